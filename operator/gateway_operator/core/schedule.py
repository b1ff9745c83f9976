"""When one GatewayDeployment's loop runs next, and which problem it keeps showing: pure, with
the clock (monotonic seconds) and the jitter as inputs, so tests drive it without sleeping.

The one owner of "when next": the backoff after a problem, the resync and its jitter, the recheck
of a rollout waiting for its slot, the /health poll's cadence, how long a step waits for its pass
before publishing without it, the stale-replica restart's cooldown, and the health watch's
(health_watch.py): how long each long-poll may wait, how soon one that failed is tried again,
how long its answer stands in for a poll, and when a step publishes what it brought. As controller-runtime's
queue owns the backoff and the reconciler only returns what happened, the pass (reconcile.py)
returns an ``Outcome`` and ``settled`` decides from it when the next full pass is due. The loop
(controller.py) asks ``begin`` at each step which kind of pass this one is (``PassKind``: observe,
re-apply, or full), tells ``settled`` (or ``errored``) how it ended, and sleeps ``sleep_for``
unless woken.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

from gateway_operator.api import reasons
from gateway_operator.core.claim_risk import holds
from gateway_operator.core.conditions import Problem
from gateway_operator.core.health import ReplicaHealth
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.replicas import CUT_OFF_AFTER_S
from gateway_operator.core.rollouts import RolloutState

#: problems only a full pass can see (a write the API server refused, a foreign object): shown
#: until the next full pass, so status does not flap between it and the observation passes
STICKY = (reasons.APPLY_FAILED, reasons.OBJECT_NOT_OWNED, reasons.RECONCILE_ERROR, reasons.EXPOSE_NOT_SERVED,
          reasons.API_SERVER_UNAVAILABLE)
PROBLEM_BACKOFF = (2.0, 4.0, 8.0, 16.0, 30.0, 60.0)  # retries while a problem persists
MIN_SLEEP = 0.1
POLL_SLACK = MIN_SLEEP  # a step this close before its poll is due polls now, not in a moment
#: a GatewayDeployment waiting for a rollout slot (rollouts.py) looks again this often (a full
#: pass), so that a freed slot is taken within seconds rather than at its next resync
QUEUED_RECHECK_S = 5.0
#: the health watch, tried again after it failed (refused, reset, an answer that is not the
#: launcher's): the last step is also how often a replica whose image has no watch is asked
WATCH_RETRY = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)
#: a watch asks again no sooner after its last ask, whatever the answers (an image answering at once)
WATCH_MIN_GAP_S = 0.5
#: a step that publishes a watch's news comes no sooner after the last one (a counter that moves
#: with every webhook during an outage changes the tag each time)
NEWS_GAP_S = 1.0
#: a duration a replica reports crosses a bound the operator acts on this long after the long-poll
#: that asks for it: its answer rounds to a tenth, and the tick that reads it is 0.2 s
CROSSING_SLACK_S = 0.3
#: a replica whose last answer said it holds claims (claim_risk.holds) is heard at least this often
#: (its long-poll waits no longer; without a watch it is polled this often), and waited for no
#: longer than HOLDER_TIMEOUT_S past that (whatever spec.health.timeoutSeconds says): a holder that
#: stops answering (paused, starved, cut off from the operator) must be noticed well within its
#: claim lease (60 s by default), since another replica may admit its webhook once the claim
#: expires. Through the watch: the long-poll fails HOLDER_HEARD_S + HOLDER_TIMEOUT_S after it was
#: sent (+ WATCH_MIN_GAP_S after the last answer), the loop is woken (NEWS_GAP_S at most) and polls
#: that replica at once (HOLDER_TIMEOUT_S): about 7.5 s at most, then a status write. Through polls:
#: HOLDER_HEARD_S + HOLDER_TIMEOUT_S, 4 s. The cost: one answer every 2 s per holder, not per interval
HOLDER_HEARD_S = 2.0
HOLDER_TIMEOUT_S = 2.0


class PassKind(enum.Enum):
    """What a pass does, the least first (a step runs the most that is due)."""

    OBSERVE = 1  # probe over the kept connection, read the Deployment as watched; no apply
    # an owned object changed (drift, a rollout's or a pod's progress): apply, against the Secret
    # inputs and the probe the last full pass left. Secrets have no watch, so a Secret's change is
    # the next full pass's to notice, as between observation passes; a re-apply never moves it
    REAPPLY = 2
    FULL = 3     # the spec changed, the resync, a retry after a problem: read the Secrets afresh, probe whole, apply

    @property
    def applies(self) -> bool:
        return self is not PassKind.OBSERVE


def _most(a: PassKind, b: PassKind) -> PassKind:
    return a if a.value >= b.value else b


@dataclass(frozen=True)
class Timing:
    """The operator-wide timing of full passes (the flags of ``gateway-operator run``)."""

    resync_seconds: float = 60.0                        # a full pass (drift check) at least this often
    problem_backoff: tuple[float, ...] = PROBLEM_BACKOFF  # retries while a problem persists


def backoff(failures: int, steps: tuple[float, ...] = PROBLEM_BACKOFF) -> float:
    """Seconds before the next full pass after ``failures`` failed ones in a row (the one backoff)."""
    return steps[min(failures, len(steps) - 1)]


def resync_after(resync_seconds: float, jitter: float, first: bool = False) -> float:
    """The resync period less up to 10% (``jitter`` in [0, 1)), so that objects drift apart.
    The ``first`` after a loop starts comes anywhere from a tenth of the period to all of it:
    the loops an operator start finds together (1,000 full passes in one minute) then resync
    spread over the period, not in one wave a period later (773 of 1,000 within 11 s, measured)."""
    if first:
        return resync_seconds * (0.1 + 0.9 * jitter)
    return resync_seconds * (1.0 - 0.1 * jitter)


def requeue_after(timing: Timing, outcome: Outcome, failures: int, first: bool, jitter: float) -> float:
    """Seconds until the next full pass after a pass that ended with ``outcome``: the backoff
    while a problem persists (``failures`` in a row before this one), a waiting rollout's recheck,
    else the resync (``first``: the loop's first full pass, spread over the whole period)."""
    if outcome.problem is not None:
        return backoff(failures, timing.problem_backoff)
    requeue = resync_after(timing.resync_seconds, jitter, first and outcome.applied)
    if outcome.rollout is RolloutState.QUEUED:  # a slot may free any moment: look again soon
        requeue = min(requeue, QUEUED_RECHECK_S)
    return requeue


def publish_wait(now: float, poll_due: float, started: float, probe_bound: float | None) -> float:
    """How long a step waits for its pass before it publishes the poll without it: until the next
    poll; when this step polled (``probe_bound``: the bound of the pass's Redis probe), no longer
    than that bound from the step's start, so that a Redis that hangs shows in the same status as
    the replicas that report it, and only a pass queued for the API threads is left behind."""
    wait = poll_due - now
    if probe_bound is not None:
        wait = min(wait, started + probe_bound - now)
    return max(0.0, wait)


def watch_due(due: float | None, now: float, interval: float) -> float:
    """When a replica's next silent answer is due: on a fixed cadence of ``interval`` from its
    first ask (the watch moves ``due`` on by one interval after each silent answer), so that a
    silent replica is heard once an interval whatever each round trip takes (a wait of a fixed
    length drifts: a little more often or less, by the round trip). A cadence more than an interval
    behind (a failure, a busy loop) starts again from ``now``; a shorter interval takes effect at once."""
    if due is None or now - due > interval:
        return now + interval
    return min(due, now + interval)


def watch_wait(until_due: float, last: ReplicaHealth | None) -> float:
    """How long a replica's long-poll may wait for a change: until its silent answer is due
    (``watch_due``: the interval is the longest silence), shortened to when a duration the
    operator acts on crosses its bound (a replica cut off from Redis, or one reaching it again, for
    CUT_OFF_AFTER_S: replicas.out_of_traffic). A duration is not in the watch's tag, so its
    crossing is asked for, not announced. A holder of claims is heard every HOLDER_HEARD_S, so that
    one that stops answering is noticed within seconds."""
    wait = until_due
    if last is not None and holds(last):
        wait = min(wait, HOLDER_HEARD_S)
    if last is not None:
        for since in (last.answers_for_s, last.unusable_for_s):
            if since is not None and since < CUT_OFF_AFTER_S:
                wait = min(wait, CUT_OFF_AFTER_S - since + CROSSING_SLACK_S)
    return max(WATCH_MIN_GAP_S, wait)


def answer_timeout(timeout: float, last: ReplicaHealth | None) -> float:
    """How long past its wait a replica's answer is waited for: ``timeout`` (spec.health), no more
    than HOLDER_TIMEOUT_S for a replica whose last answer said it holds claims."""
    return min(timeout, HOLDER_TIMEOUT_S) if last is not None and holds(last) else timeout


def poll_every(interval: float, unwatched: Sequence[ReplicaHealth]) -> float:
    """The poll's cadence: spec.health's interval, no longer than HOLDER_HEARD_S while a replica
    polled without a watch said at its last answer that it holds claims."""
    return min(interval, HOLDER_HEARD_S) if any(holds(h) for h in unwatched) else interval


def watch_retry(failures: int) -> float:
    """Seconds before a watch that failed ``failures`` times in a row is tried again (its replica is
    polled meanwhile)."""
    return backoff(failures, WATCH_RETRY)


def watch_stands(answered_at: float, now: float, interval: float, timeout: float) -> bool:
    """A watch's last answer stands in for a poll while its next one may still come (its wait, the
    interval, and its timeout, plus a second); older, the replica is polled."""
    return now - answered_at <= interval + timeout + 1.0


@dataclass
class Schedule:
    timing: Timing = field(default_factory=Timing)
    # the spec changed (FULL), or an owned object did (REAPPLY): such a pass is due
    dirty: PassKind = PassKind.FULL
    reconciled_generation: int | None = None
    latest_generation: int | None = None  # the newest generation a watch event showed
    next_full: float = 0.0
    failures: int = 0                    # consecutive passes that ended with a problem or an error
    sticky: Problem | None = None        # a problem of the last full pass that observation cannot see
    next_poll: float = 0.0               # when the next /health poll is due (fixed cadence)
    last_restart: float = 0.0
    news_at: float | None = None         # when a step publishes what a health watch brought
    last_news: float = float("-inf")     # ... the last such step

    def health_news(self, now: float) -> float | None:
        """A health watch brought a change: seconds until the step that publishes it (at once, or
        NEWS_GAP_S after the last one), or None when such a step is already due."""
        if self.news_at is not None:
            return None
        self.news_at = max(now, self.last_news + NEWS_GAP_S)
        return self.news_at - now

    def take_news(self, now: float) -> bool:
        """A step starts: does it publish a watch's news (whether or not a poll is due)."""
        if self.news_at is None or now < self.news_at - POLL_SLACK:
            return False
        self.news_at, self.last_news = None, now
        return True

    def spec_changed(self, generation: int | None) -> bool:
        """A watch event's generation: True (and a prompt first try) when it is not the reconciled one."""
        self.latest_generation = generation
        if generation == self.reconciled_generation:
            return False
        self.dirty, self.failures = PassKind.FULL, 0
        return True

    def nudge(self) -> None:
        self.dirty = _most(self.dirty, PassKind.REAPPLY)

    def adopt(self, now: float, generation: int | None, jitter: float) -> None:
        """The loop starts on an object whose status says a pass reconciled ``generation`` and left
        nothing to do (conditions.settled_at: an operator start, a shard taken over from a replica
        that died): its first passes observe, and its first full pass comes anywhere in the
        resync period (``resync_after``'s first), so that the loops found together cost an
        observation pass each instead of a wave of full passes, and a spec change among them is
        not queued behind that wave. A newer generation still makes the next pass full, a nudge a re-apply."""
        self.reconciled_generation = self.latest_generation = generation
        self.dirty = PassKind.OBSERVE
        self.next_full = now + resync_after(self.timing.resync_seconds, jitter, first=True)

    def begin(self, now: float, poll_interval: float, first_poll_jitter: float,
              passing: bool = False) -> tuple[PassKind, bool]:
        """A step starts: (which kind of pass it runs, is a /health poll due); ``passing``: a
        pass of an earlier step still runs (the step only polls: OBSERVE, and no new pass). Polls keep a fixed
        cadence, one interval apart whatever else wakes the loop (a resync, a nudge, a spec change
        reuse the last answers), so every ready replica is polled once per interval, no more. The
        second poll comes ``first_poll_jitter`` (0.5-1.0) of an interval after the first, so that
        gateways found together (an operator start) do not poll in one burst for ever."""
        poll = now >= self.next_poll - POLL_SLACK
        if poll:
            if not self.next_poll:
                self.next_poll = now + poll_interval * first_poll_jitter
            elif now - self.next_poll < poll_interval:
                self.next_poll += poll_interval  # late by a little: the next one keeps the cadence
            else:
                self.next_poll = now + poll_interval  # late by more than an interval: no catching up
        if passing:
            return PassKind.OBSERVE, poll
        return (PassKind.FULL if now >= self.next_full else self.dirty), poll

    def settled(self, now: float, outcome: Outcome, generation: int | None, jitter: float,
                kind: PassKind = PassKind.FULL) -> Problem | None:
        """A pass of ``kind`` ended with ``outcome`` (``jitter`` in [0, 1) spreads the resync);
        returns the problem status shows (a sticky one survives observation passes). Only a full
        pass, or a problem, sets the next full pass: re-applies as often as owned objects change
        never put off the resync that reads the Secrets again."""
        applied, problem = outcome.applied, outcome.problem
        requeue = requeue_after(self.timing, outcome, self.failures, self.reconciled_generation is None, jitter)
        if applied:  # a newer spec that came while it ran is still due
            newer = self.latest_generation is not None and generation != self.latest_generation
            self.dirty = PassKind.FULL if newer else PassKind.OBSERVE
            self.reconciled_generation = generation
            self.next_full = now + requeue if kind is PassKind.FULL or problem else min(self.next_full, now + requeue)
            self.failures = self.failures + 1 if problem else 0
            self.sticky = problem if problem and problem.reason in STICKY else None
            return problem
        if problem is None:
            return self.sticky
        self.next_full = min(self.next_full, now + requeue)
        return problem

    def errored(self, now: float) -> None:
        """The step itself failed (not the pass): the next full pass backs off."""
        self.next_full = now + backoff(self.failures, self.timing.problem_backoff)
        self.failures += 1

    def hurry_poll(self, now: float, within: float) -> None:
        """The next poll comes within ``within`` (a replica polled without a watch holds claims)."""
        self.next_poll = min(self.next_poll, now + within)

    def restart_allowed(self, now: float, cooldown: float) -> bool:
        return now - self.last_restart >= cooldown

    def restarted(self, now: float) -> None:
        self.last_restart = now

    def sleep_for(self, now: float, passing: bool = False) -> float:
        """Until the next poll or full pass; while a full pass runs, until the next poll (the
        pass wakes the loop when it ends)."""
        due = self.next_poll if passing else min(self.next_poll, self.next_full)
        if self.news_at is not None:
            due = min(due, self.news_at)
        return max(MIN_SLEEP, due - now)
