"""A release installed the way docs/install.md tells users to, on the REAL node (issue 55).

A real OCI registry (CNCF distribution, TLS on loopback from a CA made for the run, which the node's
containerd is told to trust) starts empty. ``make release VERSION=<this tree's> REGISTRY=...``
builds and pushes the operator and gateway images as OCI image indexes, their SPDX SBOMs, and the
chart, signing all with a key pair made for the run (no transparency log is reachable here). Then,
as a user would: the chart's signature and the operator image's (the digest the chart pins) are
verified with ``cosign verify`` before ``helm install oci://...``, the kubelet pulls every image
from the registry, and a GatewayDeployment of the released gateway image gets Ready with
``ExactlyOnceAdmission=True`` and answers a webhook (the LLM STAND-IN, the one stand-in, counts the
agent's turn). The next patch release (this tree with its version bumped, released the same way)
is a ``helm upgrade`` that rolls the operator and no gateway. A tampered image (another image
pushed under a released tag) is refused by the same verification.

The release here is for linux/amd64 only (the host's platform): the arm64 half of a release builds
under qemu-user and is measured in bench/results, not in ``make test`` (docs/releasing.md).
Timings are printed and, with ``$GWOP_RELEASE_JSON``, written as JSON. Needs root (the real node);
without it the module skips in one line, under CI it fails."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from harness import llm_pod, node
from harness.cluster import REPO, Cluster
from harness.gateways import conditions, is_ready, ready_pods
from harness.registry import Cosign, Registry, release
from harness.wait import until

VERSION = yaml.safe_load((REPO / "charts/gateway-operator/Chart.yaml").read_text())["version"]
NAME = "released"
SBOM_TYPE = "https://spdx.dev/Document"  # cosign's predicate type of an spdxjson attestation


def next_patch(version: str) -> str:
    major, minor, patch = (int(part) for part in version.split("-")[0].split("."))
    return f"{major}.{minor}.{patch + 1}"


def bumped_tree(directory: Path, version: str) -> Path:
    """This tree's files (tracked and new, as `git ls-files` lists them) copied to ``directory``
    with its version set to ``version`` wherever a release reads it: the next release's tree."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, directory / name)
    edits = {"pyproject.toml": (r'^version = "[^"]+"', f'version = "{version}"'),
             "operator/gateway_operator/__init__.py": (r'^__version__ = "[^"]+"', f'__version__ = "{version}"'),
             "charts/gateway-operator/Chart.yaml": (r"^version: .+$", f"version: {version}")}
    for name, (pattern, replacement) in edits.items():
        text, count = re.subn(pattern, replacement, (directory / name).read_text(), count=1, flags=re.M)
        assert count == 1, f"{name}: no {pattern}"
        (directory / name).write_text(text)
    chart = directory / "charts/gateway-operator/Chart.yaml"
    chart.write_text(re.sub(r'^appVersion: .+$', f'appVersion: "{version}"', chart.read_text(), count=1, flags=re.M))
    return directory


@dataclass
class Installed:
    registry: Registry
    cosign: Cosign
    release: dict[str, Any]
    namespace: str
    llm_env: dict[str, str]
    figures: dict[str, Any] = field(default_factory=dict)

    def image(self, name: str) -> str:
        """The released image's index, by digest."""
        return f"{self.registry.host}/gateway-operator/{name}@{self.release['images'][name]['digest']}"

    @property
    def chart(self) -> str:
        return f"oci://{self.registry.host}/charts/gateway-operator"


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE, "-l",
                            "app.kubernetes.io/name=gateway-operator")["items"]


def helm_install(cluster: Cluster, installed: Installed, version: str, *how: str) -> None:
    cluster.helm(*how, node.RELEASE, installed.chart, "--version", version, "--ca-file",
                 str(installed.registry.ca_path), "-n", node.SYSTEM_NAMESPACE, "--wait", "--timeout", "240s",
                 # this module's namespace only: the session's other namespaces are not this release's
                 "--set", "watchNamespaces={" + installed.namespace + "}")


def gateway(installed: Installed) -> dict[str, Any]:
    """examples/gateway-single.yaml (one replica, SQLite on a PVC) on the released gateway image."""
    body = yaml.safe_load((REPO / "examples/gateway-single.yaml").read_text())
    body["metadata"] = {"name": NAME, "namespace": installed.namespace}
    spec = body["spec"]
    spec.update(image=installed.image("gateway"), health={"intervalSeconds": 2, "timeoutSeconds": 1},
                env=[{"name": k, "value": v} for k, v in installed.llm_env.items()])
    return body


def ready_with_exactly_once(cluster: Cluster, namespace: str) -> bool:
    found = conditions(cluster, namespace, NAME)
    return (found.get("Ready", {}).get("status") == "True"
            and found.get("ExactlyOnceAdmission", {}).get("status") == "True")


def pull_digest(image_id: str) -> str:
    """The digest a pod's container status says its image was pulled by (``...@sha256:...``)."""
    return image_id.rsplit("@", 1)[-1]


@pytest.fixture(scope="module")
def installed(cluster: Cluster, operators: dict[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if cluster.directory is None:
        pytest.skip("the release test tells the session's own node to trust its registry "
                    "(not an existing cluster's, GWOP_TEST_KUBECONFIG)")
    work = tmp_path_factory.mktemp("release")
    node.stop_the_session_operator(cluster, operators)
    cluster.helm("uninstall", node.RELEASE, "-n", node.SYSTEM_NAMESPACE, "--wait", check=False)  # another module's
    registry = Registry.start(work / "registry")
    figures: dict[str, Any] = {"version": VERSION}
    try:
        with registry.trusted_by_node(cluster):
            cosign = Cosign.key_pair(work / "keys", registry)
            namespace = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
            llm_env = llm_pod.deploy(cluster, namespace, node.images().gateway)
            began = time.monotonic()
            released, release_s = release(work, VERSION, registry, cosign)
            installed = Installed(registry, cosign, released, namespace, llm_env, figures)
            # before the install, as docs/install.md says: the chart's signature, then the operator
            # image the chart pins
            verified = cosign.verify(f"{registry.host}/charts/gateway-operator:{VERSION}")
            assert verified.returncode == 0, verified.stderr
            values = yaml.safe_load(cluster.helm("show", "values", installed.chart, "--version", VERSION,
                                                 "--ca-file", str(registry.ca_path)).stdout)
            pinned = f"{values['image']['repository']}@{values['image']['digest']}"
            assert pinned == installed.image("operator"), values["image"]
            verified = cosign.verify(pinned)
            assert verified.returncode == 0, verified.stderr
            cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": node.SYSTEM_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
            installing = time.monotonic()
            helm_install(cluster, installed, VERSION, "install")
            cluster.apply(json.dumps(gateway(installed)))
            until(lambda: ready_with_exactly_once(cluster, namespace), timeout=240, interval=1,
                  what="the GatewayDeployment of the released image Ready with ExactlyOnceAdmission=True")
            figures.update(release_s=round(release_s, 1), install_to_ready_s=round(time.monotonic() - installing, 1),
                           release_to_ready_s=round(time.monotonic() - began, 1), release=released)
            yield installed
    finally:
        registry.stop()
        cluster.helm("uninstall", node.RELEASE, "-n", node.SYSTEM_NAMESPACE, "--wait", check=False)
        print(json.dumps({k: v for k, v in figures.items() if k != "release"}))
        if os.environ.get("GWOP_RELEASE_JSON"):
            Path(os.environ["GWOP_RELEASE_JSON"]).write_text(json.dumps(figures, indent=2))


def test_a_release_installs_from_the_registry_and_its_gateway_serves(cluster: Cluster, installed: Installed) -> None:
    """Every image the release put in the chart and the GatewayDeployment came from the registry,
    by the digest released; the released gateway runs an agent turn for a webhook, once."""
    operator = installed.release["images"]["operator"]
    released = {operator["digest"], *(p["digest"] for p in operator["platforms"].values())}
    pods = operator_pods(cluster)
    assert pods and all(is_ready(p) for p in pods), "the operator's pods are not all ready"
    for pod in pods:  # the chart's replicas (one leads)
        [status] = pod["status"]["containerStatuses"]
        assert pod["spec"]["containers"][0]["image"] == installed.image("operator")
        assert pull_digest(status["imageID"]) in released, status["imageID"]
    [gw] = ready_pods(cluster, installed.namespace, NAME)
    assert gw["spec"]["containers"][0]["image"] == installed.image("gateway")
    turns = node.deliver(cluster, installed.namespace, NAME, [gw["status"]["podIP"]] * 2, f"release-{uuid.uuid4().hex[:8]}")
    assert all(a.status in (200, 202) for a in turns.answers), turns
    assert turns.turns == 1, f"one delivery sent twice ran {turns.turns} agent turns"


SIGNATURE = "https://sigstore.dev/cosign/sign/v1"  # a cosign signature bundle's predicate type


def referrers(registry: Registry, repository: str, digest: str) -> dict[str, str]:
    """What the registry lists as referrers of ``digest`` (the OCI 1.1 referrers tag schema's index
    under ``sha256-<hex>``: distribution 3.1 serves no referrers API), as {predicate type: its
    manifest's subject}."""
    status, index = registry.get(f"{repository}/manifests/{digest.replace(':', '-')}")
    assert status == 200, f"{repository}@{digest}: no referrers (HTTP {status})"
    found = {}
    for entry in index["manifests"]:
        status, artifact = registry.get(f"{repository}/manifests/{entry['digest']}",
                                        accept="application/vnd.oci.image.manifest.v1+json")
        assert status == 200 and artifact["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json", artifact
        found[artifact["annotations"]["dev.sigstore.bundle.predicateType"]] = artifact["subject"]["digest"]
    return found


def test_each_image_and_the_chart_are_signed_with_their_sboms_listed_as_referrers(installed: Installed) -> None:
    """Each image index verifies, each platform's manifest too, and carries its SBOM as a signed
    SPDX attestation that lists the image's Debian and Python packages; the registry lists each
    signature and attestation as a referrer of the digest it signs."""
    host = installed.registry.host
    for name, image in installed.release["images"].items():
        repository = f"gateway-operator/{name}"
        verified = installed.cosign.verify(installed.image(name))
        assert verified.returncode == 0, verified.stderr
        assert referrers(installed.registry, repository, image["digest"]) == {SIGNATURE: image["digest"]}
        for arch, platform in image["platforms"].items():
            reference = f"{host}/{repository}@{platform['digest']}"
            assert installed.cosign.verify(reference).returncode == 0, f"{name}/{arch} is not signed"
            attested = installed.cosign.verify_sbom(reference)
            assert attested.returncode == 0, attested.stderr
            [statement] = [json.loads(base64.b64decode(json.loads(line)["payload"]))
                           for line in attested.stdout.splitlines() if line.strip()]
            assert statement["predicateType"] == SBOM_TYPE
            purls = [ref["referenceLocator"] for p in statement["predicate"]["packages"]
                     for ref in p.get("externalRefs", []) if ref.get("referenceType") == "purl"]
            assert any(purl.startswith("pkg:deb/debian/python3.11@") for purl in purls), f"{name}: no Debian python3.11"
            wanted = "pkg:pypi/kopf@" if name == "operator" else "pkg:pypi/praisonai-bot@0.1.16"
            assert any(purl.startswith(wanted) for purl in purls), f"{name}: no {wanted} in its SBOM"
            assert referrers(installed.registry, repository, platform["digest"]) == \
                {SIGNATURE: platform["digest"], SBOM_TYPE: platform["digest"]}
    chart = installed.release["chart"]
    assert installed.cosign.verify(f"{host}/charts/gateway-operator@{chart['digest']}").returncode == 0
    assert referrers(installed.registry, "charts/gateway-operator", chart["digest"]) == {SIGNATURE: chart["digest"]}


def test_the_next_patch_release_upgrades_the_operator_and_rolls_no_gateway(
        cluster: Cluster, installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> None:
    """x.y.(z+1), released from the bumped tree to the same registry: `helm upgrade` from the
    registry runs its operator (its `gateway-operator version` says so); the gateway's pod template
    does not change, so no gateway rolls, and Ready never flips."""
    version = next_patch(VERSION)
    tree = bumped_tree(tmp_path_factory.mktemp("next-tree"), version)
    began = time.monotonic()
    nxt, release_s = release(tmp_path_factory.mktemp("next"), version, installed.registry, installed.cosign, tree=tree)
    before = cluster.get_json("deployment", NAME, "-n", installed.namespace)
    ready_since = conditions(cluster, installed.namespace, NAME)["Ready"]["lastTransitionTime"]
    assert installed.cosign.verify(f"{installed.registry.host}/charts/gateway-operator:{version}").returncode == 0
    helm_install(cluster, installed, version, "upgrade")
    image = f"{installed.registry.host}/gateway-operator/operator@{nxt['images']['operator']['digest']}"

    def upgraded() -> list[dict[str, Any]] | None:  # every replica of the chart on the new image, and no other
        pods = operator_pods(cluster)
        return pods if pods and all(is_ready(p) and p["spec"]["containers"][0]["image"] == image for p in pods) else None
    pod = until(upgraded, timeout=180, what=f"the operator running {image}")[0]
    said = cluster.kubectl("exec", "-n", node.SYSTEM_NAMESPACE, pod["metadata"]["name"], "--",
                           "gateway-operator", "version", "--output", "json").stdout
    assert json.loads(said)["operator"] == version, said
    until(lambda: ready_with_exactly_once(cluster, installed.namespace), timeout=120,
          what="the GatewayDeployment Ready under the upgraded operator")
    after = cluster.get_json("deployment", NAME, "-n", installed.namespace)
    assert after["spec"]["template"] == before["spec"]["template"], "the upgrade rolled the gateway"
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert conditions(cluster, installed.namespace, NAME)["Ready"]["lastTransitionTime"] == ready_since
    installed.figures["upgrade"] = {"version": version, "release_s": round(release_s, 1),
                                    "release_and_upgrade_s": round(time.monotonic() - began, 1)}


def test_a_tampered_image_is_refused_by_the_verification(installed: Installed) -> None:
    """Another image pushed under the operator's released tag (a registry write the signer did not
    make): `cosign verify` of that tag fails, and the chart still pins the released digest."""
    tag = f"{installed.registry.host}/gateway-operator/operator:{VERSION}"
    assert installed.cosign.verify(tag).returncode == 0
    images = Path(os.environ.get("GWOP_CACHE") or Path.home() / ".cache/gateway-operator") / "images"
    archive = next(line.split()[1] for line in (images / "images.txt").read_text().splitlines()
                   if line.split()[0] == node.images().redis)
    store = ["buildah", "--root", str(images / "storage/root"), "--runroot", str(images / "storage/run")]
    pulled = subprocess.run([*store, "pull", "--quiet", f"oci-archive:{archive}"], check=True, capture_output=True,
                            text=True, timeout=300).stdout.split()[-1]
    subprocess.run([*store, "push", "--quiet", "--cert-dir", str(installed.registry.cert_dir), pulled, f"docker://{tag}"],
                   check=True, capture_output=True, timeout=300)
    refused = installed.cosign.verify(tag)
    assert refused.returncode != 0, "a tampered tag verified"
    assert "no valid bundles exist in registry" in refused.stderr, refused.stderr
    assert installed.cosign.verify(installed.image("operator")).returncode == 0, "the released digest no longer verifies"
