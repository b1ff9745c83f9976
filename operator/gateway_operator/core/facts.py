"""The facts status is computed from: what the pass (its ``Outcome``) and the /health poll saw,
with what status remembers of the canary's history and of the unrecorded admissions, turned into
the ``Facts`` that conditions.compute reads. Pure; the wall clock is an input.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from gateway_operator.api import GatewaySpec
from gateway_operator.api import reasons as R
from gateway_operator.api import replica_state
from gateway_operator.api.objects import meta_of, status_of
from gateway_operator.core import conditions as C
from gateway_operator.core import claim_risk, dedup_history, unrecorded
from gateway_operator.core.conditions import Facts
from gateway_operator.core.health import ReplicaHealth
from gateway_operator.core.outcome import Outcome

def gather(body: Mapping[str, Any], spec: GatewaySpec | None, outcome: Outcome, replicas: Sequence[ReplicaHealth],
          now: float, gone: Sequence[ReplicaHealth] = (), silent_holders: Sequence[claim_risk.Holder] = (),
          leaving: Sequence[ReplicaHealth] = ()) -> Facts:
    """What conditions.compute reads: the spec, the pass's ``outcome`` (reconcile.Outcome, its
    problem as the schedule shows it), the poll's ``replicas`` (``gone``: the last answers of replicas
    that went away since the last publish; ``silent_holders``: replicas that held claims at their
    last answer and do not answer now, claim_risk.silent; ``leaving``: the last answers of replicas
    gone or going with a journal, their stop's word not read yet), the canary's history and the
    unrecorded admissions."""
    observed = outcome.observed
    return Facts(
        generation=meta_of(body).generation or 0,
        desired_replicas=spec.replicas if spec else 0,
        store_backend=spec.store_backend if spec else "sqlite", policy=spec.policy if spec else "",
        persistence=spec.persistence.enabled if spec else False,
        redis_configured=spec.redis.configured if spec else False, running_replicas=observed.running,
        ready_replicas=observed.ready, updated_replicas=observed.updated,
        rollout_observed=observed.rollout_observed, current_replicas=observed.current, problem=outcome.problem,
        probe=outcome.probe,
        health=tuple(replicas), dedup=_dedup_history(body, outcome, now, _record_ttl(spec)),
        unrecorded=_unrecorded(body, outcome, replicas, gone, now, _record_ttl(spec)), now=now,
        migrating=bool(outcome.migration and not outcome.migration.done),
        sessions_store=spec.sessions_store if spec else "replica", target=outcome.target, rollout=outcome.rollout,
        memory_warned=_said(body, C.REDIS_DURABLE, R.REDIS_NEARLY_FULL), refused=outcome.refused,
        channels=replica_state.channels_on_every_replica(spec.config, spec.pod.get("env"), spec.replicas)
        if spec else (), silent_holders=tuple(silent_holders), coalesced=spec.coalesced_hooks if spec else (),
        record_ttl=_record_ttl(spec), leaving=tuple(leaving))


def _record_ttl(spec: GatewaySpec | None) -> float:
    """How long a record lives in this GatewayDeployment's store (spec.redis.recordTTLSeconds): the
    windows opened by lost or unrecorded records last that long."""
    return float(spec.redis.record_ttl_seconds if spec else dedup_history.RECORD_TTL_SECONDS)


def _said(body: Mapping[str, Any], type_: str, reason: str) -> bool:
    """The condition ``type_`` as last written has ``reason``."""
    return status_of(body).says(type_, reason=reason)


def _remembered(body: Mapping[str, Any], outcome: Outcome) -> Mapping[str, Any] | None:
    """status.redis as last written, when it is about the same store (endpoint and prefix)."""
    target = outcome.target
    remembered = status_of(body).redis
    same = target is not None and remembered.get("endpoint") == target.endpoint and \
        remembered.get("prefix") == target.prefix
    return remembered if same else None


def _unrecorded(body: Mapping[str, Any], outcome: Outcome, replicas: Sequence[ReplicaHealth],
                gone: Sequence[ReplicaHealth], now: float, ttl: float) -> unrecorded.Unrecorded:
    if outcome.target is None:
        return unrecorded.Unrecorded()
    return unrecorded.assess(unrecorded.Unrecorded.from_status(_remembered(body, outcome)), replicas, gone, now,
                             ttl)


def _dedup_history(body: Mapping[str, Any], outcome: Outcome, now: float, ttl: float) -> dedup_history.History:
    """The canary's history after this pass; what status remembers counts only for the same store."""
    target = outcome.target
    if target is None:
        return dedup_history.History()
    previous = dedup_history.History.from_status(_remembered(body, outcome))
    probe = outcome.probe
    fresh = probe.store if probe is not None and not probe.reused else None  # a kept result was assessed when it was new
    return dedup_history.assess(previous, fresh, now, ttl)
