"""One reconciliation pass for one GatewayDeployment (synchronous; runs in a thread).

Reads the inputs (spec, Secrets, the Redis probe, the live Deployment), decides the replica
count (policy and scale-out gate), applies what ``render`` says should exist, and returns
what it saw. It never raises for bad input: a bad input becomes a ``Problem`` and what was
running is left alone.
"""
from __future__ import annotations

import logging
import secrets as token_source
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubernetes.client.rest import ApiException

from . import api, render
from .api import GatewaySpec, Policy
from .conditions import Problem
from .kube import Kube
from .redis_probe import ProbeResult, probe
from .redis_target import InvalidRedisURL, RedisTarget, managed_redis_name, resolve
from .validation import MSG_REPLICAS_NEED_REDIS, violations

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    target: RedisTarget | None = None
    problem: Problem | None = None
    probe: ProbeResult | None = None
    running_replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    rollout_observed: bool = False
    writes: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one gateway pod (kept in a kopf index)."""

    name: str
    uid: str
    ip: str | None
    ready: bool
    deleting: bool
    waiting_reason: str | None = None
    last_exit_code: int | None = None


def reconcile(kube: Kube, body: Mapping[str, Any], pods: Sequence[PodView], apply: bool = True) -> Outcome:
    """``apply=False`` only observes (Secrets, the Redis probe, the Deployment's status): the
    cheap pass run every health interval between full reconciles."""
    meta = body["metadata"]
    owner = render.Owner(meta["name"], meta["namespace"], meta["uid"])
    raw_spec = body.get("spec") or {}
    out = Outcome()
    try:
        spec = GatewaySpec.parse(raw_spec)
    except (TypeError, ValueError, KeyError) as e:
        out.problem = Problem("InvalidSpec", f"spec cannot be read: {e}")
        return _observe(kube, owner, out)

    # Defence in depth: the CRD's rules may be missing (an old CRD, a bypassed webhook).
    policy_breach = spec.policy == Policy.REFUSE and spec.replicas > 1 and spec.store_backend != "redis"
    broken = [m for m in violations(raw_spec) if m != MSG_REPLICAS_NEED_REDIS]
    if broken:
        out.problem = Problem("InvalidSpec", " ".join(broken))
        return _observe(kube, owner, out)
    if not spec.image:
        out.problem = Problem("InvalidSpec", "spec.image is required")
        return _observe(kube, owner, out)
    try:
        out.target = resolve(spec.redis, owner.namespace, owner.name)
    except InvalidRedisURL as e:
        out.problem = Problem("InvalidRedisURL", str(e))
        return _observe(kube, owner, out)

    try:
        if apply:
            out.writes += _ensure_generated_secrets(kube, owner, spec)
        inputs = _secret_inputs(kube, owner, spec, out.target)
        if inputs.problem:  # keep what runs: pods referencing a missing Secret would not start
            out.problem = inputs.problem
            return _observe(kube, owner, out)
        if out.target is not None:
            out.probe = probe(out.target, inputs.password, timeout=spec.health.timeout_seconds,
                              host_override=_managed_redis_ip(kube, owner, out.target))
        if policy_breach:
            out.problem = Problem("ReplicaPolicyViolation", MSG_REPLICAS_NEED_REDIS)
        if apply:
            replicas = _replicas(kube, owner, spec, out)
            for manifest in render.desired_objects(owner, spec, out.target, replicas, inputs.revision):
                out.writes += kube.apply(manifest).written
            if spec.replicas <= 1:
                out.writes += kube.delete_if_present("policy/v1", "PodDisruptionBudget", owner.namespace,
                                                     owner.name, owner.uid)
    except ApiException as e:
        out.problem = Problem("ApplyFailed", f"the API server refused a change: {_api_message(e)}")
    out = _observe(kube, owner, out)
    if out.problem is None:
        out.problem = _pod_problem(pods)
    return out


def _ensure_generated_secrets(kube: Kube, owner: render.Owner, spec: GatewaySpec) -> int:
    """The auth token (the gateway refuses a non-loopback bind without one) and the managed
    Redis password: generated once, never rotated behind the user's back."""
    created = 0
    if spec.auth_token_ref is None:
        created += kube.create_if_absent(render.generated_secret(
            owner, render.auth_secret_name(owner.name), "token", token_source.token_urlsafe(48), "gateway"))
    if spec.redis.managed:
        created += kube.create_if_absent(render.generated_secret(
            owner, managed_redis_name(owner.name), "password", token_source.token_urlsafe(32), "redis"))
    return created


@dataclass(frozen=True)
class SecretInputs:
    password: str | None = None   # the Redis password, for the operator's own probe
    revision: str = ""            # changes when a Secret the pods read changes
    problem: Problem | None = None


def _secret_inputs(kube: Kube, owner: render.Owner, spec: GatewaySpec, target: RedisTarget | None) -> SecretInputs:
    """Checks every Secret the pods will read (env vars are read at container start, so a
    rotated Secret must roll the pods: its resourceVersion goes into ``revision``)."""
    refs = [("spec.authTokenSecretRef", render.auth_token_ref(owner.name, spec))]
    if target is not None and target.password_ref is not None:
        refs.append(("spec.redis.passwordSecretRef", target.password_ref))
    password, versions = None, []
    for field_name, ref in refs:
        try:
            value, version = kube.secret_value(owner.namespace, ref.name, ref.key)
        except LookupError:
            return SecretInputs(problem=Problem("SecretNotFound", f"Secret {ref.name!r} named by {field_name} does "
                                                                  f"not exist in namespace {owner.namespace}"))
        if value is None:
            return SecretInputs(problem=Problem("SecretKeyMissing", f"Secret {ref.name!r} named by {field_name} has "
                                                                    f"no key {ref.key!r}"))
        versions.append(f"{ref.name}@{version}")
        if target is not None and ref == target.password_ref:
            password = value
    return SecretInputs(password, render.digest(sorted(versions)))


def _managed_redis_ip(kube: Kube, owner: render.Owner, target: RedisTarget) -> str | None:
    """Probe a managed Redis at its ready pod's IP: the Service name resolves only inside
    the cluster network, the pod IP wherever pods are routable."""
    if not target.managed:
        return None
    for pod in kube.pods(owner.namespace, api.selector_for(owner.name, component="redis")):
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            return str(status["podIP"])
    return "0.0.0.0"  # nothing ready yet: the probe fails with a connection error, as it should


def _replicas(kube: Kube, owner: render.Owner, spec: GatewaySpec, out: Outcome) -> int:
    """Replica count to run now: never more than one without Redis under Refuse, and no
    scale-out past the current count (at least one) until the Redis probe passes."""
    if spec.policy == Policy.REFUSE and spec.store_backend != "redis":
        return min(spec.replicas, 1)
    if spec.store_backend == "redis" and not (out.probe and out.probe.ok):
        live = kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
        current = int(((live or {}).get("spec") or {}).get("replicas") or 0)
        return min(spec.replicas, max(1, current))
    return spec.replicas


def _observe(kube: Kube, owner: render.Owner, out: Outcome) -> Outcome:
    live = kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
    if live is None:
        return out
    status = live.get("status") or {}
    out.running_replicas = int((live.get("spec") or {}).get("replicas") or 0)
    out.ready_replicas = int(status.get("readyReplicas") or 0)
    out.updated_replicas = int(status.get("updatedReplicas") or 0)
    out.rollout_observed = int(status.get("observedGeneration") or 0) >= int(live["metadata"]["generation"])
    return out


def _pod_problem(pods: Sequence[PodView]) -> Problem | None:
    """A replica that crash-loops, or that the gateway itself refused to start (exit 78)."""
    for pod in pods:
        if pod.last_exit_code == 78:
            return Problem("GatewayConfigRejected", f"pod {pod.name} exited 78: the gateway rejected its "
                                                    "gateway.yaml (see kubectl logs); the previous replicas keep "
                                                    "serving")
    for pod in pods:
        if pod.waiting_reason in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                                  "CreateContainerConfigError", "InvalidImageName"):
            return Problem(pod.waiting_reason if pod.waiting_reason != "CrashLoopBackOff" else "CrashLoop",
                           f"pod {pod.name} is waiting: {pod.waiting_reason}")
    return None


def _api_message(e: ApiException) -> str:
    import json
    try:
        return str(json.loads(e.body).get("message", e.reason))[:500]
    except (TypeError, ValueError):
        return str(e.reason)
