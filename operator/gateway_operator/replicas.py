"""How many gateway replicas run now: the replica policy and the scale-out gate (pure)."""
from __future__ import annotations

from .api import GatewaySpec, Policy


def gate_holds(store_backend: str, probe_ok: bool, running: int, desired: int) -> bool:
    """The scale-out gate: a Redis-backed gateway grows past what runs only once the
    operator's Redis probe passes (a replica's clean /health proves nothing until it has
    handled a webhook)."""
    return store_backend == "redis" and not probe_ok and running < desired


def replicas_to_run(spec: GatewaySpec, probe_ok: bool, running: int) -> int:
    """Never more than one replica without Redis under Refuse (even if the CRD's rule is
    missing), and no scale-out past what runs (at least one) while the gate holds."""
    if spec.policy == Policy.REFUSE and spec.store_backend != "redis":
        return min(spec.replicas, 1)
    if gate_holds(spec.store_backend, probe_ok, running, spec.replicas):
        return min(spec.replicas, max(1, running))
    return spec.replicas
