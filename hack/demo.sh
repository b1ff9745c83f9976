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
    [[ -x $python ]] || "$repo/hack/venv.sh"
    command -v redis-server >/dev/null || { echo "demo: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
    exec "$python" -u "$repo/hack/demo.py" up ;;
  down)
    if [[ -x $python ]]; then exec "$python" -u "$repo/hack/demo.py" down; fi
    exec "$repo/hack/cluster.sh" down ;;  # no venv: the demo never ran anything but, maybe, the cluster
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
