#!/usr/bin/env bash
# The release matrix (issue 32): the real-gateway suite (tests/unit/test_launcher_real_gateway.py:
# the launcher, the real gateway package, a real redis-server) run against each praisonai-bot
# release the operator lists as tested (gateway_operator/core/compat.py TESTED_RELEASES), or those of
# RELEASES="0.1.15 0.1.14". The venv's own release (requirements-dev.txt) is what `make test` runs;
# each other one is installed alone (--no-deps: with the venv's praisonaiagents and the rest of its
# dependencies, as an image that upgrades only praisonai-bot would) into .cache/gateway-releases/<r>,
# kept there (a release's content never changes), and put first on PYTHONPATH, which the suite passes
# on to the launchers it starts. MATRIX_ARGS: more pytest arguments (-k ...). MATRIX_JSON=<file>:
# the results as JSON. MATRIX_SKIP_OWN=1: leave out the venv's own release (CI: `make test` ran it).
# Exits 1 when any release fails.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
PY=$repo/.venv/bin/python
releases=${RELEASES:-$("$PY" -c 'from gateway_operator.core.compat import TESTED_RELEASES; print(" ".join(TESTED_RELEASES))')}
own=$("$PY" -c 'import importlib.metadata as m; print(m.version("praisonai-bot"))')
cache=$repo/.cache/gateway-releases
mkdir -p "$cache"
results=()
failed=0
for release in $releases; do
  [[ ${MATRIX_SKIP_OWN:-} == 1 && $release == "$own" ]] && continue
  start=$SECONDS
  path=""
  if [[ $release != "$own" ]]; then
    path=$cache/$release
    if [[ ! -d $path ]]; then
      rm -rf "$path.partial"
      "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$path.partial" "praisonai-bot==$release"
      mv "$path.partial" "$path"
    fi
  fi
  found=$(PYTHONPATH=$path "$PY" -c 'import importlib.metadata as m; print(m.version("praisonai-bot"))')
  [[ $found == "$release" ]] || { echo "release-matrix: $release asked, $found found" >&2; exit 1; }
  log=$(mktemp)
  rc=0
  # shellcheck disable=SC2086
  PYTHONPATH=$path "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_launcher_real_gateway.py ${MATRIX_ARGS:-} \
    >"$log" 2>&1 || rc=$?
  summary=$(tail -1 "$log")
  took=$((SECONDS - start))
  echo "== [release-matrix] praisonai-bot $release: $summary (${took}s)"
  if [[ $rc != 0 ]]; then
    failed=1
    grep -E "^(FAILED|ERROR)" "$log" | head -20 || true
  fi
  passed=$(grep -oE "[0-9]+ passed" <<<"$summary" | grep -oE "[0-9]+" || echo 0)
  bad=0
  for n in $(grep -oE "[0-9]+ (failed|errors?)" <<<"$summary" | grep -oE "^[0-9]+" || true); do bad=$((bad + n)); done
  results+=("{\"release\": \"$release\", \"passed\": ${passed:-0}, \"failed\": ${bad:-0}, \"exit\": $rc, \"seconds\": $took}")
  rm -f "$log"
done
if [[ -n ${MATRIX_JSON:-} ]]; then
  (IFS=,; echo "{\"suite\": \"tests/unit/test_launcher_real_gateway.py\", \"releases\": [${results[*]}]}") >"$MATRIX_JSON"
fi
exit $failed
