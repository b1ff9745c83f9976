"""The OLDEST supported Kubernetes (hack/versions.env KUBE_OLDEST_VERSION; the chart's kubeVersion
">=1.30.0-0"), on a control plane of its own (.cluster/oldest_end: kube-apiserver,
kube-controller-manager and kube-scheduler at that version, built by hack/build-binaries.sh
--oldest; etcd, kwok and kubectl the pinned ones): a representative slice of what the newest end
proves, kept small for `make test`. `make test-oldest` runs the admission suite, the chart's and
some operator tests there in full.

The slice: the CRD installs; a handful of its CEL rules answer with their messages, exactly as
``gateway-operator check`` does offline (CEL `matches`, `in`, `all`, `has`, the metadata rule, the
rules still run after a non-blocking error and skipped after a blocking one) and the typed pod
fields' schemas (generated from KUBE_VERSION's OpenAPI) are admitted; `helm install` of the chart
passes its kubeVersion check against the real server, and its ValidatingAdmissionPolicies
(admissionregistration.k8s.io/v1) warn at `kubectl apply` and refuse with the operator's message;
the operator reconciles a GatewayDeployment to Ready, and writes an HTTPRoute
(gateway.networking.k8s.io/v1, the Gateway API CRDs of the real node) the server admits; and
the chart's renderings pass ``kubeconform -strict`` against this server's own schemas, which
refuse a field Kubernetes added later (tests/sim/test_chart_schemas.py does the newest end).
"""
from __future__ import annotations

import json
import os
import re
import uuid
from typing import Iterator

import pytest
import yaml

import test_chart_schemas as chart_schemas
import test_crd_admission as admission
from gateway_operator.api import tenancy
from harness import kube_schemas
from harness.chart_lint import VALUE_SETS
from harness.cluster import CACHE_BIN, REPO, Cluster, versions
from harness.gateways import apply_gateway, replica_warning, wait_condition, wait_ready_pods
from harness.operator import OperatorProcess, gateway_deployment
from harness.wait import until

OLDEST = versions()["KUBE_OLDEST_VERSION"]
CHART = REPO / "charts/gateway-operator"

# One case per kind of CEL rule and schema check (test_crd_admission.CASES has them all).
SLICE = [
    "three on redis",                      # admitted: the replica rule's has() chain
    "three without redis",                 # the replica rule's message
    "redis url redis://r:99999",           # matches() with the URL grammar
    "credentials in url",
    "env GATEWAY_AUTH_TOKEN",              # all() over a list-map, `in` a list
    "blank image",                         # matches('\\S')
    "name too long",                       # the rule on metadata.name (size())
    "skip verify with a CA",
    "real affinity, tolerations, spread",  # the typed pod fields, admitted
    "cpu: lots",                           # a Quantity's pattern
    "toleration operator",                 # an enum of the typed pod fields
    "pattern and a rule",                  # CEL still runs after a non-blocking error ...
    "enum and a rule",                     # ... and not after a blocking one
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """This module's control plane at KUBE_OLDEST_VERSION (``namespace`` of tests/conftest.py uses it)."""
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        pytest.skip("starts a control plane of its own at the oldest supported version")
    c = Cluster.start(REPO / ".cluster/oldest_end", GWOP_KUBE_VERSION=OLDEST)
    try:
        yield c
    finally:
        c.stop()


def test_the_control_plane_is_the_oldest_the_chart_supports(cluster: Cluster) -> None:
    server = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert server["gitVersion"] == OLDEST
    low = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"])
    assert low, "Chart.yaml kubeVersion is no longer of the form >=X.Y.0-0"
    assert (server["major"], server["minor"]) == low.groups(), "KUBE_OLDEST_VERSION is not the chart's lower end"


@pytest.mark.parametrize("case", SLICE)
def test_cel_rules_answer_as_the_offline_check(cluster: Cluster, namespace: str, case: str) -> None:
    admission.test_api_server_agrees_with_offline_check(cluster, namespace, case)


def test_the_charts_admission_policies_warn_and_refuse(cluster: Cluster, namespace: str) -> None:
    release, ns = f"oldest-{uuid.uuid4().hex[:6]}", cluster.new_namespace()
    cluster.helm("install", release, str(CHART), "-n", ns)  # Helm checks kubeVersion against the server
    try:
        stderr = replica_warning(cluster, namespace)
        assert "Warning:" in stderr and "3 replicas" in stderr  # its messageExpression
        refused = cluster.apply(json.dumps(gateway_deployment("greedy", priorityClassName="system-node-critical")),
                                "-n", namespace, "--dry-run=server", check=False)
        assert refused.returncode != 0 and tenancy.MSG_PRIORITY_CLASS in refused.stderr.replace("\\", ""), \
            refused.stderr
    finally:
        cluster.helm("uninstall", release, "-n", ns, "--wait", check=False)


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_kubeconform_finds_every_rendered_object_valid_on_the_oldest_kubernetes(cluster: Cluster, values: str) -> None:
    chart_schemas.check_clean(cluster, values)


def test_kubeconform_refuses_on_the_oldest_a_field_kubernetes_added_later(cluster: Cluster) -> None:
    """The schemas are this server's: pod-level resources (1.32) are an unknown field on 1.30."""
    checked = kube_schemas.kubeconform(chart_schemas.with_pod_level_resources(), chart_schemas.schemas(cluster))
    assert checked.returncode == 1, checked.stdout
    assert "/spec/template/spec': additional properties 'resources' not allowed" in checked.stdout, checked.stdout


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[OperatorProcess]:
    """The real operator CLI under the chart's RBAC, stopped before this module's control plane."""
    with OperatorProcess(cluster) as proc:
        yield proc


def test_the_operator_reconciles_a_gateway_to_ready(cluster: Cluster, operator: OperatorProcess,
                                                    namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("solo"))
    wait_condition(cluster, namespace, "solo", "Ready", "True", timeout=90)
    wait_ready_pods(cluster, namespace, "solo", 1)
    assert "Traceback" not in operator.log_text()


def test_the_operators_httproute_is_admitted(cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    """gateway.networking.k8s.io/v1 from the Gateway API standard CRDs the real node serves
    (hack/build-binaries.sh --node), on the oldest control plane."""
    crds = CACHE_BIN / "gateway-api-crds"
    if not crds.exists():
        pytest.skip("no Gateway API CRDs built (make node-binaries)")
    cluster.kubectl("apply", "--server-side", "-f", str(crds.resolve()))
    until(lambda: cluster.kubectl("wait", "--for=condition=Established", "crd/httproutes.gateway.networking.k8s.io",
                                  check=False).returncode == 0, timeout=60, what="the HTTPRoute CRD")
    route = {"httpRoute": {"parentRefs": [{"name": "public", "namespace": "gateway-system"}],
                           "hostnames": ["bot.example.com"]}}
    apply_gateway(cluster, namespace, gateway_deployment("routed", expose=route))
    written = until(lambda: cluster.get_json("httproute", "routed", "-n", namespace), timeout=60, what="the HTTPRoute")
    assert written["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert written["metadata"]["ownerReferences"][0]["name"] == "routed"
    wait_condition(cluster, namespace, "routed", "Ready", "True", timeout=90)
    wait_condition(cluster, namespace, "routed", "Stalled", "False")


def test_a_shard_list_is_answered_in_full_where_the_server_does_not_shard(cluster: Cluster, namespace: str) -> None:
    """--shards on a server without ShardedListAndWatch (1.30 has no such gate): the list's
    shardSelector is ignored and every GatewayDeployment answered, so the supervisor filters the same
    assignment itself (tests/sim/test_shard_replicas.py: the newest end answers one shard's only)."""
    from gateway_operator.clients.kube import Kube, load_config
    from gateway_operator.core.shards import selector

    for name in ("shard-a", "shard-b", "shard-c"):
        apply_gateway(cluster, namespace, gateway_deployment(name))
    kube = Kube(load_config(str(cluster.kubeconfig)))
    listed = kube.gateway_deployments((namespace,), selector([0], 4))
    assert sorted(o["metadata"]["name"] for o in listed) == ["shard-a", "shard-b", "shard-c"]
