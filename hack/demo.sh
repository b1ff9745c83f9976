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

late_pid=$GWOP_CLUSTER_DIR.late.pid late_log=$GWOP_CLUSTER_DIR.late.log  # beside the sandbox's directory
late_running() { [[ -f $late_pid ]] && kill -0 "$(cat "$late_pid")" 2>/dev/null; }

# The late set (Traefik, kube-router: the longest Go builds, about 13 of a fresh machine's minutes)
# is built under nice beside everything else, and joins the running node when it is done
# (hack/node.sh late): the sandbox does not wait for the edge and the NetworkPolicy enforcer.
start_late() {
  late_running && { echo "[demo] the edge and the NetworkPolicy enforcer are already being built ($late_log)"; return; }
  mkdir -p "$(dirname "$late_log")"
  setsid bash -c '
    set -euo pipefail
    start=$SECONDS
    # its own session is its own scheduler autogroup, which the kernel shares the CPU with equally
    # whatever its processes nice is: the autogroup itself gets the lowest priority
    echo 19 >/proc/self/autogroup 2>/dev/null || true
    nice -n 19 "$1/hack/build-binaries.sh" --late-only >/dev/null
    echo "[demo-late] traefik and kube-router built in $((SECONDS - start))s; starting them once the node is up (up to 60 min)"
    GWOP_NODE_LATE_WAIT=3600 "$1/hack/node.sh" late
    echo "[demo-late] the edge and the NetworkPolicy enforcer joined the node $((SECONDS - start))s after the demo began"
  ' late "$repo" >"$late_log" 2>&1 </dev/null &
  echo $! >"$late_pid"
}

case ${1:-up} in
  up)
    # what a fresh machine lacks comes first, with a line before each slow step, and its time
    # counts in the demo's total
    export GWOP_DEMO_STARTED=$(date +%s.%N)
    echo "[demo] system packages (redis-server, openssl, curl; the node and the image builder install theirs)"
    "$repo/hack/system-deps.sh"
    echo "[demo] python venv (the first run installs the pinned packages: about a minute)"
    "$repo/hack/venv.sh"
    bin=$("$repo/hack/build-binaries.sh" --dir)
    late=0
    if ! [[ -x $bin/traefik && -x $bin/kube-router ]]; then
      late=1
      export GWOP_NODE_LATE=defer
      echo "[demo] the edge (Traefik) and the NetworkPolicy enforcer (kube-router): built in the background" \
           "(the first run: about 15 minutes under nice; they join the running node; log: $late_log)"
      start_late
    fi
    # the images (mostly downloads and unpacking) are built beside the Go builds (mostly compiling)
    images_log=$(mktemp)
    "$repo/hack/images.sh" >"$images_log" 2>&1 &
    images=$!
    echo "[demo] control-plane and node binaries (the first run builds them from Go modules: about 12 minutes)," \
         "the images beside them"
    "$repo/hack/build-binaries.sh" --sandbox >/dev/null
    if ! wait "$images"; then cat "$images_log"; rm -f "$images_log"; echo "[demo] hack/images.sh failed" >&2; exit 1; fi
    rm -f "$images_log"
    rc=0
    "$python" -u "$repo/hack/demo.py" up || rc=$?
    if ((late)) && late_running; then
      echo
      echo "The edge (Traefik, $bin/traefik) and the NetworkPolicy enforcer (kube-router) are still being"
      echo "built in the background; they join this node by themselves (follow: tail -f $late_log)."
      echo "Until then the Ingress and HTTPRoute have no address and NetworkPolicies are not enforced."
    fi
    exit "$rc" ;;
  down)
    if late_running; then kill -TERM -- "-$(cat "$late_pid")" 2>/dev/null || true; echo "[demo] stopped the background build of the late set"; fi
    rm -f "$late_pid"
    exec "$repo/hack/cluster.sh" down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
