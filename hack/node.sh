#!/usr/bin/env bash
# A REAL node joined to the local control plane (issue 8): containerd 2 (containerd, its runc shim
# and ctr built from the Go module proxy, hack/build-binaries.sh --node) + Debian's runc, a CNI bridge,
# kube-scheduler, a real kubelet and kube-proxy (iptables), CoreDNS, pods from the locally built
# images (make images). Needs root. hack/cluster.sh runs it when GWOP_NODE=1 (`make cluster-up`):
#
#   hack/node.sh network  clean a crashed run's leftovers, record the host's state, create the
#                         bridge with the node's address (printed): the API server binds it so
#                         that pods reach it (cluster.sh calls this before the API server)
#   hack/node.sh up       start the node on the control plane in GWOP_CLUSTER_DIR (default
#                         .cluster/sandbox); without one, starts it (GWOP_NODE=1 cluster.sh up)
#   hack/node.sh down     stop it and remove exactly what network + up created
#   hack/node.sh status   exit 0 when every node process runs and the node is Ready
#
# Network (containment: only loopback and the 198.18.0.0/15 addresses this bridge creates):
# pods on bridge gwop0 in 198.18.0.0/16 (node 198.18.0.1), ipMasq off, Services 198.19.0.0/16
# routed onto the bridge, forwarding between the bridge and any other interface dropped, no
# NodePort outside the node IP. Cluster DNS: CoreDNS on the node address (port 1053) behind the
# kube-system/kube-dns Service at 198.19.0.10, answering cluster.local only and forwarding
# nothing; host-network pods get a private resolv.conf that names no host resolver.
# PersistentVolumeClaims: the default StorageClass gwop-hostpath, served by our minimal hostPath
# provisioner (hack/hostpath_provisioner.py) with directories under $GWOP_CLUSTER_DIR/node/volumes.
# The edge: Traefik (hack/build-binaries.sh --node) on the node as its ingress controller, for
# IngressClass traefik and, with the Gateway API CRDs installed, GatewayClass traefik and the
# Gateway gwop-edge/edge; it listens on $EDGE_IP:80 (loopback: "outside" is this host) and
# publishes that address in the status of the Ingresses and Gateways it serves.
# NetworkPolicies: kube-router's network policy controller alone (hack/build-binaries.sh --node;
# no router, no service proxy: kube-proxy keeps the Services) on the node as a host process,
# enforcing them with iptables chains and ipsets on the pods' bridged and routed traffic
# (bridge netfilter on); why kube-router and not kube-network-policies: hack/versions.env.
# GWOP_NODE_NETPOL=0 starts none (NetworkPolicies then bind nothing, as on a plain bridge CNI:
# how tests/test_node.py's NetworkPolicy test is seen to fail without an enforcer).
# One node per host (the bridge, /run/netns, the iptables chains and ipsets are host-global).
#
# Everything else lives in $GWOP_CLUSTER_DIR/node: containerd's root, state and socket, CNI
# config and IPAM data, the kubelet's root and pod logs, certificates, logs, pids, and what
# network recorded about the host (iptables chains, ipsets, sysctls) so down can put it back. The one
# exception, the runc shims' sockets, goes to $SHIM_SOCKETS (a unix socket path must stay short).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${GWOP_CLUSTER_DIR:-$repo/.cluster/sandbox}
node_dir=$dir/node
run=$node_dir/run; logs=$node_dir/logs; npki=$node_dir/pki; rec=$node_dir/recorded
kubeconfig=$dir/kubeconfig
images_list=${GWOP_IMAGES_LIST:-${GWOP_CACHE:-$HOME/.cache/gateway-operator}/images/images.txt}
NODE_NAME=${GWOP_NODE_NAME:-gwop-node-0}
BRIDGE=gwop0
NODE_IP=198.18.0.1
POD_CIDR=198.18.0.0/16
SERVICE_CIDR=198.19.0.0/16
DNS_IP=198.19.0.10   # the kube-dns Service (the 10th address, as kubeadm does)
DNS_PORT=1053        # CoreDNS on the node address; the Service maps 53 to it
FWD_CHAIN=GWOP-NODE-FORWARD
PAUSE_IMAGE=localhost/gateway-operator/pause:3
OWNER=/run/gwop-node.owner  # the one cluster dir whose node holds the host-global names
sock=$node_dir/containerd/containerd.sock
# containerd's shim_manager socket_dir: at most 42 characters (containerd 2.4's maxSocketDirLen),
# which a path in $node_dir cannot promise; ours, not containerd's default /run/containerd/s
SHIM_SOCKETS=/run/gwop-node/s
cgroup_name=gwop-node
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
EDGE_IP=127.0.80.1    # Traefik's entry point (port 80), the address Ingresses and the Gateway get
EDGE_NAMESPACE=gwop-edge
netpol=${GWOP_NODE_NETPOL:-1}
components=(containerd kube-scheduler kubelet kube-proxy coredns hostpath-provisioner edge)
[[ $netpol == 0 ]] || components+=(netpol)
python=${GWOP_PYTHON:-$repo/.venv/bin/python}

log() { echo "[node] $*" >&2; }
source "$repo/hack/processes.sh"  # free_port, start, stop_pid, wait_for
die() { log "$*"; exit 1; }

alive() {  # running (a killed process not yet reaped by its new parent is a zombie: not alive)
  local pid; pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}
kc() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }




node_ready() {
  [[ $(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

status() {
  local c
  for c in "${components[@]}"; do alive "$c" || return 1; done
  node_ready
}

ensure_packages() {  # containerd itself is built (hack/containerd): Debian's 1.6 is not used
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

# -- certificates -------------------------------------------------------------------------
client_cert() {  # client_cert NAME SUBJECT: NAME.crt/.key in $npki, signed by the cluster CA
  local name=$1 subj=$2
  [[ -f $npki/$name.crt ]] && return
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$npki/$name.key" -out "$npki/$name.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$npki/client.ext"
  openssl x509 -req -in "$npki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -CAserial "$npki/ca.srl" -days 365 -extfile "$npki/client.ext" -out "$npki/$name.crt" 2>/dev/null
}

node_kubeconfig() {  # node_kubeconfig NAME: a kubeconfig for the client certificate NAME
  local name=$1 server out=$node_dir/$1.kubeconfig
  server=$(kc config view -o jsonpath='{.clusters[0].cluster.server}')
  local k=("$bin/kubectl" --kubeconfig "$out")
  rm -f "$out"
  "${k[@]}" config set-cluster local --server "$server" --certificate-authority "$dir/pki/ca.crt" --embed-certs >/dev/null
  "${k[@]}" config set-credentials "$name" --client-certificate "$npki/$name.crt" --client-key "$npki/$name.key" --embed-certs >/dev/null
  "${k[@]}" config set-context local --cluster local --user "$name" >/dev/null
  "${k[@]}" config use-context local >/dev/null
  chmod 600 "$out"
}

# -- host state: recorded at up, put back at down -----------------------------------------
iptables_chains() { iptables-save 2>/dev/null | awk '/^\*/{t=substr($0,2)} /^:/{print t, substr($1,2)}' | sort -u; }

record_host() {
  mkdir -p "$rec"
  iptables_chains >"$rec/iptables-chains"
  local sets foreign
  sets=$(ipset list -n) || die "ipset list failed: the node's NetworkPolicy enforcer (kube-router) needs the kernel's ip_set"
  printf '%s\n' "$sets" | sed '/^$/d' | sort -u >"$rec/ipsets"
  foreign=$(tr '\n' ' ' <"$rec/ipsets")
  # kube-router v2.1.0 saves every ipset of the host and restores them all at each sync (fixed in
  # v2.1.3/v2.2.0, which the Go module proxy does not serve): sets of other programs are rewritten
  # with what they held a sync earlier
  [[ -z $foreign ]] || log "warning: this host has ipsets ($foreign) that the node's kube-router v2.1.0 rewrites at each sync"
  local s; for s in "${sysctls[@]}"; do echo "$s=$(sysctl -n "$s" 2>/dev/null || echo)"; done >"$rec/sysctls"
  [[ -e /var/lib/kubelet ]] || touch "$rec/created-var-lib-kubelet"
  [[ -e /run/netns ]] || touch "$rec/created-run-netns"
}

# Removes the iptables chains that appeared since up (kube-proxy's, the kubelet's, ours) and
# the rules in other chains that jump to them; chains that existed before are left alone.
restore_iptables() {
  [[ -f $rec/iptables-chains ]] || return 0
  iptables-save 2>/dev/null | python3 -c '
import shlex, sys
before = set(tuple(l.split()) for l in open(sys.argv[1]) if l.strip())
builtin = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}
table, rules, new = None, [], []
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("*"):
        table = line[1:]
    elif line.startswith(":"):
        chain = line[1:].split()[0]
        if (table, chain) not in before and chain not in builtin:
            new.append((table, chain))
    elif line.startswith("-A "):
        rules.append((table, shlex.split(line)))
newset = set(new)
for table, words in rules:
    chain = words[1]
    target = words[words.index("-j") + 1] if "-j" in words else (words[words.index("-g") + 1] if "-g" in words else None)
    if (table, chain) not in newset and (table, target) in newset:
        print(shlex.join(["iptables", "-t", table, "-D", chain] + words[2:]))
for table, chain in new:
    print(shlex.join(["iptables", "-t", table, "-F", chain]))
for table, chain in new:
    print(shlex.join(["iptables", "-t", table, "-X", chain]))
' "$rec/iptables-chains" | while IFS= read -r cmd; do eval "$cmd" 2>/dev/null || log "failed: $cmd"; done
}

# Destroys the ipsets that appeared since up with kube-router's names (KUBE-SRC-/KUBE-DST- of its
# network policy controller, TMP- of an interrupted restore); the iptables rules naming them are
# gone first (restore_iptables). Sets that existed before are left alone.
restore_ipsets() {
  [[ -f $rec/ipsets ]] && command -v ipset >/dev/null || return 0
  local set
  ipset list -n 2>/dev/null | sed '/^$/d' | sort -u | comm -13 "$rec/ipsets" - | while IFS= read -r set; do
    [[ $set == KUBE-* || $set == TMP-* ]] || continue
    ipset destroy "$set" 2>/dev/null || log "failed: ipset destroy $set"
  done
}

restore_sysctls() {
  [[ -f $rec/sysctls ]] || return 0
  local line
  while IFS= read -r line; do
    [[ -n ${line#*=} ]] || continue
    [[ $(sysctl -n "${line%%=*}" 2>/dev/null) == "${line#*=}" ]] || sysctl -qw "$line" >/dev/null 2>&1 || true
  done <"$rec/sysctls"
}

cgroup_dirs() { local h; for h in /sys/fs/cgroup/*/; do [[ -d $h$cgroup_name ]] && echo "$h$cgroup_name"; done; }

make_cgroups() {  # the kubelet's cgroupRoot, in every v1 hierarchy (and v2 if mounted there)
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -f ${h}cgroup.procs ]] || continue
    mkdir -p "$h$cgroup_name"
    if [[ -f ${h}cpuset.cpus ]]; then
      cat "${h}cpuset.cpus" >"$h$cgroup_name/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$cgroup_name/cpuset.mems"
    fi
  done
}

remove_cgroups() {
  local d p
  for d in $(cgroup_dirs); do
    for p in $(cat "$d"/cgroup.procs "$d"/*/cgroup.procs "$d"/*/*/cgroup.procs "$d"/*/*/*/cgroup.procs 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null || true
    done
  done
  sleep 0.2
  for d in $(cgroup_dirs); do
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ ! -d $d ]] || log "cgroup $d not removed"
  done
}

# -- teardown (down, and up after a crash) -------------------------------------------------
containerd_config_exists() { [[ -f $node_dir/containerd/config.toml ]]; }

# this node's ctr on this node's socket; containerd 2 reports the host's cgroup v1 as a deprecation,
# which ctr would print on every call (cmd/ctr/commands/client.go): containerd.log has it once
nctr() { CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$nbin/ctr" -a "$sock" "$@"; }
ctr_() { nctr -n k8s.io "$@"; }

# containerd finds the runc shim (containerd-shim-runc-v2) on its PATH: this node's first, never
# a containerd-shim-runc-v2 of Debian's containerd package in /usr/bin
start_containerd() {
  start containerd env PATH="$nbin:$PATH" "$nbin/containerd" --config "$node_dir/containerd/config.toml"
}

# Every container of this node's containerd (its own socket: nothing else runs there) killed
# and deleted; prints the network namespaces their sandboxes used.
drain_containerd() {
  alive containerd || containerd_config_exists || return 0
  [[ -x ${nbin:-}/ctr ]] || nbin=$("$repo/hack/build-binaries.sh" --node) \
    || { log "no node binaries (hack/build-binaries.sh --node); skipping container cleanup"; return 0; }
  if ! alive containerd; then
    mkdir -p "$logs" "$run"
    start_containerd
    local i; for i in $(seq 50); do nctr version >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  nctr version >/dev/null 2>&1 || { log "containerd does not answer; skipping container cleanup"; return 0; }
  local ids id
  ids=$(ctr_ containers ls -q 2>/dev/null || true)
  for id in $ids; do
    ctr_ containers info "$id" 2>/dev/null | python3 -c '
import json, sys
spec = json.load(sys.stdin).get("Spec") or {}
for ns in (spec.get("linux") or {}).get("namespaces") or []:
    if ns.get("type") == "network" and ns.get("path"):
        print(ns["path"])' >>"$rec/netns" || true
  done
  for id in $ids; do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
  for id in $ids; do
    for _ in $(seq 20); do ctr_ tasks delete "$id" >/dev/null 2>&1 && break; grep -qx -- "$id" <<<"$(ctr_ tasks ls -q 2>/dev/null)" || break; sleep 0.1; done
    ctr_ containers delete "$id" >/dev/null 2>&1 || true
  done
}

# Shims started for this node's socket (they outlive containerd: their own process group), and
# their sockets. containerd 2's runc shim runs as `<$nbin>/containerd-shim-runc-v2-<version>
# -namespace k8s.io -id <id> -address <containerd socket>` (the cmdline's last NUL gives the
# trailing space) and listens on $SHIM_SOCKETS/<sha256>; a containerd 1.6 node's leftover shims
# look the same with their sockets in /run/containerd/s.
kill_own_shims() {
  local p pids=() path
  for p in /proc/[0-9]*; do
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "containerd-shim.*-address $sock " || continue
    pids+=("${p#/proc/}")
  done
  ((${#pids[@]})) || return 0
  # the unix sockets a shim listens on, by inode
  local paths; paths=$(python3 - "$SHIM_SOCKETS" "${pids[@]}" <<'PY'
import os, sys
prefixes = (sys.argv[1] + "/", "/run/containerd/s/")
inodes = set()
for pid in sys.argv[2:]:
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if len(f) >= 8 and f[6] in inodes and f[7].startswith(prefixes):
        print(f[7])
PY
)
  kill -KILL "${pids[@]}" 2>/dev/null || true
  log "killed leftover shims ${pids[*]}"
  for path in $paths; do rm -f "$path"; done
}

remove_netns() {
  local ns
  [[ -f $rec/netns ]] || return 0
  sort -u "$rec/netns" | while IFS= read -r ns; do
    [[ $ns == /var/run/netns/* || $ns == /run/netns/* ]] || continue
    [[ -e $ns ]] || continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  if [[ -f $rec/created-run-netns ]]; then
    rmdir /run/netns 2>/dev/null || true
  fi
}

unmount_under() {  # every mount under $1, deepest first
  local m
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r | while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

teardown() {
  [[ -d $node_dir ]] || { [[ $(cat "$OWNER" 2>/dev/null) == "$dir" ]] && rm -f "$OWNER"; return 0; }
  mkdir -p "$rec"
  local c t0=$SECONDS
  for c in netpol edge hostpath-provisioner coredns kube-proxy kubelet kube-scheduler; do stop_pid "$c"; done
  drain_containerd
  stop_pid containerd
  log "processes and containers gone in $((SECONDS - t0))s"
  kill_own_shims
  remove_cgroups
  remove_netns
  unmount_under "$node_dir"
  if ip link show "$BRIDGE" >/dev/null 2>&1 && [[ -f $rec/created-bridge ]]; then
    ip link delete "$BRIDGE" && log "deleted bridge $BRIDGE"
  fi
  # the shims' socket directory is this node's alone (one node per host) and its shims are gone;
  # a shim that exited on its own may not have removed its socket yet
  rm -rf "${SHIM_SOCKETS%/*}"
  if [[ -f $rec/created-run-containerd ]]; then  # recorded by a node of containerd 1.6
    rmdir /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null || true
  fi
  restore_iptables
  restore_ipsets
  restore_sysctls
  if [[ -f $rec/created-var-lib-kubelet ]]; then rm -rf /var/lib/kubelet; fi
  if [[ -n ${bin:-} && -f $kubeconfig ]] && [[ $(kc get --raw /readyz 2>/dev/null) == ok ]]; then
    kc delete node "$NODE_NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kc delete clusterrolebinding gwop-node-kubelets gwop-node-coredns gwop-node-hostpath-provisioner gwop-node-edge gwop-node-netpol --ignore-not-found >/dev/null 2>&1 || true
    kc delete clusterrole gwop-node-coredns gwop-node-hostpath-provisioner gwop-node-edge gwop-node-netpol --ignore-not-found >/dev/null 2>&1 || true
    kc delete ingressclass traefik --ignore-not-found >/dev/null 2>&1 || true
    kc delete gatewayclass traefik --ignore-not-found >/dev/null 2>&1 || true
    kc delete namespace "$EDGE_NAMESPACE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kc delete service kube-dns -n kube-system --ignore-not-found >/dev/null 2>&1 || true
    kc delete storageclass gwop-hostpath --ignore-not-found >/dev/null 2>&1 || true
  fi
  rm -rf "$node_dir"
  [[ $(cat "$OWNER" 2>/dev/null) == "$dir" ]] && rm -f "$OWNER"
  log "node removed ($node_dir)"
}

node_binding() {  # node_binding NAME: binds ClusterRole gwop-node-NAME to the client certificate gwop-node:NAME
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gwop-node-$1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gwop-node-$1}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "gwop-node:$1"}]
EOF
}

# -- cluster DNS -----------------------------------------------------------------------------
# CoreDNS runs on the node (node infrastructure here, like kube-proxy; no image to build) and
# serves cluster.local from the API; anything else gets REFUSED (no forward plugin: no query
# ever leaves for the host's resolver). The kube-dns Service has no selector: its EndpointSlice
# names the node address and CoreDNS's port.
write_corefile() {
  cat >"$node_dir/Corefile" <<EOF
cluster.local:$DNS_PORT in-addr.arpa:$DNS_PORT {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa {
        kubeconfig $node_dir/coredns.kubeconfig local
        pods insecure
    }
    cache 30
}
.:$DNS_PORT {
    bind $NODE_IP
    errors
}
EOF
}

cluster_dns_objects() {
  write_corefile
  kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gwop-node-coredns}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
$(node_binding coredns)
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: $DNS_PORT}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: $DNS_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: gwop-node}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports:
- {name: dns, port: $DNS_PORT, protocol: UDP}
- {name: dns-tcp, port: $DNS_PORT, protocol: TCP}
EOF
}

dns_answers() {  # kubernetes.default resolves through the Service address, as a pod asks it
  python3 - "$DNS_IP" <<'PY'
import socket, struct, sys
q = struct.pack(">HHHHHH", 0x4757, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in "kubernetes.default.svc.cluster.local".split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
s.sendto(q, (sys.argv[1], 53))
r = s.recv(512)
sys.exit(0 if (r[3] & 0x0F) == 0 and struct.unpack(">H", r[6:8])[0] >= 1 else 1)
PY
}

# -- the edge: Traefik as the node's ingress controller ----------------------------------------
# Its own client certificate and the ClusterRole Traefik documents for its kubernetesIngress and
# kubernetesGateway providers; the Gateway API CRDs (standard channel) from their module.
edge_objects() {
  kc apply --server-side --field-manager gwop-node -f "$nbin/gateway-api-crds/" >/dev/null
  kc wait --for condition=Established crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io --timeout 60s >/dev/null
  kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gwop-node-edge}
rules:
- {apiGroups: [""], resources: [services, secrets, configmaps, nodes, namespaces], verbs: [get, list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
- {apiGroups: [networking.k8s.io], resources: [ingresses, ingressclasses], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [ingresses/status], verbs: [update]}
- {apiGroups: [gateway.networking.k8s.io], resources: [gatewayclasses, gateways, httproutes, grpcroutes, referencegrants, backendtlspolicies], verbs: [get, list, watch]}
- {apiGroups: [gateway.networking.k8s.io], resources: [gatewayclasses/status, gateways/status, httproutes/status, grpcroutes/status, backendtlspolicies/status], verbs: [update]}
---
$(node_binding edge)
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: traefik}
spec: {controller: traefik.io/ingress-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: $EDGE_NAMESPACE}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: $EDGE_NAMESPACE}
spec:
  gatewayClassName: traefik
  listeners:
  - {name: web, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}}
EOF
  # Traefik's static configuration. Its entry point's timeouts are Traefik v3's defaults, spelled
  # out: a request is read within 60 s; the answer (a webhook's waits for an agent turn) and an
  # upgraded WebSocket are not cut. No version check and no usage report: nothing leaves this host.
  cat >"$node_dir/traefik.yaml" <<EOF
global: {checkNewVersion: false, sendAnonymousUsage: false}
entryPoints:
  web:
    address: "$EDGE_IP:80"
    transport: {respondingTimeouts: {readTimeout: 60s, writeTimeout: 0s, idleTimeout: 180s}}
providers:
  kubernetesIngress:
    ingressClass: traefik
    ingressEndpoint: {ip: $EDGE_IP}
  kubernetesGateway:
    statusAddress: {ip: $EDGE_IP}
log: {level: INFO, noColor: true}
# the access log names the replica behind each request; not the path (a WebSocket carries its token
# in the query string) and no header
accessLog: {filePath: "$logs/edge-access.log", format: json, fields: {names: {RequestPath: drop}, headers: {defaultMode: drop}}}
EOF
}

# -- NetworkPolicies: kube-router's network policy controller ---------------------------------
# Its own client certificate and a ClusterRole of what it reads: the pods, namespaces and
# NetworkPolicies it turns into iptables chains and ipsets, and its Node (get: its address).
# Services, Endpoints and EndpointSlices too: kube-router v2.1.0 starts the informers of all its
# controllers whichever run (pkg/cmd/kube-router.go), and exits when one of them cannot sync.
netpol_objects() {
  kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gwop-node-netpol}
rules:
- {apiGroups: [""], resources: [pods, namespaces], verbs: [list, watch]}
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [list, watch]}
- {apiGroups: [""], resources: [services, endpoints], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
$(node_binding netpol)
EOF
}

# Only the firewall controller: no router (the CNI bridge is the pod network), no service proxy
# (kube-proxy keeps the Services), no load-balancer allocator; IPv4. No listener at all: its
# health server (default :20244) would bind every interface, metrics and pprof stay off.
# v2.1.0 looks its Node up by $NODE_NAME first, then by the host name, --hostname-override last.
start_netpol() {
  start netpol env NODE_NAME="$NODE_NAME" "$nbin/kube-router" --kubeconfig "$node_dir/netpol.kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --hostname-override "$NODE_NAME" --service-cluster-ip-range "$SERVICE_CIDR" \
    --enable-ipv4=true --enable-ipv6=false --health-port 0 --metrics-port 0 --v 1
}

# its top-level chains hooked into the filter table (it creates them before its first sync)
netpol_enforcing() {
  alive netpol && iptables -S FORWARD 2>/dev/null | grep -q -- '-j KUBE-ROUTER-FORWARD' \
    && iptables -S KUBE-NWPLCY-DEFAULT >/dev/null 2>&1
}

edge_answers() { python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], 80), 1).close()' "$EDGE_IP"; }

# -- up ------------------------------------------------------------------------------------
write_configs() {
  local cd=$node_dir/containerd
  mkdir -p "$cd/root" "$cd/state" "$cd/opt" "$cd/certs.d/_default" "$node_dir/cni/net.d" "$node_dir/cni/ipam" \
    "$node_dir/kubelet/root" "$node_dir/kubelet/pod-logs" "$node_dir/kubelet/volume-plugins"
  # Every registry is loopback port 1 (hosts.toml's `server` of the fallback namespace): an image
  # that is not on the node fails to pull at once (ImagePullBackOff), and no pull ever resolves
  # or reaches a host outside this machine, whatever image a pod names.
  printf '# hack/node.sh: no registry is reachable from this node\nserver = "http://127.0.0.1:1"\n' \
    >"$cd/certs.d/_default/hosts.toml"
  # containerd 2 config version 3 (docs/cri/config.md; containerd 2.4 migrates it to its version 4
  # in memory at each start, with a warning): the CRI settings are split between the images,
  # runtime and grpc (server) plugins; NRI (on by default in containerd 2, listening on the
  # host-global /var/run/nri/nri.sock) is off, as containerd 1.6 had none
  cat >"$cd/config.toml" <<EOF
version = 3
root = "$cd/root"
state = "$cd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$cd/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$SHIM_SOCKETS"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$cd/certs.d"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$cd/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$node_dir/cni/net.d"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
  cat >"$node_dir/cni/net.d/10-gwop.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gwop-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$node_dir/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  # pods with dnsPolicy Default/ClusterFirst get this, never the host's resolver
  printf '# gateway-operator real node: no resolver (containment)\nnameserver 127.0.0.1\noptions ndots:1\n' >"$node_dir/resolv.conf"
  local kubelet_port healthz_port
  kubelet_port=$(free_port); healthz_port=$(free_port)
  cat >"$node_dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_name
failSwapOn: false
failCgroupV1: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
resolvConf: $node_dir/resolv.conf
podLogsDir: $node_dir/kubelet/pod-logs
volumePluginDir: $node_dir/kubelet/volume-plugins
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%", imagefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 50
EOF
  local proxy_healthz proxy_metrics
  proxy_healthz=$(free_port); proxy_metrics=$(free_port)
  cat >"$node_dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $node_dir/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
nodePortAddresses: ["$NODE_IP/32"]
iptables: {masqueradeAll: false, localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

network() {
  # the bridge first, with the node's address, so the kubelet and kube-proxy can bind it
  ip link add "$BRIDGE" type bridge
  touch "$rec/created-bridge"
  ip addr add "$NODE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # the Service range stays on the bridge: nothing untranslated follows the default route out
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
  # the CNI bridge turns IP forwarding on; no packet crosses between the bridge and any other
  # interface (no NAT is configured either). In the mangle table's FORWARD, which sees every
  # forwarded packet before any filter rule does: the filter table's FORWARD begins with
  # kube-router's jump (it puts it back first at each sync), which ACCEPTs pod traffic that its
  # policies allow, to wherever it is routed
  iptables -t mangle -N "$FWD_CHAIN"
  iptables -t mangle -A "$FWD_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
  iptables -t mangle -A "$FWD_CHAIN" ! -i "$BRIDGE" -o "$BRIDGE" -j DROP
  iptables -t mangle -I FORWARD 1 -j "$FWD_CHAIN"
  # bridge netfilter (restored at down): frames bridged between two pods traverse iptables, so
  # that kube-router's chains see pod-to-pod traffic and, for a pod reaching a Service whose
  # endpoint is a pod on the same bridge, conntrack can undo the DNAT of the bridged reply
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
}

import_images() {
  [[ -f $images_list ]] || die "no $images_list: run 'make images' first (the node's pause image comes from it)"
  local image archive listed t0=$SECONDS
  grep -q "^$PAUSE_IMAGE " "$images_list" || die "$images_list lists no $PAUSE_IMAGE"
  while read -r image archive; do
    [[ -n $image ]] || continue
    [[ -f $archive ]] || die "$archive (listed in $images_list) is missing: run 'make images'"
    ctr_ images import "$archive" >>"$logs/images.log" 2>&1 || { tail -5 "$logs/images.log" >&2; die "import of $archive failed"; }
    # the listing is read whole first: `ctr ... | grep -q` under pipefail fails when grep exits
    # on the first line and ctr's next write meets a closed pipe
    listed=$(ctr_ images ls -q)
    grep -qx -- "$image" <<<"$listed" || die "$archive did not give $image (ctr images ls: $(tr '\n' ' ' <<<"$listed"))"
  done <"$images_list"
  log "imported $(wc -l <"$images_list") images in $((SECONDS - t0))s"
}

network_up() {  # network: the bridge with the node's address, before the API server binds it
  [[ $(id -u) == 0 ]] || die "a real node needs root (containerd, the bridge, iptables, cgroups)"
  local owner; owner=$(cat "$OWNER" 2>/dev/null || true)
  [[ -z $owner || $owner == "$dir" || ! -d $owner/node ]] \
    || die "the node of $owner holds this host's bridge: GWOP_CLUSTER_DIR=$owner hack/node.sh down"
  ensure_packages
  teardown  # a previous (crashed) run's leftovers
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "bridge $BRIDGE exists and was not created by this directory's node"
  echo "$dir" >"$OWNER"
  mkdir -p "$run" "$logs" "$npki" "$rec"
  record_host
  network
  echo "$NODE_IP"
}

network_recorded() { [[ -f $rec/created-bridge ]] && ip link show "$BRIDGE" >/dev/null 2>&1; }

up() {
  [[ $(id -u) == 0 ]] || die "a real node needs root (containerd, the bridge, iptables, cgroups)"
  bin=$("$repo/hack/build-binaries.sh")
  if ! [[ -f $kubeconfig && $(kc get --raw /readyz 2>/dev/null) == ok ]] || ! network_recorded; then
    log "no control plane for a real node in $dir: starting one (GWOP_NODE=1 hack/cluster.sh up)"
    GWOP_CLUSTER_DIR=$dir GWOP_NODE=1 "$repo/hack/cluster.sh" up >/dev/null
    return  # cluster.sh up ran `node.sh up` itself
  fi
  local endpoint
  endpoint=$(kc get endpointslice -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[0].endpoints[0].addresses[0]}')
  [[ $endpoint == "$NODE_IP" ]] || die "the API server advertises $endpoint, not the node address $NODE_IP (pods could not reach it): restart it with GWOP_NODE=1 hack/cluster.sh up"
  if status 2>/dev/null; then log "already up"; return; fi
  local t0=$SECONDS
  nbin=$("$repo/hack/build-binaries.sh" --node)
  log "node binaries ready in $((SECONDS - t0))s"
  t0=$SECONDS
  write_configs
  make_cgroups

  client_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  client_cert kube-proxy "/CN=system:kube-proxy"
  client_cert kube-scheduler "/CN=system:kube-scheduler"
  client_cert coredns "/CN=gwop-node:coredns"
  client_cert hostpath-provisioner "/CN=gwop-node:hostpath-provisioner"
  client_cert edge "/CN=gwop-node:edge"
  client_cert netpol "/CN=gwop-node:netpol"
  node_kubeconfig kubelet; node_kubeconfig kube-proxy; node_kubeconfig kube-scheduler; node_kubeconfig coredns
  node_kubeconfig hostpath-provisioner; node_kubeconfig edge; node_kubeconfig netpol
  # RBAC only (no Node authorizer): the kubelets' group gets the system:node role
  kc create clusterrolebinding gwop-node-kubelets --clusterrole system:node --group system:nodes \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  cluster_dns_objects
  edge_objects
  netpol_objects
  # PersistentVolumeClaims: our minimal hostPath provisioner (hack/hostpath_provisioner.py)
  kc apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: gwop-hostpath
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: gateway-operator.dev/node-hostpath
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gwop-node-hostpath-provisioner}
rules:
- {apiGroups: [""], resources: [persistentvolumeclaims], verbs: [list]}
- {apiGroups: [""], resources: [persistentvolumes], verbs: [list, create, delete]}
---
$(node_binding hostpath-provisioner)
EOF

  start_containerd
  wait_for containerd 30 nctr version
  import_images

  start kube-scheduler "$nbin/kube-scheduler" --kubeconfig "$node_dir/kube-scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$(free_port)" --v 1
  start kubelet "$nbin/kubelet" --config "$node_dir/kubelet.yaml" \
    --kubeconfig "$node_dir/kubelet.kubeconfig" --root-dir "$node_dir/kubelet/root" \
    --cert-dir "$node_dir/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1
  start kube-proxy "$nbin/kube-proxy" --config "$node_dir/kube-proxy.yaml" --v 1
  start coredns "$nbin/coredns" -conf "$node_dir/Corefile"
  start hostpath-provisioner "$python" "$repo/hack/hostpath_provisioner.py" --kubeconfig "$node_dir/hostpath-provisioner.kubeconfig" \
    --root "$node_dir/volumes" --node "$NODE_NAME"
  start edge env KUBECONFIG="$node_dir/edge.kubeconfig" "$nbin/traefik" --configFile="$node_dir/traefik.yaml"
  wait_for "node $NODE_NAME Ready" 120 node_ready
  wait_for "cluster DNS" 30 dns_answers
  # kube-router (which reads the Node's InternalIP at start: the node is Ready, so registered) only
  # once kube-proxy has written its chains (DNS answers through a Service address):
  # kube-router rewrites the filter table with iptables-restore, and one started beside kube-proxy's
  # first sync removed a chain kube-proxy had just made (its sync then waits 30 s to retry)
  local t_netpol
  if [[ $netpol != 0 ]]; then
    t_netpol=$SECONDS
    start_netpol
  fi
  wait_for "the edge (traefik) on $EDGE_IP:80" 30 edge_answers
  if [[ $netpol != 0 ]]; then
    wait_for "NetworkPolicy enforcement (kube-router's chains)" 60 netpol_enforcing
    log "kube-router enforcing NetworkPolicies $((SECONDS - t_netpol))s after its start"
  else
    log "GWOP_NODE_NETPOL=0: no NetworkPolicy enforcer on this node"
  fi
  log "node $NODE_NAME Ready in $((SECONDS - t0))s (containerd socket $sock, logs $logs)"
}

case ${1:-} in
  network) network_up ;;
  up) up ;;
  down)
    [[ $(id -u) == 0 ]] || die "needs root"
    bin=$("$repo/hack/build-binaries.sh" 2>/dev/null) || bin=
    nbin=$("$repo/hack/build-binaries.sh" --node 2>/dev/null) || nbin=
    teardown ;;
  status)
    bin=$("$repo/hack/build-binaries.sh" 2>/dev/null)
    if status; then log "node $NODE_NAME up"; else log "node not up"; exit 1; fi ;;
  images)  # a running node takes the images of `make images` again (`make demo` on a reused sandbox)
    nbin=$("$repo/hack/build-binaries.sh" --node 2>/dev/null)
    import_images ;;
  *) echo "usage: $0 network|up|down|status|images" >&2; exit 2 ;;
esac
