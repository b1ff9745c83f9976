#!/usr/bin/env bash
# `make test`: the suite as two pytest runs side by side:
#   - tests/node, on the real node (one per host);
#   - tests/unit and tests/sim, whose control planes have a simulated node, each in its own
#     .cluster/<dir> on loopback.
# They share nothing but the CPU, and much of each is waiting (pods starting, drains, the checker's
# slice), so side by side they take about as long as the longer one: 1,267 s against 2,315 s one
# after the other on this machine kind (issue 34, docs/development.md "CI").
# Each line says which run printed it. The exit status is non-zero when either run fails, pytest's
# 5 (no test collected) included. A failed run's summary (pytest's "short test summary info") is
# printed again at the very end, so the tail of a long log names what failed. With arguments
# (PYTEST_ARGS), or GWOP_TEST_KUBECONFIG (an existing cluster, which the node tests would share):
# one pytest run, as before.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PY:-.venv/bin/python}
if (($#)) || [[ -n ${GWOP_TEST_KUBECONFIG:-} ]]; then
  exec "$py" -m pytest --durations=30 "$@"
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run() {  # run NAME PATH...: one pytest run, each line prefixed with [NAME] (and kept in $logs/NAME)
  local name=$1; shift
  # no cache plugin: two runs would write .pytest_cache at once
  "$py" -m pytest -p no:cacheprovider --durations=20 "$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$logs/$name"
  return "${PIPESTATUS[0]}"
}

summary() {  # summary NAME RC: a failed run's short summary again, from its log
  (($2 == 0)) && return
  echo "[test] $1 exited $2; its summary again:"
  sed -n '/short test summary info/,$p' "$logs/$1"
  grep -q 'short test summary info' "$logs/$1" || tail -n 40 "$logs/$1"
}

# AFTER_NODE=<command> (CI: the release matrix's slice) runs in the node run's lane once tests/node
# has ended, the shorter of the two runs; its lines say [after-node], and its exit status counts as
# the node run's when that passed
node_lane() {
  local rc=0 after=0 t0
  run node tests/node || rc=$?
  [[ -n ${AFTER_NODE:-} ]] || return "$rc"
  t0=$SECONDS
  bash -c "$AFTER_NODE" 2>&1 | sed -u "s/^/[after-node] /"
  after=${PIPESTATUS[0]}
  echo "[test] after tests/node: $AFTER_NODE exited $after in $((SECONDS - t0))s"
  ((rc != 0)) || rc=$after
  return "$rc"
}

start=$SECONDS
node_lane & node=$!
run unit+sim tests/unit tests/sim & rest=$!
node_rc=0; wait "$node" || node_rc=$?
rest_rc=0; wait "$rest" || rest_rc=$?
summary node "$node_rc"
summary unit+sim "$rest_rc"
echo "[test] tests/node${AFTER_NODE:+ then AFTER_NODE} exited $node_rc, tests/unit + tests/sim exited $rest_rc, in $((SECONDS - start))s"
((node_rc == 0)) || exit "$node_rc"
exit "$rest_rc"
