"""One long-lived task per GatewayDeployment: reconcile when needed, poll every ready
replica's /health each interval, publish status when it changed, post Events on
transitions, and restart replicas stuck on the build-time fallback.

A single sequential task per object means no two writers ever race on one status.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import kopf
from kubernetes.client.rest import ApiException

from . import api, conditions, health, metrics, status
from .api import GatewaySpec
from .conditions import Facts
from .kube import Kube
from .reconcile import Outcome, PodView, reconcile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerSettings:
    resync_seconds: float = 60.0            # full reconcile (drift check) at least this often
    problem_backoff: tuple[float, ...] = (2, 4, 8, 16, 30)  # retries while a Problem persists


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class GatewayController:
    kube: Kube
    namespace: str
    name: str
    pods: Callable[[], Sequence[PodView]]  # live view of the pod index for this gateway
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    body: Mapping[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    _dirty: bool = True
    _reconciled_generation: int | None = None
    _next_full: float = 0.0
    _problem_streak: int = 0
    _last_restart: float = 0.0
    _rv_floor: int = 0

    def update(self, body: Mapping[str, Any]) -> None:
        """Called for every watch event of the object: wakes the loop when the spec changed."""
        if _resource_version(body) < self._rv_floor:
            return  # older than our own last status write; a newer event follows
        self.body = body
        if body.get("metadata", {}).get("generation") != self._reconciled_generation:
            self._dirty = True
            self.wake.set()

    def nudge(self) -> None:
        """An owned object changed (drift, rollout progress): reconcile soon."""
        self._dirty = True
        self.wake.set()

    async def run(self) -> None:
        """Until cancelled, or until the GatewayDeployment is found gone."""
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                if e.status == 404:  # deleted, and the watch event that says so was missed
                    log.info("gateway %s/%s is gone; stopping its loop", self.namespace, self.name)
                    return
                # e.g. 422 when a status write meets a CRD rule the spec no longer passes
                log.warning("gateway %s/%s: the API server refused a request: %s %s", self.namespace,
                            self.name, e.status, e.reason)
                metrics.RECONCILE_ERRORS.labels(self.namespace, self.name).inc()
            except Exception:  # never let one object's surprise kill its loop
                log.exception("gateway %s/%s: step failed", self.namespace, self.name)
                metrics.RECONCILE_ERRORS.labels(self.namespace, self.name).inc()
            await self._sleep()

    async def step(self) -> None:
        body = self.body
        spec = GatewaySpec.parse(body.get("spec") or {})
        full = self._dirty or time.monotonic() >= self._next_full
        # polling runs beside the reconcile, so a slow Redis probe never delays what the
        # replicas report: a fact shows within one interval plus the poll timeout
        outcome, replicas = await asyncio.gather(self._reconcile(body, apply=full), self._poll(spec))
        if not full and outcome.probe is not None and outcome.probe.ok and \
                outcome.running_replicas < spec.replicas and spec.store_backend == "redis":
            outcome = await self._reconcile(body, apply=True)  # the scale-out gate just opened
        facts = Facts(
            generation=int(body["metadata"].get("generation") or 0), desired_replicas=spec.replicas,
            store_backend=spec.store_backend, policy=spec.policy, persistence=spec.persistence.enabled,
            redis_configured=spec.redis.configured, running_replicas=outcome.running_replicas,
            ready_replicas=outcome.ready_replicas, updated_replicas=outcome.updated_replicas,
            rollout_observed=outcome.rollout_observed, problem=outcome.problem, probe=outcome.probe,
            health=tuple(replicas))
        await self._publish(body, facts, outcome)
        await self._restart_stale(spec, facts, outcome)

    async def _reconcile(self, body: Mapping[str, Any], apply: bool) -> Outcome:
        started = time.monotonic()
        outcome = await asyncio.to_thread(reconcile, self.kube, body, list(self.pods()), apply)
        if apply:
            metrics.RECONCILE_SECONDS.labels(self.namespace, self.name).observe(time.monotonic() - started)
            metrics.RECONCILES.labels(self.namespace, self.name).inc()
            metrics.API_WRITES.labels(self.namespace, self.name).inc(outcome.writes)
            self._dirty = False
            self._reconciled_generation = body["metadata"].get("generation")
            if outcome.problem:
                delay = self.settings.problem_backoff[min(self._problem_streak, len(self.settings.problem_backoff) - 1)]
                self._problem_streak += 1
            else:
                delay, self._problem_streak = self.settings.resync_seconds, 0
            self._next_full = time.monotonic() + delay
        return outcome

    async def _poll(self, spec: GatewaySpec) -> list[health.ReplicaHealth]:
        targets = [health.Target(p.name, p.ip, api.GATEWAY_PORT) for p in self.pods()
                   if p.ready and p.ip and not p.deleting]
        results = await health.poll_replicas(targets, spec.health.timeout_seconds, spec.health.max_concurrency)
        for r in results:
            metrics.HEALTH_POLLS.labels(self.namespace, self.name, r.state.value).inc()
        return results

    async def _publish(self, body: Mapping[str, Any], facts: Facts, outcome: Outcome) -> None:
        previous = body.get("status") or {}
        new = status.build(previous, facts, outcome.target, now_iso())
        metrics.observe_conditions(self.namespace, self.name, new["conditions"])
        if not status.changed(previous, new):
            return
        patch = dict(new)
        if "redis" in previous and "redis" not in new:
            patch["redis"] = None
        written = await asyncio.to_thread(self.kube.patch_status, self.namespace, self.name, patch)
        metrics.API_WRITES.labels(self.namespace, self.name).inc()
        # the watch may still deliver events older than this write: remember where we are
        self.body, self._rv_floor = written, _resource_version(written)
        self._post_events(body, previous.get("conditions") or [], new["conditions"])

    def _post_events(self, body: Mapping[str, Any], before: Sequence[Mapping[str, Any]],
                     after: Sequence[Mapping[str, Any]]) -> None:
        for t in conditions.transitions(before, after):
            event = _event_for(t)
            if event:
                kopf.event(dict(body), type=event[0], reason=event[1], message=event[2])

    async def _restart_stale(self, spec: GatewaySpec, facts: Facts, outcome: Outcome) -> None:
        """A replica whose store fell back to SQLite at build time keeps it until restarted;
        once Redis answers the probe, restart such replicas one at a time."""
        if not (spec.health.restart_stale_replicas and outcome.probe and outcome.probe.ok):
            return
        stale = sorted(h.pod for h in facts.health if h.state is health.Idempotency.BUILD_TIME_FALLBACK)
        if not stale or facts.ready_replicas < facts.running_replicas:
            return  # wait until the previous restart has come back ready
        if time.monotonic() - self._last_restart < spec.health.restart_cooldown_seconds:
            return
        pod = next((p for p in self.pods() if p.name == stale[0]), None)
        if pod is None:
            return
        self._last_restart = time.monotonic()
        await asyncio.to_thread(self.kube.delete_pod, self.namespace, pod.name, pod.uid)
        metrics.STALE_RESTARTS.labels(self.namespace, self.name).inc()
        kopf.event(dict(self.body), type="Normal", reason="RestartedStaleReplica",
                   message=f"restarted pod {pod.name}: it kept the per-replica SQLite fallback after Redis "
                           "came back (the gateway rebuilds its store only on restart)")

    async def _sleep(self) -> None:
        spec = GatewaySpec.parse(self.body.get("spec") or {})
        timeout = min(spec.health.interval_seconds, max(0.1, self._next_full - time.monotonic()))
        try:
            await asyncio.wait_for(self.wake.wait(), timeout=timeout)
        except asyncio.TimeoutError:
            pass
        self.wake.clear()


def _resource_version(body: Mapping[str, Any]) -> int:
    try:
        return int(body.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:  # resource versions are opaque; etcd's happen to be integers
        return 0


def _event_for(t: conditions.Transition) -> tuple[str, str, str] | None:
    c = t.new
    if t.type == conditions.IDEMPOTENCY_DEGRADED:
        if c["status"] == "True":
            return "Warning", "IdempotencyDegraded", c["message"]
        if t.old == "True":
            return "Normal", "IdempotencyRecovered", "no replica reports durability:idempotency any more"
    if t.type == conditions.REDIS_REACHABLE:
        if c["status"] == "False":
            return "Warning", "RedisUnreachable", c["message"]
        if c["status"] == "True" and t.old == "False":
            return "Normal", "RedisReachable", c["message"]
    if t.type == conditions.STALLED and c["status"] == "True":
        return "Warning", c["reason"], c["message"]
    if t.type == conditions.EXACTLY_ONCE:
        if c["status"] == "False" and c["reason"] == "PerReplicaStores":
            return "Warning", "ExactlyOnceNotHeld", c["message"]
        if c["status"] == "True" and t.old is not None:
            return "Normal", "ExactlyOnceAdmission", c["message"]
    return None
