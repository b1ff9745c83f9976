"""The Helm chart, with the real ``helm`` against the real local control plane.

Stand-ins: the prometheus-operator CRDs (ServiceMonitor, PrometheusRule) are installed as
schemaless STAND-IN CRDs so the chart's monitoring objects can be dry-run; the operator
image cannot run here (no container runtime), so the kubelet stand-in only reports its pod.
"""
from __future__ import annotations

import base64
import json
import subprocess
import uuid
from typing import Iterator

import pytest
import yaml

from support.cluster import REPO, Cluster, tool
from support.gateways import apply_gateway, wait_condition, wait_ready_pods
from support.operator import OperatorProcess, gateway_deployment, redis_store
from support.redis_server import RedisServer
from support.wait import until

pytestmark = pytest.mark.cluster
CHART = str(REPO / "charts/gateway-operator")
ALL_FEATURES = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
                "--set", "metrics.kubeStateMetrics.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true"]

MONITORING_STANDIN_CRDS = [
    ("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")]


def helm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([tool("helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def install_monitoring_standin_crds(cluster: Cluster) -> None:
    for plural, kind in MONITORING_STANDIN_CRDS:
        cluster.apply(json.dumps({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}))
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com")


@pytest.fixture
def release(cluster: Cluster) -> Iterator[tuple[str, str]]:
    name = f"chart-{uuid.uuid4().hex[:6]}"
    namespace = cluster.new_namespace()
    yield name, namespace
    helm(cluster, "uninstall", name, "-n", namespace, "--wait", check=False)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_helm_lint_strict() -> None:
    result = subprocess.run([tool("helm"), "lint", "--strict", CHART], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values, message", [
    (["--set", "logFormat=xml"], "logFormat"),
    (["--set", "watchNamespaces[0]=Not_A_Namespace"], "does not match pattern"),
    (["--set", "metrics.port=70000"], "metrics/port"),
    (["--set", "replicaCount=2"], "additional properties 'replicaCount' not allowed"),
])
def test_values_schema_rejects_bad_values(values: list[str], message: str) -> None:
    result = subprocess.run([tool("helm"), "template", "x", CHART, *values], capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr, result.stderr


@pytest.mark.parametrize("mode", [[], ["--set", "watchNamespaces={team-a,team-b}"]], ids=["cluster-wide", "namespaced"])
def test_every_template_passes_a_server_side_dry_run(cluster: Cluster, mode: list[str]) -> None:
    install_monitoring_standin_crds(cluster)
    ns = cluster.new_namespace()
    for extra in ("team-a", "team-b"):
        cluster.kubectl("create", "namespace", extra, check=False)
    rendered = helm(cluster, "template", "dry", CHART, "-n", ns, *ALL_FEATURES, *mode).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert {"Deployment", "ServiceAccount", "ValidatingAdmissionPolicy", "ServiceMonitor", "PrometheusRule"} <= kinds
    # the ServiceAccount for real first: admission of the test pod looks it up
    accounts = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ServiceAccount"]
    cluster.apply(json.dumps(accounts[0]))
    result = cluster.apply(rendered, "--dry-run=server", check=False)  # every object names its namespace
    assert result.returncode == 0, result.stderr
    if mode:
        assert {"Role", "RoleBinding"} <= kinds and "ClusterRoleBinding" in kinds  # discovery only
        roles = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Role"]
        assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]


def test_install_upgrade_uninstall(cluster: Cluster, release: tuple[str, str]) -> None:
    name, ns = release
    out = helm(cluster, "install", name, CHART, "-n", ns, "--wait", "--timeout", "120s").stdout
    assert "kubectl wait --for=condition=Ready gatewaydeployment/<name>" in out  # NOTES.txt
    cluster.kubectl("get", "crd", "gatewaydeployments.gateway-operator.dev")
    deployment = cluster.get_json("-n", ns, f"deployment/{name}")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    cluster.kubectl("get", "clusterrole", name)
    cluster.kubectl("get", "validatingadmissionpolicy", f"{name}-replica-warning")

    helm(cluster, "upgrade", name, CHART, "-n", ns, "--set", "resyncSeconds=120", "--set",
         "admissionPolicy.enabled=false", "--wait", "--timeout", "120s")
    args = cluster.get_json("-n", ns, f"deployment/{name}")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--resync-seconds=120" in args
    assert cluster.kubectl("get", "validatingadmissionpolicy", f"{name}-replica-warning", check=False).returncode != 0
    assert json.loads(helm(cluster, "history", name, "-n", ns, "-o", "json").stdout)[-1]["revision"] == 2

    helm(cluster, "uninstall", name, "-n", ns, "--wait")
    assert cluster.kubectl("-n", ns, "get", f"deployment/{name}", check=False).returncode != 0
    assert cluster.kubectl("get", "clusterrole", name, check=False).returncode != 0
    # Helm never deletes CRDs (documented): the GatewayDeployments of users survive
    cluster.kubectl("get", "crd", "gatewaydeployments.gateway-operator.dev")


def can_i(cluster: Cluster, user: str, *args: str) -> bool:
    return cluster.kubectl("auth", "can-i", *args, "--as", user, check=False).stdout.strip() == "yes"


def test_chart_rbac_grants_what_the_operator_uses_and_no_more(cluster: Cluster, release: tuple[str, str]) -> None:
    name, ns = release
    helm(cluster, "install", name, CHART, "-n", ns, "--set", "watchNamespaces={" + ns + "}")
    sa = f"system:serviceaccount:{ns}:{name}"
    other = cluster.new_namespace()
    for verb_resource in (["patch", "gatewaydeployments.gateway-operator.dev", "--subresource=status"],
                          ["watch", "gatewaydeployments.gateway-operator.dev"], ["create", "deployments.apps"],
                          ["patch", "configmaps"], ["delete", "pods"], ["get", "secrets"], ["create", "secrets"],
                          ["create", "events"], ["create", "poddisruptionbudgets.policy"]):
        assert can_i(cluster, sa, *verb_resource, "-n", ns), verb_resource
    for verb_resource in (["list", "secrets"], ["delete", "secrets"], ["update", "gatewaydeployments.gateway-operator.dev"],
                          ["delete", "gatewaydeployments.gateway-operator.dev"], ["create", "pods"],
                          ["create", "roles.rbac.authorization.k8s.io"], ["create", "deployments.apps", "--all-namespaces"]):
        assert not can_i(cluster, sa, *verb_resource, "-n", ns), verb_resource
    # namespaced mode: nothing outside the listed namespaces
    assert not can_i(cluster, sa, "create", "deployments.apps", "-n", other)
    assert not can_i(cluster, sa, "get", "secrets", "-n", other)
    cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_the_session_operator_runs_under_the_chart_service_account(operator: OperatorProcess) -> None:
    """Every other operator test already runs the operator with the chart's RBAC; this one
    proves the identity is really that ServiceAccount (not the admin)."""
    from support.operator import IDENTITY
    kubeconfig = yaml.safe_load((operator.dir / "operator.kubeconfig").read_text())
    token = kubeconfig["users"][0]["user"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == IDENTITY


def test_admission_policy_warns_at_kubectl_apply(cluster: Cluster, release: tuple[str, str], namespace: str) -> None:
    name, ns = release
    helm(cluster, "install", name, CHART, "-n", ns)
    manifest = gateway_deployment("warned", replicas=3, replicaPolicy="Warn")

    def warned() -> str | None:
        out = apply_gateway(cluster, namespace, manifest)
        cluster.kubectl("-n", namespace, "delete", "gatewaydeployment", "warned", "--wait=false")
        return out.stderr if "exactly-once admission is NOT held" in out.stderr else None
    stderr = until(warned, timeout=30, what="the admission policy's warning")
    assert "Warning:" in stderr and "3 replicas" in stderr
    quiet = apply_gateway(cluster, namespace, gateway_deployment("fine"))
    assert "Warning" not in quiet.stderr


def test_gateway_pods_pass_the_restricted_pod_security_profile(cluster: Cluster, operator: OperatorProcess) -> None:
    """Gateway and managed-Redis pods are admitted in a namespace enforcing `restricted`;
    a real redis-server at the managed Redis pod's IP takes the generated password."""
    ns = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        apply_gateway(cluster, ns, gateway_deployment("strict", replicas=2, config=redis_store(),
                                                       redis={"managed": {"enabled": True}}))
        redis_pod = until(lambda: next((p for p in cluster.get_json("-n", ns, "pods", "-l",
                                        "app.kubernetes.io/component=redis")["items"] if p["status"].get("podIP")), None),
                          timeout=60, what="the managed Redis pod")
        password = base64.b64decode(cluster.get_json("-n", ns, "secret/strict-redis")["data"]["password"]).decode()
        server = RedisServer(password=password, host=redis_pod["status"]["podIP"], port=6379).start()
        try:
            wait_condition(cluster, ns, "strict", "RedisReachable", "True", "ProbeSucceeded")
            wait_ready_pods(cluster, ns, "strict", 2)
            policy = cluster.get_json("-n", ns, "networkpolicy/strict-redis")["spec"]
            assert policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "strict"
            status = cluster.get_json("-n", ns, "gatewaydeployment/strict")["status"]
            assert status["redis"]["endpoint"] == f"strict-redis.{ns}.svc:6379/0"
            assert password not in json.dumps(status)
        finally:
            server.close()
        # a non-compliant pod is really refused there (the profile is enforced)
        bad = cluster.kubectl("-n", ns, "run", "root", "--image=example.invalid/x", "--restart=Never", check=False)
        assert bad.returncode != 0 and "violates PodSecurity" in bad.stderr
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
