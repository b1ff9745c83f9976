"""Unit tests of the pure parts: rendering, Redis resolution, health classification,
condition computation and merging, the no-write comparison."""
from __future__ import annotations

import pytest
import yaml

from gateway_operator import api
from gateway_operator.api import reasons
from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import InvalidRedisURL, resolve
from gateway_operator.clients.kube import is_subset
from gateway_operator.core import conditions, replicas, status
from gateway_operator.core.conditions import Facts, Problem
from gateway_operator.core.health import DESCRIPTIONS, Idempotency, ReplicaHealth, classify, own_view
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.render.autoscaling import disruption_budget
from gateway_operator.core.render.deployment import deployment
from gateway_operator.core.render.gateway_config import config_hash, config_map, gateway_config
from gateway_operator.core.render.managed_redis import managed_redis
from gateway_operator.core.render.names import OperatorIdentity, Owner
from gateway_operator.core.render.network import gateway_network_policy, service
from gateway_operator.core.render.objects import desired_objects
from gateway_operator.pod import pod_code as shipped_pod_code
from harness.operator import gateway_deployment, redis_store

OWNER = Owner("gw", "prod", "uid-1")
POD_CODE = shipped_pod_code()  # the pods' code, as the operator's entry points read it
OK = ProbeResult(True, "ProbeSucceeded", "ok")
DOWN = ProbeResult(False, "ConnectionFailed", "cannot connect")


def spec(**overrides) -> GatewaySpec:
    return GatewaySpec.parse(gateway_deployment("gw", **overrides)["spec"])


# -- Redis target ----------------------------------------------------------------------

def test_default_prefix_is_per_namespace_and_name() -> None:
    a = resolve(spec(redis={"url": "redis://r:6380/2"}).redis, "prod", "gw")
    b = resolve(spec(redis={"url": "redis://r:6380/2"}).redis, "staging", "gw")
    assert a is not None and b is not None
    assert (a.host, a.port, a.db, a.url) == ("r", 6380, 2, "redis://r:6380/2")
    assert a.prefix == "gwop:prod:gw:" and b.prefix == "gwop:staging:gw:"


def test_host_form_tls_and_managed() -> None:
    t = resolve(spec(redis={"host": "r", "port": 7000, "db": 1, "tls": {"enabled": True}, "prefix": "x:"}).redis, "p", "g")
    assert t is not None and (t.url, t.endpoint, t.prefix) == ("rediss://r:7000/1", "r:7000/1", "x:")
    m = resolve(spec(redis={"managed": {"enabled": True}}).redis, "p", "g")
    assert m is not None and m.host == "g-redis.p.svc" and m.password_ref == api.SecretKeyRef("g-redis", "password")
    assert resolve(spec().redis, "p", "g") is None


@pytest.mark.parametrize("url", ["redis://r:notaport/0", "http://r:6379", "redis://u:p@r:6379", "redis://r:6379/x"])
def test_malformed_urls_are_specific_errors(url: str) -> None:
    with pytest.raises(InvalidRedisURL):
        resolve(spec(redis={"url": url}).redis, "p", "g")


# -- rendering ---------------------------------------------------------------------------

def test_rendered_config_carries_redis_without_secrets() -> None:
    s = spec(replicas=3, config=redis_store(), redis={"url": "redis://r:6379/0", "passwordSecretRef": {"name": "pw"}})
    target = resolve(s.redis, OWNER.namespace, OWNER.name)
    config = gateway_config(OWNER, s, target)
    assert config["push"]["redis"] == {"url": "redis://r:6379/0?socket_timeout=0.3&socket_connect_timeout=1",
                                       "prefix": "gwop:prod:gw:",
                                       "password": "${GATEWAY_REDIS_PASSWORD}"}
    assert config["turn_lock"] == {"backend": "redis"}
    assert config["gateway"]["allowed_origins"] == ["http://gw.prod.svc", "http://gw.prod.svc.cluster.local"]


def test_user_turn_lock_choice_is_kept() -> None:
    s = spec(config=redis_store({"turn_lock": {"backend": "local"}}), redis={"url": "redis://r:6379/0"})
    assert gateway_config(OWNER, s, resolve(s.redis, "prod", "gw"))["turn_lock"] == {"backend": "local"}


def test_config_change_changes_the_pod_template_hash() -> None:
    a, b = spec(), spec(config={"agents": {"assistant": {"instructions": "other"}}})
    ha = config_hash(config_map(OWNER, a, None, POD_CODE))
    hb = config_hash(config_map(OWNER, b, None, POD_CODE))
    assert ha != hb
    assert deployment(OWNER, a, None, 1, ha)["spec"]["template"]["metadata"]["annotations"][
        api.ANNOTATION_CONFIG_HASH] == ha


def test_strategy_pdb_and_affinity_follow_the_store() -> None:
    single = spec()
    shared = spec(replicas=3, config=redis_store(), redis={"url": "redis://r:6379/0"})
    assert deployment(OWNER, single, None, 1, "h")["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment(OWNER, shared, None, 3, "h")["spec"]["strategy"]["type"] == "RollingUpdate"
    assert disruption_budget(OWNER, single) is None
    assert disruption_budget(OWNER, shared)["spec"]["maxUnavailable"] == 1
    assert service(OWNER, shared)["spec"]["sessionAffinity"] == "ClientIP"


def test_pod_security_is_restricted() -> None:
    pod = deployment(OWNER, spec(), None, 1, "h")["spec"]["template"]["spec"]
    c = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["allowPrivilegeEscalation"] is False and c["readOnlyRootFilesystem"] is True
    assert c["capabilities"] == {"drop": ["ALL"]}


def test_managed_redis_objects() -> None:
    operator = OperatorIdentity("ops-system", "ops")
    objects = managed_redis(OWNER, spec(config=redis_store(), redis={"managed": {"enabled": True}}), operator)
    kinds = {o["kind"]: o for o in objects}
    assert set(kinds) == {"Deployment", "Service", "NetworkPolicy"}
    policy = kinds["NetworkPolicy"]["spec"]
    sources = policy["ingress"][0]["from"]
    assert sources[0]["podSelector"]["matchLabels"] == api.selector_for("gw")
    # the operator's probe: only its release's pods, only in its namespace (a pod label alone
    # can be set by anyone who may create a pod)
    assert sources[1] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops-system"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway-operator",
                                                          "app.kubernetes.io/instance": "ops"}}}
    assert len(sources) == 2  # nobody else reaches the managed Redis
    assert "--requirepass" in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"][2]


@pytest.mark.parametrize("replicas, persistence, on", [
    (1, None, False), (3, None, True), (3, {"enabled": False}, False), (1, {"enabled": True}, True),
    (2, {"size": "2Gi"}, True)])
def test_a_managed_redis_shared_by_several_replicas_persists_and_never_evicts(replicas, persistence, on) -> None:
    managed = {"enabled": True, **({"persistence": persistence} if persistence is not None else {})}
    objects = managed_redis(OWNER, spec(replicas=replicas, config=redis_store(), redis={"managed": managed}),
                            OperatorIdentity())
    command = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--maxmemory-policy noeviction" in command
    assert ("--appendonly yes" in command) is on and ("--appendonly no" in command) is not on
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert len(claims) == (1 if on else 0)
    if persistence and persistence.get("size"):
        assert claims[0]["spec"]["resources"]["requests"]["storage"] == "2Gi"


# -- health ------------------------------------------------------------------------------

def owner(reason: str, owner_id: str = "durability:idempotency") -> dict:
    return {"owner_kind": "gateway", "owner_id": owner_id, "state": "cold", "reason": reason}


@pytest.mark.parametrize("body, expected", [
    ({"status": "healthy"}, Idempotency.HEALTHY),
    ({"degraded_owners": [owner("redis idempotency backend not available (running per-replica)")]},
     Idempotency.BUILD_TIME_FALLBACK),
    ({"degraded_owners": [owner("redis idempotency backend unreachable at runtime (dedup best-effort until "
                                "it recovers)")]}, Idempotency.RUNTIME_OUTAGE),
    ({"degraded_owners": [owner("something new")]}, Idempotency.OTHER),
    ({"degraded_owners": [owner("Error 111 connecting", "turn_lock:redis")]}, Idempotency.HEALTHY),
    ({"degraded_owners": "garbage"}, Idempotency.HEALTHY),
])
def test_classify(body: dict, expected: Idempotency) -> None:
    assert classify(body) is expected


@pytest.mark.parametrize("section, expected", [
    ({"versions": {"praisonai-bot": "0.1.16", "praisonaiagents": "1.7.17"}, "idempotency": {"redis": "answers"}},
     ("answers", ("0.1.16", "1.7.17"), None)),
    ({"idempotency": {"redis": "answers", "answers_for_s": 12.5}}, ("answers", (), 12.5)),
    ({"idempotency": {"redis": "unreachable", "answers_for_s": 12.5}}, ("unreachable", (), None)),
    ({"idempotency": {"redis": "answers", "answers_for_s": True}}, ("answers", (), None)),
    ({"idempotency": {"redis": "answers", "answers_for_s": -1}}, ("answers", (), None)),
    ({"idempotency": {"redis": "answers", "answers_for_s": "12"}}, ("answers", (), None)),
    ({"idempotency": {"redis": "answers", "answers_for_s": float("nan")}}, ("answers", (), None)),
    (None, (None, (), None)),
    ("garbage", (None, (), None)),
    ({"idempotency": {"redis": "fine, trust me"}, "versions": {"praisonai-bot": "0.1.16"}}, (None, (), None)),
    ({"versions": {"praisonai-bot": "0.1.16; rm -rf /", "praisonaiagents": "1"}}, (None, (), None)),
    ({"versions": {"praisonai-bot": "9" * 65, "praisonaiagents": "1"}}, (None, (), None)),
    ({"versions": {"praisonai-bot": 16, "praisonaiagents": "1"}, "idempotency": "x"}, (None, (), None)),
])
def test_the_launchers_own_view_is_read_and_anything_else_left_out(section: object, expected: tuple) -> None:
    assert own_view({"status": "healthy", "gateway_operator": section})[:3] == expected


def test_what_a_replica_left_unrecorded_is_read_from_its_own_view_and_nothing_hostile() -> None:
    def view(**store: object) -> tuple:
        seen = own_view({"gateway_operator": {"idempotency": {"redis": "answers", **store}}})
        return seen.unrecorded, seen.last_unrecorded_at, seen.journalled
    assert view(journal_dropped=2, leases_lost=1, last_unrecorded_at=1.8e9, journalled=5) == (3, 1.8e9, 5)
    assert view(journal_dropped=0, leases_lost=0, last_unrecorded_at=1.8e9) == (0, None, 0)
    assert view(journal_dropped=-4, leases_lost=True, last_unrecorded_at="now", journalled=1e12) == (0, None, 0)
    assert view(leases_lost=1, last_unrecorded_at=float("inf")) == (1, None, 0)


def test_a_replica_cut_off_from_redis_while_another_reaches_it_leaves_the_traffic() -> None:
    """A partition takes the cut-off replica out (readiness gate); an outage of Redis itself, a
    replica that does not say, or a recovery the replicas see a moment apart takes none out."""
    far = replicas.CUT_OFF_AFTER_S + 60

    def out(*views: tuple[str, str | None, float | None], serving: tuple[str, ...] = ("a", "b", "c"),
            unusable_for: float = far) -> set[str]:
        health = [ReplicaHealth(pod, Idempotency.HEALTHY, redis, (), since if redis == "answers" else None,
                                unusable_for_s=unusable_for if redis in ("unreachable", "refusing") else None)
                  for pod, redis, since in views]
        return set(replicas.out_of_traffic(health, serving))
    assert out(("a", "unreachable", None), ("b", "answers", far)) == {"a"}
    assert out(("a", "refusing", None), ("b", "answers", far), ("c", "unreachable", None)) == {"a", "c"}
    # Redis itself down or refusing: every replica says so, none is taken out
    assert out(("a", "unreachable", None), ("b", "unreachable", None)) == set()
    assert out(("a", "refusing", None), ("b", "refusing", None)) == set()
    # Redis just came back and b saw it first: a is about to, and stays in
    assert out(("a", "unreachable", None), ("b", "answers", replicas.CUT_OFF_AFTER_S - 1)) == set()
    # the one that reaches Redis takes no traffic itself (not Ready): nobody would, so a stays in
    assert out(("a", "unreachable", None), ("b", "answers", far), serving=("a",)) == set()
    # another image (no own view), or a view without a duration, is never the evidence
    assert out(("a", "unreachable", None), ("b", None, None)) == set()
    assert out(("a", "unreachable", None), ("b", "answers", None)) == set()
    assert out(("a", None, None), ("b", "answers", far)) == set()
    # one replica alone is never cut off
    assert out(("a", "unreachable", None)) == set()
    # Redis just went and a saw it first (b asks again within 3 s): a stays in; so does a replica
    # that failed one probe under load
    assert out(("a", "unreachable", None), ("b", "answers", far), unusable_for=replicas.CUT_OFF_AFTER_S - 1) == set()


def test_a_build_time_fallback_is_restarted_only_once_the_replica_itself_reaches_redis() -> None:
    """The operator's probe reaching Redis says nothing of a replica cut off from it."""
    def stale(own: str | None) -> str | None:
        health = [ReplicaHealth("a", Idempotency.BUILD_TIME_FALLBACK, own), ReplicaHealth("b", Idempotency.HEALTHY)]
        return replicas.stale_replica(True, health, ready=2, running=2)
    assert (stale("answers"), stale("unreachable"), stale("refusing"), stale(None)) == ("a", None, None, None)


def test_status_shows_what_the_replicas_run_and_drops_it_when_none_tells() -> None:
    health = (ReplicaHealth("a", Idempotency.HEALTHY, "answers", ("0.1.16", "1.7.17")),
              ReplicaHealth("b", Idempotency.HEALTHY, "answers", ("0.1.17", "1.7.17")),
              ReplicaHealth("c", Idempotency.HEALTHY, "answers", ("0.1.16", "1.7.17")),
              ReplicaHealth("d", Idempotency.UNKNOWN))
    built = status.build(None, facts(health=health), None, "2026-12-04T00:00:00Z")
    assert built["gateway"] == {"versions": [
        {"praisonaiBot": "0.1.16", "praisonaiagents": "1.7.17", "replicas": 2},
        {"praisonaiBot": "0.1.17", "praisonaiagents": "1.7.17", "replicas": 1}]}
    later = status.build(built, facts(health=(ReplicaHealth("d", Idempotency.HEALTHY),)), None, "2026-12-04T00:00:01Z")
    assert "gateway" not in later and status.changed(built, later)
    assert status.merge_patch(built, later)["gateway"] is None


def test_each_refusal_the_launcher_names_has_its_own_reason() -> None:
    """The launcher's /health text for a Redis that answers but refuses (gwop_journal.REFUSALS: OOM,
    READONLY, NOPERM, LOADING) maps to a reason of its own, with what to do; the same text without
    the launcher's tail stays RuntimeOutage."""
    import redis
    from harness import pod_code
    pod_code.importable()
    import gwop_journal
    expected = {redis.exceptions.OutOfMemoryError: Idempotency.REDIS_OUT_OF_MEMORY,
                redis.exceptions.ReadOnlyError: Idempotency.REDIS_READ_ONLY,
                redis.exceptions.NoPermissionError: Idempotency.REDIS_COMMAND_NOT_PERMITTED,
                redis.exceptions.BusyLoadingError: Idempotency.REDIS_LOADING}
    assert len(gwop_journal.REFUSALS) == len(expected)
    for error, state in expected.items():
        text = f"{gwop_journal.RUNTIME_TEXT}: {gwop_journal.refusal_of(error('refused'))}"
        assert classify({"degraded_owners": [owner(text)]}) is state, text
        assert state.value in reasons.ALL and "Redis" in DESCRIPTIONS[state]
    assert gwop_journal.refusal_of(redis.exceptions.TimeoutError("slow")) is None
    assert classify({"degraded_owners": [owner(gwop_journal.RUNTIME_TEXT)]}) is Idempotency.RUNTIME_OUTAGE


# -- conditions ----------------------------------------------------------------------------

def facts(**kw) -> Facts:
    base = dict(generation=2, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
                redis_configured=True, running_replicas=3, ready_replicas=3, updated_replicas=3,
                rollout_observed=True, probe=OK,
                health=tuple(ReplicaHealth(f"p{i}", Idempotency.HEALTHY) for i in range(3)))
    base.update(kw)
    return Facts(**base)


def by_type(f: Facts) -> dict[str, conditions.Condition]:
    return {c.type: c for c in conditions.compute(f)}


def test_all_healthy_on_redis_holds_exactly_once() -> None:
    c = by_type(facts())
    assert (c["Ready"].status, c["ExactlyOnceAdmission"].status, c["ExactlyOnceAdmission"].reason) == \
        ("True", "True", "SharedRedisStore")
    assert c["IdempotencyDegraded"].status == "False" and c["Stalled"].status == "False"


def test_degraded_replicas_pick_the_worst_reason_and_count() -> None:
    health = (ReplicaHealth("a", Idempotency.RUNTIME_OUTAGE), ReplicaHealth("b", Idempotency.BUILD_TIME_FALLBACK),
              ReplicaHealth("c", Idempotency.HEALTHY))
    c = by_type(facts(health=health))
    assert (c["IdempotencyDegraded"].status, c["IdempotencyDegraded"].reason) == ("True", "BuildTimeFallback")
    assert c["IdempotencyDegraded"].message.startswith("2 of 3 replicas")
    assert c["ExactlyOnceAdmission"].status == "False"


def test_a_redis_out_of_memory_is_named_over_a_timeout_and_says_what_to_do() -> None:
    health = (ReplicaHealth("a", Idempotency.RUNTIME_OUTAGE), ReplicaHealth("b", Idempotency.REDIS_OUT_OF_MEMORY),
              ReplicaHealth("c", Idempotency.HEALTHY))
    c = by_type(facts(health=health))
    assert (c["IdempotencyDegraded"].status, c["IdempotencyDegraded"].reason) == ("True", "RedisOutOfMemory")
    assert "raise maxmemory" in c["IdempotencyDegraded"].message
    assert (c["ExactlyOnceAdmission"].status, c["ExactlyOnceAdmission"].reason) == ("False", "IdempotencyDegraded")


def test_gate_and_unreachable_redis() -> None:
    c = by_type(facts(probe=DOWN, running_replicas=1, ready_replicas=1, updated_replicas=1))
    assert (c["Ready"].reason, c["Reconciling"].reason) == ("WaitingForRedis", "WaitingForRedis")
    assert (c["RedisReachable"].status, c["ExactlyOnceAdmission"].reason) == ("False", "RedisUnreachable")


def test_unanswered_health_is_unknown_not_true() -> None:
    c = by_type(facts(health=(ReplicaHealth("a", Idempotency.UNKNOWN),)))
    assert (c["ExactlyOnceAdmission"].status, c["ExactlyOnceAdmission"].reason) == ("Unknown", "ReplicasUnverified")


def test_sqlite_variants() -> None:
    base = dict(store_backend="sqlite", redis_configured=False, probe=None, health=())
    assert by_type(facts(**base, desired_replicas=1, running_replicas=1, ready_replicas=1, updated_replicas=1,
                         persistence=True))["ExactlyOnceAdmission"].reason == "SingleReplicaDurableStore"
    assert by_type(facts(**base, desired_replicas=1, running_replicas=1, ready_replicas=1,
                         updated_replicas=1))["ExactlyOnceAdmission"].reason == "StoreNotPersistent"
    warn = by_type(facts(**base, policy="Warn"))
    assert warn["ExactlyOnceAdmission"].reason == "PerReplicaStores" and "NOT held" in warn["Ready"].message


def test_problem_stalls() -> None:
    c = by_type(facts(problem=Problem("SecretNotFound", "Secret 'x' ...")))
    assert (c["Stalled"].status, c["Stalled"].reason, c["Ready"].reason, c["Reconciling"].status) == \
        ("True", "SecretNotFound", "SecretNotFound", "False")


WAITING_STATES = {
    "gated on Redis": dict(probe=DOWN, running_replicas=1, ready_replicas=1, updated_replicas=1),
    "rolling out": dict(updated_replicas=1, ready_replicas=2),
    "template not yet observed": dict(rollout_observed=False),
    "replicas not ready": dict(ready_replicas=0),
    "ready": {},
}
BLOCKERS = (reasons.APPLY_FAILED, reasons.OBJECT_NOT_OWNED, reasons.SECRET_NOT_FOUND, reasons.INVALID_SPEC,
            reasons.CONFIG_OVER_LIMITS, reasons.REDIS_TARGET_NOT_ALLOWED, reasons.RECONCILE_ERROR, reasons.CRASH_LOOP)


@pytest.mark.parametrize("state", WAITING_STATES)
@pytest.mark.parametrize("blocker", BLOCKERS)
def test_a_blocker_wins_over_any_waiting_state(state: str, blocker: str) -> None:
    """Whatever else is going on (waiting for Redis, rolling out), a problem that stops the
    operator is what Ready and Reconciling report, so kstatus and `kubectl get` show it."""
    c = by_type(facts(**WAITING_STATES[state], problem=Problem(blocker, f"{blocker} detail")))
    assert (c["Stalled"].status, c["Stalled"].reason) == ("True", blocker)
    assert (c["Ready"].status, c["Ready"].reason, c["Ready"].message) == ("False", blocker, f"{blocker} detail")
    assert (c["Reconciling"].status, c["Reconciling"].reason) == ("False", reasons.RECONCILE_STALLED)


@pytest.mark.parametrize("state", WAITING_STATES)
def test_without_a_blocker_waiting_is_reported_as_progress(state: str) -> None:
    c = by_type(facts(**WAITING_STATES[state]))
    assert c["Stalled"].status == "False"
    assert (c["Ready"].status == "True") == (state == "ready")
    assert (c["Reconciling"].status == "True") == (state != "ready")


def test_merge_moves_transition_time_only_on_flips() -> None:
    first = conditions.merge([], conditions.compute(facts()), 2, "T1")
    same = conditions.merge(first, conditions.compute(facts()), 2, "T2")
    assert same == first
    flipped = conditions.merge(first, conditions.compute(facts(probe=DOWN)), 3, "T3")
    times = {c["type"]: c["lastTransitionTime"] for c in flipped}
    assert times["RedisReachable"] == "T3" and times["IdempotencyDegraded"] == "T1"
    assert all(c["observedGeneration"] == 3 for c in flipped)


def test_status_unchanged_means_no_write() -> None:
    first = status.build({}, facts(), None, "T1")
    assert not status.changed(first, status.build(first, facts(), None, "T2"))
    assert status.changed(first, status.build(first, facts(ready_replicas=2), None, "T2"))


# -- the no-write comparison ---------------------------------------------------------------

def test_is_subset_ignores_server_defaults_but_not_drift() -> None:
    desired = {"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "resources":
                                                                            {"limits": {"cpu": "0.5"}}}]}}}}
    live = {"spec": {"replicas": 1, "revisionHistoryLimit": 10, "template": {"spec": {"containers": [
        {"name": "c", "imagePullPolicy": "IfNotPresent", "resources": {"limits": {"cpu": "500m"}}}]}}}}
    assert is_subset(desired, live)
    live["spec"]["replicas"] = 4
    assert not is_subset(desired, live)


def test_render_cli_output_parses(tmp_path) -> None:
    from gateway_operator import offline
    objects = offline.render_objects(gateway_deployment("gw", replicas=2, replicaPolicy="Warn"), "prod")
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
    assert yaml.safe_load(objects[0]["data"]["gateway.yaml"])["gateway"]["port"] == 8765


# -- the Redis probe against real servers ----------------------------------------------

def test_probe_outcomes(redis_server) -> None:
    import socket
    import threading
    import time as clock

    import asyncio

    from gateway_operator.api.redis_target import RedisTarget
    from gateway_operator.clients.redis_probe import Prober

    def probe(target: RedisTarget, password: str | None, timeout: float = 2) -> ProbeResult:
        return asyncio.run(Prober().probe("t", target, password, timeout))

    def target(port: int) -> RedisTarget:
        return RedisTarget("127.0.0.1", port, 0, False, "gwop:t:g:", None)

    ok = probe(target(redis_server.port), redis_server.password)
    # the probe leaves only its canary (no TTL) under the prefix
    assert ok.ok and redis_server.client().keys("gwop:*") == ["gwop:t:g:operator-canary"]
    assert ok.store is not None and ok.store.canary_created and ok.store.run_id
    wrong = probe(target(redis_server.port), "wrong")
    assert (wrong.ok, wrong.reason) == (False, "AuthenticationFailed") and "wrong" not in wrong.message
    assert probe(target(redis_server.port), None).reason == "AuthenticationFailed"

    not_redis = socket.socket()
    not_redis.bind(("127.0.0.1", 0))
    not_redis.listen()

    def answer_http() -> None:
        conn, _ = not_redis.accept()
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()
    threading.Thread(target=answer_http, daemon=True).start()
    assert probe(target(not_redis.getsockname()[1]), "x").reason == "ProbeFailed"
    not_redis.close()

    redis_server.stop()
    started = clock.monotonic()
    down = probe(target(redis_server.port), redis_server.password, timeout=1)
    assert down.reason == "ConnectionFailed" and clock.monotonic() - started < 1.5  # one attempt, no retries


def test_pod_placement_knobs_reach_the_pod() -> None:
    s = spec(priorityClassName="gateways", topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}])
    pod = deployment(OWNER, s, None, 1, "h")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "gateways"
    assert pod["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": api.selector_for("gw")}


def test_no_polled_replica_proves_nothing() -> None:
    c = by_type(facts(health=()))
    assert (c["ExactlyOnceAdmission"].status, c["ExactlyOnceAdmission"].reason) == ("Unknown", "ReplicasUnverified")


@pytest.mark.parametrize("persistent", [True, False])
def test_managed_redis_command_keeps_dedup_records_across_a_kill_only_with_persistence(tmp_path, persistent) -> None:
    """The managed Redis's own command line, run by a real redis-server with /data in a temp
    directory: with persistence a SIGKILLed Redis comes back with its 24-hour records."""
    import os
    import shutil
    import signal
    import subprocess
    import time as clock

    import redis as redis_py

    from harness.processes import free_port
    from harness.wait import until

    managed = {"enabled": True, **({"persistence": {"enabled": True}} if persistent else {})}
    s = spec(config=redis_store(), redis={"managed": managed})
    deployment = next(o for o in managed_redis(OWNER, s, OperatorIdentity()) if o["kind"] == "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == api.DEFAULT_MANAGED_REDIS_IMAGE
    assert (deployment["spec"]["template"]["spec"]["volumes"][0].get("persistentVolumeClaim") is not None) == persistent
    port = free_port()
    script = command[2].replace("--port 6379", f"--port {port} --bind 127.0.0.1").replace("/data", str(tmp_path))
    env = {**os.environ, "REDIS_PASSWORD": "pw"}

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([command[0], command[1], script], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis_py.Redis(port=port, password="pw", socket_timeout=1)
        until(lambda: client.ping(), timeout=10, tolerate=(redis_py.RedisError,), what="redis-server")
        return proc

    assert shutil.which("redis-server")
    proc = start()
    client = redis_py.Redis(port=port, password="pw", socket_timeout=1)
    client.set("gwop:prod:gw:hookidem:abc", "recorded", px=86_400_000)
    clock.sleep(1.5)  # appendfsync everysec
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc = start()
    try:
        kept = client.get("gwop:prod:gw:hookidem:abc")
        assert (kept == b"recorded") == persistent, kept
        if persistent:
            assert client.pttl("gwop:prod:gw:hookidem:abc") > 86_000_000
    finally:
        proc.terminate()
        proc.wait()


def test_a_managed_redis_runs_the_operators_default_image_unless_its_spec_names_one() -> None:
    """The chart's managedRedis.image (--managed-redis-image) is the default; spec.redis.managed.image wins."""
    local = OperatorIdentity(managed_redis_image="localhost/gateway-operator/redis:7")

    def image(managed: dict) -> str:
        s = spec(config=redis_store(), redis={"managed": {"enabled": True, **managed}})
        deployment = next(o for o in managed_redis(OWNER, s, local) if o["kind"] == "Deployment")
        return deployment["spec"]["template"]["spec"]["containers"][0]["image"]

    assert image({}) == "localhost/gateway-operator/redis:7"
    assert image({"image": "mirror.internal/redis:7.2"}) == "mirror.internal/redis:7.2"


@pytest.mark.parametrize("reason, message, shown", [
    # what a real kubelet reports (tests/node/test_node.py sees them on the node): image problems keep
    # the kubelet's words; a crash loop's back-off countdown is left out (it changes every retry)
    ("ErrImageNeverPull", 'Container image "localhost/x:0" is not present with pull policy of Never',
     'pod p is waiting: ErrImageNeverPull (Container image "localhost/x:0" is not present with pull policy of Never)'),
    ("ImagePullBackOff", "Back-off pulling image " + "x" * 400, None),
    ("CrashLoopBackOff", "back-off 40s restarting failed container=gateway", "pod p is waiting: CrashLoopBackOff"),
])
def test_a_waiting_pod_is_a_stalled_reason_with_the_kubelets_words(reason: str, message: str, shown: str | None) -> None:
    from gateway_operator.core.problems import pod_problem
    from gateway_operator.loop.handlers import WAITING_MESSAGE_LIMIT, pod_view
    status = {"podIP": "198.18.0.9", "containerStatuses": [{"state": {"waiting": {"reason": reason, "message": message}}}]}
    problem = pod_problem([pod_view("p", "u", {}, status)])
    assert problem is not None and problem.reason == (reasons.CRASH_LOOP if reason == "CrashLoopBackOff" else reason)
    if shown is not None:
        assert problem.message == shown
    else:
        assert problem.message.startswith(f"pod p is waiting: {reason} (Back-off pulling image xxx")
        assert len(problem.message) < WAITING_MESSAGE_LIMIT + 50


REFUSAL = ("gateway-launcher: unsupported gateway: this gateway (praisonai-bot 0.1.17, praisonaiagents 1.7.17) "
           "lacks what the launcher relies on: RedisIdempotencyStore._RECORD_LUA/_RELEASE_LUA/_RECORDED (written for "
           "praisonai-bot 0.1.16, praisonaiagents 1.7.17); refusing to start rather than run without exactly-once")


@pytest.mark.parametrize("code, message, reason", [
    (78, REFUSAL, reasons.GATEWAY_INCOMPATIBLE),
    (78, "gateway-launcher: fatal config error: agents: unknown model", reasons.GATEWAY_CONFIG_REJECTED),
    (78, None, reasons.GATEWAY_CONFIG_REJECTED),
    (1, REFUSAL, None),  # not the launcher's refusal: a crash, which a crash loop reports
])
def test_a_replica_that_refused_the_gateway_release_says_what_it_lacks(code: int, message: str | None,
                                                                       reason: str | None) -> None:
    """The launcher's exit-78 line, as the kubelet keeps it in the pod's lastState, names the
    missing names and the versions in Stalled: GatewayIncompatible, not a config error."""
    from gateway_operator.core.problems import pod_problem
    from gateway_operator.loop.handlers import pod_view
    terminated = {"exitCode": code, **({"message": message + "\n"} if message else {})}
    status = {"podIP": "198.18.0.9", "containerStatuses": [{"state": {"running": {}},
                                                            "lastState": {"terminated": terminated}}]}
    problem = pod_problem([pod_view("p", "u", {}, status)])
    assert (problem.reason if problem else None) == reason
    if reason == reasons.GATEWAY_INCOMPATIBLE:
        assert "praisonai-bot 0.1.17" in problem.message and "_RECORD_LUA" in problem.message
        assert problem.message.startswith("pod p refused to start (exit 78): this gateway")


# -- spec.expose -----------------------------------------------------------------------------

EDGE = {"ingress": {"className": "traefik", "host": "gw.example.test", "tlsSecretName": "gw-tls",
                    "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "90"}},
        "httpRoute": {"parentRefs": [{"name": "edge", "namespace": "edge-system"}], "hostnames": ["gw.example.test"]}}


def exposed(replicas: int) -> list[dict]:
    s = spec(replicas=replicas, config=redis_store(), redis={"url": "redis://r:6379/0"}, expose=EDGE)
    objects = desired_objects(OWNER, s, resolve(s.redis, OWNER.namespace, OWNER.name), replicas, pod_code=POD_CODE)
    return objects


def test_expose_renders_an_ingress_and_an_httproute_that_reach_every_replica() -> None:
    objects = exposed(3)
    kinds = [o["kind"] for o in objects]
    assert kinds[-2:] == ["Ingress", "HTTPRoute"], kinds  # after what the replicas need
    ingress, route = objects[-2:]
    assert ingress["metadata"]["ownerReferences"] == [OWNER.reference()]
    assert ingress["spec"]["ingressClassName"] == "traefik"
    assert ingress["spec"]["tls"] == [{"hosts": ["gw.example.test"], "secretName": "gw-tls"}]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "gw", "port": {"number": api.GATEWAY_PORT}}
    notes = ingress["metadata"]["annotations"]
    # the user's annotation wins; the rest are the operator's WebSocket timeouts and cookie affinity
    assert notes["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "90"
    assert notes["nginx.ingress.kubernetes.io/proxy-send-timeout"] == "3600"
    assert notes["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert notes["nginx.ingress.kubernetes.io/session-cookie-name"] == api.DEFAULT_AFFINITY_COOKIE
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["metadata"]["annotations"]["traefik.ingress.kubernetes.io/service.sticky.cookie.name"] == \
        api.DEFAULT_AFFINITY_COOKIE
    # the route: webhooks in a rule of their own, both with the edge timeout, parents spelled out
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "edge", "namespace": "edge-system"}]
    assert route["spec"]["hostnames"] == ["gw.example.test"]
    prefixes = [r["matches"][0]["path"]["value"] for r in route["spec"]["rules"]]
    assert prefixes == ["/hooks/", "/"]
    assert all(r["timeouts"] == {"request": "3600s"} and r["backendRefs"] == [{"name": "gw", "port": api.GATEWAY_PORT}]
               for r in route["spec"]["rules"])
    # browsers on the exposed host may open the WebSocket
    config = yaml.safe_load(objects[0]["data"]["gateway.yaml"])
    assert {"https://gw.example.test", "http://gw.example.test"} <= set(config["gateway"]["allowed_origins"])


def test_one_replica_needs_no_edge_affinity_and_no_expose_renders_no_route() -> None:
    objects = exposed(1)
    ingress = next(o for o in objects if o["kind"] == "Ingress")
    assert "nginx.ingress.kubernetes.io/affinity" not in ingress["metadata"]["annotations"]
    assert "annotations" not in next(o for o in objects if o["kind"] == "Service")["metadata"]
    plain = desired_objects(OWNER, spec(), None, 1, pod_code=POD_CODE)
    assert not {"Ingress", "HTTPRoute"} & {o["kind"] for o in plain}


def test_exposure_reads_the_address_the_edge_published() -> None:
    from gateway_operator.core.expose import exposure
    e = spec(expose=EDGE).expose
    assert exposure(e, None, None, {}).address == ""
    assert "no address yet" in exposure(e, {"status": {}}, None, {}).message
    ingress = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}}
    assert exposure(e, ingress, None, {})[:2] == ("192.0.2.7", "https://gw.example.test/")
    # a route counts only once a parent accepted it, and then gives that Gateway's address
    route = {"metadata": {"namespace": "prod"}, "status": {"parents": [{
        "parentRef": {"name": "edge", "namespace": "edge-system"},
        "conditions": [{"type": "Accepted", "status": "False"}]}]}}
    gateways = {("edge-system", "edge"): {"status": {"addresses": [{"type": "IPAddress", "value": "192.0.2.9"}]}}}
    only_route = spec(expose={"httpRoute": EDGE["httpRoute"]}).expose
    assert "accepted" in exposure(only_route, None, route, gateways).message
    route["status"]["parents"][0]["conditions"][0]["status"] = "True"
    assert exposure(only_route, None, route, gateways)[:2] == ("192.0.2.9", "http://gw.example.test/")


def test_status_expose_appears_and_goes_with_the_spec() -> None:
    from gateway_operator.core.expose import Exposure
    facts = Facts(generation=1, desired_replicas=1, store_backend="sqlite", policy="Refuse", persistence=False,
                  redis_configured=False)
    with_address = status.build(None, facts, None, "t0", exposure=Exposure("192.0.2.7", "http://gw/"))
    assert with_address["expose"] == {"address": "192.0.2.7", "url": "http://gw/"}
    without = status.build(with_address, facts, None, "t1")
    assert "expose" not in without and status.changed(with_address, without)
    assert status.merge_patch(with_address, without)["expose"] is None
    # a merge patch keeps what it does not null: the waiting message goes once the address comes
    waiting = status.build(None, facts, None, "t0", exposure=Exposure(message="no address yet"))
    assert status.merge_patch(waiting, with_address)["expose"] == {"message": None, "address": "192.0.2.7",
                                                                  "url": "http://gw/"}


def test_the_gateway_network_policy_admits_the_namespace_the_operator_and_the_listed_namespaces() -> None:
    operator = OperatorIdentity("ops", "gwop")
    assert gateway_network_policy(OWNER, spec(), operator) is None  # off by default
    on = spec(networkPolicy={"enabled": True, "fromNamespaces": ["edge"]})
    policy = gateway_network_policy(OWNER, on, operator)
    assert policy["metadata"]["name"] == "gw-gateway"
    assert policy["spec"]["podSelector"] == {"matchLabels": api.selector_for("gw")}
    rule = policy["spec"]["ingress"][0]
    assert rule["ports"] == [{"port": api.GATEWAY_PORT, "protocol": "TCP"}]
    peers = rule["from"]
    assert {"podSelector": {}} in peers  # this namespace only (no namespaceSelector)
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
            "podSelector": {"matchLabels": {api.LABEL_NAME: "gateway-operator", api.LABEL_INSTANCE: "gwop"}}} in peers
    assert {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                        "values": ["edge"]}]}} in peers
    assert len(peers) == 3
    kinds = [o["kind"] for o in desired_objects(OWNER, on, None, 1, operator=operator, pod_code=POD_CODE)]
    assert kinds.count("NetworkPolicy") == 1


@pytest.mark.parametrize("drain", [None, 300])
def test_drain_seconds_sets_the_grace_period_the_prestop_pause_and_the_gateways_drain(drain) -> None:
    s = spec(replicas=3, config=redis_store(), **({"drainSeconds": drain} if drain else {}))
    expected = drain or api.DEFAULT_DRAIN_SECONDS
    pod = deployment(OWNER, s, None, 3, "hash")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == expected + 25  # preStop 5 + exit margin 20
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert gateway_config(OWNER, s, None)["gateway"]["drain_timeout"] == expected


def test_the_switch_from_one_sqlite_replica_holds_one_replica_on_its_pvc_until_the_records_are_in_redis() -> None:
    from gateway_operator.core.replicas import Migration, migration_state, replicas_to_run
    s = spec(replicas=3, config=redis_store(), persistence={"enabled": True})
    tokens = iter(["t1", "t2"])

    def state(previous: dict, claim: bool, marker: str | None) -> Migration | None:
        return migration_state(s, previous, lambda: claim, marker, lambda: next(tokens))
    pending = state({}, True, None)
    assert pending == Migration("t1", False) and replicas_to_run(s, True, 1, pending) == 1
    objects = desired_objects(OWNER, s, None, 1, migration=pending.token, pod_code=POD_CODE)
    deployment = next(o for o in objects if o["kind"] == "Deployment")["spec"]
    pod = deployment["template"]["spec"]
    assert deployment["strategy"] == {"type": "Recreate"}  # the old pod lets go of the PVC first
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "gw-gateway-state"}} in pod["volumes"]
    assert {"name": "GWOP_SQLITE_MIGRATION", "value": "t1"} in pod["containers"][0]["env"]
    # the token is kept by status until the launcher writes it; an old marker does not count
    assert state(pending.status(), True, "t0") == Migration("t1", False)
    done = state(pending.status(), True, "t1")
    assert done == Migration("t1", True) and replicas_to_run(s, True, 1, done) == 3
    assert state(done.status(), False, None) == done  # done stays done
    after = next(o for o in desired_objects(OWNER, s, None, 3, pod_code=POD_CODE)
                 if o["kind"] == "Deployment")["spec"]
    assert {"name": "state", "emptyDir": {}} in after["template"]["spec"]["volumes"]
    # nothing to carry over: no PVC (an emptyDir's records died with its pod), or not on Redis
    assert state({}, False, None) is None
    sqlite = spec(replicas=1, persistence={"enabled": True})
    assert migration_state(sqlite, done.status(), lambda: True, None, lambda: "x") is None


@pytest.mark.parametrize("sessions, redis, replicas, expected", [
    (None, {"managed": {"enabled": True}}, 3, ("redis", "True", "SharedSessionHistory")),
    ({"store": "replica"}, {"managed": {"enabled": True}}, 3, ("replica", "False", "PerReplicaHistory")),
    (None, None, 1, ("replica", "True", "SingleReplicaHistory")),
    ({"store": "redis"}, {"managed": {"enabled": True}}, 1, ("redis", "True", "SharedSessionHistory")),
])
def test_session_history_is_shared_whenever_redis_is_wired(sessions, redis, replicas, expected) -> None:
    extra = {**({"sessions": sessions} if sessions else {}), **({"redis": redis} if redis else {})}
    s = spec(replicas=replicas, config=redis_store() if redis else None, **extra) if redis else spec(replicas=replicas)
    store, status, reason = expected
    assert s.sessions_store == store
    rendered = gateway_config(OWNER, s, resolve(s.redis, OWNER.namespace, OWNER.name) if redis else None)
    # with or without Redis: the launcher keeps each session's history apart (never 0.1.16's one per hook)
    assert rendered["session_history"] == {"store": store, "max_messages": 50, "ttl_seconds": 604800,
                                           "max_sessions": 10_000}
    probe = ProbeResult(True, "ProbeSucceeded", "ok")
    c = {x.type: x for x in conditions.compute(Facts(
        generation=1, desired_replicas=replicas, store_backend=s.store_backend, policy="Refuse", persistence=False,
        redis_configured=bool(redis), probe=probe if redis else None, sessions_store=store))}["SessionsShared"]
    assert (c.status, c.reason) == (status, reason), c


def test_the_session_history_key_reaches_the_pods_only_from_a_secret() -> None:
    shared = spec(replicas=3, config=redis_store(), redis={"managed": {"enabled": True}})
    target = resolve(shared.redis, OWNER.namespace, OWNER.name)
    env = {e["name"]: e for e in deployment(OWNER, shared, target, 3, "h")["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert env["GATEWAY_SESSION_KEY"] == {"name": "GATEWAY_SESSION_KEY", "valueFrom": {"secretKeyRef": {
        "name": "gw-session-key", "key": "key"}}}
    own = spec(replicas=3, config=redis_store(), redis={"managed": {"enabled": True}},
               sessions={"encryptionKeySecretRef": {"name": "mine"}})
    env = {e["name"]: e for e in deployment(OWNER, own, target, 3, "h")["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert env["GATEWAY_SESSION_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "key"}
    local = spec(replicas=3, config=redis_store(), redis={"managed": {"enabled": True}}, sessions={"store": "replica"})
    assert "GATEWAY_SESSION_KEY" not in {e["name"] for e in deployment(OWNER, local, target, 3, "h")[
        "spec"]["template"]["spec"]["containers"][0]["env"]}


def test_your_own_redis_reaches_the_pods_as_a_mounted_ca_and_secret_backed_user() -> None:
    """spec.redis with an ACL user, a private CA and a server name: the ConfigMap names only the
    CA's path and the env vars; the pod mounts the CA bundle alone, read-only."""
    own = spec(replicas=3, config=redis_store(), redis={
        "host": "10.0.0.5", "port": 6380, "passwordSecretRef": {"name": "redis-login"},
        "usernameSecretRef": {"name": "redis-login"},
        "tls": {"enabled": True, "caSecretRef": {"name": "redis-ca", "key": "bundle.pem"},
                "serverName": "redis.prod.internal"}})
    target = resolve(own.redis, OWNER.namespace, OWNER.name)
    assert target is not None and target.server_name == "redis.prod.internal"
    assert gateway_config(OWNER, own, target)["push"]["redis"] == {
        "url": f"rediss://10.0.0.5:6380/0?socket_timeout=0.3&socket_connect_timeout=1&ssl_ca_certs={api.REDIS_CA_DIR}"
               "/ca.crt",
        "prefix": "gwop:prod:gw:", "password": "${GATEWAY_REDIS_PASSWORD}", "username": "${GATEWAY_REDIS_USERNAME}",
        "tls_server_name": "redis.prod.internal"}
    pod = deployment(OWNER, own, target, 3, "h")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GATEWAY_REDIS_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "redis-login", "key": "username"}
    assert {"name": "redis-ca", "mountPath": api.REDIS_CA_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": "redis-ca", "secret": {"secretName": "redis-ca", "defaultMode": 0o444, "items": [
        {"key": "bundle.pem", "path": "ca.crt"}]}} in pod["volumes"]
    # insecureSkipVerify: nothing checked, and no CA mounted
    skip = spec(replicas=3, config=redis_store(), redis={"url": "rediss://r:6380/0",
                                                         "tls": {"insecureSkipVerify": True}})
    skip_target = resolve(skip.redis, OWNER.namespace, OWNER.name)
    assert gateway_config(OWNER, skip, skip_target)["push"]["redis"]["url"].endswith("&ssl_cert_reqs=none")
    assert "redis-ca" not in {v["name"] for v in deployment(OWNER, skip, skip_target, 3, "h")["spec"][
        "template"]["spec"]["volumes"]}


def test_a_spec_without_the_new_fields_renders_the_pod_template_it_did_before() -> None:
    """An operator upgrade must not roll a gateway whose spec names none of the TLS options."""
    for url in ("redis://r:6379/0", "rediss://r:6380/0"):
        plain = spec(replicas=3, config=redis_store(), redis={"url": url, "passwordSecretRef": {"name": "p"}})
        target = resolve(plain.redis, OWNER.namespace, OWNER.name)
        pod = deployment(OWNER, plain, target, 3, "h")["spec"]["template"]["spec"]
        assert [v["name"] for v in pod["volumes"]] == ["config", "work", "state", "tmp"]
        assert "GATEWAY_REDIS_USERNAME" not in {e["name"] for e in pod["containers"][0]["env"]}
        assert gateway_config(OWNER, plain, target)["push"]["redis"] == {
            "url": f"{url}?socket_timeout=0.3&socket_connect_timeout=1", "prefix": "gwop:prod:gw:",
            "password": "${GATEWAY_REDIS_PASSWORD}"}


@pytest.mark.parametrize("replicas, env, channels, expected", [
    (3, ["TELEGRAM_BOT_TOKEN"], None, ("False", "ChannelOnEveryReplica", ["telegram"])),
    (3, [], None, ("True", "NoChannelOnEveryReplica", [])),  # the examples' unset placeholder: skipped
    (1, ["TELEGRAM_BOT_TOKEN"], None, ("True", "NoChannelOnEveryReplica", [])),
    (2, ["DISCORD_BOT_TOKEN"], None, ("False", "ChannelOnEveryReplica", ["discord"])),  # auto-enabled from env
    (2, [], {"ops": {"platform": "discord", "token": "literal-token"},
             "wa": {"platform": "whatsapp", "mode": "cloud", "token": "t"}},
     ("False", "ChannelOnEveryReplica", ["ops"])),
    (2, [], {"ops": {"platform": "discord", "token": "literal-token", "enabled": False}},
     ("True", "NoChannelOnEveryReplica", [])),
])
def test_a_channel_bot_every_replica_would_run_is_said_in_status_with_a_warning(replicas, env, channels,
                                                                               expected) -> None:
    from gateway_operator.core import events, facts
    from gateway_operator.core.outcome import Outcome
    config = redis_store()
    if channels is not None:
        config["channels"] = channels
    raw = gateway_deployment("gw", replicas=replicas, config=config, redis={"managed": {"enabled": True}},
                             env=[{"name": n, "valueFrom": {"secretKeyRef": {"name": "bot", "key": n}}} for n in env])
    s = GatewaySpec.parse(raw["spec"])
    body = {"metadata": {"name": "gw", "namespace": "ns", "generation": 1}, "spec": raw["spec"], "status": {}}
    c = {x.type: x for x in conditions.compute(facts.gather(body, s, Outcome(), (), 0.0))}["ReplicaSafeChannels"]
    status, reason, named = expected
    assert (c.status, c.reason) == (status, reason), c
    assert [n for n in named if f"({n} " in c.message or f"; {n} " in c.message] == named, c.message
    event = events.event_for(conditions.Transition(
        "ReplicaSafeChannels", None, {"status": c.status, "reason": c.reason, "message": c.message}))
    if status == "False":
        assert event == ("Warning", "ChannelOnEveryReplica", c.message)
    else:
        assert event is None
