"""Webhooks a replica admitted that Redis may never have recorded (issue 35, unrecorded.py): the
window is opened from each replica's own word (its journal dropped them, a lease was lost mid-turn)
or from a replica that went away with a journal Redis never took, kept in status across operator
restarts, shown as AdmissionsNotRecorded for one record TTL after the last such admission, and
not rewritten while nothing new happens."""
from __future__ import annotations

from gateway_operator.api import reasons
from gateway_operator.core import conditions
from gateway_operator.core.conditions import Facts
from gateway_operator.core.dedup_history import RECORD_TTL_SECONDS
from gateway_operator.core.health import Idempotency, ReplicaHealth
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.unrecorded import (CARRY_BUDGET_S, MARK_GRACE_S, Leaving, Unrecorded, assess,
                                              leaves_a_journal, settle)

T0 = 1_800_000_000.0


def replica(pod: str, unrecorded: int = 0, at: float | None = None, journalled: int = 0,
            redis: str = "answers") -> ReplicaHealth:
    return ReplicaHealth(pod, Idempotency.HEALTHY, redis, (), None, unrecorded, at, journalled)


def shown(window: Unrecorded, now: float) -> dict[str, conditions.Condition]:
    f = Facts(generation=1, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
              redis_configured=True, running_replicas=3, ready_replicas=3, updated_replicas=3, rollout_observed=True,
              probe=ProbeResult(True, reasons.PROBE_SUCCEEDED, "ok"), health=(replica("a"),), unrecorded=window, now=now)
    return {c.type: c for c in conditions.compute(f)}


def test_nothing_unrecorded_opens_nothing() -> None:
    quiet = [replica("a"), replica("b", journalled=3)]  # a journal Redis is taking: nothing lost
    assert assess(Unrecorded(), quiet, [], T0) == Unrecorded()
    assert assess(Unrecorded(), [], [replica("c", journalled=4, redis="answers")], T0) == Unrecorded()
    assert shown(Unrecorded(), T0)["IdempotencyDegraded"].status == "False"


def test_a_journal_dropped_or_a_lease_lost_opens_a_window_for_one_ttl_after_the_last_one() -> None:
    window = assess(Unrecorded(), [replica("a", 2, T0 - 5), replica("b", 1, T0 - 1)], [], T0)
    assert (window.at, window.until, window.admissions) == (T0 - 5, T0 - 1 + RECORD_TTL_SECONDS, 3)
    degraded, admission = shown(window, T0)["IdempotencyDegraded"], shown(window, T0)["ExactlyOnceAdmission"]
    assert (degraded.status, degraded.reason) == ("True", reasons.ADMISSIONS_NOT_RECORDED)
    assert (admission.status, admission.reason) == ("False", reasons.ADMISSIONS_NOT_RECORDED)
    assert "at least 3 webhook(s)" in degraded.message and "can run the agent again" in degraded.message
    # kept across polls (and an operator restart: status) with nothing new: the same window
    again = assess(Unrecorded.from_status(window.status()), [replica("a", 2, T0 - 5), replica("b", 1, T0 - 1)], [],
                   T0 + 60)
    assert again.status() == window.status()
    # a later one extends it; its end passes, and it closes
    later = assess(again, [replica("a", 3, T0 + 100)], [], T0 + 101)
    assert later.until == T0 + 100 + RECORD_TTL_SECONDS and later.at == T0 - 5 and later.admissions == 3
    assert shown(later, later.until + 1)["IdempotencyDegraded"].status == "False"
    assert assess(later, [], [], later.until + 1) == Unrecorded()


def test_a_replica_gone_with_a_journal_redis_never_took_counts_its_journal() -> None:
    gone = [replica("c", journalled=4, redis="unreachable")]
    window = assess(Unrecorded(), [replica("a")], gone, T0)
    assert (window.at, window.until, window.admissions) == (T0, T0 + RECORD_TTL_SECONDS, 4)
    assert "stopped while its outage journal still held them" in window.why
    # counted once: the next poll no longer lists it as gone
    assert assess(window, [replica("a")], [], T0 + 2).admissions == 4


def test_what_status_remembers_is_read_back_and_nothing_else() -> None:
    window = Unrecorded(T0, T0 + RECORD_TTL_SECONDS, 7, "why")
    assert Unrecorded.from_status(window.status()) == window
    assert Unrecorded.from_status({"unrecordedAdmissions": {"at": "yesterday", "admissions": True}}) == Unrecorded()
    assert Unrecorded().status() == {}


def test_a_replica_degraded_now_names_the_reason_and_the_window_follows() -> None:
    """Seed 89 of the checker: Redis out of memory while a lost dedup history's window was open
    showed only DedupHistoryLost, hiding what to do now. The replicas' current state names the
    reason; the windows follow in the message."""
    window = Unrecorded(T0, T0 + RECORD_TTL_SECONDS, 2, "why")
    oom = ReplicaHealth("a", Idempotency.REDIS_OUT_OF_MEMORY, "refusing")
    f = Facts(generation=1, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
              redis_configured=True, running_replicas=3, ready_replicas=3, updated_replicas=3, rollout_observed=True,
              probe=ProbeResult(True, reasons.PROBE_SUCCEEDED, "ok"), health=(oom,), unrecorded=window, now=T0 + 1)
    degraded = {c.type: c for c in conditions.compute(f)}["IdempotencyDegraded"]
    assert (degraded.status, degraded.reason) == ("True", "RedisOutOfMemory"), degraded
    assert "; also at least 2 webhook(s)" in degraded.message


def test_a_leaving_replica_that_carried_its_journal_opens_no_window_one_that_did_not_does() -> None:
    """A replica whose last answer said journalled while Redis was unusable may still carry its
    journal at its stop: the window waits for its word (<prefix>gwop-carried:<pod>). Its word read:
    nothing is announced. Its pod gone without it for MARK_GRACE_S (killed, force-deleted): its
    journal is counted. Still terminating past its drain and carry: counted too."""
    last = replica("c", journalled=4, redis="unreachable")
    assert leaves_a_journal(last) and not leaves_a_journal(replica("d", journalled=4, redis="answers"))
    waiting = {"c": Leaving(last, since=100.0)}
    # terminating, no word yet: wait
    still, left = settle(waiting, present={"c"}, carried=(), now=110.0, drain_s=30)
    assert (list(still), left) == (["c"], [])
    # its word came: nothing left, nothing announced
    assert settle(still, present={"c"}, carried={"c"}, now=111.0, drain_s=30) == ({}, [])
    # gone from the API without a word: waits MARK_GRACE_S for the next probes, then counts it
    still, left = settle(waiting, present=set(), carried=(), now=112.0, drain_s=30)
    assert still["c"].vanished == 112.0 and left == []
    still, left = settle(still, present=set(), carried=(), now=112.0 + MARK_GRACE_S + 0.1, drain_s=30)
    assert still == {} and left == [last]
    window = assess(Unrecorded(), [], left, T0)
    assert window.admissions == 4 and "stopped while its outage journal still held them" in window.why
    # terminating longer than its drain and carry allow: counted without waiting for the pod to go
    still, left = settle(waiting, present={"c"}, carried=(), now=100.0 + 30 + CARRY_BUDGET_S + MARK_GRACE_S + 1,
                         drain_s=30)
    assert still == {} and left == [last]
