"""Which problem a pass reports: declared once, pure.

A pass (reconcile.py) collects the problems its steps found, each made by one constructor here;
``winner`` picks the one that becomes ``Stalled=True`` (and so ``Ready=False``,
``Reconciling=False``) by its place in ``PRECEDENCE``, as Flux's ``summarize.Conditions``
declares its order once.
"""
from __future__ import annotations

import json
from typing import Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator.api import reasons as R
from gateway_operator.api import GatewaySpec, Policy
from gateway_operator.api.tenancy import MSG_HOST_CLAIMED
from gateway_operator.api.validation import MSG_AUTOSCALING_NEEDS_REDIS, MSG_REPLICAS_NEED_REDIS
from gateway_operator.core.conditions import Problem
from gateway_operator.core.pods import PodView

#: the first of a pass's problems in this order wins
PRECEDENCE: tuple[str, ...] = (
    # the spec or its inputs cannot be read: the pass stops there, what runs is left alone
    R.INVALID_SPEC, R.CONFIG_OVER_LIMITS, R.TENANCY_POLICY_VIOLATION, R.INVALID_REDIS_URL,
    R.SECRET_NOT_FOUND, R.SECRET_KEY_MISSING, R.SECRET_VALUE_INVALID,
    # a write the API server refused, or an object in the way: seen only by a full pass (sticky)
    R.OBJECT_NOT_OWNED, R.APPLY_FAILED, R.EXPOSE_NOT_SERVED, R.RECONCILE_ERROR, R.API_SERVER_UNAVAILABLE,
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


def api_server_unavailable(error: Exception) -> Problem:
    """The API server did not answer a request of the pass in time, or at all (clients/kube.SILENT):
    its state, not the spec's; retried with backoff, and shown as Reconciling, not Stalled."""
    return Problem(R.API_SERVER_UNAVAILABLE, f"the API server did not answer a request of the reconcile in time "
                                             f"({type(error).__name__}); retrying with backoff. Nothing needs changing "
                                             "here: a busy or restarting API server clears by itself")


def namespace_terminating(e: ApiException) -> bool:
    """The API server refused to create something because the namespace is being deleted (the
    cause NamespaceTerminating): not a problem of the spec, and nothing to retry there."""
    if e.body is None:
        return False
    try:
        causes = (json.loads(e.body).get("details") or {}).get("causes") or []
    except (TypeError, ValueError, AttributeError):
        return False
    return e.status == 403 and any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def api_message(e: ApiException) -> str:
    if e.body is None:
        return str(e.reason)
    try:
        return str(json.loads(e.body).get("message", e.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)
