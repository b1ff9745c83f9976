"""What one GatewayDeployment's passes leave for the next ones, in one typed record: last pass in,
last pass out.

A full pass reads the Secrets, renders, probes Redis and reads the exposure; an observation pass
(core.schedule.PassKind) reuses what the last one read (steps.Observation) instead of asking the
API server again. The controller (controller.py) drives the passes and owns one ``PassMemory``:
``seen`` is what goes into a pass, ``keep`` what comes out of it; the other fields are the loop's
own (its last status write, the readiness gates written, the last pass published again, the
connection a probe left open).
Kept apart from the controller so that the driver holds no loose fields of memory.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from gateway_operator.api import GatewaySpec
from gateway_operator.api.objects import meta_of, spec_of
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.tenancy import Claim, TenancyPolicy
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.core.expose import Exposure
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import LiveDeployment
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.render.names import Owner
from gateway_operator.loop import inputs
from gateway_operator.loop.inputs import Checked, SecretInputs
from gateway_operator.loop.pod_actuators import Gates
from gateway_operator.loop.reconcile import Result
from gateway_operator.loop.steps import Observation, Rendered


class Passed(NamedTuple):
    """What a pass saw, as the loop publishes it: the generation and spec it reconciled."""

    generation: object
    spec: GatewaySpec | None
    outcome: Outcome


@dataclass
class PassMemory:
    """One GatewayDeployment's memory across passes (each field: what, and until when)."""

    rv_floor: int = 0                    # the resourceVersion of our last status write
    checked: Checked | None = None       # the spec as checked, kept while its generation is the same
    inputs: SecretInputs | None = None   # the last full pass's Secret inputs, reused until the next
    rendered: Rendered | None = None     # the last full pass's render, if it found every object in place
    exposure: Exposure | None = None     # status.expose as last read (spec.expose)
    probe: ProbeResult | None = None     # the last Redis probe (an observation pass may reuse it)
    probed: RedisTarget | None = None    # ... of which target
    gates: Gates = field(default_factory=dict)  # readiness gates written (pod_actuators.PodActuators.gate)
    last: Passed | None = None           # the last pass, published again with each poll while the next runs
    connection: KeptConnection = field(default_factory=KeptConnection)  # its own, left open by a probe

    def check(self, body: Mapping[str, Any], owner_name: str, namespace: str,
              tenancy: TenancyPolicy) -> Checked | None:
        """inputs.check, once per generation (a spec change bumps it; status writes do not)."""
        meta, kept_one = meta_of(body), self.checked
        generation = meta.generation
        if kept_one is None or generation is None or kept_one.generation != generation:
            try:
                kept_one = inputs.check(Owner(owner_name, namespace, meta.uid), spec_of(body), generation, tenancy)
            except Exception:  # noqa: BLE001 - the pass meets it again and reports it (ReconcileError)
                kept_one = None
            self.checked = kept_one
        return kept_one

    def seen(self, deployment: LiveDeployment | None, host_claims: Mapping[str, Sequence[Claim]],
             checked: Checked | None, leaving: tuple[str, ...]) -> Observation:
        """What goes into a pass: what the last ones read, beside what the watches show now."""
        return Observation(deployment, self.inputs, self.exposure, host_claims, checked, self.probe, self.probed,
                           self.connection, leaving, self.rendered)

    def keep(self, result: Result) -> None:
        """What comes out of a pass, for the next ones: its probe, the exposure it read, and after a
        full pass its Secret inputs and render."""
        outcome = result.outcome
        self.probe, self.probed = outcome.probe, outcome.target if outcome.probe is not None else None
        if outcome.exposure is not None or (outcome.applied and outcome.problem is None):
            self.exposure = outcome.exposure
        if outcome.applied:
            self.inputs = result.inputs  # None after a problem: observation passes read again until fixed
            self.rendered = result.rendered  # None after a problem: the next full pass renders and reads

    def ended(self, passed: Passed | None) -> Passed | None:
        """The pass to publish: one that ended (``passed``), kept as ``last`` with its probe marked
        reused (it was assessed for the dedup history when new); while none ended, the last one,
        published again with each poll while the next runs (None before the first)."""
        if passed is None:
            return self.last
        probe = passed.outcome.probe
        if probe is not None and not probe.reused:
            self.last = passed._replace(outcome=passed.outcome._replace(probe=dataclasses.replace(probe, reused=True)))
        else:
            self.last = passed
        return passed
