"""Which problem a pass reports, and which Event a change of condition posts: declared once, pure.

A pass (reconcile.py) collects the problems its steps found; ``winner`` picks the one that
becomes ``Stalled=True`` (and so ``Ready=False``, ``Reconciling=False``) by its place in
``PRECEDENCE``, as Flux's ``summarize.Conditions`` declares its order once. ``EVENTS`` says
which condition transitions post an Event, and of which type. ``facts`` turns what the pass
and the poll saw into the ``Facts`` that conditions.compute reads.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from kubernetes.client.rest import ApiException

from . import conditions as C
from . import dedup_history, replica_state, unrecorded
from . import reasons as R
from .api import GatewaySpec, Policy
from .conditions import Facts, Problem, Transition
from .health import ReplicaHealth
from .pods import PodView
from .tenancy import MSG_HOST_CLAIMED
from .validation import MSG_AUTOSCALING_NEEDS_REDIS, MSG_REPLICAS_NEED_REDIS

#: the first of a pass's problems in this order wins
PRECEDENCE: tuple[str, ...] = (
    # the spec or its inputs cannot be read: the pass stops there, what runs is left alone
    R.INVALID_SPEC, R.CONFIG_OVER_LIMITS, R.TENANCY_POLICY_VIOLATION, R.INVALID_REDIS_URL,
    R.SECRET_NOT_FOUND, R.SECRET_KEY_MISSING, R.SECRET_VALUE_INVALID,
    # a write the API server refused, or an object in the way: seen only by a full pass (sticky)
    R.OBJECT_NOT_OWNED, R.APPLY_FAILED, R.EXPOSE_NOT_SERVED, R.RECONCILE_ERROR,
    # the spec asks for what is refused: the rest is applied despite the first and the last
    R.REPLICA_POLICY_VIOLATION, R.REDIS_TARGET_NOT_ALLOWED, R.HOST_CLAIMED,
    # what the replicas and the Deployment controller report
    R.GATEWAY_INCOMPATIBLE, R.GATEWAY_CONFIG_REJECTED, R.CRASH_LOOP, *R.POD_WAITING, R.FAILED_CREATE,
)
#: problems that still leave the rest applied: the replica guard (one replica runs), a host
#: claimed by someone older (everything but the routes)
APPLY_DESPITE = (R.REPLICA_POLICY_VIOLATION, R.HOST_CLAIMED)
_RANK = {reason: i for i, reason in enumerate(PRECEDENCE)}


def winner(problems: Sequence[Problem | None]) -> Problem | None:
    """The problem status shows: the first by PRECEDENCE (then by the order found)."""
    found = [p for p in problems if p is not None]
    return min(found, key=lambda p: _RANK.get(p.reason, len(PRECEDENCE)), default=None)


def applies_despite(problem: Problem | None) -> bool:
    return problem is None or problem.reason in APPLY_DESPITE


# -- the problems, one constructor each ----------------------------------------------------------

def policy_problem(spec: GatewaySpec) -> Problem | None:
    if spec.policy == Policy.REFUSE and spec.replicas > 1 and spec.store_backend != "redis":
        return Problem(R.REPLICA_POLICY_VIOLATION, MSG_REPLICAS_NEED_REDIS)
    # the same guard for the autoscaler (render holds it at one replica meanwhile)
    if spec.policy == Policy.REFUSE and spec.autoscaling.enabled and spec.autoscaling.max_replicas > 1 \
            and spec.store_backend != "redis":
        return Problem(R.REPLICA_POLICY_VIOLATION, MSG_AUTOSCALING_NEEDS_REDIS)
    return None


def target_problem(reason: str | None, message: str) -> Problem | None:
    """The probe refused to connect: the Redis is outside the operator's allowlist."""
    return Problem(R.REDIS_TARGET_NOT_ALLOWED, message) if reason == R.TARGET_NOT_ALLOWED else None


def claim_problem(claimed: Sequence[str]) -> Problem | None:
    return Problem(R.HOST_CLAIMED, MSG_HOST_CLAIMED.format(host=", ".join(claimed))) if claimed else None


def deployment_problem(failure: str) -> Problem | None:
    """A pod the API server refused to create (Pod Security, a quota, an admission webhook): the
    ReplicaSet's FailedCreate, as the Deployment controller reports it."""
    if failure:
        return Problem(R.FAILED_CREATE, f"the API server refused to create a gateway pod: {failure}")
    return None


def pod_problem(pods: Sequence[PodView]) -> Problem | None:
    """A replica that crash-loops, or that the gateway itself refused to start (exit 78)."""
    for pod in pods:
        if pod.refused_gateway:
            return Problem(R.GATEWAY_INCOMPATIBLE, f"pod {pod.name} refused to start (exit 78): {pod.refused_gateway}; "
                                                   "use an image with the gateway release the operator supports; "
                                                   "the previous replicas keep serving")
        if pod.last_exit_code == 78:
            return Problem(R.GATEWAY_CONFIG_REJECTED, f"pod {pod.name} exited 78: the gateway rejected its "
                                                      "gateway.yaml (see kubectl logs); the previous replicas "
                                                      "keep serving")
    for pod in pods:
        if pod.waiting_reason == "CrashLoopBackOff":
            return Problem(R.CRASH_LOOP, f"pod {pod.name} is waiting: CrashLoopBackOff")
        if pod.waiting_reason in R.POD_WAITING:
            detail = f" ({pod.waiting_message})" if pod.waiting_message else ""
            return Problem(pod.waiting_reason, f"pod {pod.name} is waiting: {pod.waiting_reason}{detail}")
    return None


def not_owned(kind: str, name: str, namespace: str) -> Problem:
    return Problem(R.OBJECT_NOT_OWNED,
                   f"{kind} {name} already exists in namespace {namespace} and is not controlled by this "
                   "GatewayDeployment; the operator leaves it alone. Rename the GatewayDeployment or remove that "
                   "object.")


def not_served(kind: str, api_version: str, field: str) -> Problem:
    return Problem(R.EXPOSE_NOT_SERVED, f"this cluster serves no {kind} ({api_version}): {field} needs it. Install "
                   "its CRDs (Gateway API) or remove that field; the replicas run meanwhile.")


def refused(e: ApiException, what: str = "request") -> Problem:
    return Problem(R.APPLY_FAILED, f"the API server refused a {what}: {api_message(e)}")


def unexpected(error: Exception) -> Problem:
    """An error the operator did not foresee: named by type only (its text might quote
    input), with the traceback in the operator's log."""
    if isinstance(error, ApiException):
        return refused(error)
    if isinstance(error, RecursionError):
        return Problem(R.CONFIG_OVER_LIMITS, "spec nests too deeply to process")
    return Problem(R.RECONCILE_ERROR, f"unexpected {type(error).__name__} while reconciling; retrying with "
                                      "backoff (details in the operator log)")


def namespace_terminating(e: ApiException) -> bool:
    """The API server refused to create something because the namespace is being deleted (the
    cause NamespaceTerminating): not a problem of the spec, and nothing to retry there."""
    try:
        causes = (json.loads(e.body).get("details") or {}).get("causes") or []
    except (TypeError, ValueError, AttributeError):
        return False
    return e.status == 403 and any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def api_message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message", e.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


# -- Events: which transition posts one (type, reason, message) -----------------------------------

_Rule = Callable[[Transition], "tuple[str, str, str] | None"]


def _when(status: str | None, event: str, reason: str | None = None, message: str | None = None,
          was: Callable[[str | None], bool] = lambda old: True) -> _Rule:
    def rule(t: Transition) -> tuple[str, str, str] | None:
        c = t.new
        if status is not None and c["status"] != status or not was(t.old):
            return None
        return event, reason or c["reason"], message or c["message"]
    return rule


#: per condition type, its rules in order; the first that matches posts the Event
EVENTS: Mapping[str, tuple[_Rule, ...]] = {
    C.STALLED: (_when("True", "Warning"),),
    C.REDIS_DURABLE: (_when("False", "Warning", was=lambda old: old != "False"),),
    C.IDEMPOTENCY_DEGRADED: (
        _when("True", "Warning", "IdempotencyDegraded"),
        _when(None, "Normal", "IdempotencyRecovered", "no replica reports durability:idempotency any more",
              was=lambda old: old == "True")),
    C.REDIS_REACHABLE: (
        _when("False", "Warning", "RedisUnreachable"),
        _when("True", "Normal", "RedisReachable", was=lambda old: old == "False")),
    C.REDIS_TLS_VERIFIED: (_when("False", "Warning"),),
    C.GATEWAY_COMPATIBLE: (_when("False", "Warning"),),
    C.REPLICA_SAFE_CHANNELS: (_when("False", "Warning"),),
    C.EXACTLY_ONCE: (
        lambda t: (("Warning", "ExactlyOnceNotHeld", t.new["message"])
                   if t.new["status"] == "False" and t.new["reason"] == R.PER_REPLICA_STORES else None),
        _when("True", "Normal", "ExactlyOnceAdmission", was=lambda old: old is not None)),
}


def event_for(t: Transition) -> tuple[str, str, str] | None:
    return next((e for e in (rule(t) for rule in EVENTS.get(t.type, ())) if e), None)


# -- Facts -------------------------------------------------------------------------------------------

def facts(body: Mapping[str, Any], spec: GatewaySpec | None, outcome: Any, replicas: Sequence[ReplicaHealth],
          now: float, gone: Sequence[ReplicaHealth] = ()) -> Facts:
    """What conditions.compute reads: the spec, the pass's ``outcome`` (reconcile.Outcome, its
    problem as the schedule shows it), the poll's ``replicas`` (``gone``: the last answers of replicas
    that went away since the last publish), the canary's history and the unrecorded admissions."""
    observed = outcome.observed
    return Facts(
        generation=int(body["metadata"].get("generation") or 0),
        desired_replicas=spec.replicas if spec else 0,
        store_backend=spec.store_backend if spec else "sqlite", policy=spec.policy if spec else "",
        persistence=spec.persistence.enabled if spec else False,
        redis_configured=spec.redis.configured if spec else False, running_replicas=observed.running,
        ready_replicas=observed.ready, updated_replicas=observed.updated,
        rollout_observed=observed.rollout_observed, current_replicas=observed.current, problem=outcome.problem,
        probe=outcome.probe,
        health=tuple(replicas), dedup=_dedup_history(body, outcome, now),
        unrecorded=_unrecorded(body, outcome, replicas, gone, now), now=now,
        migrating=bool(outcome.migration and not outcome.migration.done),
        sessions_store=spec.sessions_store if spec else "replica", target=outcome.target, rollout=outcome.rollout,
        memory_warned=_said(body, C.REDIS_DURABLE, R.REDIS_NEARLY_FULL), refused=outcome.refused,
        channels=replica_state.channels_on_every_replica(spec.config, spec.pod.get("env"), spec.replicas)
        if spec else ())


def _said(body: Mapping[str, Any], type_: str, reason: str) -> bool:
    """The condition ``type_`` as last written has ``reason``."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(isinstance(c, Mapping) and c.get("type") == type_ and c.get("reason") == reason for c in conditions)


def _remembered(body: Mapping[str, Any], outcome: Any) -> Mapping[str, Any] | None:
    """status.redis as last written, when it is about the same store (endpoint and prefix)."""
    target = outcome.target
    remembered = (body.get("status") or {}).get("redis") or {}
    same = target is not None and remembered.get("endpoint") == target.endpoint and \
        remembered.get("prefix") == target.prefix
    return remembered if same else None


def _unrecorded(body: Mapping[str, Any], outcome: Any, replicas: Sequence[ReplicaHealth],
                gone: Sequence[ReplicaHealth], now: float) -> unrecorded.Unrecorded:
    if outcome.target is None:
        return unrecorded.Unrecorded()
    return unrecorded.assess(unrecorded.Unrecorded.from_status(_remembered(body, outcome)), replicas, gone, now)


def _dedup_history(body: Mapping[str, Any], outcome: Any, now: float) -> dedup_history.History:
    """The canary's history after this pass; what status remembers counts only for the same store."""
    target = outcome.target
    if target is None:
        return dedup_history.History()
    previous = dedup_history.History.from_status(_remembered(body, outcome))
    fresh = outcome.probe is not None and not outcome.probe.reused  # a kept result was assessed when it was new
    return dedup_history.assess(previous, outcome.probe.store if fresh else None, now)
