#!/usr/bin/env bash
# A REAL node joined to the local control plane (hack/node/README.md): containerd, runc, a CNI
# bridge, kube-scheduler, kubelet, kube-proxy, CoreDNS, a hostPath provisioner, Traefik as the edge,
# kube-router's network policy controller. Root; one node per host. hack/cluster.sh runs it with
# GWOP_NODE=1: `network` (NETWORK_ACTIONS, before the API server; prints the node address the API
# server binds), `up` (UP_ACTIONS), `late` (the edge and the NetworkPolicy enforcer, when `up` ran with
# GWOP_NODE_LATE=defer before they were built), `down`, `status`, `images` (take `make images` again).
# Its configuration is hack/node/files and hack/node/manifests, its Python hack/node/node_tools.py.
# Each action appends what it is about to create to $created BEFORE creating it; `down` (and
# `network`, for a crashed run) undoes that list last line first. Containment: traffic only to
# loopback and 198.18.0.0/15 (no NAT, no forwarding between the bridge and any other interface).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${GWOP_CLUSTER_DIR:-$repo/.cluster/sandbox}
node_dir=$dir/node
run=$node_dir/run; logs=$node_dir/logs; npki=$node_dir/pki
created=$run/created  # what the actions created, one tab-separated line each, in order
kubeconfig=$dir/kubeconfig
images_list=${GWOP_IMAGES_LIST:-${GWOP_CACHE:-$HOME/.cache/gateway-operator}/images/images.txt}
NODE_NAME=${GWOP_NODE_NAME:-gwop-node-0}
BRIDGE=gwop0
NODE_IP=198.18.0.1
POD_CIDR=198.18.0.0/16
SERVICE_CIDR=198.19.0.0/16
DNS_IP=198.19.0.10   # the kube-dns Service (the 10th address, as kubeadm does)
DNS_PORT=1053        # CoreDNS on the node address; the Service maps 53 to it
EDGE_IP=127.0.80.1   # Traefik's entry point (port 80), the address Ingresses and the Gateway get
FWD_CHAIN=GWOP-NODE-FORWARD
PAUSE_IMAGE=localhost/gateway-operator/pause:3
OWNER=/run/gwop-node.owner  # the one cluster dir whose node holds the host-global names
SOCK=$node_dir/containerd/containerd.sock
SHIM_SOCKETS=/run/gwop-node/s
CGROUP_NAME=gwop-node
NODE_DIR=$node_dir CLUSTER_DIR=$dir
NODE_VARS="NODE_DIR CLUSTER_DIR NODE_NAME BRIDGE NODE_IP POD_CIDR DNS_IP DNS_PORT EDGE_IP PAUSE_IMAGE SOCK
  SHIM_SOCKETS CGROUP_NAME KUBELET_PORT KUBELET_HEALTHZ_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT"
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
CLIENTS=(  # NAME SUBJECT: a client certificate and kubeconfig each, signed by the cluster CA
  "kubelet /O=system:nodes/CN=system:node:$NODE_NAME" "kube-proxy /CN=system:kube-proxy"
  "kube-scheduler /CN=system:kube-scheduler" "coredns /CN=gwop-node:coredns"
  "hostpath-provisioner /CN=gwop-node:hostpath-provisioner" "edge /CN=gwop-node:edge" "netpol /CN=gwop-node:netpol")
netpol=${GWOP_NODE_NETPOL:-1}
# The late parts: the edge (Traefik) and the NetworkPolicy enforcer (kube-router), the longest builds.
# GWOP_NODE_LATE=defer (hack/demo.sh on a machine that has not built them yet) starts the node
# without the late parts whose binary is missing; `node.sh late` starts them once built.
late_mode=${GWOP_NODE_LATE:-now}
components=(containerd kube-scheduler kubelet kube-proxy coredns hostpath-provisioner)
late_components=(edge)
[[ $netpol == 0 ]] || late_components+=(netpol)
python=${GWOP_PYTHON:-$repo/.venv/bin/python}
tools=(python3 "$repo/hack/node/node_tools.py")
nbin=$("$repo/hack/build-binaries.sh" --dir)  # where the node's binaries are (node_binaries builds them)

NETWORK_ACTIONS=(check_root check_owner install_packages clean_leftovers claim_host record_host
  create_bridge isolate_bridge bridge_netfilter)
UP_ACTIONS=(node_binaries write_configs make_cgroups certificates apply_manifests start_containerd
  import_images start_scheduler start_kubelet start_kube_proxy start_coredns start_provisioner start_edge
  wait_node_ready wait_cluster_dns start_netpol wait_edge wait_netpol)

log() { echo "[node] $*" >&2; }
source "$repo/hack/processes.sh"  # free_port, start, alive, stop_pid, wait_for, sign_client_cert, write_kubeconfig
die() { log "$*"; exit 1; }
kc() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
# this node's ctr on this node's socket; containerd 2 reports the host's cgroup v1 as a deprecation,
# which ctr would print on every call (cmd/ctr/commands/client.go): containerd.log has it once
nctr() { CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$nbin/ctr" -a "$SOCK" "$@"; }
ctr_() { nctr -n k8s.io "$@"; }
record() { local IFS=$'\t'; printf '%s\n' "$*" >>"$created"; }  # record KIND ARG...: before creating it
launch() { record process "$1"; start "$@"; }  # launch NAME CMD...: a recorded process
node_ready() { [[ $(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; }
late_binary() { case $1 in edge) echo traefik ;; netpol) echo kube-router ;; esac; }
deferred() {  # deferred NAME: a late part left for `node.sh late` (its binary is not built yet)
  [[ $late_mode == defer && ! -x $nbin/$(late_binary "$1") ]]
}
status() {
  local c
  for c in "${components[@]}"; do alive "$c" || return 1; done
  for c in "${late_components[@]}"; do alive "$c" || deferred "$c" || return 1; done
  node_ready
}
run_actions() {  # each action in order, with its time
  local a t0 us i=0
  for a in "$@"; do
    t0=$EPOCHREALTIME; "$a"; us=$(( ${EPOCHREALTIME//[.,]/} - ${t0//[.,]/} )); i=$((i + 1))
    log "$(printf '%2d/%d %-18s %3d.%02ds' "$i" $# "$a" $((us / 1000000)) $((us / 10000 % 100)))"
  done
}

# -- network: the actions before the API server ------------------------------------------------
check_root() { [[ $(id -u) == 0 ]] || die "a real node needs root (containerd, the bridge, iptables, cgroups)"; }
check_owner() {
  local owner; owner=$(cat "$OWNER" 2>/dev/null || true)
  [[ -z $owner || $owner == "$dir" || ! -d $owner/node ]] \
    || die "the node of $owner holds this host's bridge: GWOP_CLUSTER_DIR=$owner hack/node.sh down"
}
install_packages() {  # containerd itself is built (hack/containerd): Debian's 1.6 is not used
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v ipset >/dev/null || missing+=(ipset)  # kube-router's network policy controller runs it
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
clean_leftovers() {  # a previous (crashed) run's, by its list
  teardown
  if ip link show "$BRIDGE" >/dev/null 2>&1; then die "bridge $BRIDGE exists and was not created by this directory's node"; fi
}
claim_host() { mkdir -p "$run" "$logs" "$npki"; record dir "$node_dir"; record owner "$OWNER"; echo "$dir" >"$OWNER"; }
record_host() {  # what down puts back: the sysctls' values; what it removes: chains and ipsets made from now on
  local s foreign
  for s in "${sysctls[@]}"; do record sysctl "$s" "$(sysctl -n "$s" 2>/dev/null || echo)"; done
  "${tools[@]}" ipsets >"$run/ipsets.before" || die "the node's NetworkPolicy enforcer (kube-router) needs the kernel's ip_set"
  record ipsets-since "$run/ipsets.before"
  # kube-router v2.1.0 restores every ipset of the host at each sync (fixed in v2.1.3/v2.2.0, which
  # the Go module proxy does not serve): other programs' sets get what they held a sync earlier
  foreign=$(tr '\n' ' ' <"$run/ipsets.before")
  [[ -z $foreign ]] || log "warning: this host has ipsets ($foreign) that the node's kube-router v2.1.0 rewrites at each sync"
  "${tools[@]}" iptables-chains >"$run/iptables-chains.before"
  record chains-since "$run/iptables-chains.before"  # kube-proxy's, the kubelet's, kube-router's
  [[ -e /var/lib/kubelet ]] || record dir /var/lib/kubelet
  [[ -e /run/netns ]] || record empty-dir /run/netns
}
create_bridge() {  # with the node's address, so the kubelet and kube-proxy can bind it
  record link "$BRIDGE"  # its address and route go with it
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # the Service range stays on the bridge: nothing untranslated follows the default route out
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
}
# The CNI bridge turns IP forwarding on; no packet crosses between the bridge and any other interface
# (no NAT either). In mangle FORWARD, which sees every forwarded packet before any filter rule: filter
# FORWARD begins with kube-router's jump, which ACCEPTs pod traffic its policies allow, wherever routed.
isolate_bridge() {
  record iptables-chain mangle "$FWD_CHAIN"
  iptables -t mangle -N "$FWD_CHAIN"
  iptables -t mangle -A "$FWD_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
  iptables -t mangle -A "$FWD_CHAIN" ! -i "$BRIDGE" -o "$BRIDGE" -j DROP
  record iptables-rule mangle FORWARD -j "$FWD_CHAIN"
  iptables -t mangle -I FORWARD 1 -j "$FWD_CHAIN"
}
# Bridged frames traverse iptables: kube-router's chains see pod-to-pod traffic, and conntrack can
# undo the DNAT of a bridged reply from a Service's endpoint on the same bridge (put back at down).
bridge_netfilter() { sysctl -qw net.bridge.bridge-nf-call-iptables=1; }

# -- up: the actions on the running API server ---------------------------------------------------
node_binaries() {
  if [[ $late_mode == defer ]]; then nbin=$("$repo/hack/build-binaries.sh" --sandbox); else nbin=$("$repo/hack/build-binaries.sh" --node); fi
}
write_configs() {  # hack/node/files and manifests rendered; the kubelet's and kube-proxy's ports chosen now
  KUBELET_PORT=$(free_port) KUBELET_HEALTHZ_PORT=$(free_port) PROXY_HEALTHZ_PORT=$(free_port) PROXY_METRICS_PORT=$(free_port)
  mkdir -p "$node_dir"/containerd/{root,state,opt} "$node_dir/cni/ipam" "$node_dir"/kubelet/{root,pod-logs,volume-plugins}
  local v vars=(); for v in $NODE_VARS; do vars+=("$v=${!v}"); done
  env "${vars[@]}" NODE_VARS="$NODE_VARS" "${tools[@]}" render "$repo/hack/node/files" "$node_dir"
  env "${vars[@]}" NODE_VARS="$NODE_VARS" "${tools[@]}" render "$repo/hack/node/manifests" "$node_dir/manifests"
}
make_cgroups() {  # the kubelet's cgroupRoot, in every v1 hierarchy (and v2 if mounted there)
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -f ${h}cgroup.procs ]] || continue
    record cgroup "$h$CGROUP_NAME"
    mkdir -p "$h$CGROUP_NAME"
    if [[ -f ${h}cpuset.cpus ]]; then
      cat "${h}cpuset.cpus" >"$h$CGROUP_NAME/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$CGROUP_NAME/cpuset.mems"
    fi
  done
}
certificates() {  # CLIENTS' certificates and kubeconfigs, for the API server's address
  local c name server; server=$(kc config view -o jsonpath='{.clusters[0].cluster.server}')
  for c in "${CLIENTS[@]}"; do
    name=${c%% *}
    [[ -f $npki/$name.crt ]] || sign_client_cert "$dir/pki" "$npki/$name" "${c#* }" 365
    write_kubeconfig "$node_dir/$name.kubeconfig" "$server" "$dir/pki/ca.crt" "$npki/$name" "$name"
  done
}
apply_manifests() {  # the Gateway API CRDs (standard channel, from their module; kept at down), then ours
  kc apply --server-side --field-manager gwop-node -f "$nbin/gateway-api-crds/" >/dev/null
  kc wait --for condition=Established crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io --timeout 60s >/dev/null
  record manifests "$node_dir/manifests"
  kc apply -f "$node_dir/manifests" >/dev/null
}
# containerd finds its runc shim on PATH: this node's first, never Debian's containerd package's
containerd_daemon() { start containerd env PATH="$nbin:$PATH" "$nbin/containerd" --config "$node_dir/containerd/config.toml"; }
start_containerd() {
  record dir "${SHIM_SOCKETS%/*}"  # this node's alone (one node per host)
  record mounts "$node_dir"        # the snapshots', the pods' volumes
  record containerd                # its containers, their network namespaces, its shims
  containerd_daemon
  wait_for containerd 30 nctr version
}
import_images() {
  [[ -f $images_list ]] || die "no $images_list: run 'make images' first (the node's pause image comes from it)"
  local image archive listed t0=$SECONDS
  grep -q "^$PAUSE_IMAGE " "$images_list" || die "$images_list lists no $PAUSE_IMAGE"
  while read -r image archive; do
    [[ -n $image ]] || continue
    [[ -f $archive ]] || die "$archive (listed in $images_list) is missing: run 'make images'"
    ctr_ images import "$archive" >>"$logs/images.log" 2>&1 || { tail -5 "$logs/images.log" >&2; die "import of $archive failed"; }
    # read whole first: under pipefail, `ctr ... | grep -q` fails when grep exits before ctr's last write
    listed=$(ctr_ images ls -q)
    grep -qx -- "$image" <<<"$listed" || die "$archive did not give $image (ctr images ls: $(tr '\n' ' ' <<<"$listed"))"
  done <"$images_list"
  log "imported $(wc -l <"$images_list") images in $((SECONDS - t0))s"
}
start_scheduler() {
  launch kube-scheduler "$nbin/kube-scheduler" --kubeconfig "$node_dir/kube-scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$(free_port)" --v 1
}
start_kubelet() {
  record node "$NODE_NAME"  # the Node it registers
  launch kubelet "$nbin/kubelet" --config "$node_dir/kubelet.yaml" \
    --kubeconfig "$node_dir/kubelet.kubeconfig" --root-dir "$node_dir/kubelet/root" \
    --cert-dir "$node_dir/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1
}
start_kube_proxy() { launch kube-proxy "$nbin/kube-proxy" --config "$node_dir/kube-proxy.yaml" --v 1; }
start_coredns() { launch coredns "$nbin/coredns" -conf "$node_dir/Corefile"; }
start_provisioner() {
  launch hostpath-provisioner "$python" "$repo/hack/hostpath_provisioner.py" \
    --kubeconfig "$node_dir/hostpath-provisioner.kubeconfig" --root "$node_dir/volumes" --node "$NODE_NAME"
}
start_edge() {
  deferred edge && { log "the edge (Traefik) is not built yet: it joins with 'hack/node.sh late'"; return 0; }
  launch edge env KUBECONFIG="$node_dir/edge.kubeconfig" "$nbin/traefik" --configFile="$node_dir/traefik.yaml"
}
wait_node_ready() { wait_for "node $NODE_NAME Ready" 120 node_ready; }
wait_cluster_dns() { wait_for "cluster DNS" 30 "${tools[@]}" dns-answers "$DNS_IP"; }
# kube-router once the node is Ready (it reads the Node's InternalIP at start) and kube-proxy wrote its
# chains (DNS answers through a Service): its iptables-restore beside kube-proxy's first sync removed a
# chain kube-proxy had just made. Only the firewall; IPv4; no listener (its health server would bind
# every interface). v2.1.0 looks its Node up by $NODE_NAME first.
start_netpol() {
  [[ $netpol != 0 ]] || return 0
  deferred netpol && { log "the NetworkPolicy enforcer (kube-router) is not built yet: it joins with 'hack/node.sh late'"; return 0; }
  t_netpol=$SECONDS
  launch netpol env NODE_NAME="$NODE_NAME" "$nbin/kube-router" --kubeconfig "$node_dir/netpol.kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --hostname-override "$NODE_NAME" --service-cluster-ip-range "$SERVICE_CIDR" \
    --enable-ipv4=true --enable-ipv6=false --health-port 0 --metrics-port 0 --v 1
}
wait_edge() { deferred edge || wait_for "the edge (traefik) on $EDGE_IP:80" 30 "${tools[@]}" tcp-answers "$EDGE_IP" 80; }
netpol_enforcing() {  # its top-level chains hooked into the filter table (it creates them before its first sync)
  alive netpol && iptables -S FORWARD 2>/dev/null | grep -q -- '-j KUBE-ROUTER-FORWARD' \
    && iptables -S KUBE-NWPLCY-DEFAULT >/dev/null 2>&1
}
wait_netpol() {
  if [[ $netpol == 0 ]]; then log "GWOP_NODE_NETPOL=0: no NetworkPolicy enforcer on this node"; return; fi
  deferred netpol && return 0
  wait_for "NetworkPolicy enforcement (kube-router's chains)" 60 netpol_enforcing
  log "kube-router enforcing NetworkPolicies $((SECONDS - t_netpol))s after its start"
}

# -- down: the recorded list, walked backwards ---------------------------------------------------
api_up() {  # the control plane answers (cached: asked once per teardown)
  [[ -n ${api_state:-} ]] || { [[ -n ${bin:-} && -f $kubeconfig && $(kc get --raw /readyz 2>/dev/null) == ok ]] && api_state=up || api_state=down; }
  [[ $api_state == up ]]
}
undo() {  # undo KIND ARG...: removes one recorded thing; what is already gone is skipped
  case $1 in
    process) stop_pid "$2" ;;
    node) ! api_up || kc delete node "$2" --ignore-not-found --wait=false >/dev/null 2>&1 ;;
    manifests) ! api_up || [[ ! -d $2 ]] || kc delete -f "$2" --ignore-not-found --wait=false >/dev/null 2>&1 ;;
    containerd) drain_containerd; stop_pid containerd; "${tools[@]}" kill-shims "$SOCK" "$SHIM_SOCKETS"
      "${tools[@]}" remove-netns "$run/netns" ;;
    mounts) "${tools[@]}" unmount-under "$2" ;;
    cgroup) remove_cgroup "$2" ;;
    dir) "${tools[@]}" unmount-under "$2"; rm -rf "$2" ;;
    empty-dir) rmdir "$2" 2>/dev/null || true ;;
    link) if ip link show "$2" >/dev/null 2>&1; then ip link delete "$2" && log "deleted bridge $2"; fi ;;
    iptables-rule) while iptables -t "$2" -C "${@:3}" 2>/dev/null; do iptables -t "$2" -D "${@:3}" || break; done ;;
    iptables-chain) if iptables -t "$2" -S "$3" >/dev/null 2>&1; then iptables -t "$2" -F "$3"; iptables -t "$2" -X "$3"; fi ;;
    chains-since) [[ ! -f $2 ]] || "${tools[@]}" remove-new-chains "$2" ;;
    ipsets-since) [[ ! -f $2 ]] || "${tools[@]}" remove-new-ipsets "$2" ;;
    sysctl) [[ -z ${3:-} || $(sysctl -n "$2" 2>/dev/null) == "$3" ]] || sysctl -qw "$2=$3" >/dev/null 2>&1 || true ;;
    owner) [[ $(cat "$2" 2>/dev/null) != "$dir" ]] || rm -f "$2" ;;
    *) log "skipping an unknown entry: $*" ;;
  esac
}
teardown() {  # also what no list names (a crash before it began): the node's directory, the owner file
  local entries=() fields i t0=$SECONDS t1
  [[ ! -f $created ]] || mapfile -t entries <"$created"
  for ((i = ${#entries[@]} - 1; i >= 0; i--)); do
    IFS=$'\t' read -ra fields <<<"${entries[i]}"
    ((${#fields[@]})) || continue
    t1=$SECONDS; undo "${fields[@]}" || log "could not undo: ${fields[*]}"
    ((SECONDS - t1 < 5)) || log "undid ${fields[*]} in $((SECONDS - t1))s"
  done
  [[ ! -d $node_dir ]] || undo dir "$node_dir"
  undo owner "$OWNER"
  ((${#entries[@]})) && log "node removed ($node_dir: ${#entries[@]} recorded things) in $((SECONDS - t0))s" || true
}
# Every container of this node's containerd (its own socket) killed and deleted (a stopped
# containerd is started for it); their network namespaces listed in $run/netns.
drain_containerd() {
  alive containerd || [[ -f $node_dir/containerd/config.toml ]] || return 0
  [[ -x $nbin/ctr ]] || { log "no node binaries (hack/build-binaries.sh --node); skipping container cleanup"; return 0; }
  alive containerd || { mkdir -p "$logs" "$run"; containerd_daemon; }
  wait_for -q containerd 10 nctr version || { log "containerd does not answer; skipping container cleanup"; return 0; }
  local ids id; ids=$(ctr_ containers ls -q 2>/dev/null || true)
  for id in $ids; do ctr_ containers info "$id" 2>/dev/null | "${tools[@]}" netns >>"$run/netns" || true; done
  for id in $ids; do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
  for id in $ids; do wait_for -q "task $id deleted" 2 task_gone "$id"; ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
}
task_gone() { ctr_ tasks delete "$1" >/dev/null 2>&1 || ! grep -qx -- "$1" <<<"$(ctr_ tasks ls -q 2>/dev/null)"; }
remove_cgroup() {  # its processes (at any depth) killed, then its directories, deepest first
  [[ -d $1 ]] || return 0
  local p; for p in $(find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  wait_for -q "cgroup $1 empty" 5 cgroup_empty "$1" || true
  find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [[ ! -d $1 ]] || log "cgroup $1 not removed"
}
cgroup_empty() { ! find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null | grep -q .; }
# -- the commands ----------------------------------------------------------------------------------
up() {
  check_root
  bin=$("$repo/hack/build-binaries.sh" --no-sim)
  if ! [[ -f $kubeconfig && $(kc get --raw /readyz 2>/dev/null) == ok && -f $created ]] || ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "no control plane for a real node in $dir: starting one (GWOP_NODE=1 hack/cluster.sh up)"
    GWOP_CLUSTER_DIR=$dir GWOP_NODE=1 "$repo/hack/cluster.sh" up >/dev/null
    return  # cluster.sh up ran `node.sh up` itself
  fi
  local endpoint t0=$SECONDS
  endpoint=$(kc get endpointslice -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[0].endpoints[0].addresses[0]}')
  [[ $endpoint == "$NODE_IP" ]] || die "the API server advertises $endpoint, not the node address $NODE_IP (pods could not reach it): restart it with GWOP_NODE=1 hack/cluster.sh up"
  if status 2>/dev/null; then log "already up"; return; fi
  run_actions "${UP_ACTIONS[@]}"
  log "node $NODE_NAME Ready in $((SECONDS - t0))s (containerd socket $SOCK, logs $logs)"
}

base_up() { local c; for c in "${components[@]}"; do alive "$c" || return 1; done; node_ready; }
late() {  # the late parts built since `up` (GWOP_NODE_LATE=defer), started once the rest of the node is up
  check_root
  bin=$nbin
  local wait=${GWOP_NODE_LATE_WAIT:-0}  # s to wait for the node (hack/demo.sh: while it starts)
  wait_for -q "the node" "$wait" base_up || die "the node is not up (hack/node.sh up)"
  alive edge || run_actions start_edge wait_edge
  [[ $netpol == 0 ]] || alive netpol || run_actions start_netpol wait_netpol
}

case ${1:-} in
  network) run_actions "${NETWORK_ACTIONS[@]}"; echo "$NODE_IP" ;;
  up) up ;;
  down)
    check_root
    bin=$nbin
    teardown ;;
  late) late ;;
  status)
    bin=$nbin
    if status; then log "node $NODE_NAME up"; else log "node not up"; exit 1; fi ;;
  images) node_binaries; import_images ;;
  *) echo "usage: $0 network|up|down|late|status|images" >&2; exit 2 ;;
esac
