"""One reconciliation pass for one GatewayDeployment: ``steps.STEPS`` in order on one ``Pass``,
then ``summarize.winner`` picks the problem status shows. The pass returns a ``Result``: what it
saw, and when it wants to run again (controller-runtime's ``Result{RequeueAfter}``). It never
raises: what was running is left alone, and the retry backs off.
"""
from __future__ import annotations

import random
from typing import Any, Mapping, NamedTuple, Sequence

from . import compat, schedule, summarize
from .conditions import Problem
from .expose import Exposure
from .inputs import SecretInputs
from .kube import Kube
from .pods import Observed, PodView
from .redis_probe import ProbeResult, Prober
from .redis_target import RedisTarget
from .replicas import Migration
from .rollouts import QUEUED_RECHECK_S, RolloutGate
from .steps import STEPS, Observation, Pass, ReconcileSettings  # noqa: F401 - the pass's inputs


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
    rollout: str = ""       # "queued" / "operator": a rollout the operator causes itself (rollouts.py)
    refused: tuple[tuple[str, str], ...] = ()  # (pod, the launcher's line) for pods that refused the gateway
    carried: frozenset[str] = frozenset()  # leaving replicas that said their journal is all in Redis


class Result(NamedTuple):
    outcome: Outcome
    requeue_after: float    # seconds until the next full pass is due
    inputs: SecretInputs | None = None  # what a full pass read from the Secrets, for the passes until the next


async def reconcile(kube: Kube, prober: Prober, settings: ReconcileSettings, body: Mapping[str, Any],
                    pods: Sequence[PodView], full: bool, failures: int,
                    seen: Observation = Observation(), rollouts: RolloutGate | None = None,
                    first: bool = False) -> Result:
    """``full=False`` only observes: the cheap pass run every health interval between full ones.
    It reads nothing from the API server when ``seen`` has the Deployment's watched state and
    the last full pass's Secret inputs, so a Secret's change is noticed by the next full pass.
    ``failures``: consecutive passes that ended with a Problem (for the backoff); ``first``: the
    loop's first pass (its resync comes anywhere in the period: schedule.resync_after)."""
    p = Pass(kube, prober, settings, body, pods, full, seen, rollouts=rollouts)
    try:
        for step in STEPS:
            if not await step(p):
                break
        outcome = Outcome(p.prepared.target, summarize.winner(p.problems), p.probe, p.observed, p.writes,
                          p.apply_due, exposure=p.exposure, migration=p.migration, rollout=p.rollout,
                          refused=tuple(compat.refusals(pods)),
                          carried=p.carried)
        read = p.prepared.inputs
    except Exception as e:  # noqa: BLE001 - the boundary: nothing escapes to the loop
        outcome, read = Outcome(problem=summarize.unexpected(e), applied=full, error=e), None
    if outcome.problem is not None:
        return Result(outcome, schedule.backoff(failures, settings.problem_backoff))
    requeue = schedule.resync_after(settings.resync_seconds, random.random(), first and full)
    if outcome.rollout == "queued":  # a slot may free any moment: look again soon (a full pass)
        requeue = min(requeue, QUEUED_RECHECK_S)
    return Result(outcome, requeue, read if full else None)


