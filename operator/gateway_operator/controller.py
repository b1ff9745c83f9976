"""One long-lived task per GatewayDeployment: reconcile when needed, poll every ready
replica's /health each interval, publish status when it changed, post Events on
transitions, and restart replicas stuck on the build-time fallback.

A single sequential task per object means no two writers ever race on one status. What
it does next is decided by the reconcile's ``Result`` (when the next full pass is due);
an error of its own backs off the same way, and is logged once per change, not per try.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, MutableMapping, Sequence

import kopf
from kubernetes.client.rest import ApiException

from . import api, conditions, dedup_history, health, metrics, render, status
from .api import GatewaySpec, HealthSpec
from .conditions import Facts, Problem
from .expose import Exposure
from .kube import Kube
from .reconcile import LiveDeployment, Observation, Outcome, PodView, ReconcileSettings, Result, SecretInputs, reconcile
from .redis_probe import Prober
from .schedule import Schedule
from .tenancy import Claim

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerSettings:
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)  # resync, backoff, identity
    redis_allow: tuple[str, ...] = ()        # the probe's allowlist (CIDRs, hosts, .domains); empty: open


class ObjectLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The operator's log lines about one GatewayDeployment carry its namespace/name."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{self.extra['object']}] {msg}", kwargs  # type: ignore[index]


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class GatewayController:
    kube: Kube
    namespace: str
    name: str
    pods: Callable[[], Sequence[PodView]]  # live view of the pod index for this gateway
    deployment: Callable[[], LiveDeployment | None] = lambda: None  # its Deployment, as last watched
    claims: Callable[[Sequence[str]], Mapping[str, Sequence[Claim]]] = lambda _: {}  # claimants of these hosts
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    prober: Prober = field(default_factory=Prober)
    poller: health.Poller = field(default_factory=health.Poller)
    body: Mapping[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    schedule: Schedule = field(default_factory=Schedule)  # when the next pass, poll and restart are due
    _last_problem: Problem | None = None  # the last one logged
    _rv_floor: int = 0
    _inputs: SecretInputs | None = None  # the last full pass's Secret inputs, reused until the next
    _exposure: Exposure | None = None     # status.expose as last read (spec.expose)

    def __post_init__(self) -> None:
        self.log = ObjectLog(log, {"object": f"{self.namespace}/{self.name}"})

    def update(self, body: Mapping[str, Any]) -> None:
        """Called for every watch event of the object: wakes the loop when the spec changed."""
        if _resource_version(body) < self._rv_floor:
            return  # older than our own last status write; a newer event follows
        self.body = _kept(body)
        if self.schedule.spec_changed(body.get("metadata", {}).get("generation")):
            self.wake.set()  # a new spec deserves a prompt first try

    def nudge(self) -> None:
        """An owned object changed (drift, rollout progress): reconcile soon."""
        self.schedule.nudge()
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
                    self.log.info("the GatewayDeployment is gone; stopping its loop")
                    return
                # e.g. 422 when a status write meets a CRD rule the spec no longer passes
                self._note_error(f"the API server refused a request: {e.status} {e.reason}")
            except Exception as e:  # noqa: BLE001 - never let one object's surprise kill its loop
                self._note_error(f"step failed: {type(e).__name__}", exc_info=True)
            await self._sleep()

    def _note_error(self, message: str, exc_info: bool = False) -> None:
        metrics.reconcile_failed(self.namespace, self.name)
        problem = Problem("StepError", message)
        if problem != self._last_problem:
            self.log.warning(message, exc_info=exc_info)
            self._last_problem = problem
        self.schedule.errored(time.monotonic(), self.settings.reconcile.problem_backoff)

    async def step(self) -> None:
        body = self.body
        spec = _spec_or_none(body)
        health_spec = spec.health if spec else HealthSpec()
        full = self.schedule.begin(time.monotonic(), health_spec.interval_seconds, random.uniform(0.5, 1.0))
        # polling runs beside the reconcile, so a slow Redis probe never delays what the
        # replicas report: a fact shows within one interval plus the poll timeout
        hosts = spec.expose.hosts if spec else ()
        result, replicas = await asyncio.gather(self._reconcile(body, full, hosts), self._poll(health_spec))
        outcome = self._settle(body, result.outcome, result.requeue_after)
        observed = outcome.observed
        now = time.time()
        facts = Facts(
            generation=int(body["metadata"].get("generation") or 0),
            desired_replicas=spec.replicas if spec else 0,
            store_backend=spec.store_backend if spec else "sqlite", policy=spec.policy if spec else "",
            persistence=spec.persistence.enabled if spec else False,
            redis_configured=spec.redis.configured if spec else False, running_replicas=observed.running,
            ready_replicas=observed.ready, updated_replicas=observed.updated,
            rollout_observed=observed.rollout_observed, problem=outcome.problem, probe=outcome.probe,
            health=tuple(replicas), dedup=_dedup_history(body, outcome, now), now=now,
            migrating=bool(outcome.migration and not outcome.migration.done),
            sessions_store=spec.sessions_store if spec else "replica", target=outcome.target)
        policy = render.gateway_network_policy_name(self.name) if spec and spec.network_policy.enabled else ""
        await self._publish(body, facts, outcome, policy)
        if spec is not None:
            await self._restart_stale(spec, facts, outcome)

    async def _reconcile(self, body: Mapping[str, Any], full: bool, hosts: Sequence[str]) -> Result:
        started = time.monotonic()
        seen = Observation(self.deployment(), self._inputs, self._exposure, self.claims(hosts))
        result = await reconcile(self.kube, self.prober, self.settings.reconcile, body, list(self.pods()),
                                 full, self.schedule.failures, seen)
        if result.outcome.exposure is not None or (result.outcome.applied and result.outcome.problem is None):
            self._exposure = result.outcome.exposure
        if result.outcome.applied:
            self._inputs = result.inputs  # None after a problem: observation passes read again until fixed
            metrics.reconcile_took(self.namespace, self.name, time.monotonic() - started)
        return result

    def _settle(self, body: Mapping[str, Any], outcome: Outcome, requeue_after: float) -> Outcome:
        """Metrics, the next full pass (the schedule: a sticky problem survives observation
        passes), and one log line per change of problem."""
        if outcome.applied:
            metrics.reconciled(self.namespace, self.name, outcome.writes)
        outcome = outcome._replace(problem=self.schedule.settled(
            time.monotonic(), outcome.applied, body["metadata"].get("generation"), outcome.problem, requeue_after))
        if outcome.error is not None:
            metrics.reconcile_failed(self.namespace, self.name)
        if outcome.problem != self._last_problem:
            if outcome.problem is not None:
                self.log.warning("stalled: %s: %s", outcome.problem.reason, outcome.problem.message,
                                 exc_info=outcome.error)
            elif self._last_problem is not None:
                self.log.info("no longer stalled (was %s)", self._last_problem.reason)
            self._last_problem = outcome.problem
        return outcome

    async def _poll(self, health_spec: HealthSpec) -> list[health.ReplicaHealth]:
        targets = [health.Target(p.name, p.ip, api.GATEWAY_PORT) for p in self.pods()
                   if p.ready and p.ip and not p.deleting]
        results = await self.poller.poll(targets, health_spec.timeout_seconds, health_spec.max_concurrency)
        metrics.polled(self.namespace, self.name, (r.state.value for r in results))
        return results

    async def _publish(self, body: Mapping[str, Any], facts: Facts, outcome: Outcome, policy: str) -> None:
        previous = body.get("status") or {}
        selector = ",".join(f"{k}={v}" for k, v in api.selector_for(self.name).items())
        # a pass that stopped before it could tell (a problem) keeps what status said
        migration = (outcome.migration.status() if outcome.migration is not None
                     else previous.get("sqliteMigration") if outcome.problem is not None else None)
        new = status.build(previous, facts, outcome.target, now_iso(), selector, self._exposure, policy, migration)
        metrics.observe_conditions(self.namespace, self.name, new["conditions"])
        if not status.changed(previous, new):
            return
        written = await asyncio.to_thread(self.kube.patch_status, self.namespace, self.name,
                                          status.merge_patch(previous, new))
        metrics.wrote(self.namespace, self.name)
        # the watch may still deliver events older than this write: remember where we are
        self.body, self._rv_floor = _kept(written), _resource_version(written)
        self._post_events(body, previous.get("conditions") or [], new["conditions"])

    def _post_events(self, body: Mapping[str, Any], before: Sequence[Mapping[str, Any]],
                     after: Sequence[Mapping[str, Any]]) -> None:
        for t in conditions.transitions(before, after):
            self.log.info("%s %s -> %s (%s): %s", t.type, t.old or "-", t.new["status"], t.new["reason"],
                          t.new["message"])
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
        if not self.schedule.restart_allowed(time.monotonic(), spec.health.restart_cooldown_seconds):
            return
        pod = next((p for p in self.pods() if p.name == stale[0]), None)
        if pod is None:
            return
        self.schedule.restarted(time.monotonic())
        await asyncio.to_thread(self.kube.delete_pod, self.namespace, pod.name, pod.uid)
        metrics.restarted_stale_replica(self.namespace, self.name)
        self.log.info("restarted pod %s: it kept the build-time SQLite fallback", pod.name)
        kopf.event(dict(self.body), type="Normal", reason="RestartedStaleReplica",
                   message=f"restarted pod {pod.name}: it kept the per-replica SQLite fallback after Redis "
                           "came back (the gateway rebuilds its store only on restart)")

    async def _sleep(self) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), timeout=self.schedule.sleep_for(time.monotonic()))
        except asyncio.TimeoutError:
            pass
        self.wake.clear()


def _spec_or_none(body: Mapping[str, Any]) -> GatewaySpec | None:
    """The typed spec, or None when it cannot be read (reconcile reports why)."""
    try:
        return GatewaySpec.parse(body.get("spec") or {})
    except Exception:  # noqa: BLE001 - reconcile turns the same failure into InvalidSpec
        return None


def _kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the loop keeps it between steps: without metadata.managedFields, which
    the operator never reads and which is most of a GatewayDeployment's size in memory."""
    meta = body.get("metadata") or {}
    return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _resource_version(body: Mapping[str, Any]) -> int:
    try:
        return int(body.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:  # resource versions are opaque; etcd's happen to be integers
        return 0


def _dedup_history(body: Mapping[str, Any], outcome: Outcome, now: float) -> dedup_history.History:
    """The canary's history after this pass; what status remembers counts only for the same store."""
    target = outcome.target
    if target is None:
        return dedup_history.History()
    remembered = (body.get("status") or {}).get("redis") or {}
    same = remembered.get("endpoint") == target.endpoint and remembered.get("prefix") == target.prefix
    previous = dedup_history.History.from_status(remembered if same else None)
    return dedup_history.assess(previous, outcome.probe.store if outcome.probe else None, now)


def _event_for(t: conditions.Transition) -> tuple[str, str, str] | None:
    c = t.new
    if t.type == conditions.REDIS_DURABLE and c["status"] == "False" and t.old != "False":
        return "Warning", c["reason"], c["message"]
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
    if t.type == conditions.REDIS_TLS_VERIFIED and c["status"] == "False":
        return "Warning", c["reason"], c["message"]
    if t.type == conditions.STALLED and c["status"] == "True":
        return "Warning", c["reason"], c["message"]
    if t.type == conditions.EXACTLY_ONCE:
        if c["status"] == "False" and c["reason"] == "PerReplicaStores":
            return "Warning", "ExactlyOnceNotHeld", c["message"]
        if c["status"] == "True" and t.old is not None:
            return "Normal", "ExactlyOnceAdmission", c["message"]
    return None
