"""One long-lived task per GatewayDeployment, the I/O around the pass: wait as the schedule
says (schedule.py), run the pass (reconcile.py) beside the /health poll (each replica's health
watch, health_watch.py, stands in for its poll while it answers, and its news wakes the loop), gather the facts
(facts.py), publish (publish.py), restart a replica stuck on the build-time fallback. One
sequential task per object: no two writers race on one status. A pass that outlasts its step's
poll (a full pass behind a resync wave) goes on while the next steps poll and publish with what
the last pass saw; one pass at a time. An error of the loop's own backs off like a failed pass
and is logged once per change.

The controller only drives: what the passes leave for the next ones is one record (pass_memory.py),
the pass running beside the steps is pass_task.py's, the replicas' answers and who is leaving are
replica_answers.py's, the writes on the pods (readiness gates, stale restarts) pod_actuators.py's,
and the status write publish.py's.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator.api import HealthSpec
from gateway_operator.api.objects import kept, meta_of, resource_version, status_of
from gateway_operator.api.tenancy import Claim
from gateway_operator.clients import health_poll, health_watch
from gateway_operator.clients.kube import SILENT, Kube, NotHeld
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import health, schedule
from gateway_operator.core.conditions import Problem, settled_at
from gateway_operator.core.facts import gather as gather_facts
from gateway_operator.core.pods import LiveDeployment, PodView
from gateway_operator.core.probe_result import bound as probe_bound
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.schedule import PassKind, Schedule
from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop import metrics, threads
from gateway_operator.loop.inputs import Checked
from gateway_operator.loop.pass_memory import Passed, PassMemory
from gateway_operator.loop.pass_task import PassTask
from gateway_operator.loop.pod_actuators import PodActuators
from gateway_operator.loop.publish import ObjectLog, at_generation, publish
from gateway_operator.loop.reconcile import reconcile
from gateway_operator.loop.replica_answers import ReplicaAnswers

log = logging.getLogger(__name__)


def _failure(e: Exception) -> tuple[str, bool]:
    """What the log says of an error of a step, and whether with its traceback (a surprise's)."""
    if isinstance(e, ApiException):  # e.g. 422 when a status write meets a CRD rule the spec no longer passes
        return f"the API server refused a request: {e.status} {e.reason}", False
    if isinstance(e, SILENT):  # a status write the API server did not answer in time: retried
        return f"the API server did not answer in time: {type(e).__name__}", False
    return f"step failed: {type(e).__name__}", True


@dataclass
class GatewayController:
    """Drives one GatewayDeployment's loop; the fields up to first_pass_ended are what it is given."""

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
    # called once when the first pass ends (supervisor.py: a loop found settled gives back its turn)
    first_pass_ended: Callable[[], None] | None = None
    _memory: PassMemory = field(default_factory=PassMemory)  # what the passes leave for the next ones
    _answers: ReplicaAnswers = field(init=False)  # the replicas' answers, who is leaving (asked: poller, watch)
    _pass_task: PassTask[Passed] = field(init=False)  # one pass at a time, which may outlast its step

    def __post_init__(self) -> None:
        self.log = ObjectLog(log, {"object": f"{self.namespace}/{self.name}"})
        self.act = PodActuators(self.kube, self.namespace, self.name, self.log)  # the writes on its pods
        self.schedule = Schedule(self.settings.reconcile.timing)
        polled = functools.partial(metrics.polled, self.namespace, self.name)
        self.watch = (health_watch.Watch(news=self._news, answered=lambda h: polled((h.state.value,)))
                      if self.settings.health_watch else None)
        self._answers, self._pass_task = ReplicaAnswers(self.poller, self.watch, polled), PassTask(self.wake.set)

    def _news(self) -> None:
        """A replica's health watch brought a change: a step publishes it (at once, or as the schedule spaces it)."""
        delay = self.schedule.health_news(time.monotonic())
        if delay is not None and delay <= 0:
            self.wake.set()
        elif delay is not None:
            asyncio.get_running_loop().call_later(delay, self.wake.set)

    def update(self, body: Mapping[str, Any]) -> None:
        """Called for every watch event of the object: wakes the loop when the spec changed."""
        if resource_version(body) < self._memory.rv_floor:
            return  # older than our own last status write; a newer event follows
        first, self.body = not self.body, kept(body)
        generation = meta_of(body).generation
        if first and settled_at(status_of(body), generation):
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
            self._pass_task.cancel()
            self._answers.close()
            await self._memory.connection.aclose()

    async def _loop(self) -> None:
        while True:
            try:
                await self.step()
            except NotHeld:   # its shard's Lease lapsed: the holder stops this loop, or renews it
                self.log.debug("not written: this replica no longer holds the shard")
            except Exception as e:  # noqa: BLE001 - never let one object's surprise kill its loop
                if isinstance(e, ApiException) and e.status == 404:  # deleted, its watch event missed
                    self.log.info("the GatewayDeployment is gone; stopping its loop")
                    return
                message, exc_info = _failure(e)  # backs off like a failed pass
                metrics.reconcile_failed(self.namespace, self.name)
                self.log.problem(Problem("StepError", message), exc_info, message)
                self.schedule.errored(time.monotonic())
            # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose event is set in the same turn as
            # the task's cancel swallows the cancel: the loop runs on once its shard is given up (supervisor.drop hangs)
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(self.schedule.sleep_for(time.monotonic(), passing=self._pass_task.running)):
                    await self.wake.wait()
            self.wake.clear()

    async def step(self) -> None:
        body = self.body
        checked = self._memory.check(body, self.name, self.namespace, self.settings.reconcile.tenancy)
        spec = checked.spec if checked else None
        health_spec = spec.health if spec else HealthSpec()
        started = time.monotonic()
        # a replica polled without a watch that holds claims is polled every schedule.HOLDER_HEARD_S
        every = schedule.poll_every(health_spec.interval_seconds, self._answers.polled_alone())
        kind, poll_due = self.schedule.begin(started, every, random.uniform(0.5, 1.0),
                                             passing=self._pass_task.running)
        news = self.schedule.take_news(started)  # what a health watch brought: published in this step
        if not self._pass_task.running:
            ended, self.first_pass_ended = self.first_pass_ended, None
            self._pass_task.start(self._pass(body, checked, kind, spec.expose.hosts if spec else ()), ended)
        # the poll runs beside the pass, and waits for no pass beyond the pass's own bound: a full pass
        # queued behind others for the API threads never delays what the replicas report, no poll skipped
        replicas = await self._answers.gather(self.pods, health_spec, poll_due)
        every = schedule.poll_every(health_spec.interval_seconds, self._answers.polled_alone())
        if every < health_spec.interval_seconds:  # a replica took claims since: polled again that soon
            self.schedule.hurry_poll(time.monotonic(), every)
        if spec is not None:
            self._memory.gates = await self.act.gate(self.body, spec, self.pods(), replicas, self._memory.gates)
        # a poll's news is published with the pass when it ends within its Redis probe's bound, so
        # that a Redis that hangs never shows RedisReachable=True beside the replicas that report it
        wait = schedule.publish_wait(time.monotonic(), self.schedule.next_poll, started,
                                     probe_bound(health_spec.timeout_seconds) if poll_due or news else None)
        done = await self._pass_task.ended(wait)  # None: the pass goes on (it wakes the loop when it ends)
        passed = self._memory.ended(done)  # ... then the last one's, published again with this poll's news
        if passed is not None and (done is not None or poll_due or news):
            await self._publish(passed, replicas)

    async def _publish(self, passed: Passed, replicas: list[health.ReplicaHealth]) -> None:
        """Status from a pass's outcome and the latest poll (publish.py), then a stale replica restarted."""
        spec = passed.spec
        beside = self._answers.for_status({p.name for p in self.pods()}, replicas, spec.drain_seconds if spec else 0.0)
        body = at_generation(self.body, passed.generation)
        facts = gather_facts(body, spec, passed.outcome, replicas, time.time(), *beside)
        written = await publish(self.kube, body, spec, facts, passed.outcome, self._memory.exposure, self.log)
        self._answers.published()
        if written is not None:  # the watch may still deliver events older than this write
            self.body, self._memory.rv_floor = kept(written), resource_version(written)
        if spec is not None:
            await self.act.restart_stale(self.body, spec, self.pods(), facts, self.schedule)

    async def _pass(self, body: Mapping[str, Any], checked: Checked | None, kind: PassKind,
                    hosts: Sequence[str]) -> Passed:
        """The pass, then what it leaves for the next ones (PassMemory.keep, the replicas whose stop's
        word it read) and the schedule (the next full pass; a sticky problem survives observation)."""
        started, generation = time.monotonic(), meta_of(body).generation
        # a spec not reconciled yet (a user waits on it) takes the prompt threads (threads.py);
        # this task's own context: the loop's next passes decide again
        threads.PROMPT.set(kind.applies and generation != self.schedule.reconciled_generation)
        seen = self._memory.seen(self.deployment(), self.claims(hosts), checked, self._answers.leaving())
        result = await reconcile(self.kube, self.prober, self.settings.reconcile, body, list(self.pods()),
                                 kind, seen, self.rollouts)
        outcome, took = result.outcome, time.monotonic() - started
        self._memory.keep(result)
        self._answers.carried(outcome.carried)
        metrics.pass_ended(self.namespace, self.name, outcome.applied, outcome.writes, took, outcome.error is not None)
        shown = self.schedule.settled(time.monotonic(), outcome, generation, random.random(), kind)
        self.log.problem(shown, outcome.error)
        return Passed(generation, checked.spec if checked else None, outcome._replace(problem=shown))
