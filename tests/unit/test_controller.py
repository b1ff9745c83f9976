"""The loop around the pass (controller.py): a /health poll waits for no pass.

The API server is test_loop's IN-MEMORY STAND-IN, with a status write and an apply that the
test can hold (a full pass stuck behind a resync wave, or a slow API server); the replica is a
real HTTP server on a loopback address of its own, answering ``GET /health`` with the gateway's
documented body (HEALTH ENDPOINT STAND-IN). Seconds, not minutes: interval 1 s, timeout 1 s.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import threading
import time
from typing import Any, Awaitable, Callable, Mapping

import kopf
import urllib3
from kopf._core.engines import posting

from gateway_operator.api import reasons as R
from gateway_operator.api import GATEWAY_PORT, IDEMPOTENCY_OWNER, WATCH_PORT
from gateway_operator.clients.kube import ApplyResult
from gateway_operator.core import conditions as C
from gateway_operator.core.pods import PodView
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.loop.controller import GatewayController
from gateway_operator.api.objects import KEPT_METADATA

from harness.pod_code import importable
from harness.wait import until_async as until
from test_loop import PROBE_OK, REDIS_SPEC, ApiStandIn, gateway, secret

REPLICA_IP = "127.61.0.1"  # a loopback address no other unit test binds
RUNTIME = "redis idempotency backend unreachable at runtime (dedup best-effort until it recovers)"


class HeldApi(ApiStandIn):
    """The stand-in with status writes, and applies that wait while ``hold`` is clear."""

    def __init__(self, body: dict[str, Any], objects: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        super().__init__(objects)
        self.body, self.version = copy.deepcopy(body), 1
        self.statuses: list[dict[str, Any]] = []  # every status as written, in order
        self.running = threading.Event()
        self.running.set()
        self.applies_waiting = 0

    def apply(self, manifest: Mapping[str, Any], owner_uid: str) -> ApplyResult:
        if not self.running.is_set():
            self.applies_waiting += 1
            self.running.wait(30)
        return super().apply(manifest, owner_uid)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        merged = {**(self.body.get("status") or {}), **status}
        self.body["status"] = {k: v for k, v in merged.items() if v is not None}
        self.version += 1
        self.body["metadata"]["resourceVersion"] = str(self.version)
        self.statuses.append(copy.deepcopy(self.body["status"]))
        return copy.deepcopy(self.body)

    def condition(self, kind: str) -> Mapping[str, Any]:
        return next((c for c in (self.body.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


async def serve_health(owners: list[dict[str, Any]], polls: list[float]) -> asyncio.AbstractServer:
    """One replica's /health: the documented body with ``owners`` as they are at each request."""
    return await serve_health_at(REPLICA_IP, owners, polls)


async def serve_health_at(ip: str, owners: list[dict[str, Any]], polls: list[float]) -> asyncio.AbstractServer:
    """serve_health at ``ip``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        polls.append(time.monotonic())
        body = json.dumps({"status": "healthy" if not owners else "degraded", "degraded_owners": owners}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, ip, GATEWAY_PORT)


async def stop(task: asyncio.Task[None], servers: list[asyncio.AbstractServer]) -> None:
    """The controller's task cancelled, then the replicas' servers closed."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for server in servers:
        server.close()
        await server.wait_closed()


class HangingProber:
    """REDIS PROBE STAND-IN: answers at once, or, once told the Redis hangs, after ``hang`` seconds
    that it could not connect (a probe's timeouts run out)."""

    def __init__(self, hang: float) -> None:
        self.hang, self.hanging = hang, False

    async def probe(self, *_: Any, **__: Any) -> ProbeResult:
        if not self.hanging:
            return PROBE_OK
        await asyncio.sleep(self.hang)
        return ProbeResult(False, R.CONNECTION_FAILED, "redis.example:6379 did not answer within 1s")


def run_loop(test: Callable[[Any, GatewayController, list[dict[str, Any]], list[float]], Awaitable[None]],
             spec: Mapping[str, Any] | None = None, prober: Any = None,
             metadata: Mapping[str, Any] | None = None, api: type[HeldApi] = HeldApi) -> None:
    body = gateway(spec or {"replicas": 1, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}})
    body["metadata"].update(metadata or {})
    kube = api(body, [secret("redis-auth", password="pw")])
    pods = [PodView("bot-0", "pod-uid", REPLICA_IP, ready=True, deleting=False)]

    async def main() -> None:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())  # the Events the loop posts, as kopf's poster takes them
        posting.settings_var.set(kopf.OperatorSettings())
        owners: list[dict[str, Any]] = []
        polls: list[float] = []
        server = await serve_health(owners, polls)
        controller = GatewayController(kube, "ns", "bot", lambda: pods)  # type: ignore[arg-type]
        if prober is not None:
            controller.prober = prober
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status") == "False", 10,
                        "the first pass and poll published")
            await test(kube, controller, owners, polls)
        finally:
            kube.running.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_replica_that_degrades_shows_while_a_full_pass_is_held() -> None:
    """Before, the step waited for its pass and its poll together: a full pass held for 11 s in
    a resync wave (measured at 1,000 x 2) skipped the polls due meanwhile and held every fact they
    would have shown. Now the poll keeps its cadence and publishes with what the last pass saw."""

    async def test(kube: HeldApi, controller: GatewayController, owners: list[dict[str, Any]],
                   polls: list[float]) -> None:
        kube.running.clear()                       # the API server stops answering applies
        controller.nudge()                         # a full pass starts, and waits
        await until(lambda: kube.applies_waiting > 0, 5, "the full pass reached its apply")
        held_at, polls_before = time.monotonic(), len(polls)
        owners.append({"owner_kind": "gateway", "owner_id": IDEMPOTENCY_OWNER, "state": "cold",
                       "reason": RUNTIME, "retry_hint": "restore redis"})
        await until(lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status") == "True", 3,
                    "the degraded replica shown while the full pass is held")
        assert kube.condition(C.IDEMPOTENCY_DEGRADED)["reason"] == "RuntimeOutage"
        assert kube.body["status"]["observedGeneration"] == 1
        await asyncio.sleep(max(0.0, held_at + 3.2 - time.monotonic()))
        assert len(polls) - polls_before >= 3, "the poll kept its cadence (one a second) while the pass was held"
        assert kube.applies_waiting == 1, "no second pass was started beside the held one"
        owners.clear()
        kube.running.set()
        await until(lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status") == "False", 3,
                    "the recovery shown once the pass ends")

    run_loop(test)


def test_a_spec_change_during_a_held_full_pass_is_reconciled_when_it_ends() -> None:
    """The pass that was running reconciled the old generation: status says so (observedGeneration)
    until the new one is applied, and the new one is applied next, not at the next resync."""

    async def test(kube: HeldApi, controller: GatewayController, owners: list[dict[str, Any]],
                   polls: list[float]) -> None:
        kube.running.clear()
        controller.nudge()
        await until(lambda: kube.applies_waiting > 0, 5, "the full pass reached its apply")
        changed = copy.deepcopy(kube.body)
        changed["metadata"]["generation"] = 2
        changed["spec"]["image"] = "gateway:2"
        kube.body = changed
        controller.update(changed)
        await asyncio.sleep(1.5)                   # polls publish meanwhile: never generation 2
        assert kube.body["status"]["observedGeneration"] == 1
        assert kube.condition(C.READY).get("observedGeneration", 1) == 1
        kube.running.set()
        await until(lambda: kube.body["status"]["observedGeneration"] == 2, 5, "generation 2 reconciled")
        deployment = kube.deployment()
        assert deployment is not None
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "gateway:2"
        assert kube.condition(C.STALLED).get("reason") != R.RECONCILE_ERROR

    run_loop(test)


def test_a_redis_that_hangs_shows_in_the_same_status_as_the_replicas_that_report_it() -> None:
    """The poll is published without its pass only past the pass's own bound (its Redis probe's):
    the replicas' RuntimeOutage never stands beside RedisReachable=True from before the hang (the
    real-node test of a paused managed Redis caught that when the bound was the poll's timeout)."""
    prober = HangingProber(hang=1.5)               # longer than the health timeout, within the probe's bound
    spec = {**REDIS_SPEC, "replicas": 1, "health": {"intervalSeconds": 4, "timeoutSeconds": 1}}

    async def test(kube: HeldApi, controller: GatewayController, owners: list[dict[str, Any]],
                   polls: list[float]) -> None:
        prober.hanging = True
        owners.append({"owner_kind": "gateway", "owner_id": IDEMPOTENCY_OWNER, "state": "cold",
                       "reason": RUNTIME, "retry_hint": "restore redis"})
        await until(lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status") == "True", 12,
                    "the degraded replica shown")
        first = next(s for s in kube.statuses
                     if any(c["type"] == C.IDEMPOTENCY_DEGRADED and c["status"] == "True" for c in s["conditions"]))
        reachable = next(c for c in first["conditions"] if c["type"] == C.REDIS_REACHABLE)
        assert (reachable["status"], reachable["reason"]) == ("False", R.CONNECTION_FAILED), first["conditions"]

    run_loop(test, spec, prober)


class SilentApi(HeldApi):
    """The stand-in whose reads time out while ``silent`` is set (a saturated API server)."""

    def __init__(self, body: dict[str, Any], objects: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        super().__init__(body, objects)
        self.silent = False

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.silent:
            raise urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out.")  # type: ignore[arg-type]
        return super().get(api_version, kind, namespace, name)


def test_an_api_server_that_does_not_answer_says_nothing_of_redis() -> None:
    """A full pass whose reads time out ends before its Redis probe. Status says the API server did
    not answer (Reconciling, APIServerUnavailable), and RedisReachable and ExactlyOnceAdmission keep
    what the last probe found, instead of flipping to Unknown and False: at 3,000 x 2 a saturated
    API server made the operator announce that exactly-once admission was lost, hundreds of times."""
    spec = {**REDIS_SPEC, "replicas": 1, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}}

    async def test(kube: SilentApi, controller: GatewayController, owners: list[dict[str, Any]],
                   polls: list[float]) -> None:
        await until(lambda: kube.condition(C.EXACTLY_ONCE).get("status") == "True", 10, "exactly-once admission held")
        kube.silent = True
        controller.nudge()
        await until(lambda: kube.condition(C.RECONCILING).get("reason") == R.API_SERVER_UNAVAILABLE, 10,
                    "the silent API server shown")
        for _ in range(6):  # the retries and the polls between them
            assert kube.condition(C.REDIS_REACHABLE).get("status") == "True", kube.condition(C.REDIS_REACHABLE)
            assert kube.condition(C.EXACTLY_ONCE).get("status") == "True", kube.condition(C.EXACTLY_ONCE)
            await asyncio.sleep(0.5)
        kube.silent = False
        await until(lambda: kube.condition(C.RECONCILING).get("reason") != R.API_SERVER_UNAVAILABLE, 30,
                    "the API server answering again shown")

    run_loop(test, spec, HangingProber(hang=1.0), api=SilentApi)  # the Redis answers


class GatedApi(HeldApi):
    """The stand-in, with the pods' readiness-gate conditions as the operator writes them; each
    write reaches the pod index at once (the watch event of a pod status patch)."""

    def __init__(self, body: dict[str, Any], pods: list[PodView]) -> None:
        super().__init__(body, [secret("redis-auth", password="pw")])
        self.pods, self.gate_writes = pods, []

    def set_pod_condition(self, namespace: str, name: str, uid: str, condition: Mapping[str, str]) -> None:
        self.gate_writes.append((name, condition["status"], condition["reason"]))
        self.pods[:] = [dataclasses.replace(p, gate=condition["status"] == "True") if p.uid == uid else p
                        for p in self.pods]


async def serve_own_view(ip: str, view: dict[str, Any]) -> asyncio.AbstractServer:
    """A replica's /health with the launcher's section: its own view of Redis as ``view`` says now."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = json.dumps({"status": "healthy", "degraded_owners": [],
                           "gateway_operator": {"idempotency": dict(view)}}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, ip, GATEWAY_PORT)


def test_a_replica_cut_off_from_redis_leaves_the_traffic_and_comes_back() -> None:
    """The readiness gate: a replica that says it cannot reach Redis while the other has reached it
    for a while is set False (it leaves the Service), the other and a new pod True, each written
    once; True again when it reaches Redis. The pod whose gate is False is still polled."""
    ips = ("127.61.0.2", "127.61.0.3")
    pods = [PodView(f"bot-{i}", f"uid-{i}", ip, ready=False, deleting=False, containers_ready=True, gated=True)
            for i, ip in enumerate(ips)]
    body = gateway({**REDIS_SPEC, "replicas": 2, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}})
    kube = GatedApi(body, pods)
    views = [{"redis": "answers", "answers_for_s": 60.0}, {"redis": "unreachable", "unusable_for_s": 30.0}]

    async def main() -> None:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())
        posting.settings_var.set(kopf.OperatorSettings())
        servers = [await serve_own_view(ip, view) for ip, view in zip(ips, views)]
        # Ready follows the gate (the kubelet's part): a pod takes traffic once its gate is True
        live = lambda: [dataclasses.replace(p, ready=bool(p.gate)) for p in kube.pods]  # noqa: E731
        controller = GatewayController(kube, "ns", "bot", live, prober=HangingProber(0))  # type: ignore[arg-type]
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: ("bot-1", "False", "CutOffFromRedis") in kube.gate_writes, 10,
                        "the cut-off replica's gate set False")
            assert ("bot-0", "True", "RedisReachable") in kube.gate_writes
            await asyncio.sleep(2.5)  # two more polls: nothing changed, nothing written
            assert sorted(kube.gate_writes) == [("bot-0", "True", "RedisReachable"),
                                                ("bot-1", "False", "CutOffFromRedis")], kube.gate_writes
            views[1].update(redis="answers", answers_for_s=0.5)
            await until(lambda: ("bot-1", "True", "RedisReachable") in kube.gate_writes, 5,
                        "the replica back in the traffic once it reaches Redis")
            views[0].update(redis="unreachable")  # now Redis is down for both: neither is taken out
            views[0].pop("answers_for_s")
            views[1].update(redis="unreachable")
            await asyncio.sleep(2.5)
            assert len(kube.gate_writes) == 3, kube.gate_writes
        finally:
            await stop(task, servers)

    asyncio.run(main())


def test_a_pod_gone_before_its_gate_is_written_does_not_stop_the_loop() -> None:
    """A pod deleted between the poll and the patch of its readiness gate answers 404: the loop
    reads a 404 as its GatewayDeployment gone, so the gate's own 404 must stay with the gate."""
    from kubernetes.client.rest import ApiException
    pods = [PodView("bot-0", "uid-0", REPLICA_IP, ready=False, deleting=False, containers_ready=True, gated=True)]
    body = gateway({**REDIS_SPEC, "replicas": 1, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}})

    class GoneApi(GatedApi):
        refused = 0

        def set_pod_condition(self, namespace: str, name: str, uid: str, condition: Mapping[str, str]) -> None:
            if not self.refused:
                self.refused += 1
                raise ApiException(status=404, reason="Not Found")
            super().set_pod_condition(namespace, name, uid, condition)

    kube = GoneApi(body, pods)

    async def main() -> None:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())
        posting.settings_var.set(kopf.OperatorSettings())
        server = await serve_own_view(REPLICA_IP, {"redis": "answers", "answers_for_s": 60.0})
        controller = GatewayController(kube, "ns", "bot", lambda: list(kube.pods), prober=HangingProber(0))  # type: ignore[arg-type]
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: kube.gate_writes == [("bot-0", "True", "RedisReachable")], 10,
                        "the gate written at the next try, the loop still running")
            assert kube.refused == 1 and not task.done()
            await until(lambda: kube.condition(C.READY) != {}, 5, "status published")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_the_loop_keeps_only_what_it_reads_of_the_object_and_its_events_still_name_it() -> None:
    """An object applied with ``kubectl apply`` carries its whole spec again in an annotation, and
    managedFields besides: the loop keeps neither between passes (memory per GatewayDeployment),
    and still names the object in its Events and writes its status."""
    spec = {"replicas": 1, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}}
    applied = {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"spec": spec})},
               "labels": {"team": "bots"}, "managedFields": [{"manager": "kubectl-client-side-apply"}],
               "creationTimestamp": "2026-12-01T00:00:00Z"}

    async def test(kube: HeldApi, controller: GatewayController, owners: list[dict[str, Any]], _: list[float]) -> None:
        meta = controller.body["metadata"]
        assert set(meta) <= set(KEPT_METADATA), sorted(set(meta) - set(KEPT_METADATA))
        assert meta["uid"] == kube.body["metadata"]["uid"] and meta["creationTimestamp"] == "2026-12-01T00:00:00Z"
        assert controller.body["spec"]["replicas"] == 1 and controller.body["status"]
        owners.append({"owner_id": IDEMPOTENCY_OWNER, "reason": RUNTIME})
        await until(lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status") == "True", 10, "the degraded replica")
        queue = posting.event_queue_var.get()
        posted = [queue.get_nowait() for _ in range(queue.qsize())]
        assert any(e.reason == "IdempotencyDegraded" and e.ref["name"] == "bot" and e.ref["namespace"] == "ns"
                   and e.ref["uid"] == kube.body["metadata"]["uid"] for e in posted), posted

    run_loop(test, spec, metadata=applied)


def test_a_watched_replica_s_change_reaches_status_at_once_and_one_without_the_watch_is_polled() -> None:
    """Health as a watch (issue 33): bot-0 runs the launcher's long-poll /health (pod/gwop_watch.py,
    real, over a HEALTH BODY STAND-IN) beside its /health; bot-1 is another image, /health only. The
    interval is 6 s: bot-0's degradation and recovery reach status within a second each, and bot-0
    is never polled once its watch answers; bot-1 is polled once an interval, and its degradation
    shows within the interval plus the timeout."""
    importable()
    import gwop_watch
    ips = ("127.61.0.4", "127.61.0.5")
    pods = [PodView(f"bot-{i}", f"uid-{i}", ip, ready=True, deleting=False) for i, ip in enumerate(ips)]
    body = gateway({**REDIS_SPEC, "replicas": 2, "health": {"intervalSeconds": 6, "timeoutSeconds": 1}})
    kube = HeldApi(body, [secret("redis-auth", password="pw")])
    owners: list[list[dict[str, Any]]] = [[], []]
    polls: list[list[float]] = [[], []]
    degraded = [{"owner_kind": "gateway", "owner_id": IDEMPOTENCY_OWNER, "state": "cold", "reason": RUNTIME}]

    async def main() -> None:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())
        posting.settings_var.set(kopf.OperatorSettings())
        servers = [await serve_health_at(ip, owners[i], polls[i]) for i, ip in enumerate(ips)]
        watch = gwop_watch.WatchServer()
        watched = gwop_watch.Watched(lambda: {"status": "healthy", "uptime": time.monotonic(),
                                              "degraded_owners": list(owners[0])})
        await watch.listen(ips[0], WATCH_PORT, watched)
        ticking = asyncio.ensure_future(watched.tick())
        controller = GatewayController(kube, "ns", "bot", lambda: pods, prober=HangingProber(0))  # type: ignore[arg-type]
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        degraded_now = lambda: kube.condition(C.IDEMPOTENCY_DEGRADED).get("status")  # noqa: E731
        try:
            await until(lambda: degraded_now() == "False" and controller.watch.watching == 1, 10,
                        "the first status, and bot-0's watch answering")
            polled_before = len(polls[0])
            for want, change in (("True", lambda: owners[0].extend(degraded)), ("False", owners[0].clear)) * 2:
                await asyncio.sleep(0.5)
                changed = time.monotonic()
                change()
                await until(lambda: degraded_now() == want, 1.5, f"bot-0's watch bringing IdempotencyDegraded={want}")
                print(f"bot-0 (watched): IdempotencyDegraded={want} {time.monotonic() - changed:.2f} s after the change")
            assert len(polls[0]) == polled_before, "bot-0 is not polled while its watch answers"
            changed = time.monotonic()
            owners[1].extend(degraded)
            await until(lambda: degraded_now() == "True", 6 + 1 + 1, "bot-1's poll bringing the degradation")
            print(f"bot-1 (polled): IdempotencyDegraded=True {time.monotonic() - changed:.2f} s after the change")
            assert len(polls[1]) >= 2, "bot-1 is polled each interval"
        finally:
            ticking.cancel()
            watch.close()
            await stop(task, servers)

    asyncio.run(main())


def test_a_loop_started_on_a_settled_status_observes_first_and_applies_a_newer_spec_at_once() -> None:
    """An operator start, or a shard taken over from a replica that died, finds many
    GatewayDeployments at once. One whose status says its generation was reconciled with nothing
    left to do is observed first: its replicas polled and its status published without a single
    apply (the full passes come spread over the resync); one whose spec changed meanwhile is
    applied at once."""
    settled = {"observedGeneration": 1, "conditions": [{"type": C.STALLED, "status": "False"},
                                                        {"type": C.RECONCILING, "status": "False"}]}

    async def start(body: dict[str, Any]) -> tuple[HeldApi, list[str]]:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())
        posting.settings_var.set(kopf.OperatorSettings())
        kube = HeldApi(body, [secret("redis-auth", password="pw")])
        pods = [PodView("bot-0", "pod-uid", REPLICA_IP, ready=True, deleting=False)]
        owners: list[dict[str, Any]] = []
        server = await serve_health(owners, [])
        controller = GatewayController(kube, "ns", "bot", lambda: pods)  # type: ignore[arg-type]
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: len(kube.statuses) >= 1 and kube.condition(C.IDEMPOTENCY_DEGRADED).get("status")
                        == "False", 10, "the first step published")
        finally:
            await stop(task, [server])
        return kube, [c for c in kube.calls if c.startswith("apply")]

    spec = {"replicas": 1, "health": {"intervalSeconds": 1, "timeoutSeconds": 1}}
    kube, applies = asyncio.run(start(gateway(spec, **settled)))
    assert applies == [], applies
    assert kube.statuses[-1]["observedGeneration"] == 1
    newer = gateway(spec, **settled)
    newer["metadata"]["generation"] = 2            # changed while no operator held it
    _, applies = asyncio.run(start(newer))
    assert "apply Deployment/bot" in applies, applies
    never = gateway(spec)                          # no status yet: a full pass first, as always
    _, applies = asyncio.run(start(never))
    assert "apply Deployment/bot" in applies, applies


def test_a_loop_cancelled_in_the_turn_it_is_woken_ends() -> None:
    """A shard given up has its loops stopped and awaited before another replica may take it
    (supervisor.drop). A loop woken (a watch's news, a nudge) in the same turn as it is cancelled
    must end all the same. Over ``asyncio.wait_for`` on Python 3.11 it swallowed the cancel and ran
    on: at 3,000 x 2 on two operators a shard lost under load left the holder waiting for ever, and
    with it every renewal."""
    async def main() -> None:
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(asyncio.Queue())
        posting.settings_var.set(kopf.OperatorSettings())
        kube = HeldApi(gateway({"replicas": 1, "health": {"intervalSeconds": 5, "timeoutSeconds": 1}}),
                       [secret("redis-auth", password="pw")])
        pods = [PodView("bot-0", "pod-uid", REPLICA_IP, ready=True, deleting=False)]
        server = await serve_health([], [])
        controller = GatewayController(kube, "ns", "bot", lambda: pods)  # type: ignore[arg-type]
        controller.update(kube.body)
        task = asyncio.create_task(controller.run())
        try:
            await until(lambda: len(kube.statuses) >= 1, 10, "the first step published")
            await asyncio.sleep(0.5)   # asleep until its next step (the interval is 5 s)
            controller.wake.set()
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=2.0)
            assert done, "the loop ran on after it was cancelled"
        finally:
            await stop(task, [server])

    asyncio.run(main())


def test_a_spec_change_is_reconciled_while_routine_calls_fill_the_shared_threads() -> None:
    """After a holder's SIGKILL the survivor's adopted loops fill the shared API threads with their
    first reads; a user's spec change does not queue behind them: its pass and its status write
    run on threads of their own (loop/threads.py)."""

    async def test(kube: HeldApi, controller: GatewayController, owners: list[dict[str, Any]],
                   polls: list[float]) -> None:
        from concurrent.futures import ThreadPoolExecutor
        shared = ThreadPoolExecutor(max_workers=1)
        asyncio.get_running_loop().set_default_executor(shared)
        busy = threading.Event()
        backlog = asyncio.get_running_loop().run_in_executor(None, busy.wait, 30)   # routine work ahead
        try:
            changed = copy.deepcopy(kube.body)
            changed["metadata"]["generation"] = 2
            changed["spec"]["image"] = "gateway:2"
            kube.body = changed
            controller.update(changed)
            await until(lambda: kube.body["status"]["observedGeneration"] == 2, 5, "generation 2 reconciled")
            deployment = kube.deployment()
            assert deployment is not None
            assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "gateway:2"
            assert not backlog.done()   # the shared threads were busy all along
        finally:
            busy.set()
            await backlog

    run_loop(test)


def test_prompt_calls_beyond_the_prompt_threads_take_the_shared_ones() -> None:
    """A wave of new GatewayDeployments is all prompt work: what the prompt threads cannot take at
    once runs on the shared ones instead of queuing behind four threads."""
    from gateway_operator.loop import threads

    async def main() -> None:
        release = threading.Event()
        names: list[str] = []

        def call() -> None:
            names.append(threading.current_thread().name)
            release.wait(10)
        threads.PROMPT.set(True)
        calls = [asyncio.ensure_future(threads.run(call)) for _ in range(threads.PROMPT_THREADS + 3)]
        await until(lambda: len(names) == len(calls), 5, "every call running at once")
        release.set()
        await asyncio.gather(*calls)
        prompt = [n for n in names if n.startswith("kube-prompt")]
        assert len(prompt) == threads.PROMPT_THREADS and len(names) - len(prompt) == 3, names

    asyncio.run(main())


def test_a_cancelled_prompt_call_keeps_its_thread_until_that_thread_ends() -> None:
    """A pass cancelled (its shard given up, its loop stopped) while its prompt call runs: the call
    runs on, so its thread is not idle, and the next prompt calls take the shared threads instead
    of queuing behind it; once it ends, the prompt thread is used again."""
    from gateway_operator.loop import threads

    async def main() -> None:
        release = threading.Event()
        names: list[str] = []

        def stuck() -> None:
            names.append(threading.current_thread().name)
            release.wait(10)

        def quick() -> str:
            return threading.current_thread().name
        threads.PROMPT.set(True)
        cancelled = [asyncio.ensure_future(threads.run(stuck)) for _ in range(threads.PROMPT_THREADS)]
        await until(lambda: len(names) == threads.PROMPT_THREADS, 5, "every prompt thread busy")
        for call in cancelled:
            call.cancel()
        await asyncio.gather(*cancelled, return_exceptions=True)
        meanwhile = await asyncio.wait_for(threads.run(quick), 5)
        assert not meanwhile.startswith("kube-prompt"), meanwhile
        release.set()
        await until(lambda: threads._busy == 0, 5, "the prompt threads idle")
        assert (await threads.run(quick)).startswith("kube-prompt")

    asyncio.run(main())
