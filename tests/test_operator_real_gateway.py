"""The operator against the REAL gateway: exactly-once admission across two replicas.

Everything here is real except the two stand-ins named below:

* the real operator (``gateway-operator run``, the session's ``operator`` fixture, under its
  own ServiceAccount) reconciles a GatewayDeployment with ``replicas: 2`` on Redis;
* the real gateway, praisonai-bot 0.1.16, runs for each pod: the kubelet STAND-IN
  (hack/kubelet_standin.py) reports the pods Running/Ready at their pod IPs but runs
  nothing, so ``support.pod_runner.run_pod_locally`` starts each pod's ``gateway``
  container - its own command, the operator's ConfigMap (``gateway.yaml`` + ``launch.py``),
  its env from the operator's Secrets - as a local process listening at the pod IP, where
  the operator polls ``GET /health``;
* a real ``redis-server`` with a password (the ``redis_server`` fixture), stopped and
  started again to cause and end an outage;
* the LLM is the LLM STAND-IN ``support.llm_standin.StandInLLM``, an offline
  OpenAI-compatible server the gateways reach through ``OPENAI_BASE_URL``.

Webhooks go to ``POST http://<podIP>:8765/hooks/deploy`` with
``Authorization: Bearer <token>``: in 0.1.16 a hook without its own ``auth`` falls back to
the gateway's auth token (``GATEWAY_AUTH_TOKEN``, from the Secret ``<name>-gateway-auth``
the operator generates). The gateway builds its idempotency store lazily, on the first
webhook, so each replica gets a warm-up webhook before its /health means anything.
"""
from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

pytest.importorskip("praisonai_bot", reason="the real gateway (praisonai-bot) is not installed in this interpreter")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed", allow_module_level=True)

from support.cluster import Cluster  # noqa: E402
from support.llm_standin import StandInLLM  # noqa: E402
from support.operator import gateway_deployment, redis_store  # noqa: E402
from support.pod_runner import LocalPodProcess, run_pod_locally  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402
from support.wait import until  # noqa: E402

pytestmark = [pytest.mark.gateway, pytest.mark.cluster]

NAME = "gw"
HOOK = "deploy"
INTERVAL = 1  # spec.health.intervalSeconds (support.operator.gateway_deployment)
# How long a status change may take to show: one health interval plus the poll timeout
# (1 s each), with room for kubectl's own polling on a loaded 2-core machine.
CONVERGE = 10.0
RUNTIME_OUTAGE = "redis idempotency backend unreachable at runtime"


# -- helpers -----------------------------------------------------------------------------

@dataclass
class Replica:
    process: LocalPodProcess
    token: str

    @property
    def pod(self) -> str:
        return self.process.pod

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                token: str | None = "default") -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.process.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {self.token if token == 'default' else token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def webhook(self, delivery_id: str, text: str = "deployed", **kw: Any) -> tuple[int, dict[str, Any]]:
        return self.request("POST", f"/hooks/{HOOK}", {"id": delivery_id, "text": text}, **kw)

    def idempotency_owners(self) -> list[dict[str, Any]]:
        status, body = self.request("GET", "/health", token=None)  # unauthenticated, as the operator polls
        assert status == 200, body
        return [o for o in body.get("degraded_owners") or [] if o.get("owner_id") == "durability:idempotency"]


@dataclass
class Gateway:
    cluster: Cluster
    namespace: str
    name: str
    replicas: list[Replica] = field(default_factory=list)

    def conditions(self) -> dict[str, dict[str, Any]]:
        body = self.cluster.get_json("gatewaydeployment", self.name, "-n", self.namespace)
        return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}

    def events(self) -> list[dict[str, Any]]:
        items = self.cluster.get_json("events", "-n", self.namespace,
                                      "--field-selector", f"involvedObject.name={self.name}")["items"]
        return [e for e in items if e["involvedObject"].get("kind") == "GatewayDeployment"]


class LocalPods:
    """Every pod process a test started; all stopped at teardown."""

    def __init__(self, cluster: Cluster, llm: StandInLLM) -> None:
        self.cluster, self.llm = cluster, llm
        self.started: list[LocalPodProcess] = []

    def run(self, pod: dict[str, Any]) -> LocalPodProcess:
        process = run_pod_locally(self.cluster, pod, container="gateway", extra_env={
            **self.llm.env(), "PRAISONAI_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "true"})
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


def ready_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = cluster.get_json("pods", "-n", namespace, "-l",
                            f"app.kubernetes.io/instance={name},app.kubernetes.io/component=gateway")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]


def secret_value(cluster: Cluster, namespace: str, name: str, key: str) -> str:
    import base64
    return base64.b64decode(cluster.get_json("secret", name, "-n", namespace)["data"][key]).decode()


def wait_conditions(gw: Gateway, expected: dict[str, tuple[str, str | None]], timeout: float, operator: Any,
                    messages: dict[str, str] | None = None) -> tuple[dict[str, dict[str, Any]], float]:
    """Wait until every condition type has (status, reason) and its message holds
    ``messages[type]``; returns the conditions and the seconds it took."""
    started = time.monotonic()
    seen: dict[str, dict[str, Any]] = {}

    def matches() -> bool:
        nonlocal seen
        seen = gw.conditions()
        return all(t in seen and seen[t]["status"] == status and (reason is None or seen[t]["reason"] == reason)
                   and (messages or {}).get(t, "") in seen[t]["message"] for t, (status, reason) in expected.items())

    try:
        until(matches, timeout=timeout, interval=0.25, what=f"conditions {expected}")
    except AssertionError:
        current = {t: (c["status"], c["reason"], c["message"]) for t, c in seen.items()}
        logs = "\n".join(f"--- {r.pod}:\n{r.process.logs()[-2000:]}" for r in gw.replicas)
        raise AssertionError(f"after {timeout}s the conditions are {json.dumps(current, indent=1)}\n"
                             f"operator log:\n{operator.log_tail(30)}\n{logs}") from None
    return seen, time.monotonic() - started


def deploy_two_replicas(cluster: Cluster, namespace: str, redis: RedisServer, pods: LocalPods) -> Gateway:
    """GatewayDeployment (replicas 2, Redis store) -> 2 ready pods -> a real gateway for each."""
    assert redis.password
    cluster.kubectl("create", "secret", "generic", "redis-auth", "-n", namespace,
                    f"--from-literal=password={redis.password}")
    body = gateway_deployment(NAME, replicas=2, config=redis_store(),
                              redis={"url": redis.url, "passwordSecretRef": {"name": "redis-auth", "key": "password"}})
    cluster.apply(json.dumps(body), "-n", namespace)
    running = until(lambda: len(ready_pods(cluster, namespace, NAME)) == 2 and ready_pods(cluster, namespace, NAME),
                    timeout=60, what="2 ready gateway pods")
    token = secret_value(cluster, namespace, f"{NAME}-gateway-auth", "token")
    gw = Gateway(cluster, namespace, NAME)
    for pod in sorted(running, key=lambda p: p["metadata"]["name"]):
        gw.replicas.append(Replica(pods.run(pod), token))
    assert len({r.process.ip for r in gw.replicas}) == 2
    return gw


def idempotency_key(delivery_id: str) -> str:
    """The key the gateway derives for a delivery to our hook (its own function; it hashes)."""
    from praisonaiagents.gateway import HookConfig

    hook = next(h for h in redis_store()["hooks"]["hooks"] if h["path"] == HOOK)
    return HookConfig.from_dict(hook).resolve_idempotency_key({"id": delivery_id})


def warm_up(gw: Gateway, tag: str) -> None:
    """The first webhook builds a replica's idempotency store (0.1.16 builds it lazily)."""
    for i, replica in enumerate(gw.replicas):
        status, body = replica.webhook(f"{tag}-{i}", "hello")
        assert (status, body.get("ok"), body.get("action")) == (200, True, "agent"), (replica.pod, status, body)


# -- fixtures ----------------------------------------------------------------------------

@pytest.fixture
def local_pods(cluster: Cluster, llm: StandInLLM) -> Iterator[LocalPods]:
    pods = LocalPods(cluster, llm)
    try:
        yield pods
    finally:
        pods.stop_all()


# -- tests -------------------------------------------------------------------------------

def test_two_replicas_admit_a_webhook_once_through_shared_redis(
        cluster: Cluster, namespace: str, redis_server: RedisServer, operator: Any, local_pods: LocalPods,
        llm: StandInLLM) -> None:
    gw = deploy_two_replicas(cluster, namespace, redis_server, local_pods)
    a, b = gw.replicas

    # the hook has no auth of its own: the gateway's token guards it
    assert a.webhook("no-token", token=None)[0] == 401
    assert a.webhook("wrong-token", token="not-the-token")[0] == 403

    turns = llm.completions
    warm_up(gw, "warmup")
    for replica in gw.replicas:
        assert replica.idempotency_owners() == [], replica.pod

    wait_conditions(gw, {"ExactlyOnceAdmission": ("True", "SharedRedisStore"),
                         "IdempotencyDegraded": ("False", "NoDegradedReplicas"),
                         "RedisReachable": ("True", "ProbeSucceeded"),
                         "Ready": ("True", "Available")}, 60, operator,
                    messages={"ExactlyOnceAdmission": "every polled replica (2)"})

    # one delivery, fanned to both replicas: A runs it, B answers from the shared store
    status, first = a.webhook("delivery-1", "same delivery")
    assert status == 200 and first.get("ok") is True and not first.get("deduplicated"), first
    status, second = b.webhook("delivery-1", "same delivery")
    assert (status, second) == (200, {"ok": True, "deduplicated": True})
    assert llm.completions - turns == 3  # two warm-ups and A's turn; B never ran the duplicate

    prefix = f"gwop:{namespace}:{NAME}:hookidem:"  # the operator's default prefix
    keys = set(redis_server.client().keys(f"{prefix}*"))
    expected = {prefix + idempotency_key(i) for i in ("warmup-0", "warmup-1", "delivery-1")}
    assert keys == expected, keys
    assert {redis_server.client().get(k) for k in keys} == {"recorded"}

    for replica in gw.replicas:  # SIGTERM is a clean stop; no secret reached the log
        logs = replica.process.logs()
        assert replica.process.stop() == 0, logs
        assert redis_server.password not in logs and replica.token not in logs


def test_redis_outage_degrades_and_recovers_exactly_once_admission(
        cluster: Cluster, namespace: str, redis_server: RedisServer, operator: Any, local_pods: LocalPods) -> None:
    gw = deploy_two_replicas(cluster, namespace, redis_server, local_pods)
    warm_up(gw, "warmup")
    wait_conditions(gw, {"ExactlyOnceAdmission": ("True", "SharedRedisStore"),
                         "IdempotencyDegraded": ("False", "NoDegradedReplicas")}, 60, operator,
                    messages={"ExactlyOnceAdmission": "every polled replica (2)"})

    redis_server.stop()
    for i, replica in enumerate(gw.replicas):  # each replica notices on its next webhook
        status, body = replica.webhook(f"during-outage-{i}")
        assert status == 200 and body.get("ok") is True, (replica.pod, body)  # admitted best-effort
        owners = replica.idempotency_owners()
        assert len(owners) == 1 and RUNTIME_OUTAGE in owners[0]["reason"], (replica.pod, owners)

    conds, took = wait_conditions(gw, {"IdempotencyDegraded": ("True", "RuntimeOutage"),
                                       "ExactlyOnceAdmission": ("False", None),
                                       "RedisReachable": ("False", "ConnectionFailed")}, CONVERGE, operator,
                                  messages={"IdempotencyDegraded": "2 of 2 replicas"})
    print(f"outage reported {took:.1f}s after the webhooks (health interval {INTERVAL}s)")
    for replica in gw.replicas:
        assert replica.pod in conds["IdempotencyDegraded"]["message"]
    assert redis_server.password not in json.dumps(conds)

    redis_server.start()  # same port, empty data set
    for i, replica in enumerate(gw.replicas):  # the next Redis operation clears the degradation
        status, body = replica.webhook(f"after-outage-{i}")
        assert (status, body.get("ok"), body.get("action")) == (200, True, "agent"), (replica.pod, body)
        assert replica.idempotency_owners() == [], replica.pod

    conds, took = wait_conditions(gw, {"IdempotencyDegraded": ("False", "NoDegradedReplicas"),
                                       "ExactlyOnceAdmission": ("True", "SharedRedisStore"),
                                       "RedisReachable": ("True", "ProbeSucceeded")}, CONVERGE, operator,
                                  messages={"ExactlyOnceAdmission": "every polled replica (2)"})
    print(f"recovery reported {took:.1f}s after the webhooks")

    def posted() -> set[tuple[str, str]] | bool:
        seen = {(e["type"], e["reason"]) for e in gw.events()}
        wanted = {("Warning", "IdempotencyDegraded"), ("Normal", "IdempotencyRecovered")}
        return seen if wanted <= seen else False

    seen = until(posted, timeout=30, what="IdempotencyDegraded and IdempotencyRecovered Events")
    assert ("Warning", "RedisUnreachable") in seen and ("Normal", "RedisReachable") in seen, seen
    degraded = next(e for e in gw.events() if e["reason"] == "IdempotencyDegraded")
    assert "durability:idempotency" in degraded["message"] and "lost Redis at runtime" in degraded["message"], degraded
