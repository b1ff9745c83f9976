"""Claims at risk, announced before they expire (issue 56, item 3): what a replica says of its
claims in /health, how the operator reads it (never trusting the tenant's body), and when
``ExactlyOnceAdmission`` goes False with ``ClaimsAtRisk`` or ``ReplicaCannotReachRedis``, how long
it stays False, and when it comes back. Pure: the clock is an input.

The end-to-end lag from a paused holder to the condition, over real sockets and a real paused
process, is test_claim_risk_lag.py's."""
from __future__ import annotations

import json

import pytest

from gateway_operator.api import reasons as R
from gateway_operator.core import claim_risk, conditions, schedule
from gateway_operator.core.conditions import Facts
from gateway_operator.core.health import Claims, Idempotency, ReplicaHealth, parse_answer
from gateway_operator.core.probe_result import ProbeResult

OK = ProbeResult(True, R.PROBE_SUCCEEDED, "ok")
LEASE = 60.0


def answer(pod: str, **store: object) -> ReplicaHealth:
    """A replica's /health answer with the launcher's idempotency section ``store``."""
    body = {"status": "healthy", "degraded_owners": [], "gateway_operator": {"idempotency": {"redis": "answers",
                                                                                             **store}}}
    return parse_answer(pod, 200, json.dumps(body).encode())


def holding(pod: str, held: int = 1, **more: object) -> ReplicaHealth:
    return answer(pod, **{"claims_held": held, "claims_unrenewed": 0, "claims_expire_in_s": 55.0,
                          "renew_failing_for_s": 0.0, "fenced": 0, "claim_lease_s": LEASE, **more})


def silent(pod: str) -> ReplicaHealth:
    return ReplicaHealth(pod, Idempotency.UNKNOWN)


def exactly_once(health: tuple[ReplicaHealth, ...], holders: dict[str, claim_risk.Holder] | None = None,
                 probe: ProbeResult = OK, leaving: tuple[ReplicaHealth, ...] = ()) -> conditions.Condition:
    f = Facts(generation=1, desired_replicas=len(health), store_backend="redis", policy="Refuse", persistence=False,
              redis_configured=True, running_replicas=len(health), ready_replicas=len(health),
              updated_replicas=len(health), rollout_observed=True, probe=probe, health=health,
              silent_holders=claim_risk.silent(holders or {}, health), leaving=leaving)
    return {c.type: c for c in conditions.compute(f)}[conditions.EXACTLY_ONCE]


# -- reading the new keys ------------------------------------------------------------------------

def test_the_claim_keys_are_read() -> None:
    h = answer("a", claims_held=3, claims_unrenewed=1, claims_expire_in_s=12.5, renew_failing_for_s=4.0, fenced=2,
               claim_lease_s=60)
    assert h.claims == Claims(3, 1, 12.5, 4.0, 2, 60.0)


@pytest.mark.parametrize("bad", [-1, "3", True, None, 1e12, float("nan"), float("inf"), [1], {"a": 1}])
def test_a_hostile_value_is_not_said(bad: object) -> None:
    body = json.dumps({"gateway_operator": {"idempotency": {
        k: bad for k in ("claims_held", "claims_unrenewed", "renew_failing_for_s", "fenced", "claim_lease_s")}}})
    h = parse_answer("a", 200, body.encode())
    assert h.claims == Claims() and h.state is Idempotency.HEALTHY


def test_a_claim_past_its_expiry_has_nothing_left_and_a_lease_beyond_bounds_is_not_said() -> None:
    assert answer("a", claims_expire_in_s=-3.0).claims.expire_in_s == 0.0
    assert answer("a", claim_lease_s=0).claims.lease_s is None
    assert answer("a", claim_lease_s=7200).claims.lease_s is None


def test_an_old_image_says_none_of_it_and_keeps_todays_condition() -> None:
    old = answer("a", claims_held=1, leases_lost=0, journalled=0)   # today's launcher: no lease, no unrenewed
    assert old.claims == Claims(held=1)
    assert exactly_once((old, answer("b"))).reason == R.SHARED_REDIS_STORE
    # silent, it is not remembered as a holder: ReplicasUnverified (Unknown) as before, not ClaimsAtRisk
    holders = claim_risk.remember({}, [old], {"a"}, 0.0)
    assert holders == {}
    c = exactly_once((silent("a"), answer("b")), claim_risk.remember(holders, [silent("a")], {"a"}, 5.0))
    assert (c.status, c.reason) == ("Unknown", R.REPLICAS_UNVERIFIED)


# -- case (a): what a replica says --------------------------------------------------------------

def test_a_holder_that_cannot_renew_makes_it_false_and_names_the_pod() -> None:
    c = exactly_once((holding("a", 2, claims_unrenewed=1), answer("b")))
    assert (c.status, c.reason) == ("False", R.CLAIMS_AT_RISK)
    assert "a could not renew 1 of its 2 claims" in c.message


def test_a_holder_whose_own_view_of_redis_is_unusable_makes_it_false() -> None:
    for view in ("unreachable", "refusing"):
        h = answer("a", redis=view, unusable_for_s=1.0, claims_held=1, claim_lease_s=LEASE)
        c = exactly_once((h, answer("b")))
        assert (c.status, c.reason) == ("False", R.CLAIMS_AT_RISK) and f"({view})" in c.message


def test_a_replica_cut_off_past_the_bound_without_claims_says_it_cannot_reach_redis() -> None:
    early = answer("a", redis="unreachable", unusable_for_s=2.0)
    assert exactly_once((early, answer("b"))).reason == R.SHARED_REDIS_STORE   # not yet: one failed probe
    late = answer("a", redis="unreachable", unusable_for_s=6.0)
    c = exactly_once((late, answer("b")))
    assert (c.status, c.reason) == ("False", R.REPLICA_CANNOT_REACH_REDIS) and "pods: a" in c.message


def test_precedence_redis_unreachable_then_claims_then_cut_off_then_the_windows() -> None:
    risky = answer("a", redis="unreachable", unusable_for_s=30.0, claims_held=1, claim_lease_s=LEASE)
    down = ProbeResult(False, R.CONNECTION_FAILED, "no")
    c = exactly_once((risky, answer("b")), probe=down)
    assert c.reason == R.REDIS_UNREACHABLE and "also claims at risk: a holds 1 claims" in c.message
    assert exactly_once((risky, answer("b"))).reason == R.CLAIMS_AT_RISK   # also cut off: claims first
    degraded = ReplicaHealth("b", Idempotency.RUNTIME_OUTAGE, "unreachable", unusable_for_s=30.0)
    assert exactly_once((answer("a"), degraded)).reason == R.REPLICA_CANNOT_REACH_REDIS


def test_the_condition_comes_back_once_the_holder_renews_again() -> None:
    assert exactly_once((holding("a", 1, claims_unrenewed=1), answer("b"))).status == "False"
    c = exactly_once((holding("a", 1), answer("b")))   # renewed: still holding, no risk
    assert (c.status, c.reason) == ("True", R.SHARED_REDIS_STORE)


# -- case (b): a holder that stops answering -----------------------------------------------------

def test_a_silent_holder_stays_at_risk_until_it_answers_renewed() -> None:
    pods = {"a", "b"}
    holders = claim_risk.remember({}, [holding("a"), answer("b")], pods, 0.0)
    assert set(holders) == {"a"}
    assert exactly_once((holding("a"), answer("b")), holders).status == "True"
    # paused: it does not answer, then its pod is no longer polled (its readiness fails): still at risk
    for now, polled in ((3.0, [silent("a"), answer("b")]), (40.0, [answer("b")]), (600.0, [answer("b")])):
        holders = claim_risk.remember(holders, polled, pods, now)
        c = exactly_once(tuple(polled), holders)
        assert (c.status, c.reason) == ("False", R.CLAIMS_AT_RISK), now
        assert "a held 1 claims at its last answer and does not answer" in c.message
    # resumed: it answers with a claim it could not renew (its fence ran), then renewed
    holders = claim_risk.remember(holders, [holding("a", 1, claims_unrenewed=1), answer("b")], pods, 601.0)
    assert exactly_once((holding("a", 1, claims_unrenewed=1), answer("b")), holders).reason == R.CLAIMS_AT_RISK
    holders = claim_risk.remember(holders, [answer("a", claims_held=0, claim_lease_s=LEASE), answer("b")], pods, 602.0)
    assert holders == {}
    assert exactly_once((answer("a"), answer("b")), holders).status == "True"


def test_a_silent_holder_whose_pod_is_gone_is_at_risk_until_its_lease_has_passed() -> None:
    holders = claim_risk.remember({}, [holding("a"), answer("b")], {"a", "b"}, 100.0)
    holders = claim_risk.remember(holders, [answer("b")], {"b"}, 110.0)   # force-deleted 10 s after its answer
    assert holders["a"].gone == 110.0
    for now in (120.0, 159.9):
        holders = claim_risk.remember(holders, [answer("b")], {"b"}, now)
        assert exactly_once((answer("b"),), holders).reason == R.CLAIMS_AT_RISK, now
    holders = claim_risk.remember(holders, [answer("b")], {"b"}, 160.0)   # its last answer + its lease
    assert holders == {} and exactly_once((answer("b"),), holders).status == "True"


def test_a_holder_is_heard_every_two_seconds_and_waited_for_no_longer() -> None:
    """The long-poll of a holder waits HOLDER_HEARD_S, not the interval; its answer's timeout and
    the poll's cadence without a watch are bounded the same way, whatever spec.health says."""
    assert schedule.watch_wait(10.0, holding("a")) == schedule.HOLDER_HEARD_S
    assert schedule.watch_wait(10.0, answer("a", claims_held=1)) == 10.0   # an old image: as before
    assert schedule.answer_timeout(60.0, holding("a")) == schedule.HOLDER_TIMEOUT_S
    assert schedule.answer_timeout(60.0, answer("a")) == 60.0
    assert schedule.poll_every(3600.0, [answer("b"), holding("a")]) == schedule.HOLDER_HEARD_S
    assert schedule.poll_every(3600.0, [answer("b")]) == 3600.0
    # the derived bound: a paused holder is noticed through the watch within the lease, with margin
    lag = schedule.WATCH_MIN_GAP_S + schedule.HOLDER_HEARD_S + 2 * schedule.HOLDER_TIMEOUT_S + schedule.NEWS_GAP_S
    assert lag <= 10.0


def test_a_replica_that_went_away_silent_leaves_the_unrecorded_window_unless_it_carried_everything() -> None:
    """Found by the protocol model: a holder cut off from Redis, out of the operator's hearing, ends
    its turns (answered 200, records never written) and goes away with its journal. Once its claims
    expire the provider's redelivery runs again, so its going away opens AdmissionsNotRecorded,
    unless its stop says it carried everything to Redis; a replica never heard opens nothing."""
    from gateway_operator.core import unrecorded
    holder = claim_risk.Holder(holding("p", held=2), at=100.0)
    left = claim_risk.left_by(holder)
    assert unrecorded.leaves_a_journal(left) and left.journalled == 2
    assert unrecorded.leaves_a_journal(claim_risk.unheard(silent("q")))
    waiting = {"p": unrecorded.Leaving(left, 100.0, vanished=100.0)}
    still, gone = unrecorded.settle(waiting, present=(), carried=(), now=106.0, drain_s=10.0)
    window = unrecorded.assess(unrecorded.Unrecorded(), [], gone, now=106.0, ttl=3600.0)
    assert not still and window.open(106.0) and window.admissions == 2, window
    _, gone = unrecorded.settle(waiting, present=(), carried=("p",), now=106.0, drain_s=10.0)
    assert not gone  # its stop said it carried everything: no window


def test_while_a_replica_that_left_a_journal_has_not_said_it_carried_it_exactly_once_is_not_held() -> None:
    """Found by the protocol model (a CI run's exploration): a replica cut off from Redis and out of
    the operator's hearing admits best-effort, is stopped, and cannot carry its journal. From its
    stop, another replica can run what it admitted (Redis holds no record of it), so the seconds the
    operator waits for the stop's word (unrecorded.settle) are not True: they announce the window
    that opens after them, or that the carried word closes."""
    from gateway_operator.core import unrecorded
    left = claim_risk.unheard(silent("gone"))
    said = exactly_once((answer("a"), answer("b")))
    assert (said.status, said.reason) == ("True", R.SHARED_REDIS_STORE)
    said = exactly_once((answer("a"), answer("b")), leaving=(left,))
    assert (said.status, said.reason) == ("False", R.ADMISSIONS_NOT_RECORDED), said
    assert "pods: gone" in said.message and "carried" in said.message
    # its word read (carried): settle lets it go, and nothing is waiting any more
    still, gone = unrecorded.settle({"gone": unrecorded.Leaving(left, 100.0)}, present=(), carried=("gone",),
                                    now=101.0, drain_s=10.0)
    assert not still and not gone
