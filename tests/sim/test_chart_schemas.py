"""The chart through the schema check a platform team's chart pipeline runs (issue 55, item 3):
``kubeconform -strict`` (hack/versions.env, built by hack/build-binaries.sh from hack/kubeconform)
over what the real ``helm template --include-crds`` renders for each of the chart's CI value sets,
against the schemas of the NEWEST supported Kubernetes here (the session's control plane) and of
the OLDEST in tests/sim/test_oldest_end.py (its control plane at KUBE_OLDEST_VERSION): every object
of a kind the server knows, with no field it lacks and no value of the wrong type. The schemas are
the servers' own OpenAPI (harness.kube_schemas: kubeconform's usual download site is not reachable
here); every rendered kind must have one (nothing is skipped as unknown)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness import kube_schemas
from harness.chart_lint import VALUE_SETS, rendered
from harness.cluster import REPO, Cluster
from harness.monitoring import prometheus_operator_crds

CRDS = [REPO / "crds/gatewaydeployments.yaml"]


def chart(flags: list[str]) -> str:
    return rendered([*flags, "--include-crds"])


def schemas(cluster: Cluster) -> Path:
    return kube_schemas.generate(cluster, [*CRDS, *prometheus_operator_crds()])


def check_clean(cluster: Cluster, values: str) -> None:
    """kubeconform finds every rendered object valid, none skipped for want of a schema."""
    manifests = chart(VALUE_SETS[values])
    checked = kube_schemas.kubeconform(manifests, schemas(cluster))
    assert checked.returncode == 0, f"kubeconform (exit {checked.returncode}):\n{checked.stdout}{checked.stderr}"
    summary = re.search(r"Summary: (\d+) resources? found .*? - Valid: (\d+), Invalid: (\d+), Errors: (\d+), "
                        r"Skipped: (\d+)", checked.stdout)
    assert summary, checked.stdout
    found, valid, invalid, errors, skipped = map(int, summary.groups())
    documents = [d for d in yaml.safe_load_all(manifests) if d]
    assert (found, valid, invalid, errors, skipped) == (len(documents), len(documents), 0, 0, 0), checked.stdout


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_kubeconform_finds_every_rendered_object_valid_on_the_newest_kubernetes(cluster: Cluster, values: str) -> None:
    check_clean(cluster, values)


def test_kubeconform_refuses_an_unknown_field_a_wrong_type_and_an_unknown_kind(cluster: Cluster) -> None:
    """The check is live: in the operator's Deployment a misspelt container field and a count
    written as a word, and a kind no schema knows, are each refused, named by field."""
    directory = schemas(cluster)
    documents = [d for d in yaml.safe_load_all(chart([])) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["imagePullPolicyy"] = container.pop("imagePullPolicy")
    deployment["spec"]["replicas"] = "two"
    documents.append({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w"}})
    found = kube_schemas.kubeconform(yaml.safe_dump_all(documents), directory)
    assert found.returncode == 1, found.stdout
    assert "/spec/template/spec/containers/0': additional properties 'imagePullPolicyy' not allowed" in found.stdout, \
        found.stdout
    assert "/spec/replicas': got string, want integer" in found.stdout, found.stdout
    assert "Widget" in found.stdout and "could not find schema" in found.stdout, found.stdout


def with_pod_level_resources() -> str:
    """The chart's Deployment with pod-level ``resources`` (PodSpec.resources, added in Kubernetes
    1.32): valid on the newest schemas, refused on 1.30's (tests/sim/test_oldest_end.py)."""
    documents = [d for d in yaml.safe_load_all(chart([])) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["resources"] = {"limits": {"cpu": "1", "memory": "512Mi"}}
    return yaml.safe_dump_all([deployment])


def test_the_schemas_are_the_servers_version_a_field_it_added_after_the_oldest_is_valid(cluster: Cluster) -> None:
    checked = kube_schemas.kubeconform(with_pod_level_resources(), schemas(cluster))
    assert checked.returncode == 0, checked.stdout
