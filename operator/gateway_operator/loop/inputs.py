"""The pass's first step: read its inputs. The spec parsed and checked, the generated Secrets
created (full passes), the Secrets the pods read, the managed Redis's address, and the
Deployment as far as it is ours. Every bad input becomes a Problem (problems.py names it);
what runs is left alone.

The API calls are synchronous (kubernetes client); reconcile.py runs these in threads.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from kubernetes.client.exceptions import ApiException

from gateway_operator import api
from gateway_operator.api import reasons, workloads
from gateway_operator.api import GatewaySpec, SecretKeyRef
from gateway_operator.api.redis_target import InvalidRedisURL, RedisTarget, resolve
from gateway_operator.api.tenancy import TenancyPolicy
from gateway_operator.api.tenancy import violations as tenancy_violations
from gateway_operator.api.validation import MSG_REPLICAS_NEED_REDIS, limit_violations, violations
from gateway_operator.clients.kube import Kube, NotOwned, SecretUndecodable
from gateway_operator.clients.redis_connection import Credentials, ca_bundle_loads
from gateway_operator.core import problems
from gateway_operator.core.conditions import Problem
from gateway_operator.core.pods import LiveDeployment, Observed, live_deployment, serving
from gateway_operator.core.render.manifest import digest
from gateway_operator.core.render.names import Owner, auth_token_ref, session_key_ref
from gateway_operator.core.render.secrets import generated_secrets


class SecretInputs(NamedTuple):
    password: str | None = None   # the Redis password, for the operator's own probe
    revision: str = ""            # changes when a Secret the pods read changes
    problem: Problem | None = None
    username: str | None = None   # the Redis ACL user (spec.redis.usernameSecretRef)
    ca: str | None = None         # the PEM bundle of spec.redis.tls.caSecretRef
    refs: tuple[SecretKeyRef, ...] = ()       # the Secrets (and keys) read
    versions: tuple[tuple[str, str], ...] = ()  # ... the resourceVersion of each, by name, as read

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.password, self.username, self.ca)

    def still(self, kube: Kube, namespace: str, refs: tuple[SecretKeyRef, ...]) -> bool:
        """Are these inputs still what a read would find: the same Secrets named, and the Secret
        watch (--watch-secrets) showing each at the version it was read at?"""
        return kube.secrets_watched and self.problem is None and refs == self.refs and all(
            str(kube.delivered("Secret", namespace, name)) == version for name, version in self.versions)


class Prepared(NamedTuple):
    """Inputs of one pass, read before the probe. ``inputs`` holds the Redis password: it
    stays in the operator's memory (the loop keeps it for the observation passes), never in
    status, events or logs."""

    owner: Owner
    spec: GatewaySpec | None = None
    target: RedisTarget | None = None
    inputs: SecretInputs | None = None
    managed_ip: str | None = None
    problem: Problem | None = None
    writes: int = 0
    terminating: bool = False  # the namespace is being deleted: nothing more is created there

    @property
    def credentials(self) -> Credentials:
        return self.inputs.credentials if self.inputs else Credentials()

    @property
    def revision(self) -> str:
        return self.inputs.revision if self.inputs else ""


class Checked(NamedTuple):
    """The spec parsed and checked (pure): the same for as long as its generation is, so the
    loop keeps it between passes instead of parsing every interval. ``spec`` is set whenever it
    parses, even when a rule then refuses it (the loop still reads its health settings)."""

    generation: object
    spec: GatewaySpec | None = None
    target: RedisTarget | None = None
    problem: Problem | None = None


def check(owner: Owner, raw_spec: Mapping[str, Any], generation: object,
          tenancy: TenancyPolicy = TenancyPolicy()) -> Checked:
    """Parse and check the spec: every bad input becomes a Problem."""
    try:
        spec = GatewaySpec.parse(raw_spec)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        return Checked(generation, problem=Problem(reasons.INVALID_SPEC, f"spec cannot be read: {e}"))
    over = limit_violations(raw_spec)
    if over:
        return Checked(generation, spec, problem=Problem(reasons.CONFIG_OVER_LIMITS, " ".join(over)))
    # Defence in depth: the CRD's rules may be missing (an old CRD, a bypassed webhook).
    broken = [m for m in violations(owner.name, raw_spec) if m != MSG_REPLICAS_NEED_REDIS]
    if broken:
        return Checked(generation, spec, problem=Problem(reasons.INVALID_SPEC, " ".join(broken)))
    if not spec.image:
        return Checked(generation, spec, problem=Problem(reasons.INVALID_SPEC, "spec.image is required"))
    # the administrator's policy, which the chart's admission policy enforces too (it may be off)
    refused = tenancy_violations(owner.namespace, raw_spec, tenancy)
    if refused:
        return Checked(generation, spec, problem=Problem(reasons.TENANCY_POLICY_VIOLATION, " ".join(refused)))
    try:
        return Checked(generation, spec, resolve(spec.redis, owner.namespace, owner.name))
    except InvalidRedisURL as e:
        return Checked(generation, spec, problem=Problem(reasons.INVALID_REDIS_URL, str(e)))


def reads_the_api(checked: Checked, fresh: bool, cached: SecretInputs | None) -> bool:
    """Whether ``prepare`` calls the API server (the loop runs it in a thread then): Secrets
    read afresh or not read yet, or a managed Redis whose pod address is looked up."""
    return checked.problem is None and (fresh or cached is None or bool(checked.target and checked.target.managed))


def prepare(kube: Kube, owner: Owner, checked: Checked, fresh: bool, cached: SecretInputs | None,
            last: SecretInputs | None = None) -> Prepared:
    """``fresh`` (a full pass): create the generated Secrets when absent. Read the Secrets the
    pods use (unless ``cached`` holds what the last full pass read, or the Secret watch shows
    ``last``, what it read, unchanged since) and the managed Redis's address."""
    if checked.problem is not None or checked.spec is None:
        return Prepared(owner, problem=checked.problem)
    spec, target = checked.spec, checked.target
    read: dict[str, dict[str, Any]] = {}  # the Secrets this pass read, by name: each read once
    try:
        writes = _ensure_generated_secrets(kube, owner, spec, read) if fresh else 0
        if cached is None and last is not None and last.still(kube, owner.namespace, secret_refs(owner, spec, target)):
            cached = last
        inputs = cached or _secret_inputs(kube, owner, spec, target, read)
        managed_ip = _managed_redis_ip(kube, owner, target) if target is not None else None
    except NotOwned as e:
        return Prepared(owner, spec, target, problem=problems.not_owned(e.kind, e.name, e.namespace))
    except ApiException as e:
        if problems.namespace_terminating(e):
            return Prepared(owner, spec, target, terminating=True)
        return Prepared(owner, spec, target, problem=problems.refused(e))
    if inputs.problem:  # keep what runs: pods referencing a missing Secret would not start
        return Prepared(owner, spec, target, problem=inputs.problem, writes=writes)
    return Prepared(owner, spec, target, inputs, managed_ip, writes=writes)


def _ensure_generated_secrets(kube: Kube, owner: Owner, spec: GatewaySpec,
                              read: dict[str, dict[str, Any]]) -> int:
    """The Secrets render.secrets.generated_secrets names: created once when absent, never rotated
    behind the user's back. ``read`` gets the ones found, so that the pass does not read them again."""
    created = 0
    for g in generated_secrets(owner, spec):
        made, live = kube.create_if_absent(g.manifest(owner), owner.uid)
        created += made
        if live is not None:
            read[g.name] = live
    return created


def _named_refs(owner: Owner, spec: GatewaySpec, target: RedisTarget | None) -> list[tuple[str, SecretKeyRef]]:
    """Every Secret (and key) the pods read, with the spec field that names it."""
    refs = [("spec.authTokenSecretRef", auth_token_ref(owner.name, spec))]
    if target is not None and target.password_ref is not None:
        refs.append(("spec.redis.passwordSecretRef", target.password_ref))
    if target is not None and target.username_ref is not None:
        refs.append(("spec.redis.usernameSecretRef", target.username_ref))
    if target is not None and target.ca_ref is not None:
        refs.append(("spec.redis.tls.caSecretRef", target.ca_ref))
    session_key = session_key_ref(owner.name, spec) if target is not None else None
    if session_key is not None:
        refs.append(("spec.sessions.encryptionKeySecretRef", session_key))
    return refs


def secret_refs(owner: Owner, spec: GatewaySpec, target: RedisTarget | None) -> tuple[SecretKeyRef, ...]:
    return tuple(ref for _, ref in _named_refs(owner, spec, target))


def _secret_inputs(kube: Kube, owner: Owner, spec: GatewaySpec, target: RedisTarget | None,
                   read: Mapping[str, dict[str, Any]]) -> SecretInputs:
    """Checks every Secret the pods will read (env vars are read at container start, so a
    rotated Secret must roll the pods: its resourceVersion goes into ``revision``)."""
    refs = _named_refs(owner, spec, target)
    ca_ref = target.ca_ref if target is not None else None
    found: dict[SecretKeyRef, str] = {}
    versions: list[str] = []
    read_at: dict[str, str] = {}
    for field_name, ref in refs:
        try:
            value, version = kube.secret_value(owner.namespace, ref.name, ref.key, read.get(ref.name))
        except LookupError:
            return SecretInputs(problem=Problem(reasons.SECRET_NOT_FOUND, f"Secret {ref.name!r} named by "
                                                f"{field_name} does not exist in namespace {owner.namespace}"))
        except SecretUndecodable:
            return SecretInputs(problem=Problem(reasons.SECRET_VALUE_INVALID, f"key {ref.key!r} of Secret "
                                                f"{ref.name!r} named by {field_name} is not UTF-8 text"))
        if value is None:
            return SecretInputs(problem=Problem(reasons.SECRET_KEY_MISSING, f"Secret {ref.name!r} named by "
                                                f"{field_name} has no key {ref.key!r}"))
        if ref == ca_ref and not ca_bundle_loads(value):
            return SecretInputs(problem=Problem(reasons.SECRET_VALUE_INVALID, f"key {ref.key!r} of Secret "
                                                f"{ref.name!r} named by {field_name} holds no PEM certificate "
                                                "(-----BEGIN CERTIFICATE----- ...) that TLS can load"))
        versions.append(f"{ref.name}@{version}")
        read_at[ref.name] = version
        found[ref] = value
    target_refs = (target.password_ref, target.username_ref) if target is not None else (None, None)
    return SecretInputs(found.get(target_refs[0]) if target_refs[0] else None, digest(sorted(versions)),
                        username=found.get(target_refs[1]) if target_refs[1] else None,
                        ca=found.get(ca_ref) if ca_ref else None, refs=tuple(ref for _, ref in refs),
                        versions=tuple(sorted(read_at.items())))


def _managed_redis_ip(kube: Kube, owner: Owner, target: RedisTarget) -> str | None:
    """Probe a managed Redis at its ready pod's IP: the Service name resolves only inside
    the cluster network, the pod IP wherever pods are routable. "" when none is ready."""
    if not target.managed:
        return None
    for pod in kube.pods(owner.namespace, api.selector_for(owner.name, component="redis")):
        if serving(pod):
            return workloads.pod_ip(pod)
    return ""


def observe(kube: Kube, owner: Owner) -> LiveDeployment | None:
    """The Deployment as it is now (None: there is none)."""
    live = kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
    return None if live is None else live_deployment(live)


def observed_if_ours(live: LiveDeployment | None, owner: Owner) -> Observed:
    """The Deployment's counts; a same-named Deployment of someone else counts as nothing."""
    return live.observed if live is not None and live.controller_uid == owner.uid else Observed()
