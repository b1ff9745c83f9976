"""What one reconciliation pass found and did (``Outcome``): the pass (reconcile.py) returns it,
the schedule decides from it when the next full pass is due, and the facts status is computed
from (facts.py) read it. A plain record, low in the layering so that each reader types it.
"""
from __future__ import annotations

from typing import NamedTuple

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.core.conditions import Problem
from gateway_operator.core.expose import Exposure
from gateway_operator.core.pods import Observed
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.replicas import Migration
from gateway_operator.core.rollouts import RolloutState


class Outcome(NamedTuple):
    target: RedisTarget | None = None
    problem: Problem | None = None
    probe: ProbeResult | None = None
    observed: Observed = Observed()
    writes: int = 0
    applied: bool = False   # a full pass (apply) ran, not only observation
    error: Exception | None = None  # an unforeseen error behind the problem (its traceback is logged)
    exposure: Exposure | None = None  # read this pass (spec.expose); None: not read, keep the last
    migration: Migration | None = None  # a single SQLite replica's records on their way to Redis
    rollout: RolloutState = RolloutState.NONE  # a rollout the operator causes itself (rollouts.py)
    refused: tuple[tuple[str, str], ...] = ()  # (pod, the launcher's line) for pods that refused the gateway
    carried: frozenset[str] = frozenset()  # leaving replicas that said their journal is all in Redis
