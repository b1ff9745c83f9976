"""One reconciliation pass for one GatewayDeployment: the steps (steps.py) in order, each a
function of what the pass is given and of the steps before it, then ``steps.summarize`` makes one
``Outcome`` of their results (``problems.winner`` picks the problem status shows). The pass returns
a ``Result``: what it saw and did (``Outcome``), the Secret inputs it read and what it rendered.
When to come back is the schedule's to decide from that outcome (schedule.py), as
controller-runtime's queue owns the backoff. It never raises: what was running is left alone, and
the retry backs off.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Sequence

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.kube import SILENT, Kube
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import problems
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import PodView
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.schedule import PassKind
from gateway_operator.core.settings import ReconcileSettings
from gateway_operator.loop.inputs import SecretInputs
from gateway_operator.loop import steps
from gateway_operator.loop.steps import Given, Observation, Probed, Rendered


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
    g = Given.of(kube, prober, settings, body, pods, kind, seen, rollouts)
    applies, probed = kind.applies, None
    try:
        read = await steps.read_inputs(g)
        if read.proceeds:
            probed = await steps.probe(g, read)
            outcome, written = await steps.after_the_probe(g, read, probed)
        else:
            outcome, written = steps.summarize(g, read), steps.Written()
        # a namespace being deleted refuses what a full pass would create (the generated Secrets
        # first): the Secret inputs read before stay, so that the observation passes until the
        # GatewayDeployment goes read no Secret the namespace controller removed
        terminating = read.prepared.terminating or written.terminating
        kept = seen.inputs if terminating and read.prepared.inputs is None else read.prepared.inputs
        rendered = written.rendered
    except SILENT as e:  # a busy API server: the backoff retries, and status says so without Stalled
        target, probe = _redis_as_last_seen(g, probed)
        outcome = Outcome(target, problems.api_server_unavailable(e), probe, applied=applies, error=e)
        kept, rendered = None, None
    except Exception as e:  # noqa: BLE001 - the boundary: nothing escapes to the loop
        outcome, kept, rendered = Outcome(problem=problems.unexpected(e), applied=applies, error=e), None, None
    clean = applies and outcome.problem is None
    return Result(outcome, kept if clean else None, rendered if clean else None)


def _redis_as_last_seen(g: Given, probed: Probed | None) -> tuple[RedisTarget | None, ProbeResult | None]:
    """For a pass the API server did not answer: the Redis the spec names, and what this pass's
    probe found (``probed``), else the last probe of that same Redis, kept (not new: the dedup
    history is not assessed again). A request the API server left unanswered says nothing of
    Redis, so RedisReachable, and ExactlyOnceAdmission with it, hold instead of flipping to Unknown."""
    checked = g.seen.checked
    if checked is None or checked.generation != g.generation or checked.target is None:
        return None, None
    if probed is not None and probed.probe is not None:   # probed before the API server fell silent
        return checked.target, probed.probe
    last = g.seen.probe
    if last is None or g.seen.probed != checked.target:
        return checked.target, None
    return checked.target, last if last.reused else dataclasses.replace(last, reused=True)
