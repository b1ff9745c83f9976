#!/usr/bin/env bash
# The release (issue 55): `make release VERSION=x.y.z REGISTRY=host[:port]` runs it, and so would a
# hosted CI's release job. From this tree, whose version must already be VERSION (pyproject.toml and
# the chart's version and appVersion; tests/unit/test_release_metadata.py keeps the rest in step):
#   1. the operator and gateway images for each platform of $PLATFORMS (hack/images.sh; a foreign
#      architecture builds under qemu-user), each an SPDX SBOM (syft: the Debian and Python packages)
#   2. pushed as OCI image indexes REGISTRY/gateway-operator/{operator,gateway}:VERSION (buildah)
#   3. the chart, its default operator image set to the released index BY DIGEST, packaged and pushed
#      to oci://REGISTRY/charts (helm), as REGISTRY/charts/gateway-operator:VERSION
#   4. cosign: each image index signed (with every per-platform manifest in it), each platform's SBOM
#      attached as a signed SPDX attestation of that platform's manifest, the chart signed; each
#      signature and attestation a referrer of the digest it signs (sigstore bundles)
#   5. $RELEASE_DIR/release.json: every reference, digest and size, and each phase's time
# Settings (environment):
#   PLATFORMS         default "linux/amd64 linux/arm64"
#   COSIGN_KEY        the private key (cosign generate-key-pair; COSIGN_PASSWORD its password). Unset:
#                     keyless signing (Fulcio and Rekor, the identity of a hosted CI's OIDC token)
#   COSIGN_TLOG       1 (default): record signatures in the transparency log; 0: none (a registry
#                     on a machine that reaches no transparency log, as the tests' is)
#   REGISTRY_CA_FILE  the CA that signed the registry's TLS certificate, when the system does not
#                     trust it (buildah, helm and cosign are all told)
#   RELEASE_DIR       where release.json, the SBOMs and the chart archive go (default dist/VERSION)
# The registry's credentials come from each tool's own login (buildah login, helm registry login,
# cosign login), made before: nothing here stores one. Needs root (buildah, as hack/images.sh) and
# hack/build-binaries.sh --release (cosign, syft).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${1:-${VERSION:-}}
REGISTRY=${2:-${REGISTRY:-}}
usage="usage: make release VERSION=x.y.z REGISTRY=host[:port][/path]"
[[ -n $VERSION && -n $REGISTRY ]] || { echo "$usage" >&2; exit 2; }
[[ $VERSION =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] \
  || { echo "release: VERSION '$VERSION' is not a semantic version x.y.z[-pre]" >&2; exit 2; }
[[ $REGISTRY != *://* && $REGISTRY != */ ]] \
  || { echo "release: REGISTRY is host[:port][/path], without a scheme or a trailing slash: '$REGISTRY'" >&2; exit 2; }
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
COSIGN_TLOG=${COSIGN_TLOG:-1}
RELEASE_DIR=${RELEASE_DIR:-$repo/dist/$VERSION}
cache=${GWOP_CACHE:-$HOME/.cache/gateway-operator}
store=$cache/images/storage  # hack/images.sh's buildah store
bin=$("$repo/hack/build-binaries.sh" --dir)
IMAGES=(operator gateway)

log() { echo "[release] $*" >&2; }
fail() { echo "release: $*" >&2; exit 1; }
bah() { buildah --root "$store/root" --runroot "$store/run" "$@"; }
phase_start=$SECONDS
declare -A phase_s=()
phase() { phase_s[$1]=$((SECONDS - phase_start)); log "$1 took ${phase_s[$1]}s"; phase_start=$SECONDS; }

# the tree must already be the release: one version in the package and the chart
tree_version() {
  python3 - "$repo" <<'EOF'
import re, sys, tomllib
repo = sys.argv[1]
package = tomllib.load(open(f"{repo}/pyproject.toml", "rb"))["project"]["version"]
chart = open(f"{repo}/charts/gateway-operator/Chart.yaml").read()
found = {"pyproject.toml": package,
         "Chart.yaml version": re.search(r"^version:\s*\"?([^\"\s]+)", chart, re.M)[1],
         "Chart.yaml appVersion": re.search(r"^appVersion:\s*\"?([^\"\s]+)", chart, re.M)[1]}
print(" ".join(f"{k}={v}" for k, v in found.items()) if len(set(found.values())) > 1 else package)
EOF
}
found=$(tree_version)
[[ $found == "$VERSION" ]] || fail "VERSION $VERSION is not this tree's version ($found): bump pyproject.toml, \
operator/gateway_operator/__init__.py, the chart's version and appVersion and CHANGELOG.md first (docs/releasing.md)"
for tool in cosign syft helm; do [[ -x $bin/$tool ]] || fail "$bin/$tool is missing: hack/build-binaries.sh --release"; done
command -v buildah >/dev/null || fail "buildah is missing: hack/images.sh installs it"
mkdir -p "$RELEASE_DIR"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# TLS trust for a registry whose CA the system does not hold: buildah reads a directory of *.crt,
# helm takes the file, cosign (Go) the system bundle plus it
tls_bah=() tls_helm=()
if [[ -n ${REGISTRY_CA_FILE:-} ]]; then
  [[ -f $REGISTRY_CA_FILE ]] || fail "REGISTRY_CA_FILE $REGISTRY_CA_FILE does not exist"
  mkdir -p "$work/certs" && cp "$REGISTRY_CA_FILE" "$work/certs/ca.crt"
  cat /etc/ssl/certs/ca-certificates.crt "$REGISTRY_CA_FILE" >"$work/bundle.pem" 2>/dev/null || cp "$REGISTRY_CA_FILE" "$work/bundle.pem"
  export SSL_CERT_FILE=$work/bundle.pem
  tls_bah=(--cert-dir "$work/certs") tls_helm=(--ca-file "$REGISTRY_CA_FILE")
fi
# sigstore's bundle format (--new-bundle-format): each signature and attestation is an OCI artifact
# whose subject is the digest it signs, pushed as a referrer of that digest (a registry without the
# referrers API gets the OCI 1.1 referrers tag schema: an index under the tag sha256-<hex>)
sign_flags=(--yes --new-bundle-format)
[[ -z ${COSIGN_KEY:-} ]] || sign_flags+=(--key "$COSIGN_KEY")
((COSIGN_TLOG)) || sign_flags+=(--tlog-upload=false)

# 1. images and SBOMs, per platform
declare -A archive=()   # [name/arch] -> OCI archive
for platform in $PLATFORMS; do
  arch=${platform#linux/}
  [[ $platform == linux/* && -n $arch ]] || fail "PLATFORMS names linux/<arch> platforms: '$platform'"
  list=$work/images-$arch.txt
  GWOP_IMAGE_ARCH=$arch GWOP_IMAGES_LIST=$list "$repo/hack/images.sh" >&2
  for name in "${IMAGES[@]}"; do
    archive[$name/$arch]=$(awk -v n="/$name:" 'index($1, n) { print $2; exit }' "$list")
    [[ -f ${archive[$name/$arch]} ]] || fail "hack/images.sh listed no $name image for $arch in $list"
    SYFT_CHECK_FOR_APP_UPDATE=false "$bin/syft" scan "oci-archive:${archive[$name/$arch]}" --quiet \
      -o "spdx-json=$RELEASE_DIR/sbom-$name-$arch.spdx.json"
  done
done
phase images_and_sboms

# 2. the image indexes
declare -A index_digest=()
for name in "${IMAGES[@]}"; do
  list=release-$name-$VERSION
  bah manifest rm "$list" >/dev/null 2>&1 || true
  bah manifest create "$list" >/dev/null
  for platform in $PLATFORMS; do
    bah manifest add "$list" "oci-archive:${archive[$name/${platform#linux/}]}" >/dev/null
  done
  bah manifest push --quiet --all --format oci "${tls_bah[@]}" --digestfile "$work/$name.digest" \
    "$list" "docker://$REGISTRY/gateway-operator/$name:$VERSION"
  bah manifest inspect "$list" >"$RELEASE_DIR/index-$name.json"
  bah manifest rm "$list" >/dev/null
  index_digest[$name]=$(cat "$work/$name.digest")
  log "pushed $REGISTRY/gateway-operator/$name:$VERSION@${index_digest[$name]}"
done
phase push_images

# 3. the chart, its default image the released operator index by digest
cp -r "$repo/charts/gateway-operator" "$work/chart"
python3 - "$work/chart/values.yaml" "$REGISTRY/gateway-operator/operator" "${index_digest[operator]}" <<'EOF'
import re, sys
path, repository, digest = sys.argv[1:]
text = open(path).read()
block = re.search(r"^image:\n((?:[ #].*\n|\n)*?)(?=^\S)", text, re.M)
body = block[1]
body, n1 = re.subn(r"^(  repository:).*$", rf"\1 {repository}", body, count=1, flags=re.M)
body, n2 = re.subn(r"^(  digest:).*$", rf'\1 "{digest}"', body, count=1, flags=re.M)
assert n1 == n2 == 1, "values.yaml: image.repository and image.digest must each be one line"
open(path, "w").write(text[:block.start(1)] + body + text[block.end(1):])
EOF
# Artifact Hub's list of the images the chart runs, by digest, with their platforms
python3 - "$work/chart/Chart.yaml" "$PLATFORMS" \
  "operator=$REGISTRY/gateway-operator/operator@${index_digest[operator]}" \
  "gateway=$REGISTRY/gateway-operator/gateway@${index_digest[gateway]}" <<'EOF'
import sys
path, platforms, *images = sys.argv[1:]
lines = ["  # the released images (hack/release.sh)", "  artifacthub.io/images: |"]
for item in images:
    name, image = item.split("=", 1)
    lines += [f"    - name: {name}", f"      image: {image}", "      platforms:"]
    lines += [f"        - {p}" for p in platforms.split()]
text = open(path).read()
assert "\nannotations:\n" in text and "artifacthub.io/images" not in text, "Chart.yaml: annotations"
open(path, "w").write(text.replace("\nannotations:\n", "\nannotations:\n" + "\n".join(lines) + "\n", 1))
EOF
"$bin/helm" package "$work/chart" --version "$VERSION" --app-version "$VERSION" -d "$RELEASE_DIR" >/dev/null
chart_archive=$RELEASE_DIR/gateway-operator-$VERSION.tgz
"$bin/helm" push "$chart_archive" "oci://$REGISTRY/charts" "${tls_helm[@]}" >"$work/push.txt" 2>&1 \
  || { cat "$work/push.txt" >&2; fail "helm push failed"; }
chart_digest=$(sed -n 's/^Digest: *//p' "$work/push.txt")
[[ $chart_digest == sha256:* ]] || { cat "$work/push.txt" >&2; fail "helm push printed no digest"; }
log "pushed oci://$REGISTRY/charts/gateway-operator:$VERSION@$chart_digest"
phase push_chart

# 4. signatures and attestations
for name in "${IMAGES[@]}"; do
  "$bin/cosign" sign "${sign_flags[@]}" --recursive "$REGISTRY/gateway-operator/$name@${index_digest[$name]}" 2>"$work/sign.log" \
    || { cat "$work/sign.log" >&2; fail "cosign sign $name failed"; }
  for platform in $PLATFORMS; do
    arch=${platform#linux/}
    digest=$(python3 -c 'import json, sys; print(next(m["digest"] for m in json.load(open(sys.argv[1]))["manifests"] if m["platform"]["architecture"] == sys.argv[2]))' \
      "$RELEASE_DIR/index-$name.json" "$arch")
    "$bin/cosign" attest "${sign_flags[@]}" --type spdxjson --predicate "$RELEASE_DIR/sbom-$name-$arch.spdx.json" \
      "$REGISTRY/gateway-operator/$name@$digest" 2>"$work/sign.log" \
      || { cat "$work/sign.log" >&2; fail "cosign attest $name/$arch failed"; }
  done
done
"$bin/cosign" sign "${sign_flags[@]}" "$REGISTRY/charts/gateway-operator@$chart_digest" 2>"$work/sign.log" \
  || { cat "$work/sign.log" >&2; fail "cosign sign of the chart failed"; }
phase sign

# 5. what was released: every digest, and each platform's bytes as the registry holds them (its
# manifest's config and layers, read back from the registry)
phases=$(for k in "${!phase_s[@]}"; do printf '%s=%s\n' "$k" "${phase_s[$k]}"; done)
digests=$(for name in "${IMAGES[@]}"; do printf '%s=%s\n' "$name" "${index_digest[$name]}"; done)
python3 - "$RELEASE_DIR" "$VERSION" "$REGISTRY" "$chart_digest" "$chart_archive" "$phases" "$digests" <<'EOF'
import json, os, ssl, sys, urllib.request
out, version, registry, chart_digest, chart_archive, phases, digests = sys.argv[1:]
host, _, prefix = registry.partition("/")
context = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
def manifest(repository, digest):
    path = "/".join(p for p in (prefix, repository) if p)
    request = urllib.request.Request(f"https://{host}/v2/{path}/manifests/{digest}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        return json.load(answer)
release = {"version": version, "registry": registry, "images": {},
           "chart": {"reference": f"oci://{registry}/charts/gateway-operator", "version": version,
                     "digest": chart_digest, "bytes": os.path.getsize(chart_archive)},
           "phase_seconds": {k: int(v) for k, v in (line.split("=") for line in phases.splitlines())}}
for line in digests.splitlines():
    name, digest = line.split("=")
    index = json.load(open(f"{out}/index-{name}.json"))
    platforms = {}
    for m in index["manifests"]:
        arch = m["platform"]["architecture"]
        sbom = json.load(open(f"{out}/sbom-{name}-{arch}.spdx.json"))
        try:
            body = manifest(f"gateway-operator/{name}", m["digest"])
            size = body["config"]["size"] + sum(layer["size"] for layer in body["layers"])
        except OSError as error:  # a registry that wants credentials for reads: no size
            print(f"[release] {name}/{arch}: size not read ({error})", file=sys.stderr)
            size = None
        platforms[arch] = {"digest": m["digest"], "bytes": size, "sbom_packages": len(sbom.get("packages", []))}
    release["images"][name] = {"reference": f"{registry}/gateway-operator/{name}:{version}", "digest": digest,
                               "platforms": platforms}
json.dump(release, open(f"{out}/release.json", "w"), indent=2)
print(json.dumps(release, indent=2))
EOF
log "released $VERSION to $REGISTRY: $RELEASE_DIR/release.json"
