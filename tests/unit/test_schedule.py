"""The loop's timing (schedule.py), driven by a fake clock: when a pass is a full one, how a
problem backs off, which problem stays shown between full passes, the poll cadence, the restart
cooldown: all from the outcome a pass returns, the pass never says when to come back. No test
here sleeps."""
from __future__ import annotations

from gateway_operator.api import reasons
from gateway_operator.core import schedule
from gateway_operator.core.conditions import Problem, settled_at
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.rollouts import RolloutState
from gateway_operator.core.schedule import PassKind, Schedule, Timing

INTERVAL = 10.0
APPLY = Problem(reasons.APPLY_FAILED, "the API server refused a change")
REDIS = Problem(reasons.REDIS_TARGET_NOT_ALLOWED, "outside the allowlist")


def ended(s: Schedule, now: float, applied: bool, generation: int, problem: Problem | None = None,
          jitter: float = 0.0, rollout: RolloutState = RolloutState.NONE,
          kind: PassKind = PassKind.FULL) -> Problem | None:
    """A pass of ``kind`` ended at ``now`` with this outcome: what status shows."""
    return s.settled(now, Outcome(problem=problem, applied=applied, rollout=rollout), generation, jitter, kind)


def test_the_first_pass_is_full_and_the_next_full_one_comes_at_the_resync() -> None:
    s, now = Schedule(Timing(resync_seconds=60.0)), 1000.0
    assert s.begin(now, INTERVAL, 0.5)[0] is PassKind.FULL
    assert ended(s, now, True, 1, jitter=0.5) is None
    assert s.dirty is PassKind.OBSERVE and s.failures == 0 and s.next_full == now + 33   # the first: 0.1-1.0 of the period
    assert s.begin(now + 30, INTERVAL, 0.5)[0] is PassKind.OBSERVE   # an observation pass
    assert s.begin(now + 33, INTERVAL, 0.5)[0] is PassKind.FULL      # the resync is due
    ended(s, now + 33, True, 1)
    assert s.next_full == now + 93                   # then the whole period (less up to 10%: jitter 0)
    assert s.begin(now + 61, INTERVAL, 0.5)[0] is PassKind.OBSERVE
    s.nudge()                                     # an owned object changed: it is applied again
    assert s.begin(now + 61, INTERVAL, 0.5)[0] is PassKind.REAPPLY


def test_polls_keep_a_fixed_cadence_after_a_jittered_second_one() -> None:
    s = Schedule()
    assert s.begin(100.0, INTERVAL, 0.7) == (PassKind.FULL, True)
    assert s.next_poll == 107.0                   # 0.7 of an interval after the first
    assert s.begin(107.0, INTERVAL, 0.7)[1]
    assert s.next_poll == 117.0                   # then one interval after the last was due
    s.next_full = 500.0
    assert s.sleep_for(107.0) == 10.0
    assert s.sleep_for(116.99) == schedule.MIN_SLEEP  # never a busy loop


def test_a_step_between_polls_does_not_poll_and_a_late_poll_keeps_the_cadence() -> None:
    """The benchmark counted 15% more polls than replicas x 1/interval: every step polled, the
    resync's and each nudge's too. Now only a due poll polls, and lateness does not shift the
    cadence (so the rate stays one per interval)."""
    s = Schedule(Timing(resync_seconds=5.0))
    s.begin(0.0, INTERVAL, 1.0)                   # the first poll; the next due at 10
    ended(s, 0.0, True, 1, jitter=0.999)          # the first resync at 4.9955
    assert s.begin(5.0, INTERVAL, 1.0) == (PassKind.FULL, False)   # the resync: a full pass, no poll
    s.nudge()
    assert s.begin(7.0, INTERVAL, 1.0) == (PassKind.FULL, False)   # a nudge before it settled: the same
    assert s.begin(9.95, INTERVAL, 1.0)[1]        # within POLL_SLACK of due: polls now
    assert s.next_poll == 20.0
    assert s.begin(20.8, INTERVAL, 1.0)[1]        # late by 0.8 s (a busy loop) ...
    assert s.next_poll == 30.0                    # ... the next one is still due at 30
    assert s.begin(55.0, INTERVAL, 1.0)[1]        # late by more than an interval: no burst of catch-up polls
    assert s.next_poll == 65.0
    polls = sum(s.begin(t / 10, INTERVAL, 1.0)[1] for t in range(550, 6550, 7))  # a step every 0.7 s
    assert polls == 60                            # 600 s: one poll per interval


def test_a_persisting_problem_backs_off_and_a_spec_change_retries_at_once() -> None:
    s, now, waits = Schedule(), 0.0, []
    for _ in range(8):
        assert s.begin(now, INTERVAL, 1.0)[0] is PassKind.FULL
        assert ended(s, now, True, 1, REDIS) == REDIS
        waits.append(s.next_full - now)
        now = s.next_full
    assert waits == [2, 4, 8, 16, 30, 60, 60, 60]
    assert not s.spec_changed(1)                  # the same generation: a status write's echo
    assert s.spec_changed(2) and s.dirty is PassKind.FULL and s.failures == 0
    assert s.begin(now - 59, INTERVAL, 1.0)[0] is PassKind.FULL   # not waiting out the backoff


def test_an_observation_pass_sees_a_problem_only_sooner_and_keeps_a_sticky_one() -> None:
    s = Schedule()
    s.begin(0.0, INTERVAL, 1.0)[0]
    ended(s, 0.0, True, 1, jitter=0.999)          # the first resync: at 59.95
    # a problem an observation pass finds (a crash loop) brings the next full pass forward
    assert ended(s, 5.0, False, 1, REDIS) == REDIS and s.next_full == 7.0
    # a full pass's refused write is not seen by observation passes: it stays until the next full one
    ended(s, 7.0, True, 1, APPLY)
    assert ended(s, 8.0, False, 1) == APPLY
    ended(s, 9.0, True, 1)
    assert ended(s, 10.0, False, 1) is None
    # a problem that is not sticky is shown only while a pass finds it
    ended(s, 11.0, True, 1, REDIS)
    assert ended(s, 12.0, False, 1) is None


def test_a_failed_step_backs_off_like_a_problem() -> None:
    s = Schedule()
    s.errored(100.0)
    s.errored(100.0)
    assert (s.failures, s.next_full) == (2, 104.0)
    s = Schedule(Timing(problem_backoff=(1.0, 3.0)))   # the operator's own steps (--resync-seconds aside)
    s.errored(100.0)
    s.errored(100.0)
    assert s.next_full == 103.0


def test_stale_replicas_restart_once_per_cooldown() -> None:
    s = Schedule()
    assert s.restart_allowed(1000.0, 60.0)
    s.restarted(1000.0)
    assert not s.restart_allowed(1059.9, 60.0) and s.restart_allowed(1060.0, 60.0)


def test_resyncs_spread_over_the_last_tenth_of_the_period() -> None:
    assert schedule.resync_after(60.0, 0.0) == 60.0
    assert 54.0 < schedule.resync_after(60.0, 0.999) < 54.1


def test_the_first_resync_after_a_start_spreads_over_the_whole_period() -> None:
    """1,000 loops an operator start found together resynced in one wave a period later (773 full
    passes within 11 s, each then 11.2 s long behind the others): the first resync now comes
    anywhere from a tenth of the period to all of it."""
    assert schedule.resync_after(60.0, 0.0, first=True) == 6.0
    assert 59.9 < schedule.resync_after(60.0, 0.999, first=True) <= 60.0
    firsts = sorted(schedule.resync_after(60.0, j / 1000, first=True) for j in range(1000))
    assert max(b - a for a, b in zip(firsts, firsts[1:])) < 0.1   # no gap, no wave


def test_while_a_full_pass_runs_the_loop_polls_and_starts_no_other_pass() -> None:
    s = Schedule()
    s.begin(0.0, INTERVAL, 1.0)                   # the first poll; the next due at 10
    s.nudge()                                     # a full pass is due ...
    assert s.begin(10.0, INTERVAL, 1.0, passing=True) == (PassKind.OBSERVE, True)  # ... but one runs: poll only
    assert s.sleep_for(10.0, passing=True) == 10.0   # until the next poll, not a busy loop on the due pass
    assert s.sleep_for(10.0) == schedule.MIN_SLEEP


def test_a_spec_that_changed_while_its_pass_ran_is_still_due() -> None:
    s = Schedule()
    s.spec_changed(1)
    s.begin(0.0, INTERVAL, 1.0)
    s.spec_changed(2)                             # a watch event while generation 1's pass runs
    ended(s, 5.0, True, 1)                        # that pass ends, having applied generation 1
    assert s.begin(5.0, INTERVAL, 1.0)[0] is PassKind.FULL, "generation 2 is applied next, not at the resync"
    ended(s, 6.0, True, 2)
    assert s.begin(7.0, INTERVAL, 1.0)[0] is PassKind.OBSERVE


def test_re_applies_never_put_off_the_resync_that_reads_the_secrets_again() -> None:
    """An owned object's change (a pod turning Ready, a Deployment's status) is applied again
    with the Secret inputs the last full pass read; Secrets have no watch, so only the resync sees
    a rotated one. A GatewayDeployment whose pods keep changing is still resynced on time."""
    s = Schedule(Timing(resync_seconds=60.0))
    ended(s, 0.0, True, 1)                        # the first full pass: the first resync at 6
    ended(s, 6.0, True, 1)                        # the resync: the next one due at 66
    for t in range(10, 66, 5):                    # a pod flaps every 5 s
        s.nudge()
        assert s.begin(float(t), INTERVAL, 1.0)[0] is PassKind.REAPPLY
        ended(s, float(t), True, 1, kind=PassKind.REAPPLY)
        assert s.next_full == 66.0
    assert s.begin(66.0, INTERVAL, 1.0)[0] is PassKind.FULL
    s.nudge()
    s.spec_changed(2)                             # a new spec outranks a nudge
    assert s.begin(67.0, INTERVAL, 1.0)[0] is PassKind.FULL
    ended(s, 68.0, True, 2)
    ended(s, 69.0, True, 2, REDIS, kind=PassKind.REAPPLY)   # a re-apply that meets a problem backs off
    assert s.next_full == 69.0 + schedule.backoff(0)


def test_a_rollout_waiting_for_its_slot_looks_again_within_seconds() -> None:
    """A full pass that found its operator-caused rollout queued (rollouts.py) comes back within
    QUEUED_RECHECK_S, so that a freed slot is taken then, not at the resync a minute later."""
    s = Schedule()
    ended(s, 0.0, True, 1)
    ended(s, 10.0, True, 1, rollout=RolloutState.QUEUED)
    assert s.next_full == 10.0 + schedule.QUEUED_RECHECK_S
    ended(s, 15.0, True, 1, rollout=RolloutState.OPERATOR)   # it has its slot: the resync again
    assert s.next_full == 75.0
    ended(s, 75.0, True, 1, REDIS, rollout=RolloutState.QUEUED)   # a problem's backoff comes first
    assert s.next_full == 75.0 + schedule.backoff(0)


def test_a_step_waits_for_its_pass_at_most_until_the_next_poll_or_the_probe_bound() -> None:
    assert schedule.publish_wait(100.0, 110.0, 100.0, None) == 10.0       # a step that did not poll
    assert schedule.publish_wait(100.5, 110.0, 100.0, 3.0) == 2.5         # it polled: the probe's bound
    assert schedule.publish_wait(104.0, 110.0, 100.0, 3.0) == 0.0         # past it: publish now
    assert schedule.publish_wait(112.0, 110.0, 100.0, None) == 0.0


def test_a_loop_adopted_on_a_settled_status_observes_first_and_resyncs_within_the_period() -> None:
    """An operator start or a shard taken over: the loop of an object whose status says its
    generation is settled observes at its first step, and its first full pass comes within the
    resync period; a newer generation makes the next pass full at once, a nudge a re-apply."""
    s = Schedule(Timing(resync_seconds=60.0))
    s.adopt(100.0, 4, 0.0)
    assert not s.spec_changed(4)                       # the same generation: nothing due
    assert s.begin(100.0, INTERVAL, 1.0) == (PassKind.OBSERVE, True)   # observation, with the first poll
    assert s.begin(105.9, INTERVAL, 1.0)[0] is PassKind.OBSERVE
    assert s.begin(106.0, INTERVAL, 1.0)[0] is PassKind.FULL         # resync_after(60, 0, first): a tenth
    late = Schedule(Timing(resync_seconds=60.0))
    late.adopt(0.0, 4, 0.99)
    assert late.spec_changed(5)                        # the spec changed while nobody reconciled it
    assert late.begin(0.0, INTERVAL, 1.0)[0] is PassKind.FULL
    nudged = Schedule()
    nudged.adopt(0.0, 4, 0.5)
    nudged.nudge()
    assert nudged.begin(0.0, INTERVAL, 1.0)[0] is PassKind.REAPPLY


def test_only_a_status_that_says_settled_at_the_generation_adopts() -> None:
    def status(generation: int, stalled: str = "False", reconciling: str = "False") -> dict:
        return {"observedGeneration": generation, "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Stalled", "status": stalled},
            {"type": "Reconciling", "status": reconciling}]}
    assert settled_at(status(3), 3)
    assert not settled_at(status(2), 3)                      # a newer spec nobody reconciled
    assert not settled_at(status(3, stalled="True"), 3)      # a problem: retried from a full pass
    assert not settled_at(status(3, reconciling="True"), 3)  # a rollout under way or waiting for its slot
    assert not settled_at({}, 3) and not settled_at(None, 3) and not settled_at(status(3), None)
