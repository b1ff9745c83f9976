"""One long-lived task per GatewayDeployment, the I/O around the pass: wait as the schedule
says (schedule.py), run the pass (reconcile.py) beside the /health poll (each replica's health
watch, health_watch.py, stands in for its poll while it answers, and its news wakes the loop), gather the facts
(facts.py), publish (publish.py), restart a replica stuck on the build-time fallback. One
sequential task per object: no two writers race on one status. A pass that outlasts its step's
poll (a full pass behind a resync wave) goes on while the next steps poll and publish with what
the last pass saw; one pass at a time. An error of the loop's own backs off like a failed pass
and is logged once per change.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator import api
from gateway_operator.api import GatewaySpec, HealthSpec
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.tenancy import Claim
from gateway_operator.clients import health_poll, health_watch
from gateway_operator.clients.kube import SILENT, Kube, NotHeld
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import claim_risk, health, schedule, unrecorded
from gateway_operator.core.conditions import Facts, Problem, settled_at
from gateway_operator.core.expose import Exposure
from gateway_operator.core.facts import gather as gather_facts
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import LiveDeployment, PodView, gate_condition
from gateway_operator.core.render.autoscaling import autoscaling_status
from gateway_operator.core.render.deployment import gated
from gateway_operator.core.render.names import Owner, gateway_network_policy_name
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.probe_result import bound as probe_bound
from gateway_operator.core.replicas import out_of_traffic, stale_replica
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.schedule import PassKind, Schedule
from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop import inputs, metrics, threads
from gateway_operator.loop.inputs import Checked, SecretInputs, kept, resource_version
from gateway_operator.loop.publish import ObjectLog, now_iso, post_event, publish
from gateway_operator.loop.reconcile import reconcile
from gateway_operator.loop.steps import Observation, Rendered
from gateway_operator.pod import gwop_contract as contract

log = logging.getLogger(__name__)
GATE_LAG_S = 5.0  # a readiness gate just written is not written again while the pod index may still lag


class Passed(NamedTuple):
    """What a pass saw, as the loop publishes it: the generation and spec it reconciled."""

    generation: object
    spec: GatewaySpec | None
    outcome: Outcome


def _reused(outcome: Outcome) -> Outcome:
    """An outcome published again: its probe was assessed for the dedup history when it was new."""
    probe = outcome.probe
    return outcome if probe is None or probe.reused else outcome._replace(probe=dataclasses.replace(probe, reused=True))


def _at_generation(body: Mapping[str, Any], generation: object) -> Mapping[str, Any]:
    """``body`` as of the generation a pass reconciled (a newer spec is not reconciled yet)."""
    meta = body["metadata"]
    return body if meta.get("generation") == generation else {**body, "metadata": {**meta, "generation": generation}}


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
    poller: health_poll.Poller = field(default_factory=health_poll.Poller)  # its own: the connections to its replicas
    body: Mapping[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    schedule: Schedule = field(init=False)  # when the next pass, poll and restart are due (its timing: settings)
    watch: health_watch.Watch | None = field(init=False)  # each replica's health watch (settings.health_watch)
    rollouts: RolloutGate | None = None   # the operator-wide cap on the rollouts it causes itself
    _rv_floor: int = 0                    # the resourceVersion of our last status write
    _inputs: SecretInputs | None = None   # the last full pass's Secret inputs, reused until the next
    _rendered: Rendered | None = None     # the last full pass's render, if it found every object in place
    _exposure: Exposure | None = None     # status.expose as last read (spec.expose)
    _health: dict[str, health.ReplicaHealth] = field(default_factory=dict)  # each replica's last answer, by pod
    _checked: Checked | None = None       # the spec as checked, kept while its generation is the same
    _probe: ProbeResult | None = None     # the last Redis probe (an observation pass may reuse it)
    _probed: RedisTarget | None = None    # ... of which target
    _probe_connection: KeptConnection = field(default_factory=KeptConnection)  # its own, left open by a probe
    _pending: asyncio.Future[Passed] | None = None  # a pass that outlasted its step (it wakes the loop when it ends)
    _waking: bool = False                 # ... and it will
    _last: Passed | None = None           # the last pass, published again with each poll while the next runs
    # called once when the first pass ends (supervisor.py: a loop found settled gives back its turn)
    first_pass_ended: Callable[[], None] | None = None
    _gates: dict[str, tuple[bool, float]] = field(default_factory=dict)  # readiness gates written: by pod uid
    _gone: list[health.ReplicaHealth] = field(default_factory=list)  # last answers of replicas gone, until published
    # replicas gone while their last answer said webhooks journalled: waiting for their stop's word
    _leaving: dict[str, unrecorded.Leaving] = field(default_factory=dict)
    _carried: set[str] = field(default_factory=set)  # ... of those, the ones that gave it
    # replicas whose last answer said they hold claims (claim_risk.remember): one that stops answering
    # keeps ExactlyOnceAdmission False (ClaimsAtRisk) until it answers, or its pod is gone and its
    # claims have had time to expire, whether or not it is still polled
    _holders: dict[str, claim_risk.Holder] = field(default_factory=dict)
    _heard: set[str] = field(default_factory=set)   # polled replicas that have answered /health
    _watched: set[str] = field(default_factory=set)  # replicas whose health watch stood in at the last step

    def __post_init__(self) -> None:
        self.log = ObjectLog(log, {"object": f"{self.namespace}/{self.name}"})
        self.schedule = Schedule(self.settings.reconcile.timing)
        self.watch = (health_watch.Watch(news=self._news, answered=lambda h: metrics.polled(
            self.namespace, self.name, (h.state.value,))) if self.settings.health_watch else None)

    def _news(self) -> None:
        """A replica's health watch brought a change: a step publishes it (at once, or when the
        schedule spaces it)."""
        delay = self.schedule.health_news(time.monotonic())
        if delay is None:
            return
        if delay <= 0:
            self.wake.set()
        else:
            asyncio.get_running_loop().call_later(delay, self.wake.set)

    def update(self, body: Mapping[str, Any]) -> None:
        """Called for every watch event of the object: wakes the loop when the spec changed."""
        if resource_version(body) < self._rv_floor:
            return  # older than our own last status write; a newer event follows
        first, self.body = not self.body, kept(body)
        generation = body.get("metadata", {}).get("generation")
        if first and settled_at(body.get("status"), generation):
            # an operator start or a shard taken over: what status says was settled is observed
            # first, and fully reconciled within the resync (schedule.adopt)
            self.schedule.adopt(time.monotonic(), generation, random.random())
        if self.schedule.spec_changed(generation):
            self.wake.set()  # a new spec deserves a prompt first try

    def nudge(self) -> None:
        """An owned object changed (drift, rollout progress): re-apply soon (schedule.PassKind)."""
        self.schedule.nudge()
        self.wake.set()

    async def run(self) -> None:
        """Until cancelled, or until the GatewayDeployment is found gone."""
        try:
            await self._loop()
        finally:
            if self._pending is not None:
                self._pending.cancel()
            self.poller.close()
            if self.watch is not None:
                self.watch.close()
            await self._probe_connection.aclose()

    async def _loop(self) -> None:
        while True:
            try:
                await self.step()
            except NotHeld:   # its shard's Lease lapsed: the holder stops this loop, or renews it
                self.log.debug("not written: this replica no longer holds the shard")
            except ApiException as e:
                if e.status == 404:  # deleted, and the watch event that says so was missed
                    self.log.info("the GatewayDeployment is gone; stopping its loop")
                    return
                # e.g. 422 when a status write meets a CRD rule the spec no longer passes
                self._errored(f"the API server refused a request: {e.status} {e.reason}")
            except SILENT as e:   # a status write the API server did not answer in time: retried
                self._errored(f"the API server did not answer in time: {type(e).__name__}")
            except Exception as e:  # noqa: BLE001 - never let one object's surprise kill its loop
                self._errored(f"step failed: {type(e).__name__}", exc_info=True)
            # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose event is set in the
            # same turn as the task's cancel returns and swallows the cancel, and the loop runs on
            # after its shard was given up (supervisor.drop then waits for ever)
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(self.schedule.sleep_for(time.monotonic(), passing=self._pending is not None)):
                    await self.wake.wait()
            self.wake.clear()

    async def step(self) -> None:
        body, checked = self.body, self._check(self.body)
        spec = checked.spec if checked else None
        health_spec = spec.health if spec else HealthSpec()
        started = time.monotonic()
        # a replica polled without a watch that holds claims is polled every schedule.HOLDER_HEARD_S
        every = schedule.poll_every(health_spec.interval_seconds,
                                    [h for pod, h in self._health.items() if pod not in self._watched])
        kind, poll_due = self.schedule.begin(started, every, random.uniform(0.5, 1.0),
                                             passing=self._pending is not None)
        news = self.schedule.take_news(started)  # what a health watch brought: published in this step
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._pass(body, checked, kind,
                                                             spec.expose.hosts if spec else ()))
            if self.first_pass_ended is not None:
                ended, self.first_pass_ended = self.first_pass_ended, None
                self._pending.add_done_callback(lambda _: ended())
        pending = self._pending
        # the poll runs beside the pass, and waits for no pass beyond the pass's own bound: a
        # full pass queued behind others for the API threads never delays what the replicas
        # report, and no poll is skipped
        replicas = await self._poll(health_spec, poll_due)
        every = schedule.poll_every(health_spec.interval_seconds,
                                    [h for h in replicas if h.pod not in self._watched])
        if every < health_spec.interval_seconds:  # a replica took claims since: polled again that soon
            self.schedule.hurry_poll(time.monotonic(), every)
        if spec is not None:
            await self._gate(spec, replicas)
        # a poll's news is published with the pass when it ends within its Redis probe's bound, so
        # that a Redis that hangs never shows RedisReachable=True beside the replicas that report it
        wait = schedule.publish_wait(time.monotonic(), self.schedule.next_poll, started,
                                     probe_bound(health_spec.timeout_seconds) if poll_due or news else None)
        if not pending.done():
            await asyncio.wait({pending}, timeout=wait)
        if pending.done():
            self._pending, self._waking = None, False
            passed = pending.result()  # a pass never raises (reconcile's boundary); its bookkeeping might
            self._last = passed._replace(outcome=_reused(passed.outcome))  # for the polls while the next runs
        else:  # the pass goes on; it wakes the loop when it ends
            if not self._waking:
                pending.add_done_callback(lambda _: self.wake.set())
                self._waking = True
            if not (poll_due or news) or self._last is None:
                return
            passed = self._last  # this poll's news, with what the last pass saw
        await self._publish(passed, replicas)

    async def _publish(self, passed: Passed, replicas: list[health.ReplicaHealth]) -> None:
        """Status from a pass's outcome and the latest poll; the body as the watch and our last
        write left it, at the generation that pass reconciled."""
        body, spec, outcome = _at_generation(self.body, passed.generation), passed.spec, passed.outcome
        self._leaving, left = unrecorded.settle(self._leaving, {p.name for p in self.pods()}, self._carried,
                                                time.monotonic(), spec.drain_seconds if spec else 0.0)
        self._carried &= set(self._leaving)
        facts = gather_facts(body, spec, outcome, replicas, time.time(), self._gone + left,
                             claim_risk.silent(self._holders, replicas), [w.last for w in self._leaving.values()])
        policy = gateway_network_policy_name(self.name) if spec and spec.network_policy.enabled else ""
        # the autoscaler and PodMonitor asked for; a spec that does not parse keeps what status said,
        # so that they are still removed once a spec without them comes
        autoscaling = (autoscaling_status(self.name, spec) if spec is not None
                       else (body.get("status") or {}).get("autoscaling"))
        # the first status of a generation is what a user waits on (observedGeneration)
        token = threads.PROMPT.set(passed.generation != (body.get("status") or {}).get("observedGeneration"))
        try:
            written = await publish(self.kube, body, facts, outcome, self._exposure, policy, self.log, autoscaling)
        finally:
            threads.PROMPT.reset(token)
        self._gone = []  # their journals are in this status's window now (unrecorded.py)
        if written is not None:  # the watch may still deliver events older than this write
            self.body, self._rv_floor = kept(written), resource_version(written)
        if spec is not None:
            await self._restart_stale(spec, facts, outcome)

    def _check(self, body: Mapping[str, Any]) -> Checked | None:
        """inputs.check, once per generation (a spec change bumps it; status writes do not)."""
        meta, kept_one = body["metadata"], self._checked
        generation = meta.get("generation")
        if kept_one is None or generation is None or kept_one.generation != generation:
            try:
                kept_one = inputs.check(Owner(self.name, self.namespace, meta.get("uid", "")),
                                        body.get("spec") or {}, generation, self.settings.reconcile.tenancy)
            except Exception:  # noqa: BLE001 - the pass meets it again and reports it (ReconcileError)
                kept_one = None
            self._checked = kept_one
        return kept_one

    async def _pass(self, body: Mapping[str, Any], checked: Checked | None, kind: PassKind,
                    hosts: Sequence[str]) -> Passed:
        """The pass, then what it leaves for the next ones: the Secret inputs and the exposure
        it read, and the schedule (the next full pass; a sticky problem survives observation)."""
        started = time.monotonic()
        # a spec not reconciled yet (a user waits on it) takes the prompt threads (threads.py);
        # this task's own context: the loop's next passes decide again
        threads.PROMPT.set(kind.applies and body["metadata"].get("generation") != self.schedule.reconciled_generation)
        seen = Observation(self.deployment(), self._inputs, self._exposure, self.claims(hosts), checked,
                           self._probe, self._probed, self._probe_connection, tuple(self._leaving), self._rendered)
        result = await reconcile(self.kube, self.prober, self.settings.reconcile, body, list(self.pods()),
                                 kind, seen, self.rollouts)
        outcome = result.outcome
        self._probe, self._probed = outcome.probe, outcome.target if outcome.probe is not None else None
        self._carried |= outcome.carried
        if outcome.exposure is not None or (outcome.applied and outcome.problem is None):
            self._exposure = outcome.exposure
        if outcome.applied:
            self._inputs = result.inputs  # None after a problem: observation passes read again until fixed
            self._rendered = result.rendered  # None after a problem: the next full pass renders and reads
            metrics.reconcile_took(self.namespace, self.name, time.monotonic() - started)
            metrics.reconciled(self.namespace, self.name, outcome.writes)
        shown = self.schedule.settled(time.monotonic(), outcome, body["metadata"].get("generation"), random.random(),
                                      kind)
        outcome = outcome._replace(problem=shown)
        if outcome.error is not None:
            metrics.reconcile_failed(self.namespace, self.name)
        self.log.problem(outcome.problem, outcome.error)
        return Passed(body["metadata"].get("generation"), checked.spec if checked else None, outcome)

    def _errored(self, message: str, exc_info: bool = False) -> None:
        metrics.reconcile_failed(self.namespace, self.name)
        self.log.problem(Problem("StepError", message), exc_info, message)
        self.schedule.errored(time.monotonic())

    async def _poll(self, health_spec: HealthSpec, due: bool) -> list[health.ReplicaHealth]:
        """Every serving replica's answer: its health watch's last one while that stands, else
        polled when the poll is due, else the last one (a replica without one, a new pod, is polled
        at once)."""
        targets = [health.Target(p.name, p.ip, api.GATEWAY_PORT) for p in self.pods() if p.polled and p.ip]
        watched: dict[str, health.ReplicaHealth] = {}
        if self.watch is not None:
            self.watch.follow([dataclasses.replace(t, port=api.WATCH_PORT) for t in targets],
                              health_spec.interval_seconds, health_spec.timeout_seconds)
            now = time.monotonic()
            watched = {t.pod: h for t in targets if (h := self.watch.answer(t.pod, now)) is not None}
        self._health.update(watched)
        # a replica whose watch stood in at the last step and no longer does (it failed: its news woke
        # this step) is polled now, not at the next interval: it may be a holder that stopped answering
        asked = [t for t in targets if t.pod not in watched and
                 (due or t.pod not in self._health or t.pod in self._watched)]
        self._watched = set(watched)
        if asked:
            timeouts = {t.pod: schedule.answer_timeout(health_spec.timeout_seconds, self._health.get(t.pod))
                        for t in asked}
            answers = await self.poller.poll(asked, health_spec.timeout_seconds, health_spec.max_concurrency,
                                             keep_alive=health_spec.interval_seconds < health_poll.REUSE_WITHIN_S,
                                             timeouts=timeouts)
            metrics.polled(self.namespace, self.name, (r.state.value for r in answers))
            self._health.update((r.pod, r) for r in answers)
        live = {p.name for p in self.pods() if not p.deleting}
        for pod, last in self._health.items():
            if pod in live:
                continue  # deleted, or being deleted: a journal it said it had waits for its stop's word
            if last.state is health.Idempotency.UNKNOWN and pod in self._heard:  # went away unheard
                last = claim_risk.left_by(self._holders[pod]) if pod in self._holders else claim_risk.unheard(last)
            if unrecorded.leaves_a_journal(last):
                self._leaving.setdefault(pod, unrecorded.Leaving(last, time.monotonic()))
            else:
                self._gone.append(last)
        self._health = {t.pod: self._health[t.pod] for t in targets if t.pod in self._health}
        # the replicas that have answered since they started: one that goes away unheard may have
        # answered turns it could not record (claim_risk.unheard); one never heard is a pod that
        # never came up
        self._heard = {pod for pod in self._heard if pod in self._health} | \
            {pod for pod, h in self._health.items() if h.state is not health.Idempotency.UNKNOWN}
        self._holders = claim_risk.remember(self._holders, list(self._health.values()),
                                            {p.name for p in self.pods()}, time.monotonic())
        return list(self._health.values())

    async def _gate(self, spec: GatewaySpec, replicas: Sequence[health.ReplicaHealth]) -> None:
        """The readiness gate of each polled pod that carries it (render.deployment.gated): False for the
        replicas out_of_traffic says are cut off from Redis, True for the others, each written
        only when it changes (the pod index shows what was written once its watch event comes)."""
        if not gated(spec):
            return
        polled = [p for p in self.pods() if p.polled]
        pods = [p for p in polled if p.gated]
        answered = {h.pod for h in replicas}
        # a replica that reaches Redis counts once its containers are ready: its own gate is set
        # True in this same round, so a fresh replica cut off from its start never takes traffic
        out = out_of_traffic(replicas, {p.name for p in polled})
        now, taken_out = time.monotonic(), 0
        for pod in pods:
            if pod.name not in answered:
                continue  # not polled yet: its gate waits for its first answer
            want = pod.name not in out
            written = self._gates.get(pod.uid)
            if pod.gate is want or (written is not None and written[0] is want and now - written[1] < GATE_LAG_S):
                continue
            reachers = sorted(h.pod for h in replicas if h.redis == contract.ANSWERS and h.pod != pod.name)
            reason, message = (("RedisReachable", "this replica reaches Redis (or does not say otherwise)") if want else
                               ("CutOffFromRedis", f"this replica cannot reach Redis while {', '.join(reachers[:3])} can: "
                                "out of the Service and the edge until it reaches Redis again"))
            try:
                await threads.run(self.kube.set_pod_condition, self.namespace, pod.name, pod.uid,
                                        gate_condition(want, reason, message, now_iso()))
            except ApiException as e:
                # gone or replaced meanwhile (404, 409: its uid): nothing to gate; anything else (403:
                # the chart's RBAC not upgraded with the operator) is said, and the step goes on:
                # a 404 must never reach the loop, which reads it as the GatewayDeployment gone
                if e.status not in (404, 409):
                    self.log.warning("setting pod %s's readiness gate failed: %s %s", pod.name, e.status, e.reason)
                continue
            self._gates[pod.uid] = (want, now)
            if not want:
                taken_out += 1
                self.log.warning("pod %s cannot reach Redis while %s can: taken out of the traffic", pod.name,
                                 ", ".join(reachers[:3]))
                post_event(self.body, "Warning", "ReplicaCutOffFromRedis",
                           f"pod {pod.name} cannot reach Redis while {', '.join(reachers[:3])} can: it leaves "
                                   "the Service and the edge (readiness gate) until it reaches Redis again")
            elif pod.gate is False:
                self.log.info("pod %s reaches Redis again: back in the traffic", pod.name)
                post_event(self.body, "Normal", "ReplicaBackInTraffic",
                           f"pod {pod.name} reaches Redis again: back in the Service and the edge")
        live = {p.uid for p in pods}
        self._gates = {uid: w for uid, w in self._gates.items() if uid in live}
        metrics.traffic_gated(self.namespace, self.name, taken_out, sum(1 for p in pods if p.name in out))

    async def _restart_stale(self, spec: GatewaySpec, facts: Facts, outcome: Outcome) -> None:
        """replicas.stale_replica says which, the schedule when (its cooldown)."""
        name = stale_replica(spec.health.restart_stale_replicas, facts.health, facts.ready_replicas,
                             facts.running_replicas)
        pod = next((p for p in self.pods() if p.name == name), None) if name else None
        if pod is None or not self.schedule.restart_allowed(time.monotonic(), spec.health.restart_cooldown_seconds):
            return
        self.schedule.restarted(time.monotonic())
        await threads.run(self.kube.delete_pod, self.namespace, pod.name, pod.uid)
        metrics.restarted_stale_replica(self.namespace, self.name)
        self.log.info("restarted pod %s: it kept the build-time SQLite fallback", pod.name)
        post_event(self.body, "Normal", "RestartedStaleReplica",
                   f"restarted pod {pod.name}: it kept the per-replica SQLite fallback after Redis "
                           "came back (the gateway rebuilds its store only on restart)")
