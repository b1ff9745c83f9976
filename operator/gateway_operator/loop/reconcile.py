"""One reconciliation pass for one GatewayDeployment: ``steps.STEPS`` in order on one ``Pass``,
then ``problems.winner`` picks the problem status shows. The pass returns a ``Result``: what it
saw and did (``Outcome``) and the Secret inputs it read. When to come back is the schedule's to
decide from that outcome (schedule.py), as controller-runtime's queue owns the backoff. It never
raises: what was running is left alone, and the retry backs off.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from gateway_operator.clients.kube import SILENT, Kube
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import compat, problems
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import PodView
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.settings import ReconcileSettings
from gateway_operator.loop.inputs import SecretInputs
from gateway_operator.loop.steps import STEPS, Observation, Pass, Rendered


class Result(NamedTuple):
    outcome: Outcome
    inputs: SecretInputs | None = None  # what a full pass read from the Secrets, for the passes until the next
    rendered: Rendered | None = None    # what a full pass rendered and found in place, for the next full one


async def reconcile(kube: Kube, prober: Prober, settings: ReconcileSettings, body: Mapping[str, Any],
                    pods: Sequence[PodView], full: bool, seen: Observation = Observation(),
                    rollouts: RolloutGate | None = None) -> Result:
    """``full=False`` only observes: the cheap pass run every health interval between full ones.
    It reads nothing from the API server when ``seen`` has the Deployment's watched state and
    the last full pass's Secret inputs, so a Secret's change is noticed by the next full pass."""
    p = Pass(kube, prober, settings, body, pods, full, seen, rollouts=rollouts)
    try:
        for step in STEPS:
            if not await step(p):
                break
        outcome = Outcome(p.prepared.target, problems.winner(p.problems), p.probe, p.observed, p.writes,
                          p.apply_due, exposure=p.exposure, migration=p.migration, rollout=p.rollout,
                          refused=tuple(compat.refusals(pods)),
                          carried=p.carried)
        read, rendered = p.prepared.inputs, p.rendered
    except SILENT as e:  # a busy API server: the backoff retries, and status says so without Stalled
        outcome, read, rendered = Outcome(problem=problems.api_server_unavailable(e), applied=full, error=e), None, None
    except Exception as e:  # noqa: BLE001 - the boundary: nothing escapes to the loop
        outcome, read, rendered = Outcome(problem=problems.unexpected(e), applied=full, error=e), None, None
    clean = full and outcome.problem is None
    return Result(outcome, read if clean else None, rendered if clean else None)


