"""The GitOps examples (examples/gitops) applied to the real API server with the controllers' own
CRDs installed: Flux's Kustomization, GitRepository and OCIRepository (kustomize-controller and
source-controller modules), its HelmRelease (generated with controller-gen from the
helm-controller api module, whose root module is not served), Argo CD's Application and
AppProject (argo-cd module). hack/build-binaries.sh fetches them, checksum-pinned, into
$GWOP_CACHE/bin/gitops-crds.

No Flux or Argo CD controller runs here: what is proven is that every object is one those
controllers accept (their schemas, at admission) and that what they would apply from
examples/gitops/bots is a GatewayDeployment our CRD admits.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from harness.cluster import CACHE_BIN, REPO, Cluster
from harness.operator import install_crd
from harness.wait import until


GITOPS = REPO / "examples/gitops"
CRDS = (CACHE_BIN / "gitops-crds").resolve()  # kubectl -f does not follow a symlinked directory
NAMESPACES = ("flux-system", "argocd", "bots")


@pytest.fixture(scope="module")
def gitops(cluster: Cluster) -> Iterator[Cluster]:
    assert CRDS.is_dir(), f"{CRDS} is missing: run hack/build-binaries.sh"
    install_crd(cluster)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted(CRDS.glob("*.yaml"))]
    until(lambda: cluster.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in names],
                                  "--timeout=5s", check=False).returncode == 0, timeout=60, what="the GitOps CRDs")
    for namespace in NAMESPACES:
        cluster.kubectl("create", "namespace", namespace, check=False)
    try:
        yield cluster
    finally:
        for namespace in NAMESPACES:
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def manifests() -> list[Path]:
    return sorted(p for p in GITOPS.rglob("*.yaml") if p.parent.name != "bots")


@pytest.mark.parametrize("path", manifests(), ids=lambda p: str(p.relative_to(GITOPS)))
def test_every_gitops_manifest_is_accepted_by_its_controllers_schema(gitops: Cluster, path: Path) -> None:
    applied = gitops.kubectl("apply", "--server-side", "--field-manager", "gitops-test", "-f", str(path))
    kinds = {doc["kind"] for doc in yaml.safe_load_all(path.read_text()) if doc}
    assert applied.stdout.count("serverside-applied") == sum(1 for d in yaml.safe_load_all(path.read_text()) if d)
    assert kinds <= {"GitRepository", "OCIRepository", "HelmRelease", "Kustomization", "Application", "AppProject"}


def test_the_schemas_are_enforced_so_a_typo_would_be_refused(gitops: Cluster) -> None:
    """The same HelmRelease with one misspelt field: refused by the generated schema (so the
    acceptance above proves something)."""
    release = yaml.safe_load((GITOPS / "flux/infrastructure/helmrelease.yaml").read_text())
    release["metadata"]["name"] = "typo"
    release["spec"]["chartRefs"] = release["spec"].pop("chartRef")
    refused = gitops.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(release), check=False)
    assert refused.returncode != 0 and "chartRefs" in refused.stderr, refused.stderr
    application = yaml.safe_load_all((GITOPS / "argocd/applications.yaml").read_text())
    app = next(d for d in application if d["kind"] == "Application")
    app["metadata"]["name"] = "typo"
    app["spec"]["destination"] = "https://kubernetes.default.svc"  # a string where an object belongs
    refused = gitops.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(app), check=False)
    assert refused.returncode != 0 and "destination" in refused.stderr, refused.stderr


def test_what_flux_and_argo_cd_apply_from_bots_is_admitted(gitops: Cluster) -> None:
    """`kubectl kustomize examples/gitops/bots` (what both tools render from that path), applied
    to our CRD: a 3-replica Redis-backed GatewayDeployment with an Ingress, in namespace bots."""
    rendered = gitops.kubectl("kustomize", str(GITOPS / "bots")).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [("GatewayDeployment", "bots")]
    applied = gitops.kubectl("apply", "--server-side", "-f", "-", input=rendered)
    assert "gatewaydeployment.gateway-operator.dev/support-bot serverside-applied" in applied.stdout
    # the Flux health check and the Argo CD Application name what was applied
    flux = [d for d in yaml.safe_load_all((GITOPS / "flux/kustomizations.yaml").read_text()) if d]
    check = next(d for d in flux if d["metadata"]["name"] == "gateway-bots")["spec"]["healthChecks"][0]
    assert (check["kind"], check["name"], check["namespace"]) == ("GatewayDeployment", "support-bot", "bots")
    apps = [d for d in yaml.safe_load_all((GITOPS / "argocd/applications.yaml").read_text()) if d]
    paths = {a["metadata"]["name"]: a["spec"]["source"]["path"] for a in apps if a["kind"] == "Application"}
    assert (REPO / paths["gateway-bots"]).resolve() == (GITOPS / "bots").resolve()
    assert (REPO / paths["gateway-operator"] / "Chart.yaml").exists()
