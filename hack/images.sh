#!/usr/bin/env bash
# The node's container images (issue 8), built without Docker and without a container registry,
# by mmdebstrap (Debian rootfs) and buildah (Dockerfiles, chroot isolation, host network):
#   base      Debian bookworm rootfs: python3, python3-venv, ca-certificates, tini, passwd
#   operator  ./Dockerfile FROM the base              -> localhost/gateway-operator/operator:<version>
#   gateway   images/gateway/Dockerfile (pinned lock)  -> localhost/gateway-operator/gateway:0.1.16
#   redis     images/redis/Dockerfile (redis-server)   -> localhost/gateway-operator/redis:7
#   pause     images/pause/pause.go, static, FROM scratch -> localhost/gateway-operator/pause:3
#   test-health-standin  images/test-health-standin (a TEST IMAGE: the HEALTH ENDPOINT STAND-IN
#             as a pod, for tests on the real node) -> localhost/gateway-operator/test-health-standin:1
# Each image is an OCI archive in $GWOP_CACHE/images (default ~/.cache/gateway-operator/images)
# named by a hash of its inputs; an archive that exists is reused, so a second run takes seconds.
# $GWOP_CACHE/images/images.txt lists "NAME ARCHIVE", one image a line, for the node's import.
# The Debian mirror is read from this machine's apt sources, pip's index/CA from its pip config
# and environment, at build time: nothing host-specific is written into the repository.
# Needs root (buildah, mmdebstrap); installs buildah and mmdebstrap with apt-get when missing.
# GWOP_IMAGE_ARCH=<Debian architecture> (default: this machine's, `dpkg --print-architecture`)
# builds for another architecture under qemu-user (binfmt_misc): only base, operator and gateway
# (redis, pause and test-health-standin are the test node's own, this machine's architecture only).
# qemu-user-static is installed with apt-get when missing and its handler registered with the F
# flag (binfmt_misc mounted first if need be). The architecture is one more input of each hash;
# the archives are named NAME-TAG-ARCH-HASH.oci.tar, the images in the store NAME:TAG-ARCH, and
# $GWOP_CACHE/images/images-ARCH.txt lists them (images.txt is this machine's architecture's only).
# Each run prunes only its own architecture's stale archives. For this machine's architecture
# names, hashes and lists are what they were before the variable existed.
# GWOP_IMAGES_LIST=<file> writes the list there instead (base, operator, gateway), and prunes
# nothing (hack/release.sh).
#   hack/images.sh [build]        build what is missing, print each image's time and size
#   hack/images.sh list           print the list (images.txt, or images-ARCH.txt)
#   hack/images.sh lock-gateway   regenerate images/gateway/requirements.lock (clean venv)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${GWOP_CACHE:-$HOME/.cache/gateway-operator}
out=$cache/images
store=$out/storage          # buildah's own image store: nothing under /var/lib/containers
HOST_ARCH=$(dpkg --print-architecture)
ARCH=${GWOP_IMAGE_ARCH:-$HOST_ARCH}
# the architectures a foreign build knows: Debian's name, the OCI platform, qemu's name
ARCHES="amd64 linux/amd64 x86_64
arm64 linux/arm64 aarch64"
# this machine's architecture: no suffix, no hash word, images.txt (all as before GWOP_IMAGE_ARCH)
SFX="" ARCH_INPUT=() list=$out/images.txt PLATFORM="" QEMU_ARCH=""
if [[ $ARCH != "$HOST_ARCH" ]]; then
  read -r _ PLATFORM QEMU_ARCH < <(grep "^$ARCH " <<<"$ARCHES") || true
  [[ -n $PLATFORM ]] || { echo "[images] GWOP_IMAGE_ARCH=$ARCH: not one of $(cut -d' ' -f1 <<<"$ARCHES" | xargs)" >&2; exit 2; }
  SFX=-$ARCH ARCH_INPUT=("arch=$ARCH") list=$out/images-$ARCH.txt
fi
# a caller's own list (hack/release.sh: a release of another tree shares the cache): the list goes
# there, it holds base, operator and gateway only (not the test node's images), and nothing is
# pruned, since images.txt may still name what a prune would remove
own_list=0
if [[ -n ${GWOP_IMAGES_LIST:-} ]]; then list=$GWOP_IMAGES_LIST own_list=1; fi

PREFIX=localhost/gateway-operator
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,ca-certificates,tini,passwd
# no docs, man pages or translations in the rootfs (copyright files stay)
DPKG_OPTS=(path-exclude=/usr/share/doc/* path-include=/usr/share/doc/*/copyright
           path-exclude=/usr/share/man/* path-exclude=/usr/share/info/*
           path-exclude=/usr/share/locale/* path-include=/usr/share/locale/locale.alias)
GATEWAY_VERSION=0.1.16
CRYPTOGRAPHY_VERSION=50.0.2  # in the gateway image: EncryptedSessionStore for the shared session history
REDIS_TAG=7
PAUSE_TAG=3
# bump one to rebuild that image when its recipe below changes
BASE_RECIPE=1 BUD_RECIPE=2 PAUSE_RECIPE=1
# where the machine's CA bundle is bind-mounted during RUN steps: over the base's own bundle
# (ca-certificates), a file that exists, so the mount leaves no trace in a layer
BUILD_CA=/etc/ssl/certs/ca-certificates.crt

log() { echo "[images] $*" >&2; }
bah() { buildah --root "$store/root" --runroot "$store/run" "$@"; }

ensure_tools() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  if ((${#missing[@]})); then
    local sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo)
    log "installing ${missing[*]} with apt-get"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  [[ $(id -u) == 0 ]] || { log "buildah and mmdebstrap run as root here: run with sudo"; exit 1; }
  [[ -n $SFX ]] || command -v go >/dev/null \
    || { log "go is needed for the pause image (the control plane needs it too)"; exit 1; }
}

# A foreign architecture's binaries run under qemu-user through binfmt_misc: qemu-user-static
# (apt-get), binfmt_misc mounted, its handler registered with the F flag (the kernel opens the
# interpreter once, so it works inside the chroots of mmdebstrap and buildah, which lack it).
ensure_emulation() {
  [[ -n $SFX ]] || return 0
  local bm=/proc/sys/fs/binfmt_misc name=qemu-$QEMU_ARCH line
  if ! command -v "qemu-$QEMU_ARCH-static" >/dev/null; then
    log "installing qemu-user-static with apt-get (for $ARCH)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
  fi
  if [[ ! -e $bm/register ]]; then
    mount -t binfmt_misc binfmt_misc "$bm" \
      || { log "$ARCH: binfmt_misc is not mounted at $bm and mounting it failed"; exit 1; }
  fi
  if [[ ! -e $bm/$name ]]; then
    line=$(binfmt_line "$name") || { log "$ARCH: qemu-user-static has no binfmt entry for $name"; exit 1; }
    [[ ${line##*:} == *F* ]] || line+=F
    log "$ARCH: registering binfmt handler $name (flags ${line##*:})"
    printf '%s\n' "$line" >"$bm/register" 2>/dev/null \
      || { log "$ARCH: registering $name in $bm/register failed"; exit 1; }
  fi
  if ! grep -qx enabled "$bm/status" || ! grep -qx enabled "$bm/$name"; then
    log "$ARCH: binfmt_misc or its $name handler is disabled ($bm)"; exit 1
  fi
  if ! grep -q '^flags:.*F' "$bm/$name"; then
    log "$ARCH: $bm/$name lacks the F flag (echo -1 >$bm/$name, then run again)"; exit 1
  fi
}

# binfmt_line NAME: the register line for NAME from qemu-user-static's own files (systemd's
# binfmt.d, else binfmt-support's format)
binfmt_line() {
  local f
  for f in /usr/lib/binfmt.d/"$1".conf /usr/lib/binfmt.d/"$1"-static.conf; do
    [[ -f $f ]] && grep -m1 "^:$1:" "$f" && return
  done
  f=/usr/share/binfmts/$1
  [[ -f $f ]] || return 1
  awk -v name="$1" '
    { v[$1] = $2 }
    END {
      if (v["interpreter"] == "" || v["magic"] == "") exit 1
      flags = (v["preserve"] == "yes" ? "P" : "") (v["credentials"] == "yes" ? "OC" : "") (v["fix_binary"] == "yes" ? "F" : "")
      printf ":%s:M:%s:%s:%s:%s:%s\n", name, v["offset"], v["magic"], v["mask"], v["interpreter"], flags
    }' "$f"
}

# This machine's Debian entries for the suite (and -updates, -security), as one-line sources.
debian_sources() {
  python3 - "$SUITE" <<'EOF'
import glob, re, sys
ok = re.compile(r"^%s(-updates|-security)?$" % re.escape(sys.argv[1]))
files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")) \
        + sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
seen = []
def add(types, uris, suites, comps, signed):
    if "deb" not in types or (signed and "debian-archive-keyring" not in signed):
        return  # deb-src, or another vendor's repository
    for uri in uris:
        for suite in suites:
            line = "deb %s %s %s" % (uri, suite, " ".join(comps or ["main"]))
            if ok.match(suite) and line not in seen:
                seen.append(line)
for name in files:
    try:
        text = open(name).read()
    except OSError:
        continue
    if name.endswith(".sources"):
        for para in re.split(r"\n\s*\n", text):
            fields, key = {}, None
            for line in para.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line[0] in " \t" and key:
                    fields[key] += " " + line.strip()
                    continue
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if fields.get("enabled", "yes").lower() != "no":
                add(fields.get("types", "").split(), fields.get("uris", "").split(),
                    fields.get("suites", "").split(), fields.get("components", "").split(),
                    fields.get("signed-by", ""))
    else:
        for line in text.splitlines():
            m = re.match(r"^(deb)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line.split("#", 1)[0].strip())
            if m:
                add(["deb"], [m[3]], [m[4]], m[5].split(), m[2] or "")
print("\n".join(seen))
EOF
}

# pip's index settings of this machine (config files, then the environment), NAME=VALUE lines.
pip_settings() {
  python3 - <<'EOF'
import os, subprocess, sys
names = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL",
         "trusted-host": "PIP_TRUSTED_HOST", "cert": "PIP_CERT"}
found = {}
try:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                            text=True, timeout=60).stdout
except Exception:
    listed = ""
for line in listed.splitlines():
    key, _, value = line.partition("=")
    if key.rsplit(".", 1)[-1] in names:
        found[names[key.rsplit(".", 1)[-1]]] = value.strip().strip("'\"")
for env in names.values():
    if os.environ.get(env):
        found[env] = os.environ[env]
for key, value in found.items():
    print("%s=%s" % (key, value))
EOF
}

# hash_inputs WORD|FILE...: 16 hex digits over the words and the files' paths (in the repo, or in
# its snapshot: the same path) and contents
hash_inputs() {
  local a rel
  for a in "$@"; do
    if [[ -f $a ]]; then rel=${a#"$repo"/}; rel=${rel#"${snap:-}"/}; printf 'file %s %s\n' "$rel" "$(sha256sum <"$a" | cut -c1-64)"
    else printf 'word %s\n' "$a"; fi
  done | sha256sum | cut -c1-16
}

# snapshot FILE...: a copy of each file of the repo under $snap, at its path there; prints the
# copies. An image is hashed and built from the copies, so that what it holds is what its name
# says even when the tree is edited (a merge, a checkout) while it builds.
snapshot() {
  local f rel
  for f in "$@"; do
    rel=${f#"$repo"/}
    mkdir -p "$snap/$(dirname "$rel")"
    cp -p "$f" "$snap/$rel"
    printf '%s\n' "$snap/$rel"
  done
}

size_of() { du -h "$1" | cut -f1; }

# arch_of NAME: the architecture an archive or store image is for, from its name (…-ARCH-HASH);
# no architecture in the name: this machine's
arch_of() {
  local a _
  while read -r a _; do
    [[ $a != "$HOST_ARCH" && ${1##*/} == *-"$a"-[0-9a-f]* ]] && { echo "$a"; return; }
  done <<<"$ARCHES"
  echo "$HOST_ARCH"
}

# oci_platform ARCHIVE: OS/ARCHITECTURE[/VARIANT] of the image config in an OCI archive
# (index.json -> manifest -> config)
oci_platform() {
  python3 - "$1" <<'EOF'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    names = {m.name.lstrip("./"): m for m in tar.getmembers()}
    read = lambda name: json.load(tar.extractfile(names[name]))
    blob = lambda digest: read("blobs/" + digest.replace(":", "/", 1))
    config = blob(blob(read("index.json")["manifests"][0]["digest"])["config"]["digest"])
print("/".join(filter(None, (config.get("os"), config.get("architecture"), config.get("variant")))))
EOF
}

# check_platform ARCHIVE: a foreign build's archive says the platform it was built for
check_platform() {
  [[ -n $SFX ]] || return 0
  local got; got=$(oci_platform "$1")
  [[ $got == "$PLATFORM" ]] || { log "$(basename "$1"): its config says $got, not $PLATFORM"; rm -f "$1"; exit 1; }
}
report() { printf '[images] %-44s %-8s %6s  %s\n' "$1" "$2" "$(size_of "$3")" "$3" >&2; }

# push IMAGE ARCHIVE: the image from the store to an OCI archive (written whole, then renamed)
push() {
  rm -f "$2.part"
  bah push --quiet "$1" "oci-archive:$2.part:$1" >/dev/null
  mv "$2.part" "$2"
}

# ensure_stored IMAGE ARCHIVE: the image in buildah's store (re-imported from its archive)
ensure_stored() {
  bah inspect --type image "$1" >/dev/null 2>&1 && return
  local id; id=$(bah pull --quiet "oci-archive:$2" | tail -n1)
  bah tag "$id" "$1"
}

build_base() {
  local sources; sources=$(debian_sources)
  [[ -n $sources ]] || { log "no $SUITE entry of Debian's archive in /etc/apt/sources.list*"; exit 1; }
  local hash; hash=$(hash_inputs base "$BASE_RECIPE" "${ARCH_INPUT[@]}" "$SUITE" "$BASE_PACKAGES" "${DPKG_OPTS[@]}" "$sources")
  BASE_IMAGE=$PREFIX/base:$SUITE$SFX-$hash
  BASE_ARCHIVE=$out/base-$SUITE$SFX-$hash.oci.tar
  APT_SOURCES=$sources
  if [[ -f $BASE_ARCHIVE ]]; then report "$BASE_IMAGE" reused "$BASE_ARCHIVE"; return; fi
  local t0=$SECONDS mirrors=() opts=() cfg=() o line
  while IFS= read -r line; do mirrors+=("$line"); done <<<"$sources"
  for o in "${DPKG_OPTS[@]}"; do opts+=(--dpkgopt="$o"); done
  if [[ -n $SFX ]]; then  # a foreign architecture: its maintainer scripts run under qemu
    opts+=(--architectures="$ARCH")
    local os cpu variant
    IFS=/ read -r os cpu variant <<<"$PLATFORM"
    cfg=(--os "$os" --arch "$cpu")
    [[ -z $variant ]] || cfg+=(--variant "$variant")
  fi
  log "base: mmdebstrap $SUITE (--variant=apt --include=$BASE_PACKAGES${SFX:+ --architectures=$ARCH})"
  mmdebstrap --quiet --variant=apt --include="$BASE_PACKAGES" "${opts[@]}" \
    --customize-hook='rm -f "$1/etc/apt/sources.list"; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/apt "$1"/var/log/dpkg.log' \
    --customize-hook='dpkg-query --admindir="$1/var/lib/dpkg" -W -f "\${Package} \${Version}\n" >'"$work/packages.txt" \
    "$SUITE" "$work/rootfs.tar" "${mirrors[@]}"
  local c; c=$(bah from scratch)
  bah add --quiet "$c" "$work/rootfs.tar" / >/dev/null
  bah config "${cfg[@]}" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --entrypoint '["tini", "--"]' --cmd '["/bin/sh"]' \
    --label org.opencontainers.image.title=gateway-operator-base \
    --label org.opencontainers.image.description="Debian $SUITE: ${BASE_PACKAGES//,/, }" "$c"
  bah commit --quiet --rm "$c" "$BASE_IMAGE" >/dev/null
  push "$BASE_IMAGE" "$BASE_ARCHIVE"
  check_platform "$BASE_ARCHIVE"
  cp "$work/packages.txt" "${BASE_ARCHIVE%.oci.tar}.packages.txt"
  report "$BASE_IMAGE" "$((SECONDS - t0))s" "$BASE_ARCHIVE"
}

# build_bud NAME TAG CONTEXT DOCKERFILE [EXTRA-INPUT...]: a Dockerfile FROM the base
build_bud() {
  local name=$1 tag=$2 context=$3 dockerfile=$4; shift 4
  local inputs=() shown=${dockerfile#"$repo"/}  # the Dockerfile and every file its context holds for it, copied (snapshot)
  rm -rf "$snap" && mkdir -p "$snap"
  mapfile -t inputs < <(snapshot "$dockerfile" "$@")
  dockerfile=${inputs[0]}
  if [[ $context == "$repo" ]]; then context=$snap; else context=$snap/${context#"$repo"/}; fi
  local hash; hash=$(hash_inputs "$name" "$BUD_RECIPE" "${ARCH_INPUT[@]}" "$tag" "$BASE_IMAGE" "${inputs[@]}")
  local image=$PREFIX/$name:$tag$SFX archive=$out/$name-$tag$SFX-$hash.oci.tar
  built+=("$image $archive")
  if [[ -f $archive ]]; then report "$image" reused "$archive"; return; fi
  local t0=$SECONDS args=(--build-arg "BASE_IMAGE=$BASE_IMAGE") kv cert=""
  ensure_stored "$BASE_IMAGE" "$BASE_ARCHIVE"
  while IFS= read -r kv; do
    [[ -n $kv ]] || continue
    case $kv in
      PIP_CERT=*) cert=${kv#PIP_CERT=} ;;
      *) args+=(--build-arg "$kv") ;;
    esac
  done < <(pip_settings)
  # the machine's CA bundle (it may hold a CA that Debian's ca-certificates lacks): bind-mounted
  # into the RUN steps, never copied into a layer
  [[ -n $cert ]] || cert=${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  if [[ -f $cert ]]; then args+=(-v "$cert:$BUILD_CA:ro" --build-arg "PIP_CERT=$BUILD_CA"); fi
  [[ $name != redis ]] || args+=(--build-arg "APT_SOURCES=$APT_SOURCES")
  [[ -z $SFX ]] || args+=(--platform "$PLATFORM")  # its RUN steps run under qemu
  local blog=$out/logs/$name$SFX.log
  mkdir -p "$out/logs"
  log "$name: buildah bud $shown (from a snapshot of its inputs; log: $blog)"
  bah bud --isolation chroot --network host --pull=never --format oci --layers=false \
    -f "$dockerfile" -t "$image" "${args[@]}" "$context" >"$blog" 2>&1 \
    || { tail -n 40 "$blog" >&2; log "$name: build failed (log: $blog)"; exit 1; }
  push "$image" "$archive"
  check_platform "$archive"
  report "$image" "$((SECONDS - t0))s" "$archive"
}

build_pause() {
  local src=$repo/images/pause/pause.go
  local hash; hash=$(hash_inputs pause "$PAUSE_RECIPE" "$(go version)" "$src")
  local image=$PREFIX/pause:$PAUSE_TAG archive=$out/pause-$PAUSE_TAG-$hash.oci.tar
  built+=("$image $archive")
  if [[ -f $archive ]]; then report "$image" reused "$archive"; return; fi
  local t0=$SECONDS
  (cd "$work" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS= go build -trimpath -ldflags='-s -w -buildid=' -o pause "$src")
  local c; c=$(bah from scratch)
  bah copy --quiet --chmod 0755 "$c" "$work/pause" /pause
  bah config --entrypoint '["/pause"]' --user 65535:65535 \
    --label org.opencontainers.image.title=pause \
    --label org.opencontainers.image.description="sleeps until SIGTERM, reaps children" "$c"
  bah commit --quiet --rm "$c" "$image" >/dev/null
  push "$image" "$archive"
  report "$image" "$((SECONDS - t0))s" "$archive"
}

# archives (and store images) of earlier inputs, of this run's architecture: only the current
# ones stay (another architecture's are its own runs' to prune)
prune() {
  local keep=" $BASE_ARCHIVE ${built[*]} " f img stale=()
  for f in "$out"/*.oci.tar; do
    [[ -e $f && $(arch_of "$f") == "$ARCH" ]] || continue
    [[ $keep == *" $f "* ]] && continue
    log "removing stale $(basename "$f")"
    rm -f "$f" "${f%.oci.tar}.packages.txt"
  done
  while IFS= read -r img; do
    [[ $img == "$PREFIX/base:"* && $img != "$BASE_IMAGE" && $(arch_of "$img") == "$ARCH" ]] && stale+=("$img")
  done < <(bah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null || true)
  ((${#stale[@]} == 0)) || bah rmi "${stale[@]}" >/dev/null 2>&1 || true
  bah rmi --prune >/dev/null 2>&1 || true
}

lock_gateway() {
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m venv "$tmp/venv"
  # cryptography: praisonaiagents' EncryptedSessionStore, which the launcher wraps the shared session history in
  "$tmp/venv/bin/pip" install -q --only-binary=:all: "praisonai-bot[gateway]==$GATEWAY_VERSION" "cryptography==$CRYPTOGRAPHY_VERSION"
  { echo "# praisonai-bot[gateway]==$GATEWAY_VERSION, cryptography==$CRYPTOGRAPHY_VERSION and every package they pull, pinned (generated: hack/images.sh lock-gateway)."
    "$tmp/venv/bin/pip" freeze | sed "s/^praisonai-bot==/praisonai-bot[gateway]==/"
  } >"$repo/images/gateway/requirements.lock"
}

build_all() {
  ensure_tools
  ensure_emulation
  mkdir -p "$out" "$store"
  exec 9>"$out/.lock"
  flock 9  # one build at a time: they share the store
  work=$(mktemp -d "$out/work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  snap=$work/snap
  local t0=$SECONDS version
  version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
  built=()
  build_base
  local operator_files=()
  mapfile -t operator_files < <(cd "$repo" && find operator -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' | LC_ALL=C sort)
  build_bud operator "$version" "$repo" "$repo/Dockerfile" \
    "$repo/requirements.lock" "$repo/pyproject.toml" "$repo/hack/image-install.sh" "${operator_files[@]/#/$repo/}"
  build_bud gateway "$GATEWAY_VERSION" "$repo/images/gateway" "$repo/images/gateway/Dockerfile" \
    "$repo/images/gateway/requirements.lock"
  if [[ -z $SFX ]] && ((own_list == 0)); then  # the test node's own images: for its list, images.txt, only
    build_bud redis "$REDIS_TAG" "$repo/images/redis" "$repo/images/redis/Dockerfile"
    build_pause
    build_bud test-health-standin 1 "$repo/images/test-health-standin" "$repo/images/test-health-standin/Dockerfile" \
      "$repo/images/test-health-standin/health_standin.py" "$repo/images/test-health-standin/python3"
  fi
  printf '%s\n' "${built[@]}" >"$list.part" && mv "$list.part" "$list"
  ((own_list)) || prune
  log "all images${SFX:+ for $ARCH} in $((SECONDS - t0))s; list: $list"
}

case ${1:-build} in
  build) build_all ;;
  list) cat "$list" ;;
  lock-gateway) lock_gateway ;;
  *) echo "usage: $0 [build|list|lock-gateway]" >&2; exit 2 ;;
esac
