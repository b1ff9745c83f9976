"""One reconciliation pass for one GatewayDeployment: ``steps.STEPS`` in order on one ``Pass``,
then ``problems.winner`` picks the problem status shows. The pass returns a ``Result``: what it
saw and did (``Outcome``) and the Secret inputs it read. When to come back is the schedule's to
decide from that outcome (schedule.py), as controller-runtime's queue owns the backoff. It never
raises: what was running is left alone, and the retry backs off.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Sequence

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.kube import SILENT, Kube
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import compat, problems
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import PodView
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.schedule import PassKind
from gateway_operator.core.settings import ReconcileSettings
from gateway_operator.loop.inputs import SecretInputs
from gateway_operator.loop.steps import STEPS, Observation, Pass, Rendered


class Result(NamedTuple):
    outcome: Outcome
    inputs: SecretInputs | None = None  # what a full pass read from the Secrets, for the passes until the next
    rendered: Rendered | None = None    # what a full pass rendered and found in place, for the next full one


async def reconcile(kube: Kube, prober: Prober, settings: ReconcileSettings, body: Mapping[str, Any],
                    pods: Sequence[PodView], kind: PassKind, seen: Observation = Observation(),
                    rollouts: RolloutGate | None = None) -> Result:
    """``kind`` OBSERVE only observes: the cheap pass run every health interval between full ones.
    It reads nothing from the API server when ``seen`` has the Deployment's watched state and
    the last full pass's Secret inputs, so a Secret's change is noticed by the next full pass.
    REAPPLY applies with those inputs; FULL reads them afresh first."""
    p = Pass(kube, prober, settings, body, pods, kind, seen, rollouts=rollouts)
    applies = kind.applies
    try:
        for step in STEPS:
            if not await step(p):
                break
        outcome = Outcome(p.prepared.target, problems.winner(p.problems), p.probe, p.observed, p.writes,
                          p.apply_due, exposure=p.exposure, migration=p.migration, rollout=p.rollout,
                          refused=tuple(compat.refusals(pods)),
                          carried=p.carried)
        # a namespace being deleted refuses what a full pass would create (the generated Secrets
        # first): the Secret inputs read before stay, so that the observation passes until the
        # GatewayDeployment goes read no Secret the namespace controller removed
        read = p.seen.inputs if p.terminating and p.prepared.inputs is None else p.prepared.inputs
        rendered = p.rendered
    except SILENT as e:  # a busy API server: the backoff retries, and status says so without Stalled
        target, probe = _redis_as_last_seen(p)
        outcome = Outcome(target, problems.api_server_unavailable(e), probe, applied=applies, error=e)
        read, rendered = None, None
    except Exception as e:  # noqa: BLE001 - the boundary: nothing escapes to the loop
        outcome, read, rendered = Outcome(problem=problems.unexpected(e), applied=applies, error=e), None, None
    clean = applies and outcome.problem is None
    return Result(outcome, read if clean else None, rendered if clean else None)


def _redis_as_last_seen(p: Pass) -> tuple[RedisTarget | None, ProbeResult | None]:
    """For a pass the API server did not answer: the Redis the spec names, and what this pass's
    probe found, else the last probe of that same Redis, kept (not new: the dedup history is not
    assessed again). A request the API server left unanswered says nothing of Redis, so
    RedisReachable, and ExactlyOnceAdmission with it, hold instead of flipping to Unknown."""
    checked = p.seen.checked
    if checked is None or checked.generation != p.body["metadata"].get("generation") or checked.target is None:
        return None, None
    if p.probe is not None:   # probed before the API server fell silent
        return checked.target, p.probe
    last = p.seen.probe
    if last is None or p.seen.probed != checked.target:
        return checked.target, None
    return checked.target, last if last.reused else dataclasses.replace(last, reused=True)
