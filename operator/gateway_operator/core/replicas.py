"""How many gateway replicas run now: the replica policy and the scale-out gate (pure)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from gateway_operator.api import GatewaySpec, Policy
from gateway_operator.core.health import UNUSABLE, Idempotency, ReplicaHealth
from gateway_operator.pod import gwop_contract as contract


@dataclass(frozen=True)
class Migration:
    """The switch from one SQLite replica (its records on the state PVC) to the Redis store:
    ``token`` names this switch (status.sqliteMigration keeps it); ``done`` once the launcher of
    the one replica run with that PVC mounted wrote it to Redis after copying the records."""

    token: str
    done: bool

    def status(self) -> dict[str, str]:
        return {"token": self.token, "state": "Done" if self.done else "Pending"}


def reads_the_claim(spec: GatewaySpec, previous: Mapping[str, Any]) -> bool:
    """Whether ``migration_state`` looks the state PVC up (an API read: the loop runs it in a thread)."""
    return spec.store_backend == "redis" and spec.persistence.enabled and not _done(previous)


def _done(previous: Mapping[str, Any]) -> bool:
    return previous.get("state") == "Done" and bool(previous.get("token"))


def migration_state(spec: GatewaySpec, previous: Mapping[str, Any], state_claim_exists: Callable[[], bool],
                    marker: str | None, new_token: Callable[[], str]) -> Migration | None:
    """None when there is nothing to carry over: not on Redis, no state PVC (an emptyDir's records
    died with its pod, which ExactlyOnceAdmission said: StoreNotPersistent)."""
    if spec.store_backend != "redis" or not spec.persistence.enabled:
        return None
    if _done(previous):
        return Migration(str(previous["token"]), True)
    if not state_claim_exists():
        return None
    token = str(previous.get("token") or new_token())
    return Migration(token, marker == token)


def gate_holds(store_backend: str, probe_ok: bool, running: int, desired: int) -> bool:
    """The scale-out gate: a Redis-backed gateway grows past what runs only once the
    operator's Redis probe passes (a replica's clean /health proves nothing until it has
    handled a webhook)."""
    return store_backend == "redis" and not probe_ok and running < desired


def replicas_to_run(spec: GatewaySpec, probe_ok: bool, running: int, migration: Migration | None = None,
                    compatible: bool = True) -> int:
    """Never more than one replica without Redis under Refuse (even if the CRD's rule is
    missing), one while a single SQLite replica's records are carried into Redis, and no
    scale-out past what runs (at least one) while the gate holds, or, under Refuse, while the
    gateway is not known compatible (compat.py: GatewayCompatible=False)."""
    if spec.policy == Policy.REFUSE and spec.store_backend != "redis":
        return min(spec.replicas, 1)
    if migration is not None and not migration.done:
        return min(spec.replicas, 1)
    if gate_holds(spec.store_backend, probe_ok, running, spec.replicas) or \
            (not compatible and spec.policy == Policy.REFUSE and running < spec.replicas):
        return min(spec.replicas, max(1, running))
    return spec.replicas


def stale_replica(enabled: bool, health: Sequence[ReplicaHealth], ready: int, running: int) -> str | None:
    """The replica to restart next (``enabled``: spec.health.restartStaleReplicas): one whose
    store fell back to SQLite at build time keeps it until restarted, but a restart helps only
    once that replica itself reaches Redis again (its own view in /health says so): the
    operator's own probe reaching Redis says nothing of a replica cut off from it, whose
    replacement would be cut off too. One at a time, by name: none while a previous restart is
    not back ready."""
    stale = sorted(h.pod for h in health if h.state is Idempotency.BUILD_TIME_FALLBACK and h.redis == contract.ANSWERS)
    return stale[0] if enabled and stale and ready >= running else None


#: a replica leaves the traffic only once it has been unable to use Redis this long, while another
#: one has reached Redis this long without a break: when Redis itself goes or comes back, the
#: replicas see it within about 3 s of each other (each asks every 2 s, with a 1 s timeout, and at
#: every webhook), and none of them is cut off; one failed probe under load cuts off nobody either
CUT_OFF_AFTER_S = 5.0


def out_of_traffic(health: Sequence[ReplicaHealth], serving: Collection[str]) -> frozenset[str]:
    """The replicas the readiness gate takes out of the Service and the edge: each says itself
    (GET /health) that it cannot use Redis while another replica that takes traffic, or will once
    its own gate is set (``serving``: its containers are ready), says it has reached Redis for
    CUT_OFF_AFTER_S without a break, the first for as long: a partition. A cut-off replica
    would hold each webhook for the fail-closed window, then admit it best-effort, and the same
    webhook retried to a replica that can ask Redis runs again. When no replica reaches Redis (an
    outage, or a refusal every replica meets) none is taken out: stopping them all would stop even
    what can run, and the window and its announcement are the answer there. A replica that does
    not say (another image) stays in; one that reaches Redis again comes back at the next poll."""
    reaching = {h.pod for h in health if h.redis == contract.ANSWERS and h.pod in serving
                and (h.answers_for_s or 0.0) >= CUT_OFF_AFTER_S}
    return frozenset(h.pod for h in health if h.redis in UNUSABLE and (h.unusable_for_s or 0.0) >= CUT_OFF_AFTER_S
                     and reaching - {h.pod})
