"""What a user sees day to day (issue 11): a blocker that stays visible, the scale
subresource with the replica guard holding through it, an HPA, printer columns, Events
from gateway-operator. Real API server, kube-controller-manager (its HPA controller),
the operator under the chart's RBAC; the replicas are real pods on the real node (the HEALTH
ENDPOINT STAND-IN image, a TEST IMAGE)."""
from __future__ import annotations

import json
import re
from typing import Iterator

import pytest
import yaml

from gateway_operator.api import reasons, validation
from harness import audit
from harness.cluster import REPO, Cluster
from harness.gateways import apply_gateway, conditions, events, wait_condition
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.wait import stays, until


@pytest.fixture
def deployments_denied(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy that makes the API server refuse every Deployment in the
    test namespace: a real ApplyFailed, as a policy engine or quota would cause it."""
    name = f"deny-{namespace}"
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name}, "spec": {
                  "failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                          "operations": ["CREATE", "UPDATE"],
                                                          "resources": ["deployments"]}]},
                  "validations": [{"expression": "false", "message": "deployments are frozen here"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name}, "spec": {
                   "policyName": name, "validationActions": ["Deny"],
                   "matchResources": {"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": namespace}}}}}
    cluster.apply(json.dumps(policy))
    cluster.apply(json.dumps(binding))
    probe = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe"}, "spec": {
        "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                                                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    until(lambda: "frozen" in cluster.apply(json.dumps(probe), "-n", namespace, "--dry-run=server",
                                            check=False).stderr, timeout=30, what="the policy to take effect")
    yield name
    cluster.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
    cluster.kubectl("delete", "validatingadmissionpolicy", name, check=False)


def test_a_refused_apply_stays_visible_while_waiting_for_redis(cluster: Cluster, operator: OperatorProcess,
                                                              namespace: str, deployments_denied: str) -> None:
    """A 2-replica Redis-backed gateway whose Redis does not answer yet (WaitingForRedis) and
    whose Deployment the API server refuses: Stalled=True ApplyFailed wins, stays, and is
    reported once, by gateway-operator."""
    apply_gateway(cluster, namespace, gateway_deployment("frozen", replicas=2, config=redis_store(),
                                                         redis={"url": "redis://127.0.0.1:1/0"}))
    stalled = wait_condition(cluster, namespace, "frozen", "Stalled", "True", reasons.APPLY_FAILED)
    assert "deployments are frozen here" in stalled["message"]
    since = audit.now()
    # observation passes (every second here) must not clear it
    stays(lambda: (lambda c: (c["Stalled"]["status"], c["Ready"]["reason"]))(conditions(cluster, namespace, "frozen"))
          == ("True", reasons.APPLY_FAILED), 15, interval=1, what="Stalled=True ApplyFailed (and Ready's reason)")
    # retried with backoff (2, 4, 8 s ...), not once per observation pass
    tries = [r for r in audit.requests(cluster, operator.identity, since)
             if r.resource == "deployments" and r.name == "frozen" and r.verb == "patch"
             and r.stage == "ResponseComplete"]
    assert 1 <= len(tries) <= 4, tries
    warnings = [e for e in events(cluster, namespace, "frozen") if e["reason"] == reasons.APPLY_FAILED]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings
    assert warnings[0]["source"]["component"] == "gateway-operator"
    row = cluster.kubectl("-n", namespace, "get", "gwd", "frozen", "--no-headers").stdout.split()
    assert row[:4] == ["frozen", "False", reasons.APPLY_FAILED, "0/2"], row
    # the operator's log: a timestamp, a level, the object, one line for the transition
    transition = re.compile(rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO \[{namespace}/frozen\] "
                            rf"Stalled \S+ -> True \({reasons.APPLY_FAILED}\): .*deployments are frozen here")
    lines = [line for line in operator.log_text().splitlines() if transition.match(line)]
    assert len(lines) == 1, operator.log_tail()


def test_scale_subresource_and_the_replica_guard(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                                 redis_server: RedisServer) -> None:
    cluster.kubectl("-n", namespace, "create", "secret", "generic", "redis-auth",
                    f"--from-literal=password={redis_server.password}")
    apply_gateway(cluster, namespace, gateway_deployment("shared", replicas=1, config=redis_store(), redis={
        "url": redis_server.url, "passwordSecretRef": {"name": "redis-auth"}}))
    apply_gateway(cluster, namespace, gateway_deployment("solo"))
    wait_condition(cluster, namespace, "shared", "Ready", "True")
    wait_condition(cluster, namespace, "solo", "Ready", "True")

    cluster.kubectl("-n", namespace, "scale", "gwd", "shared", "--replicas=3")
    until(lambda: cluster.get_json("-n", namespace, "deployment/shared")["spec"]["replicas"] == 3, timeout=30,
          what="the Deployment to follow kubectl scale")
    wait_condition(cluster, namespace, "shared", "Ready", "True")
    scale = cluster.get_json("-n", namespace, "gwd", "shared")
    assert scale["status"]["selector"] == ("app.kubernetes.io/instance=shared,app.kubernetes.io/component=gateway,"
                                           "app.kubernetes.io/managed-by=gateway-operator")

    refused = cluster.kubectl("-n", namespace, "scale", "gwd", "solo", "--replicas=3", check=False)
    assert refused.returncode != 0 and validation.MSG_REPLICAS_NEED_REDIS in refused.stderr
    assert cluster.get_json("-n", namespace, "deployment/solo")["spec"]["replicas"] == 1

    hpa = yaml.safe_load((REPO / "examples/gateway-hpa.yaml").read_text())
    hpa["spec"]["scaleTargetRef"]["name"] = "shared"
    hpa["spec"]["minReplicas"] = 4  # above the current 3: the HPA scales up without needing metrics
    cluster.apply(json.dumps(hpa), "-n", namespace)

    def read_scale() -> dict | None:
        status = cluster.get_json("-n", namespace, "hpa", "support-bot").get("status") or {}
        able = next((c for c in status.get("conditions") or [] if c["type"] == "AbleToScale"), None)
        return status if able and able["status"] == "True" and status.get("currentReplicas") else None
    # the HPA controller reads the GatewayDeployment through /scale (its CPU metrics need
    # metrics-server, which this cluster lacks: that part is reported, not asserted)
    until(read_scale, timeout=60, what="the HPA to read the scale subresource")
    until(lambda: cluster.get_json("-n", namespace, "deployment/shared")["spec"]["replicas"] == 4, timeout=60,
          what="the HPA to bring replicas to its minimum of 4 through /scale")
    assert cluster.get_json("-n", namespace, "gwd", "shared")["spec"]["replicas"] == 4


def test_printer_columns_wide(cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("canary", replicas=2, replicaPolicy="Warn"))
    wait_condition(cluster, namespace, "canary", "Ready", "True")
    out = cluster.kubectl("-n", namespace, "get", "gwd", "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "REASON", "REPLICAS", "STORE", "EXACTLY-ONCE", "AGE", "DEGRADED",
                              "REDIS", "GATEWAY", "ADDRESS", "MESSAGE"]
    row = out[1].split()
    assert row[:6] == ["canary", "True", "Available", "2/2", "sqlite", "False"], row
    assert "NOT held" in out[1]
