#!/usr/bin/env bash
# Builds (or reuses from cache) the pinned binaries of a REAL node (hack/node.sh, opt-in):
#   kubelet, kube-proxy, kube-scheduler   (Go module k8s.io/kubernetes, wrapper module hack/k8s)
# Same cache and version scheme as hack/build-binaries.sh ($GWOP_CACHE/bin/<name>-<version>,
# rebuilt only when missing), which it does not change: that script still builds only the
# control plane. Prints the directory that holds them (symlinked by plain name).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
cache=${GWOP_CACHE:-$HOME/.cache/gateway-operator}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { echo "[build-node-binaries] $*" >&2; }

build_kube() {
  local name=$1 out=$bin/$1-$KUBE_VERSION
  [[ -x $out ]] && return
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  local ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=module-proxy-build"
  ld+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  local t0=$SECONDS
  log "building $name $KUBE_VERSION (one-off)"
  (cd "$here/k8s" && go build -trimpath -ldflags "$ld" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name" && mv "$out.tmp" "$out")
  log "built $name in $((SECONDS - t0))s"
}

for name in kubelet kube-proxy kube-scheduler; do
  build_kube "$name"
  ln -sf "$name-$KUBE_VERSION" "$bin/$name"
done
echo "$bin"
