"""The operator, end to end, seen from outside: kubectl-visible objects, conditions, events.

Real parts: the kube-apiserver/etcd/kube-controller-manager of the local control plane, the
operator CLI under the Helm chart's ServiceAccount and RBAC, real redis-server processes.
Its pods run on the REAL node (tests/node: containerd, kubelet, kube-proxy): each replica is
the HEALTH ENDPOINT STAND-IN image (a TEST IMAGE, harness/standins.py), whose /health the test
steers, except where a test runs the real gateway image. The real gateway serving webhooks is
in test_node.py.
"""
from __future__ import annotations

import base64
import json
import time

import pytest
import yaml

from harness import audit
from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
from harness import node
from harness.cluster import REPO, Cluster
from harness.gateways import (apply_gateway, conditions, create_password_secret, events, redis_gateway,
                              serve_health, wait_condition, wait_event)
from harness.operator import IDENTITY, OperatorProcess, gateway_deployment
from harness.redis_server import RedisServer
from harness.standins import BUILD_TIME, RUNTIME, HealthStandIns, idempotency_owner
from harness.wait import stays, until


CONDITION_TYPES = {"Ready", "Reconciling", "Stalled", "RedisReachable", "IdempotencyDegraded",
                   "ExactlyOnceAdmission", "RedisDurable", "SessionsShared", "RedisTLSVerified", "GatewayCompatible",
                   "ReplicaSafeChannels"}


# -- one replica on SQLite ---------------------------------------------------------------

def test_single_replica_sqlite_objects_and_conditions(cluster: Cluster, operator: OperatorProcess,
                                                      namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("solo", persistence={"enabled": True}))
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/solo", "--timeout=60s")

    deployment = cluster.get_json("-n", namespace, "deployment/solo")
    owner = deployment["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("GatewayDeployment", "solo", True)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # never two SQLite stores at once
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "solo-gateway-state"}} in pod["volumes"]
    assert cluster.get_json("-n", namespace, "pvc/solo-gateway-state")["spec"]["resources"]["requests"]["storage"] == "1Gi"
    token_env = next(e for e in container["env"] if e["name"] == "GATEWAY_AUTH_TOKEN")
    assert token_env["valueFrom"]["secretKeyRef"] == {"name": "solo-gateway-auth", "key": "token"}
    token = base64.b64decode(cluster.get_json("-n", namespace, "secret/solo-gateway-auth")["data"]["token"]).decode()
    assert len(token) >= 32

    config_map = cluster.get_json("-n", namespace, "configmap/solo-gateway-config")
    assert token not in json.dumps(config_map)
    gateway_yaml = yaml.safe_load(config_map["data"]["gateway.yaml"])
    assert gateway_yaml["agents"] and gateway_yaml["gateway"]["host"] == "0.0.0.0"
    assert "push" not in gateway_yaml
    assert cluster.get_json("-n", namespace, "service/solo")["spec"]["sessionAffinity"] == "None"
    assert cluster.kubectl("-n", namespace, "get", "pdb", "solo", check=False).returncode != 0

    body = cluster.get_json("-n", namespace, "gatewaydeployment/solo")
    status = body["status"]
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert (status["replicas"], status["readyReplicas"], status["storeBackend"]) == (1, 1, "sqlite")
    found = {c["type"]: c for c in status["conditions"]}
    assert set(found) == CONDITION_TYPES
    for c in found.values():
        assert {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"} <= set(c)
    assert found["ExactlyOnceAdmission"]["status"] == "True"
    assert found["ExactlyOnceAdmission"]["reason"] == "SingleReplicaDurableStore"
    assert found["Stalled"]["status"] == "False" and found["Reconciling"]["status"] == "False"
    assert found["RedisReachable"]["status"] == "Unknown"
    assert (found["RedisDurable"]["status"], found["RedisDurable"]["reason"]) == ("Unknown", "RedisNotConfigured")
    assert (found["SessionsShared"]["status"], found["SessionsShared"]["reason"]) == ("True", "SingleReplicaHistory")
    # the stand-in runs no gateway and tells no versions
    assert (found["GatewayCompatible"]["status"], found["GatewayCompatible"]["reason"]) == \
        ("Unknown", "GatewayVersionsUnknown")
    table = cluster.kubectl("-n", namespace, "get", "gatewaydeployment", "solo").stdout
    assert table.split("\n")[0].split()[:6] == ["NAME", "READY", "REASON", "REPLICAS", "STORE", "EXACTLY-ONCE"]
    assert table.split("\n")[1].split()[:6] == ["solo", "True", "Available", "1/1", "sqlite", "True"]


def test_refuse_policy_rejects_replicas_without_redis_at_admission(cluster: Cluster, operator: OperatorProcess,
                                                                   namespace: str) -> None:
    refused = apply_gateway(cluster, namespace, gateway_deployment("many", replicas=3), check=False)
    assert refused.returncode != 0
    assert "a webhook fanned to two replicas can run the agent twice" in refused.stderr
    assert "store_backend: redis" in refused.stderr
    # and scaling an accepted one-replica gateway is refused the same way
    apply_gateway(cluster, namespace, gateway_deployment("one"))
    scaled = cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", "one", "--type=merge",
                             "-p", '{"spec":{"replicas":2}}', check=False)
    assert scaled.returncode != 0 and "can run the agent twice" in scaled.stderr


def test_warn_policy_runs_replicas_and_says_exactly_once_is_not_held(cluster: Cluster, operator: OperatorProcess,
                                                                     namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("warned", replicas=3, replicaPolicy="Warn"))
    wait_condition(cluster, namespace, "warned", "ExactlyOnceAdmission", "False", "PerReplicaStores")
    ready = wait_condition(cluster, namespace, "warned", "Ready", "True")
    assert "NOT held" in ready["message"]
    assert cluster.get_json("-n", namespace, "deployment/warned")["spec"]["replicas"] == 3
    event = wait_event(cluster, namespace, "warned", "ExactlyOnceNotHeld", "Warning")
    assert "run the agent twice" in event["message"]


def test_refuse_holds_one_replica_even_without_the_crd_rule(cluster: Cluster, operator: OperatorProcess,
                                                            namespace: str) -> None:
    """Defence in depth: with the CEL rules stripped from the CRD, the operator still runs
    one replica and reports ReplicaPolicyViolation."""
    crd = yaml.safe_load((REPO / "crds/gatewaydeployments.yaml").read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema.pop("x-kubernetes-validations")
    cluster.apply(json.dumps(crd), "--server-side", "--force-conflicts")
    try:
        until(lambda: apply_gateway(cluster, namespace, gateway_deployment("sneaky", replicas=3),
                                    check=False).returncode == 0, timeout=30, what="CRD without rules in effect")
        wait_condition(cluster, namespace, "sneaky", "Stalled", "True", "ReplicaPolicyViolation")
        stays(lambda: cluster.get_json("-n", namespace, "deployment/sneaky")["spec"]["replicas"] == 1, 2,
              what="one replica without the CRD's rule")
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))


# -- Redis wiring, the scale-out gate -----------------------------------------------------

def test_redis_backed_gateway_is_wired_and_scaled(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                                  redis_server: RedisServer) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("shared", redis_server))
    wait_condition(cluster, namespace, "shared", "RedisReachable", "True", "ProbeSucceeded")
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/shared", "--timeout=60s")

    deployment = cluster.get_json("-n", namespace, "deployment/shared")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GATEWAY_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}

    config_map = cluster.get_json("-n", namespace, "configmap/shared-gateway-config")
    assert redis_server.password not in json.dumps(config_map)
    config = yaml.safe_load(config_map["data"]["gateway.yaml"])
    assert config["push"]["redis"] == {"url": f"{redis_server.url}?{REDIS_CLIENT_OPTIONS}", "password": "${GATEWAY_REDIS_PASSWORD}",
                                       "prefix": f"gwop:{namespace}:shared:"}
    assert config["turn_lock"]["backend"] == "redis"
    assert config["hooks"]["idempotency"]["store_backend"] == "redis"

    assert cluster.get_json("-n", namespace, "pdb/shared")["spec"]["maxUnavailable"] == 1
    assert cluster.get_json("-n", namespace, "service/shared")["spec"]["sessionAffinity"] == "ClientIP"
    status = cluster.get_json("-n", namespace, "gatewaydeployment/shared")["status"]
    canary = redis_server.client().get(f"gwop:{namespace}:shared:operator-canary")
    assert status["redis"] == {"endpoint": f"127.0.0.1:{redis_server.port}/0", "prefix": f"gwop:{namespace}:shared:",
                               "canary": canary, "runId": redis_server.client().info("server")["run_id"],
                               "replId": str(redis_server.client().info("replication")["master_replid"])}
    assert redis_server.password not in json.dumps(status)
    # the operator's probe left only its canary (no TTL) under the prefix
    assert redis_server.client().keys("gwop:*") == [f"gwop:{namespace}:shared:operator-canary"]
    assert redis_server.client().ttl(f"gwop:{namespace}:shared:operator-canary") == -1

    # shared session history (the default with Redis), encrypted with a key the operator generated
    # once: the key reaches the pods only as a Secret-backed env var, never status, the ConfigMap,
    # events or metrics
    assert config["session_history"] == {"store": "redis", "max_messages": 50, "ttl_seconds": 604800,
                                         "max_sessions": 10_000}
    assert env["GATEWAY_SESSION_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "shared-session-key", "key": "key"}
    key = base64.b64decode(cluster.get_json("-n", namespace, "secret/shared-session-key")["data"]["key"]).decode()
    assert len(base64.urlsafe_b64decode(key)) == 32  # a Fernet key
    assert conditions(cluster, namespace, "shared")["SessionsShared"]["reason"] == "SharedSessionHistory"
    seen = json.dumps([config_map, status, events(cluster, namespace, "shared"), deployment])
    assert key not in seen and key not in operator.metrics() and key not in operator.log_text()


def test_scale_out_waits_for_the_redis_probe(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                             redis_server: RedisServer) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    redis_server.stop()
    apply_gateway(cluster, namespace, redis_gateway("gated", redis_server))
    reconciling = wait_condition(cluster, namespace, "gated", "Reconciling", "True", "WaitingForRedis")
    assert "1 of 3" in reconciling["message"]
    redis_cond = wait_condition(cluster, namespace, "gated", "RedisReachable", "False", "ConnectionFailed")
    assert redis_server.password not in redis_cond["message"]
    assert conditions(cluster, namespace, "gated")["Ready"]["reason"] == "WaitingForRedis"
    stays(lambda: cluster.get_json("-n", namespace, "deployment/gated")["spec"]["replicas"] == 1, 3,
          what="one replica while the gate holds")
    wait_event(cluster, namespace, "gated", "RedisUnreachable", "Warning")

    redis_server.start()
    wait_condition(cluster, namespace, "gated", "RedisReachable", "True", timeout=30)
    until(lambda: cluster.get_json("-n", namespace, "deployment/gated")["spec"]["replicas"] == 3,
          timeout=30, what="scale-out once Redis answers")
    wait_condition(cluster, namespace, "gated", "Ready", "True")


def test_an_untested_gateway_release_is_named_and_holds_scale_out(cluster: Cluster, operator: OperatorProcess,
                                                                  namespace: str, redis_server: RedisServer,
                                                                  standins: HealthStandIns) -> None:
    """A replica that says it runs a praisonai-bot release outside compat.TESTED_RELEASES:
    GatewayCompatible=False UntestedGatewayRelease with a Warning Event, `kubectl get gwd -o wide`
    shows the release, and a scale-out waits (replicaPolicy Refuse) until the replicas run a tested
    release again."""
    from gateway_operator.core.compat import TESTED_RELEASES
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("untested", redis_server, replicas=1))
    [replica] = serve_health(cluster, standins, namespace, "untested", 1).values()
    replica.answer([], versions={"praisonai-bot": "0.1.99", "praisonaiagents": "1.7.17"})
    c = wait_condition(cluster, namespace, "untested", "GatewayCompatible", "False", "UntestedGatewayRelease")
    assert "praisonai-bot 0.1.99" in c["message"] and TESTED_RELEASES[-1] in c["message"]
    wait_event(cluster, namespace, "untested", "UntestedGatewayRelease", "Warning")
    wide = cluster.kubectl("-n", namespace, "get", "gatewaydeployment", "untested", "-o", "wide").stdout
    assert "GATEWAY" in wide.split("\n")[0] and "0.1.99" in wide.split("\n")[1], wide

    cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", "untested", "--type=merge",
                    "-p", json.dumps({"spec": {"replicas": 3}}))
    stays(lambda: cluster.get_json("-n", namespace, "deployment/untested")["spec"]["replicas"] == 1, 5,
          what="one replica while the release is untested")

    replica.answer([], versions={"praisonai-bot": TESTED_RELEASES[-1], "praisonaiagents": "1.7.17"})
    wait_condition(cluster, namespace, "untested", "GatewayCompatible", "True", "TestedGatewayRelease")
    until(lambda: cluster.get_json("-n", namespace, "deployment/untested")["spec"]["replicas"] == 3,
          timeout=60, what="scale-out once the release is a tested one")


def test_wrong_redis_password_is_reported_as_authentication_failure(cluster: Cluster, operator: OperatorProcess,
                                                                    namespace: str, redis_server: RedisServer) -> None:
    create_password_secret(cluster, namespace, "redis-auth", "not-the-password")
    apply_gateway(cluster, namespace, redis_gateway("wrongpass", redis_server))
    c = wait_condition(cluster, namespace, "wrongpass", "RedisReachable", "False", "AuthenticationFailed")
    assert "not-the-password" not in json.dumps(conditions(cluster, namespace, "wrongpass"))
    assert "not-the-password" not in operator.log_text()
    assert c["message"]


# -- health polling -----------------------------------------------------------------------

def test_degraded_replica_flips_conditions_and_recovers(cluster: Cluster, operator: OperatorProcess,
                                                        namespace: str, redis_server: RedisServer,
                                                        standins: HealthStandIns) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("polled", redis_server, replicas=2,
                                                    health={"restartStaleReplicas": False}))
    replicas = serve_health(cluster, standins, namespace, "polled", 2)
    wait_condition(cluster, namespace, "polled", "ExactlyOnceAdmission", "True", "SharedRedisStore")
    before = conditions(cluster, namespace, "polled")["IdempotencyDegraded"]["lastTransitionTime"]

    # a Redis outage seen by one replica: visible within one interval (1 s) plus timeout (1 s)
    first = sorted(replicas)[0]
    replicas[first].degraded_owners = [idempotency_owner(RUNTIME)]
    started = time.monotonic()
    degraded = wait_condition(cluster, namespace, "polled", "IdempotencyDegraded", "True", "RuntimeOutage", timeout=20)
    seen_after = time.monotonic() - started
    assert "1 of 2 replicas" in degraded["message"] and first in degraded["message"]
    assert degraded["lastTransitionTime"] >= before
    wait_condition(cluster, namespace, "polled", "ExactlyOnceAdmission", "False", "IdempotencyDegraded")
    assert cluster.get_json("-n", namespace, "gatewaydeployment/polled")["status"]["degradedReplicas"] == 1
    wait_event(cluster, namespace, "polled", "IdempotencyDegraded", "Warning")
    # interval (1 s) + timeout (1 s), plus kubectl's own polling and a loaded 2-core machine
    assert seen_after < 5, f"degradation took {seen_after:.1f}s to show"

    # an unknown reason (e.g. a raw Redis error) is never copied into status
    replicas[first].degraded_owners = [idempotency_owner("Error 111 connecting to 10.1.2.3:6379 password=hunter2")]
    other = wait_condition(cluster, namespace, "polled", "IdempotencyDegraded", "True", "OtherDegradation")
    assert "hunter2" not in other["message"] and "10.1.2.3" not in other["message"]

    replicas[first].degraded_owners = []
    wait_condition(cluster, namespace, "polled", "IdempotencyDegraded", "False", "NoDegradedReplicas", timeout=20)
    wait_condition(cluster, namespace, "polled", "ExactlyOnceAdmission", "True", "SharedRedisStore")
    wait_event(cluster, namespace, "polled", "IdempotencyRecovered", "Normal")


def test_build_time_fallback_replica_is_restarted_once_redis_answers(cluster: Cluster, operator: OperatorProcess,
                                                                     namespace: str, redis_server: RedisServer,
                                                                     standins: HealthStandIns) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("sticky", redis_server, replicas=2))
    replicas = serve_health(cluster, standins, namespace, "sticky", 2)
    stale = sorted(replicas)[0]
    # while the replica itself cannot reach Redis (cut off; the operator's probe reaches it), a
    # restart would not help (its replacement would be cut off too): it is not restarted
    replicas[stale].answer([idempotency_owner(BUILD_TIME)], own_redis="unreachable")
    degraded = wait_condition(cluster, namespace, "sticky", "IdempotencyDegraded", "True", "BuildTimeFallback")
    assert "fell back to a per-replica SQLite store" in degraded["message"]
    stays(lambda: not [e for e in events(cluster, namespace, "sticky") if e["reason"] == "RestartedStaleReplica"],
          6, what="no restart while the replica cannot reach Redis itself")
    replicas[stale].degraded_owners = [idempotency_owner(BUILD_TIME)]  # it reaches Redis again
    event = wait_event(cluster, namespace, "sticky", "RestartedStaleReplica", "Normal")
    assert stale in event["message"]
    until(lambda: stale not in {p["metadata"]["name"] for p in
                                cluster.get_json("-n", namespace, "pods", "-l", "app.kubernetes.io/instance=sticky")["items"]},
          timeout=30, what="the stale replica to be replaced")
    # the replacement answers healthy (a fresh stand-in at its new IP)
    serve_health(cluster, standins, namespace, "sticky", 2)
    wait_condition(cluster, namespace, "sticky", "IdempotencyDegraded", "False", timeout=30)
    restarts = [e for e in events(cluster, namespace, "sticky") if e["reason"] == "RestartedStaleReplica"]
    assert sum(e.get("count", 1) for e in restarts) == 1


# -- drift, idleness, bad input -------------------------------------------------------------

def test_drift_is_put_back(cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("drifty"))
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/drifty", "--timeout=60s")
    original = cluster.get_json("-n", namespace, "configmap/drifty-gateway-config")["data"]["gateway.yaml"]
    cluster.kubectl("-n", namespace, "scale", "deployment/drifty", "--replicas=4")
    cluster.kubectl("-n", namespace, "patch", "configmap", "drifty-gateway-config", "--type=merge",
                    "-p", json.dumps({"data": {"gateway.yaml": "agents: {}\n"}}))
    until(lambda: cluster.get_json("-n", namespace, "deployment/drifty")["spec"]["replicas"] == 1,
          timeout=30, what="replicas put back")
    until(lambda: cluster.get_json("-n", namespace, "configmap/drifty-gateway-config")["data"]["gateway.yaml"] == original,
          timeout=30, what="config put back")


def test_config_change_rolls_the_pods(cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("rolling"))
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/rolling", "--timeout=60s")
    before = cluster.get_json("-n", namespace, "deployment/rolling")["spec"]["template"]["metadata"]["annotations"]
    changed = gateway_deployment("rolling")
    changed["spec"]["config"]["agents"]["assistant"]["instructions"] = "Reply in two sentences."
    apply_gateway(cluster, namespace, changed)
    until(lambda: cluster.get_json("-n", namespace, "deployment/rolling")["spec"]["template"]["metadata"]
          ["annotations"]["gateway-operator.dev/config-hash"] != before["gateway-operator.dev/config-hash"],
          timeout=30, what="a new config hash on the pod template")
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/rolling", "--timeout=60s")
    body = cluster.get_json("-n", namespace, "gatewaydeployment/rolling")
    until(lambda: cluster.get_json("-n", namespace, "gatewaydeployment/rolling")["status"]["observedGeneration"]
          == body["metadata"]["generation"], timeout=30, what="observedGeneration to follow")


def test_no_api_writes_while_idle(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                  redis_server: RedisServer, standins: HealthStandIns) -> None:
    if not cluster.owned:
        pytest.skip("counts writes in the local control plane's audit log")
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("idle", redis_server, replicas=2))
    serve_health(cluster, standins, namespace, "idle", 2)
    wait_condition(cluster, namespace, "idle", "ExactlyOnceAdmission", "True")
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/idle", "--timeout=60s")
    seen: dict[str, str] = {}

    def settled() -> bool:  # the last status write landed: the same resourceVersion two looks running
        rv = cluster.get_json("-n", namespace, "gatewaydeployment/idle")["metadata"]["resourceVersion"]
        same, seen["rv"] = seen.get("rv") == rv, rv
        return same
    until(settled, timeout=30, interval=3, what="the last status write to land")
    since = audit.now()
    requests_before = sum(s.requests for s in standins.by_ip.values())
    # 12 polling intervals (1 s) and two full reconciles (resync 5 s)
    stays(lambda: not [w for w in audit.writes(cluster, IDENTITY, since) if w.namespace == namespace], 12,
          interval=2, what="no API write while idle")
    assert sum(s.requests for s in standins.by_ip.values()) - requests_before >= 2 * 8  # it did keep polling


def test_missing_secret_keeps_what_runs_and_recovers(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                                     redis_server: RedisServer) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("secretive", redis_server, replicas=2))
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/secretive", "--timeout=60s")
    template = cluster.get_json("-n", namespace, "deployment/secretive")["spec"]["template"]

    changed = redis_gateway("secretive", redis_server, replicas=2)
    changed["spec"]["redis"]["passwordSecretRef"] = {"name": "does-not-exist"}
    apply_gateway(cluster, namespace, changed)
    stalled = wait_condition(cluster, namespace, "secretive", "Stalled", "True", "SecretNotFound")
    assert "does-not-exist" in stalled["message"] and "spec.redis.passwordSecretRef" in stalled["message"]
    assert conditions(cluster, namespace, "secretive")["Ready"]["status"] == "False"
    wait_event(cluster, namespace, "secretive", "SecretNotFound", "Warning")
    # what was running is untouched
    live = cluster.get_json("-n", namespace, "deployment/secretive")
    assert live["spec"]["template"] == template and live["spec"]["replicas"] == 2

    create_password_secret(cluster, namespace, "does-not-exist", redis_server.password)
    wait_condition(cluster, namespace, "secretive", "Stalled", "False", timeout=60)
    wait_condition(cluster, namespace, "secretive", "Ready", "True", timeout=60)
    def password_secret() -> str:
        env = {e["name"]: e for e in cluster.get_json("-n", namespace, "deployment/secretive")["spec"]["template"]
               ["spec"]["containers"][0]["env"]}
        return env["GATEWAY_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"]
    until(lambda: password_secret() == "does-not-exist", timeout=30, what="the fixed Secret rolled out")
    assert operator.proc is not None and operator.proc.poll() is None


def test_gateway_exit_78_is_reported_as_config_rejected(cluster: Cluster, operator: OperatorProcess,
                                                        namespace: str) -> None:
    """The real gateway image with a key 0.1.16 does not know: its launcher exits 78 (fatal
    config) and the kubelet restarts it into a crash loop."""
    rejected = gateway_deployment("rejected", image=node.images().gateway, imagePullPolicy="Never")
    rejected["spec"]["config"]["gateway"] = {"drain_timout": 5}
    apply_gateway(cluster, namespace, rejected)
    stalled = wait_condition(cluster, namespace, "rejected", "Stalled", "True", "GatewayConfigRejected", timeout=120)
    pod = cluster.get_json("-n", namespace, "pods", "-l", "app.kubernetes.io/instance=rejected")["items"][0]
    assert pod["metadata"]["name"] in stalled["message"]
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 78
    assert operator.proc is not None and operator.proc.poll() is None


def test_metrics_expose_conditions_and_polls(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                             redis_server: RedisServer, standins: HealthStandIns) -> None:
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("measured", redis_server, replicas=2))
    serve_health(cluster, standins, namespace, "measured", 2)
    wait_condition(cluster, namespace, "measured", "ExactlyOnceAdmission", "True")
    labels = f'name="measured",namespace="{namespace}"'

    def exposed() -> str | None:
        text = operator.metrics()
        return text if f'gateway_operator_condition{{{labels},status="True",type="ExactlyOnceAdmission"}} 1.0' \
            in text else None
    text = until(exposed, timeout=20, what="the condition gauge")
    assert f'gateway_operator_condition{{{labels},status="False",type="ExactlyOnceAdmission"}} 0.0' in text
    assert f'gateway_operator_health_polls_total{{{labels},result="Healthy"}}' in text
    assert f"gateway_operator_reconciles_total{{{labels}}}" in text
    assert "gateway_operator_reconcile_duration_seconds_bucket" in text
    assert redis_server.password not in text


def test_rotated_redis_password_rolls_the_pods(cluster: Cluster, operator: OperatorProcess, namespace: str,
                                               redis_server: RedisServer) -> None:
    """Env vars are read at container start: a rotated Secret must restart the replicas."""
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("rotating", redis_server, replicas=2))
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gatewaydeployment/rotating", "--timeout=60s")

    def revision() -> str:
        return cluster.get_json("-n", namespace, "deployment/rotating")["spec"]["template"]["metadata"][
            "annotations"]["gateway-operator.dev/secrets-revision"]
    before = revision()
    new_password = "rotated-password-2"
    redis_server.client().config_set("requirepass", new_password)
    redis_server.password = new_password
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-auth"},
                              "stringData": {"password": new_password}}), "-n", namespace)
    until(lambda: revision() != before, timeout=30, what="a new secrets revision on the pod template")
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/rotating", "--timeout=60s")
    wait_condition(cluster, namespace, "rotating", "RedisReachable", "True", "ProbeSucceeded")
    assert new_password not in json.dumps(cluster.get_json("-n", namespace, "deployment/rotating"))
