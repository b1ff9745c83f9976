#!/usr/bin/env bash
# `make demo` / `make demo-down`: the gateway operator on a local cluster with a real node
# (see hack/demo.py). Root.
#
#   hack/demo.sh        build the images, start the control plane and its node, helm install
#                       the operator, apply the examples, print their conditions; leaves it running
#   hack/demo.sh down   stop the cluster and the node, removing what they created
#
# GWOP_CLUSTER_DIR (default <repo>/.cluster/sandbox): the sandbox's directory.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export GWOP_CLUSTER_DIR=${GWOP_CLUSTER_DIR:-$repo/.cluster/sandbox}
python=${GWOP_PYTHON:-$repo/.venv/bin/python}
cd "$repo"

case ${1:-up} in
  up)
    # what a fresh machine lacks comes first, with a line before each slow step, and its time
    # counts in the demo's total
    export GWOP_DEMO_STARTED=$(date +%s.%N)
    echo "[demo] system packages (redis-server, openssl, curl; the node and the image builder install theirs)"
    "$repo/hack/system-deps.sh"
    echo "[demo] python venv (the first run installs the pinned packages: about a minute)"
    "$repo/hack/venv.sh"
    echo "[demo] control-plane and node binaries (the first run builds them from Go modules: about 26 minutes)"
    "$repo/hack/build-binaries.sh" --node >/dev/null
    exec "$python" -u "$repo/hack/demo.py" up ;;
  down)
    exec "$repo/hack/cluster.sh" down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
