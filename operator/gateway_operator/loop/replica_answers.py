"""What the replicas answered, and who is leaving: the memory of a GatewayDeployment's /health
answers across the loop's steps (controller.py drives them; this module keeps them).

Each step ``gather``s every serving replica's answer (its health watch's while that stands in,
else a poll when due, else the last one), and notes the replicas that went away: their last
answer is published once (``gone``), or, when it said webhooks were journalled, they wait for
their stop's word (``leaving``, core.unrecorded.Leaving) and replicas that held claims keep
ExactlyOnceAdmission False until they answer again or their claims expire (core.claim_risk).
Apart from the controller so that the driver holds no replica bookkeeping: what goes in (the
pods, the health spec, whether the poll is due), what comes out (the answers, ``ForStatus``).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, NamedTuple, Sequence

from gateway_operator import api
from gateway_operator.api import HealthSpec
from gateway_operator.clients import health_poll, health_watch
from gateway_operator.core import claim_risk, health, schedule, unrecorded
from gateway_operator.core.pods import PodView


class ForStatus(NamedTuple):
    """What a status write reads of the replicas beyond their answers (core.facts.gather)."""

    gone: list[health.ReplicaHealth]            # last answers of replicas gone since the last write
    silent_holders: list[claim_risk.Holder]      # replicas that held claims and do not answer now
    leaving: list[health.ReplicaHealth]          # last answers of replicas waited on for their stop's word


@dataclass
class ReplicaAnswers:
    """Every replica's last answer, and the replicas gone or leaving, across steps; asked through the
    loop's own ``poller`` (its connections to the replicas) and ``watch`` (settings.health_watch),
    ``polled`` told the state of each answer polled (metrics)."""

    poller: health_poll.Poller
    watch: health_watch.Watch | None
    polled: Callable[[Iterable[str]], None]
    _health: dict[str, health.ReplicaHealth] = field(default_factory=dict)  # each replica's last answer, by pod
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

    def polled_alone(self) -> list[health.ReplicaHealth]:
        """The last answers of the replicas no health watch stood in for at the last step: what
        schedule.poll_every reads (a holder among them is polled sooner)."""
        return [h for pod, h in self._health.items() if pod not in self._watched]

    def leaving(self) -> tuple[str, ...]:
        """The replicas waited on for their stop's word (a pass reads it: steps.Observation.leaving)."""
        return tuple(self._leaving)

    def carried(self, pods: Collection[str]) -> None:
        """A pass read these replicas' stop's word: their journals reached Redis."""
        self._carried |= set(pods)

    async def gather(self, pods: Callable[[], Sequence[PodView]], health_spec: HealthSpec,
                     due: bool) -> list[health.ReplicaHealth]:
        """Every serving replica's answer: its health watch's last one while that stands, else
        polled when the poll is due, else the last one (a replica without one, a new pod, is polled
        at once). ``pods``: the live pod index (read again after the poll)."""
        watch = self.watch
        targets = [health.Target(p.name, p.ip, api.GATEWAY_PORT) for p in pods() if p.polled and p.ip]
        watched: dict[str, health.ReplicaHealth] = {}
        if watch is not None:
            watch.follow([dataclasses.replace(t, port=api.WATCH_PORT) for t in targets],
                         health_spec.interval_seconds, health_spec.timeout_seconds)
            now = time.monotonic()
            watched = {t.pod: h for t in targets if (h := watch.answer(t.pod, now)) is not None}
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
            self.polled(r.state.value for r in answers)
            self._health.update((r.pod, r) for r in answers)
        self._went_away({p.name for p in pods() if not p.deleting})
        self._health = {t.pod: self._health[t.pod] for t in targets if t.pod in self._health}
        # the replicas that have answered since they started: one that goes away unheard may have
        # answered turns it could not record (claim_risk.unheard); one never heard is a pod that
        # never came up
        self._heard = {pod for pod in self._heard if pod in self._health} | \
            {pod for pod, h in self._health.items() if h.state is not health.Idempotency.UNKNOWN}
        self._holders = claim_risk.remember(self._holders, list(self._health.values()),
                                            {p.name for p in pods()}, time.monotonic())
        return list(self._health.values())

    def _went_away(self, live: Collection[str]) -> None:
        """The replicas answered before and no longer live: gone, or leaving with a journal."""
        for pod, last in self._health.items():
            if pod in live:
                continue  # deleted, or being deleted: a journal it said it had waits for its stop's word
            if last.state is health.Idempotency.UNKNOWN and pod in self._heard:  # went away unheard
                last = claim_risk.left_by(self._holders[pod]) if pod in self._holders else claim_risk.unheard(last)
            if unrecorded.leaves_a_journal(last):
                self._leaving.setdefault(pod, unrecorded.Leaving(last, time.monotonic()))
            else:
                self._gone.append(last)

    def for_status(self, present: Collection[str], replicas: Sequence[health.ReplicaHealth],
                   drain_s: float) -> ForStatus:
        """What the next status write reads: the leaving replicas settled (unrecorded.settle:
        ``present``, the pods the API still has; ``drain_s``, the spec's drain), those that left
        their journal behind counted among the gone."""
        self._leaving, left = unrecorded.settle(self._leaving, present, self._carried, time.monotonic(), drain_s)
        self._carried &= set(self._leaving)
        return ForStatus(self._gone + left, claim_risk.silent(self._holders, replicas),
                         [w.last for w in self._leaving.values()])

    def close(self) -> None:
        """The loop ends: its connections to the replicas are closed."""
        self.poller.close()
        if self.watch is not None:
            self.watch.close()

    def published(self) -> None:
        """A status write went through: the gone replicas' journals are in its window now (unrecorded.py)."""
        self._gone = []
