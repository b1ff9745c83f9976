"""Hostile input and tenancy (issue 7): nothing one GatewayDeployment contains may stop the
operator, starve another namespace, or make it touch an object it does not own.

Real parts: the local control plane's API server, the operator CLI under the chart's RBAC,
real redis-server; a raw TCP listener stands for a Redis that never answers, and the
HEALTH ENDPOINT STAND-IN image (harness/standins.py, a TEST IMAGE) serves hostile /health bodies
from real pods on the real node. test_node.py does the same against the operator as a pod.
"""
from __future__ import annotations

import base64
import json
import socket
from typing import Iterator

import pytest

from gateway_operator.api import reasons
from harness.cluster import Cluster
from harness.gateways import (apply_gateway, conditions, hostile_health, reconcile_latency, runnable, wait_condition,
                              wait_ready_pods)
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.processes import rss_mib
from harness.standins import HealthStandIns
from harness.wait import stays, until


def operator_rss_mib(operator: OperatorProcess) -> float:
    assert operator.proc is not None
    rss = rss_mib(operator.proc.pid)
    assert rss is not None, "the operator is gone"
    return rss


def assert_operator_healthy(operator: OperatorProcess, pid: int) -> None:
    assert operator.proc is not None and operator.proc.pid == pid and operator.proc.poll() is None, \
        f"the operator exited:\n{operator.log_tail()}"
    log = operator.log_text()
    assert "Traceback" not in log, operator.log_tail(80)


@pytest.fixture
def bystander(cluster: Cluster, operator: OperatorProcess) -> Iterator[tuple[str, str]]:
    """An ordinary GatewayDeployment in a namespace of its own: it must keep reconciling."""
    namespace = cluster.new_namespace()
    apply_gateway(cluster, namespace, gateway_deployment("calm"))
    wait_condition(cluster, namespace, "calm", "Ready", "True")
    yield namespace, "calm"
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def nested_json(levels: int) -> str:
    """``levels`` nested mappings as JSON text (built as text: json.dumps would recurse)."""
    return '{"x":' * levels + "{}" + "}" * levels


def test_deeply_nested_config_stalls_that_object_alone(cluster: Cluster, operator: OperatorProcess,
                                                       namespace: str, bystander: tuple[str, str]) -> None:
    pid = operator.proc.pid  # type: ignore[union-attr]
    doc = runnable(cluster, gateway_deployment("deep"))
    text = json.dumps(doc).replace('"agents": {', f'"extra": {nested_json(9990)}, "agents": {{', 1)
    created = cluster.kubectl("-n", namespace, "create", "-f", "-", input=text, check=False)
    # 9990 levels: just under the API server's own decoding limit (10,000). CEL cannot see
    # inside free-form config, so the API server admits it; the operator must
    # decode it from its watch stream, refuse it, and go on serving every other object
    assert created.returncode == 0, created.stderr
    def stalled() -> dict | None:  # status only: this test process could not decode the whole object
        out = cluster.kubectl("-n", namespace, "get", "gatewaydeployment", "deep", "-o",
                              "jsonpath={.status.conditions}").stdout
        found = {c["type"]: c for c in json.loads(out or "[]")}.get("Stalled")
        return found if found and found["status"] == "True" else None
    condition = until(stalled, timeout=60, what="deep to stall")
    assert condition["reason"] == reasons.CONFIG_OVER_LIMITS and "deeper than 32 levels" in condition["message"]
    assert cluster.kubectl("-n", namespace, "get", "deployment", "deep", check=False).returncode != 0
    latency = reconcile_latency(cluster, *bystander, "after-deep")
    print(f"\nbystander reconcile latency after a 9990-level config: {latency:.2f} s")
    assert latency < 5
    assert_operator_healthy(operator, pid)


def test_hostile_health_bodies_are_capped(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                          standins: HealthStandIns) -> None:
    """The image behind /health is the tenant's: an endless body, a huge one and deeply
    nested JSON cost the operator a bounded read each, and count as an unanswered poll."""
    pid = operator.proc.pid  # type: ignore[union-attr]
    apply_gateway(cluster, namespace, gateway_deployment("loud", replicas=3, replicaPolicy="Warn"))
    pods = wait_ready_pods(cluster, namespace, "loud", 3)
    before = operator_rss_mib(operator)

    hostile_health(cluster, standins, namespace, "loud", pods)  # the stand-in server's hostile answers
    grown = operator_rss_mib(operator) - before
    print(f"\noperator RSS before hostile /health bodies {before:.0f} MiB, after 10 s of them {before + grown:.0f} MiB")
    assert grown < 40, f"operator RSS grew {grown:.0f} MiB on hostile /health bodies"
    assert conditions(cluster, namespace, "loud")["Stalled"]["status"] == "False"
    assert_operator_healthy(operator, pid)


def test_a_same_named_object_of_someone_else_is_never_taken(cluster: Cluster, operator: OperatorProcess,
                                                             namespace: str) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken", "labels": {"team": "web"}},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    cluster.apply(json.dumps(service), "-n", namespace)
    before = cluster.get_json("-n", namespace, "service/taken")
    apply_gateway(cluster, namespace, gateway_deployment("taken"))
    stalled = wait_condition(cluster, namespace, "taken", "Stalled", "True", reasons.OBJECT_NOT_OWNED)
    assert "Service taken" in stalled["message"] and "not controlled by this GatewayDeployment" in stalled["message"]
    # further passes must not touch it either
    stays(lambda: cluster.get_json("-n", namespace, "service/taken")["metadata"]["resourceVersion"]
          == before["metadata"]["resourceVersion"], 3, what="the foreign Service untouched")
    after = cluster.get_json("-n", namespace, "service/taken")
    assert after["spec"]["selector"] == {"app": "web"} and after["spec"]["ports"][0]["port"] == 80
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not after["metadata"].get("ownerReferences")
    cluster.kubectl("-n", namespace, "delete", "gatewaydeployment", "taken")
    # the garbage collector would have removed it by now had it been adopted
    stays(lambda: cluster.kubectl("-n", namespace, "get", "service", "taken", check=False).returncode == 0, 3,
          what="the foreign Service still there")


def test_undecodable_secret_stalls_once_without_a_hot_loop(cluster: Cluster, operator: OperatorProcess,
                                                           namespace: str) -> None:
    pid = operator.proc.pid  # type: ignore[union-attr]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "binary-token"},
              "data": {"token": base64.b64encode(b"\xff\xfe\x00binary").decode()}}
    cluster.apply(json.dumps(secret), "-n", namespace)
    apply_gateway(cluster, namespace, gateway_deployment("binary", authTokenSecretRef={"name": "binary-token"}))
    stalled = wait_condition(cluster, namespace, "binary", "Stalled", "True", reasons.SECRET_VALUE_INVALID)
    assert "not UTF-8" in stalled["message"]
    # a hot loop would log several lines a second
    stays(lambda: len([line for line in operator.log_text().splitlines()
                       if f"{namespace}/binary" in line and "stalled" in line]) == 1, 8,
          what="one 'stalled' line for binary")
    assert_operator_healthy(operator, pid)


def test_a_black_holed_redis_does_not_delay_other_namespaces(cluster: Cluster, operator: OperatorProcess,
                                                             namespace: str, bystander: tuple[str, str]) -> None:
    """A listener that accepts connections and never answers, named by 8 GatewayDeployments
    with the longest probe timeout: another namespace's change is still reconciled at once."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # the kernel completes handshakes; nothing ever reads or answers
    try:
        url = f"redis://127.0.0.1:{hole.getsockname()[1]}/0"
        for i in range(8):
            apply_gateway(cluster, namespace, gateway_deployment(
                f"stuck-{i}", replicas=2, config=redis_store(), redis={"url": url},
                health={"intervalSeconds": 1, "timeoutSeconds": 60}))
        # within 30 s although the spec asks for a 60 s probe timeout: the ceiling holds
        wait_condition(cluster, namespace, "stuck-7", "RedisReachable", "False", reasons.CONNECTION_FAILED,
                       timeout=30)
        latencies = [reconcile_latency(cluster, *bystander, f"during-{i}") for i in range(3)]
        print(f"\nbystander reconcile latency beside 8 black-holed Redis probes: "
              f"{', '.join(f'{x:.2f}' for x in latencies)} s")
        assert max(latencies) < 5, latencies
        assert conditions(cluster, namespace, "stuck-0")["Ready"]["reason"] == reasons.WAITING_FOR_REDIS
    finally:
        hole.close()


def test_characters_outside_the_bmp_reach_the_objects(cluster: Cluster, operator: OperatorProcess,
                                                      namespace: str) -> None:
    """An emoji in an annotation or an env value is valid Kubernetes input: the server-side
    apply body carries it as UTF-8 (the API server's YAML decoder refuses surrogate escapes)."""
    apply_gateway(cluster, namespace, gateway_deployment(
        "emoji", podAnnotations={"example.dev/mood": "\U0001F680 launch"},
        env=[{"name": "GREETING", "value": "hi \U0001F44B"}]))
    wait_condition(cluster, namespace, "emoji", "Ready", "True")
    template = cluster.get_json("-n", namespace, "deployment/emoji")["spec"]["template"]
    assert template["metadata"]["annotations"]["example.dev/mood"] == "\U0001F680 launch"
    assert {"name": "GREETING", "value": "hi \U0001F44B"} in template["spec"]["containers"][0]["env"]
