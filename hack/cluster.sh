#!/usr/bin/env bash
# The local control plane: etcd + kube-apiserver + kube-controller-manager on loopback
# ports, plus kube-scheduler and a SIMULATED node: kwok (sigs.k8s.io/kwok, the Kubernetes
# project's node simulator) plays the kubelet of node `kwok-0`, reporting each scheduled pod
# Running and Ready with a distinct 127.x pod IP, and runs nothing. With GWOP_NODE=1 the node
# is a real one instead (hack/node.sh).
#
#   hack/cluster.sh up      start (harmless when already up); prints the kubeconfig path
#   hack/cluster.sh down    stop everything it started, by pid, and wipe cluster state
#   hack/cluster.sh status  exit 0 when every component is running and /readyz says ok
#   hack/cluster.sh restart NAME   stop one component (etcd, kube-apiserver, ...) and start it
#                           again with the same command line and ports (fault tests)
#
# GWOP_CLUSTER_DIR (default: <repo>/.cluster/sandbox) holds pki, etcd data, logs, pids and
# the admin kubeconfig; tests use their own directory so they never touch the demo's.
# GWOP_POD_NETWORK (default 127.1.0.0/16): the loopback range the simulated node's pod IPs
# come from (its podCIDR); give clusters that run at the same time different ranges.
# GWOP_SERVICE_CIDR (default 10.0.0.0/24): kube-apiserver's --service-cluster-ip-range; the
# serving certificate names its first address. A real node (hack/node.sh) needs 198.19.0.0/16.
# GWOP_KCM_QPS=<n>: the controller manager's client QPS (default 20; the scale benchmark
# raises it so that creating thousands of pods does not hide the operator's own time).
# GWOP_SIMULATED_NODE=0: no simulated node (pods stay Pending). Default 1.
# GWOP_KUBE_VERSION=<version>: the control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler) at that version: hack/versions.env's KUBE_VERSION (the default) or
# KUBE_OLDEST_VERSION (the oldest supported end: <name>-<version> binaries, hack/build-binaries.sh
# --oldest, built when missing). etcd, kwok and kubectl stay the pinned ones. A cluster already up
# at another version is taken down and started again.
# GWOP_NODE=1: a REAL node (hack/node.sh: containerd, kubelet, kube-proxy, CoreDNS; root): no
# simulated node, Services in 198.19.0.0/16, and the API server bound to and advertising the node's
# bridge address (198.18.0.1) so that pods reach it through the `kubernetes` Service; the admin
# kubeconfig names that address too. `make cluster-up` runs this way.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${GWOP_CLUSTER_DIR:-$repo/.cluster/sandbox}
pki=$dir/pki; run=$dir/run; logs=$dir/logs
kubeconfig=$dir/kubeconfig
python=${GWOP_PYTHON:-$repo/.venv/bin/python}
service_cidr=${GWOP_SERVICE_CIDR:-10.0.0.0/24}
simulated=${GWOP_SIMULATED_NODE:-1}
real_node=${GWOP_NODE:-0}
api_address=127.0.0.1
if [[ $real_node == 1 ]]; then
  simulated=0
  service_cidr=${GWOP_SERVICE_CIDR:-198.19.0.0/16}
fi
source "$repo/hack/versions.env"
kube_version=${GWOP_KUBE_VERSION:-$KUBE_VERSION}
build_flags=()
case $kube_version in
  "$KUBE_VERSION") ;;
  "$KUBE_OLDEST_VERSION") build_flags=(--oldest) ;;
  *) echo "[cluster] GWOP_KUBE_VERSION=$kube_version: only $KUBE_VERSION (KUBE_VERSION) and $KUBE_OLDEST_VERSION" \
       "(KUBE_OLDEST_VERSION) are built (hack/versions.env)" >&2; exit 2 ;;
esac
[[ $simulated == 1 ]] || build_flags+=(--no-sim)  # no kwok (or the GitOps CRDs) beside a real node
if [[ $kube_version != "$KUBE_VERSION" && ${GWOP_NODE:-0} == 1 ]]; then
  echo "[cluster] GWOP_KUBE_VERSION=$kube_version: the real node runs $KUBE_VERSION only" >&2; exit 2
fi
NODE_ADDRESS=198.18.0.1  # hack/node.sh's bridge address (the serving certificate names it)
components=(etcd kube-apiserver kube-controller-manager)
[[ $simulated == 0 ]] || components+=(kube-scheduler kwok)
SIMULATED_NODE=kwok-0

log() { echo "[cluster] $*" >&2; }
source "$repo/hack/processes.sh"  # free_port, start, alive, stop_pid, wait_for, sign_cert, write_kubeconfig

# A control-plane component's binary at GWOP_KUBE_VERSION (the plain name is KUBE_VERSION's).
component() {  # component NAME
  if [[ $kube_version == "$KUBE_VERSION" ]]; then echo "$bin/$1"; else echo "$bin/$1-$kube_version"; fi
}

server_version() {
  "$bin/kubectl" --kubeconfig "$kubeconfig" version -o json 2>/dev/null \
    | "$python" -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'
}

readyz() { "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz 2>/dev/null; }

status() {
  local c
  for c in "${components[@]}"; do alive "$c" || return 1; done
  [[ $(readyz) == ok ]] || return 1
  [[ $real_node == 0 ]] || "$repo/hack/node.sh" status >/dev/null 2>&1
}

first_service_ip() { python3 -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[1])' "$service_cidr"; }

serving_cert() {  # the API server's serving certificate, for loopback and the first service IP
  cat > "$pki/serving.ext" <<EXT
subjectAltName=IP:127.0.0.1,IP:$(first_service_ip),IP:$NODE_ADDRESS,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EXT
  sign_cert "$pki" "$pki/serving" "/CN=kube-apiserver" 3650 "$pki/serving.ext"
}

# The aggregation layer's own CA and the client certificate the API server presents when it proxies to an
# extension API server (prometheus-adapter's custom.metrics.k8s.io: hack/verify-autoscaling.py), which
# trusts the X-Remote-User/-Group headers of a client this CA signed as front-proxy-client.
front_proxy_pki() {
  local fp=$pki/front-proxy
  [[ -f $fp/client.crt ]] && return
  mkdir -p "$fp"
  (cd "$fp" && openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gateway-operator-front-proxy-ca" \
     -keyout ca.key -out ca.crt 2>/dev/null)
  sign_client_cert "$fp" "$fp/client" "/CN=front-proxy-client" 3650
}

make_pki() {
  front_proxy_pki
  if [[ -f $pki/admin.crt ]]; then
    # an earlier run with another GWOP_SERVICE_CIDR: only the serving certificate changes
    grep -q "IP:$(first_service_ip),IP:$NODE_ADDRESS," "$pki/serving.ext" 2>/dev/null || serving_cert
    return
  fi
  log "generating a CA, serving, admin and service-account keys in $pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gateway-operator-local-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
  )
  serving_cert
  sign_client_cert "$pki" "$pki/admin" "/O=system:masters/CN=local-admin" 3650
  (
    cd "$pki"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

restart() {  # restart NAME: the same command line again, after the old process is gone
  local name=$1 cmd=()
  [[ -f $run/$name.cmd ]] || { log "no $name started here"; exit 1; }
  mapfile -d '' cmd < "$run/$name.cmd"
  stop_pid "$name"
  start "$name" "${cmd[@]}"
  bin=$("$repo/hack/build-binaries.sh" "${build_flags[@]}")
  wait_for "$name" 90 bash -c "[[ \$('$bin/kubectl' --kubeconfig '$kubeconfig' get --raw /readyz 2>/dev/null) == ok ]]"
  log "restarted $name"
}


up() {
  bin=$("$repo/hack/build-binaries.sh" "${build_flags[@]}")
  if status; then
    local running; running=$(server_version)
    if [[ $running == "$kube_version" ]]; then log "already up"; usage; return; fi
    log "up at $running, not $kube_version: starting it again"
  fi
  down_quiet
  mkdir -p "$run" "$logs"
  for c in "${components[@]}"; do rm -f "$logs/$c.log"; done  # start appends (for restart)
  make_pki
  if [[ $real_node == 1 ]]; then
    api_address=$("$repo/hack/node.sh" network)  # the bridge, before the API server binds its address
  fi
  # On loopback the kubernetes Service gets no endpoints (Endpoints reject 127/8), and since 1.37
  # kube-apiserver refuses to start with a loopback --advertise-address and an endpoint reconciler.
  local reconciler=()
  [[ $api_address != 127.* ]] || reconciler=(--endpoint-reconciler-type none)
  local etcd_port etcd_peer api_port
  etcd_port=$(free_port); etcd_peer=$(free_port)

  start etcd "$bin/etcd" --name local --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

  # Audit log (metadata only, never bodies) of every write, and of every request - reads
  # too - by the operator's test identities (tests/harness/operator.py): tests count the
  # operator's writes and prove that its RBAC grants exactly what it uses.
  cat > "$dir/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [system:serviceaccount:gwop-test-system:gwop-test, system:serviceaccount:gwop-test-system:gwop-test-ns]
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
POLICY
  # the sharded list and watch (KEP-5866, alpha since 1.36): `gateway-operator run --shards` asks
  # for its shards' GatewayDeployments only; the oldest supported end has no such gate and the
  # operator filters the same way itself
  local gates=()
  [[ $kube_version == "$KUBE_VERSION" ]] && gates=(--feature-gates ShardedListAndWatch=true)
  # chosen as late as possible: a port free earlier may be some connection's local port by now
  api_port=$(free_port)
  start kube-apiserver "$(component kube-apiserver)" \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$logs/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$api_address" --advertise-address "$api_address" --secure-port "$api_port" \
    --kubelet-preferred-address-types InternalIP \
    --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
    --cert-dir "$dir/apiserver-certs" --tls-cert-file "$pki/serving.crt" --tls-private-key-file "$pki/serving.key" \
    --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy/client.crt" --proxy-client-key-file "$pki/front-proxy/client.key" \
    --enable-aggregator-routing=true \
    --authorization-mode RBAC \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,DefaultStorageClass,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy \
    --service-cluster-ip-range "$service_cidr" --allow-privileged=true \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    "${reconciler[@]}" "${gates[@]}" --v 1
  write_kubeconfig "$kubeconfig" "https://$api_address:$api_port" "$pki/ca.crt" "$pki/admin" local-admin
  wait_for kube-apiserver 90 bash -c "[[ \$('$bin/kubectl' --kubeconfig '$kubeconfig' get --raw /readyz 2>/dev/null) == ok ]]"

  start kube-controller-manager "$(component kube-controller-manager)" \
    --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --leader-elect=false --secure-port 0 \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10 \
    ${GWOP_KCM_QPS:+--kube-api-qps "$GWOP_KCM_QPS" --kube-api-burst "$((GWOP_KCM_QPS * 2))"} --v 1

  [[ $simulated == 0 ]] || simulated_node
  wait_for "default service account" 60 "$bin/kubectl" --kubeconfig "$kubeconfig" -n default get serviceaccount default
  if [[ $real_node == 1 ]]; then
    "$repo/hack/node.sh" up
  fi
  usage
}

simulated_node() {  # kube-scheduler binds pods to kwok-0; kwok reports them Running with 127.x IPs
  local pod_network=${GWOP_POD_NETWORK:-127.1.0.0/16}
  # a generous client rate: binding thousands of pods must not hide the operator's own time
  cat > "$dir/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$kubeconfig", qps: 500, burst: 1000}
leaderElection: {leaderElect: false}
EOF
  start kube-scheduler "$(component kube-scheduler)" --config "$dir/scheduler.yaml" --secure-port 0 --v 1
  start kwok "$bin/kwok" --kubeconfig "$kubeconfig" -c "$bin/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-label-selector=type=kwok \
    --cidr "$pod_network" --node-ip 127.0.0.1 --server-address 127.0.0.1:0 \
    --node-lease-duration-seconds 40 -v WARN
  "$bin/kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $SIMULATED_NODE
  labels: {type: kwok, kubernetes.io/hostname: $SIMULATED_NODE}
  annotations: {kwok.x-k8s.io/node: fake}
spec: {podCIDR: "$pod_network"}
status:
  allocatable: {cpu: "1000", memory: 1Ti, ephemeral-storage: 1Ti, pods: "10000"}
  capacity: {cpu: "1000", memory: 1Ti, ephemeral-storage: 1Ti, pods: "10000"}
EOF
  wait_for "simulated node $SIMULATED_NODE" 60 "$bin/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready "node/$SIMULATED_NODE" --timeout=1s
}

usage() {
  log "control plane up: $(server_version)"
  log "  export KUBECONFIG=$kubeconfig"
  log "  kubectl binary: $bin/kubectl   (helm: $bin/helm)"
  echo "$kubeconfig"
}


down_quiet() {
  local i
  local all=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)  # whatever an earlier up started
  if [[ -d $dir/node ]]; then "$repo/hack/node.sh" down; fi  # a real node first: its kubelet stops
  for (( i=${#all[@]}-1; i>=0; i-- )); do stop_pid "${all[$i]}"; done
  rm -rf "$dir/etcd-data" "$dir/apiserver-certs"
}

case ${1:-} in
  up) up ;;
  down) down_quiet; log "down ($dir)" ;;
  status) bin=$("$repo/hack/build-binaries.sh" "${build_flags[@]}" 2>/dev/null); status && log "up" || { log "not up"; exit 1; } ;;
  kubeconfig) echo "$kubeconfig" ;;
  restart) restart "${2:?usage: $0 restart NAME}" ;;
  *) echo "usage: $0 up|down|status|kubeconfig|restart NAME" >&2; exit 2 ;;
esac
