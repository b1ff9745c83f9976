#!/usr/bin/env bash
# `make demo` / `make demo-down`: the gateway operator in a local sandbox (see hack/demo.py).
#
#   hack/demo.sh        start the control plane, a real Redis, the operator, real gateways and
#                       the examples; print their conditions; run until Ctrl-C, which stops
#                       everything (DEMO_EXIT_AFTER_SETUP=1: return after printing, leave it up)
#   hack/demo.sh down   stop everything the demo started, by pid, then the control plane
#
# GWOP_CLUSTER_DIR (default <repo>/.cluster/sandbox): the sandbox's directory.
# GWOP_POD_NETWORK (default 127.2.0.0/16): pod IPs, apart from the test session's 127.1.0.0/16.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export GWOP_CLUSTER_DIR=${GWOP_CLUSTER_DIR:-$repo/.cluster/sandbox}
export GWOP_POD_NETWORK=${GWOP_POD_NETWORK:-127.2.0.0/16}
python=${GWOP_PYTHON:-$repo/.venv/bin/python}
cd "$repo"

case ${1:-up} in
  up)
    # what a fresh machine lacks comes first, with a line before each slow step, and its time
    # counts in the demo's total
    export GWOP_DEMO_STARTED=$(date +%s.%N)
    echo "[demo] system packages (redis-server, openssl, curl)"
    "$repo/hack/system-deps.sh"
    echo "[demo] python venv (the first run installs the pinned packages: about a minute)"
    "$repo/hack/venv.sh"
    echo "[demo] control-plane binaries (the first run builds them from Go modules: a few minutes)"
    "$repo/hack/build-binaries.sh" >/dev/null
    exec "$python" -u "$repo/hack/demo.py" up ;;
  down)
    if [[ -x $python ]]; then exec "$python" -u "$repo/hack/demo.py" down; fi
    exec "$repo/hack/cluster.sh" down ;;  # no venv: the demo never ran anything but, maybe, the cluster
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
