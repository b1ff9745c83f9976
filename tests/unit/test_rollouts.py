"""rollouts.RolloutGate (a fake clock) and what the conditions say of a queued or running one."""
from __future__ import annotations

from gateway_operator.api import reasons as R
from gateway_operator.core import conditions as C
from gateway_operator.core.conditions import Facts
from gateway_operator.core.rollouts import RolloutGate, RolloutState

A, B, D = ("ns", "a"), ("ns", "b"), ("ns", "d")


def test_at_most_the_limit_roll_and_a_holder_is_admitted_again() -> None:
    gate = RolloutGate(limit=2)
    assert gate.admit(A, 0) and gate.admit(B, 1) and not gate.admit(D, 2)
    assert gate.admit(A, 3)                       # a holder goes on
    gate.applied(A, 7)
    assert gate.settle(A, 6, rolled_out=True)     # the Deployment controller has not seen generation 7
    assert gate.settle(A, 7, rolled_out=False)    # seen, not ready yet
    assert not gate.settle(A, 7, rolled_out=True) and gate.admit(D, 4)


def test_a_stuck_rollout_gives_its_slot_back_after_the_timeout_and_zero_means_no_cap() -> None:
    gate = RolloutGate(limit=1, slot_timeout=900)
    assert gate.admit(A, 0) and not gate.admit(B, 899)
    assert gate.admit(B, 901) and not gate.holds(A)
    free = RolloutGate(limit=0)
    assert all(free.admit(("ns", str(i)), 0) for i in range(50))


def _reconciling(rollout: RolloutState) -> C.Condition:
    facts = Facts(generation=1, desired_replicas=2, store_backend="redis", policy="Refuse", persistence=False,
                  redis_configured=True, running_replicas=2, ready_replicas=2,
                  updated_replicas=1 if rollout is RolloutState.OPERATOR else 2, rollout_observed=True, rollout=rollout)
    return next(c for c in C.compute(facts) if c.type == C.RECONCILING)


def test_a_queued_rollout_says_so_and_a_running_one_says_why() -> None:
    queued = _reconciling(RolloutState.QUEUED)
    assert (queued.status, queued.reason) == ("True", R.OPERATOR_UPGRADE_QUEUED)
    assert "--max-concurrent-rollouts" in queued.message
    running = _reconciling(RolloutState.OPERATOR)
    assert (running.status, running.reason) == ("True", R.ROLLING_OUT)
    assert "the operator's new release changed the pods, not the spec" in running.message
