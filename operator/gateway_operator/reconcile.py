"""One reconciliation pass for one GatewayDeployment.

``reconcile`` reads the inputs (spec, Secrets, the live Deployment), runs the Redis probe on
the event loop, decides the replica count (policy and scale-out gate), applies what
``render`` says should exist, and returns a ``Result``: what it saw, and when it wants to
run again (as controller-runtime's ``Result{RequeueAfter}`` does). It never raises: a bad
input, a foreign object in the way or an unexpected error becomes a ``Problem``, what was
running is left alone, and the retry backs off.

The API calls are synchronous (kubernetes client) and run in threads; the probe is async,
so a slow Redis never holds a thread that another namespace's reconcile needs.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import secrets as token_source
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from kubernetes.client.rest import ApiException

from . import api, expose, reasons, render, schedule
from .api import GatewaySpec, Policy, SecretKeyRef
from .conditions import Problem
from .expose import Exposure
from .kube import Kube, NotOwned, NotServed, SecretUndecodable, controlled_by
from .pods import serving
from .redis_probe import Credentials, ProbeResult, Prober, ca_bundle_loads
from .redis_target import InvalidRedisURL, RedisTarget, managed_redis_name, resolve
from .replicas import Migration, migration_state, replicas_to_run
from .tenancy import MSG_HOST_CLAIMED, Claim, TenancyPolicy, claim_of, claimed_elsewhere
from .tenancy import violations as tenancy_violations
from .validation import MSG_REPLICAS_NEED_REDIS, limit_violations, violations

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one gateway pod (kept in a kopf index)."""

    name: str
    uid: str
    ip: str | None
    ready: bool
    deleting: bool
    waiting_reason: str | None = None
    waiting_message: str = ""   # the kubelet's, for the POD_WAITING reasons only (bounded)
    last_exit_code: int | None = None


@dataclass(frozen=True)
class ReconcileSettings:
    resync_seconds: float = 60.0                            # full reconcile (drift check) at least this often
    problem_backoff: tuple[float, ...] = schedule.PROBLEM_BACKOFF  # retries while a Problem persists
    operator: render.OperatorIdentity = field(default_factory=render.OperatorIdentity)
    tenancy: TenancyPolicy = field(default_factory=TenancyPolicy)  # the administrator's (chart values tenancy)

    def backoff(self, failures: int) -> float:
        return schedule.backoff(failures, self.problem_backoff)

    def resync_after(self) -> float:
        return schedule.resync_after(self.resync_seconds, random.random())


class Observed(NamedTuple):
    """The live Deployment, as far as it is ours."""

    running: int = 0
    ready: int = 0
    updated: int = 0
    rollout_observed: bool = False
    failure: str = ""   # the Deployment's ReplicaFailure message (a pod the API server refused to create)


class LiveDeployment(NamedTuple):
    """A gateway Deployment as the watch last delivered it (kept in a kopf index), so that
    observation passes read no API object at all."""

    controller_uid: str | None
    observed: Observed


def live_deployment(deployment: Mapping[str, Any]) -> LiveDeployment:
    owner = next((r.get("uid") for r in deployment["metadata"].get("ownerReferences") or []
                  if r.get("controller")), None)
    status = deployment.get("status") or {}
    failure = next((str(c.get("message") or c.get("reason") or "")[:FAILURE_MESSAGE_LIMIT]
                    for c in status.get("conditions") or []
                    if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), "")
    return LiveDeployment(owner, Observed(
        running=int((deployment.get("spec") or {}).get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        rollout_observed=int(status.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation")
                                                                           or 0),
        failure=failure))


FAILURE_MESSAGE_LIMIT = 500  # characters of the API server's refusal kept (it names the pod and the rule)


class SecretInputs(NamedTuple):
    password: str | None = None   # the Redis password, for the operator's own probe
    revision: str = ""            # changes when a Secret the pods read changes
    problem: Problem | None = None
    username: str | None = None   # the Redis ACL user (spec.redis.usernameSecretRef)
    ca: str | None = None         # the PEM bundle of spec.redis.tls.caSecretRef

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.password, self.username, self.ca)


class Outcome(NamedTuple):
    target: RedisTarget | None = None
    problem: Problem | None = None
    probe: ProbeResult | None = None
    observed: Observed = Observed()
    writes: int = 0
    applied: bool = False   # a full pass (apply) ran, not only observation
    error: Exception | None = None  # an unforeseen error behind the problem (its traceback is logged)
    exposure: Exposure | None = None  # read this pass (spec.expose); None: not read, keep the last
    migration: Migration | None = None  # a single SQLite replica's records on their way to Redis


class Result(NamedTuple):
    outcome: Outcome
    requeue_after: float    # seconds until the next full pass is due
    inputs: SecretInputs | None = None  # what a full pass read from the Secrets, for the passes until the next


class Observation(NamedTuple):
    """What an observation pass reuses instead of reading the API: the Deployment as the
    watch delivered it, and the Secret inputs of the last full pass that read them fine."""

    deployment: LiveDeployment | None = None
    inputs: SecretInputs | None = None
    exposure: Exposure | None = None  # the last one read: an observation pass reads again until it has an address
    host_claims: Mapping[str, Sequence[Claim]] = {}  # every known claimant of each host spec.expose names


class Prepared(NamedTuple):
    """Inputs of one pass, read before the probe. ``inputs`` holds the Redis password: it
    stays in the operator's memory (the loop keeps it for the observation passes), never in
    status, events or logs."""

    owner: render.Owner
    spec: GatewaySpec | None = None
    target: RedisTarget | None = None
    inputs: SecretInputs | None = None
    managed_ip: str | None = None
    problem: Problem | None = None
    writes: int = 0

    @property
    def credentials(self) -> Credentials:
        return self.inputs.credentials if self.inputs else Credentials()

    @property
    def revision(self) -> str:
        return self.inputs.revision if self.inputs else ""


class _Pass(NamedTuple):
    outcome: Outcome
    inputs: SecretInputs | None = None  # the Secret inputs the pass used, when it could read them all


async def reconcile(kube: Kube, prober: Prober, settings: ReconcileSettings, body: Mapping[str, Any],
                    pods: Sequence[PodView], full: bool, failures: int,
                    seen: Observation = Observation()) -> Result:
    """``full=False`` only observes (the probe, the Deployment's status): the cheap pass run
    every health interval between full ones. It reads nothing from the API server when
    ``seen`` has the Deployment's watched state and the last full pass's Secret inputs, so
    a Secret's change is noticed by the next full pass. ``failures``: consecutive passes
    that ended with a Problem (for the backoff)."""
    meta = body["metadata"]
    owner = render.Owner(meta["name"], meta["namespace"], meta["uid"])
    mine = claim_of(api.KIND, meta)
    # routes exist only once status.expose was written: nothing else needs a look for them
    exposed_before = "expose" in (body.get("status") or {})
    # the gateway NetworkPolicy exists only once status.networkPolicy was written
    policy_before = "networkPolicy" in (body.get("status") or {})
    previous_migration = (body.get("status") or {}).get("sqliteMigration") or {}
    try:
        outcome, inputs = await _reconcile(kube, prober, settings, owner, mine, body.get("spec") or {}, pods, full,
                                           seen, (exposed_before, policy_before), previous_migration)
    except Exception as e:  # noqa: BLE001 - the boundary: nothing escapes to the loop
        outcome, inputs = Outcome(problem=_unexpected(e), applied=full, error=e), None
    read = inputs if full and outcome.problem is None else None
    if outcome.problem is not None:
        return Result(outcome, settings.backoff(failures), read)
    return Result(outcome, settings.resync_after(), read)


async def _reconcile(kube: Kube, prober: Prober, settings: ReconcileSettings, owner: render.Owner, mine: Claim,
                     raw_spec: Mapping[str, Any], pods: Sequence[PodView], full: bool, seen: Observation,
                     before: tuple[bool, bool], previous_migration: Mapping[str, Any]) -> _Pass:
    cached = None if full else seen.inputs
    prepared = await asyncio.to_thread(_prepare, kube, owner, raw_spec, full, cached, settings.tenancy)
    if full or seen.deployment is None:
        observed = await asyncio.to_thread(_observe, kube, owner)
    else:
        observed = _observed_if_ours(seen.deployment, owner)
    if prepared.problem is not None or prepared.spec is None:
        return _Pass(Outcome(prepared.target, prepared.problem, observed=observed, writes=prepared.writes,
                             applied=full))
    spec, target = prepared.spec, prepared.target
    probe = None
    if target is not None:
        probe = await prober.probe(owner.namespace, target, prepared.credentials, spec.health.timeout_seconds,
                                   prepared.managed_ip, owner.name)
    claimed = claimed_elsewhere(mine, spec.expose.hosts, seen.host_claims)
    claim = _claim_problem(claimed)
    problem = _policy_problem(spec) or _probe_problem(probe) or claim
    migration = await asyncio.to_thread(
        migration_state, spec, previous_migration,
        lambda: kube.get("v1", "PersistentVolumeClaim", owner.namespace, render.state_claim_name(owner.name)) is not None,
        probe.store.migrated if probe and probe.store else None, lambda: token_source.token_hex(8))
    replicas = replicas_to_run(spec, bool(probe and probe.ok), observed.running, migration)
    writes = prepared.writes
    # the scale-out gate just opened: grow now rather than at the next full pass (only a
    # Deployment that exists grows this way; creating one waits for a full pass and its backoff)
    apply = full or (observed.running > 0 and replicas > observed.running)
    exposure = None
    if apply and (problem is None or problem.reason in _APPLY_DESPITE):
        try:
            applied = await asyncio.to_thread(_apply, kube, owner, spec, target, replicas, prepared.revision,
                                              settings.operator, before, not claimed,
                                              migration.token if migration and not migration.done else "")
            writes += applied.writes
            # status.expose says why there is no route, whatever else is wrong
            exposure = (Exposure(message=claim.message) if claim else
                        await asyncio.to_thread(_exposure, kube, owner, spec, applied.routes))
        except NotOwned as e:
            problem = _not_owned(e)
        except NotServed as e:
            problem = Problem(reasons.EXPOSE_NOT_SERVED, f"this cluster serves no {e.kind} ({e.api_version}): "
                              f"{_EXPOSE_FIELD.get(e.kind, 'spec.expose')} needs it. Install its CRDs (Gateway "
                              "API) or remove that field; the replicas run meanwhile.")
        except ApiException as e:
            problem = Problem(reasons.APPLY_FAILED, f"the API server refused a change: {_api_message(e)}")
        observed = await asyncio.to_thread(_observe, kube, owner)
    elif not full and spec.expose.enabled and not claimed and not (seen.exposure and seen.exposure.address):
        try:  # waiting for the controller to publish an address: a look each observation pass
            exposure = await asyncio.to_thread(_exposure, kube, owner, spec)
        except NotServed:
            exposure = None  # the full pass reports it
    problem = problem or _pod_problem(pods) or _deployment_problem(observed)
    return _Pass(Outcome(target, problem, probe, observed, writes, apply, exposure=exposure, migration=migration),
                 prepared.inputs)


# problems that still leave the rest applied: the replica guard (one replica runs), a host
# claimed by someone older (everything but the routes)
_APPLY_DESPITE = (reasons.REPLICA_POLICY_VIOLATION, reasons.HOST_CLAIMED)
_EXPOSE_FIELD = {expose.INGRESS_API[1]: "spec.expose.ingress", expose.ROUTE_API[1]: "spec.expose.httpRoute"}


def _prepare(kube: Kube, owner: render.Owner, raw_spec: Mapping[str, Any], full: bool,
             cached: SecretInputs | None, tenancy: TenancyPolicy = TenancyPolicy()) -> Prepared:
    """Parse and check the spec, create the generated Secrets (full passes), read the ones
    the pods use (unless ``cached`` holds what the last full pass read). Every bad input
    becomes a Problem."""
    try:
        spec = GatewaySpec.parse(raw_spec)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        return Prepared(owner, problem=Problem(reasons.INVALID_SPEC, f"spec cannot be read: {e}"))
    over = limit_violations(raw_spec)
    if over:
        return Prepared(owner, problem=Problem(reasons.CONFIG_OVER_LIMITS, " ".join(over)))
    # Defence in depth: the CRD's rules may be missing (an old CRD, a bypassed webhook).
    broken = [m for m in violations(owner.name, raw_spec) if m != MSG_REPLICAS_NEED_REDIS]
    if broken:
        return Prepared(owner, problem=Problem(reasons.INVALID_SPEC, " ".join(broken)))
    if not spec.image:
        return Prepared(owner, problem=Problem(reasons.INVALID_SPEC, "spec.image is required"))
    # the administrator's policy, which the chart's admission policy enforces too (it may be off)
    refused = tenancy_violations(owner.namespace, raw_spec, tenancy)
    if refused:
        return Prepared(owner, problem=Problem(reasons.TENANCY_POLICY_VIOLATION, " ".join(refused)))
    try:
        target = resolve(spec.redis, owner.namespace, owner.name)
    except InvalidRedisURL as e:
        return Prepared(owner, problem=Problem(reasons.INVALID_REDIS_URL, str(e)))
    try:
        writes = _ensure_generated_secrets(kube, owner, spec) if full else 0
        inputs = cached or _secret_inputs(kube, owner, spec, target)
        managed_ip = _managed_redis_ip(kube, owner, target) if target is not None else None
    except NotOwned as e:
        return Prepared(owner, spec, target, problem=_not_owned(e))
    except ApiException as e:
        return Prepared(owner, spec, target, problem=Problem(reasons.APPLY_FAILED,
                                                             f"the API server refused a request: {_api_message(e)}"))
    if inputs.problem:  # keep what runs: pods referencing a missing Secret would not start
        return Prepared(owner, spec, target, problem=inputs.problem, writes=writes)
    return Prepared(owner, spec, target, inputs, managed_ip, writes=writes)


class Applied(NamedTuple):
    writes: int
    routes: dict[str, dict[str, Any]]  # the Ingress and HTTPRoute as applied, by kind (their status included)


def _apply(kube: Kube, owner: render.Owner, spec: GatewaySpec, target: RedisTarget | None, replicas: int,
           revision: str, operator: render.OperatorIdentity, before: tuple[bool, bool] = (False, False),
           routes_allowed: bool = True, migration: str = "") -> Applied:
    """``before``: whether status says routes (status.expose) and the gateway NetworkPolicy
    (status.networkPolicy) were written, so that only then are they looked for to be removed.
    ``routes_allowed`` False: a host is claimed by someone older, so no route of this
    GatewayDeployment may stand (one written before the older claim was seen goes)."""
    exposed_before, policy_before = before
    writes, routes = 0, {}
    for manifest in render.desired_objects(owner, spec, target, replicas, revision, operator, migration):
        if manifest["kind"] in _EXPOSE_FIELD and not routes_allowed:
            continue
        result = kube.apply(manifest, owner.uid)
        writes += result.written
        if manifest["kind"] in _EXPOSE_FIELD:
            routes[manifest["kind"]] = result.live
    if spec.replicas <= 1:
        writes += kube.delete_if_present("policy/v1", "PodDisruptionBudget", owner.namespace, owner.name, owner.uid)
    if policy_before and not spec.network_policy.enabled:
        writes += kube.delete_if_present("networking.k8s.io/v1", "NetworkPolicy", owner.namespace,
                                         render.gateway_network_policy_name(owner.name), owner.uid)
    if exposed_before or not routes_allowed:  # a route the spec no longer asks for, or may not have
        for (api_version, kind), wanted in ((expose.INGRESS_API, spec.expose.ingress),
                                            (expose.ROUTE_API, spec.expose.http_route)):
            if wanted is None or not routes_allowed:
                try:
                    writes += kube.delete_if_present(api_version, kind, owner.namespace, owner.name, owner.uid)
                except NotServed:
                    pass  # never created here
    return Applied(writes, routes)


def _exposure(kube: Kube, owner: render.Owner, spec: GatewaySpec,
              applied: Mapping[str, dict[str, Any]] | None = None) -> Exposure | None:
    """The address the edge published for the routes of spec.expose (None: no spec.expose).
    ``applied``: the routes a full pass just applied (read here only when absent)."""
    if not spec.expose.enabled:
        return None
    applied = applied or {}

    def route_object(api_version: str, kind: str) -> dict[str, Any] | None:
        live = applied[kind] if kind in applied else kube.get(api_version, kind, owner.namespace, owner.name)
        return _ours(live, owner)

    ingress = route = None
    gateways: dict[tuple[str, str], Any] = {}
    if spec.expose.ingress is not None:
        ingress = route_object(*expose.INGRESS_API)
    if spec.expose.http_route is not None:
        route = route_object(*expose.ROUTE_API)
        # only Gateways whose controller accepted the route (so they admit this namespace's
        # routes), and only the first few
        for key in expose.accepted_parents(route)[:4]:
            try:
                gateways[key] = kube.get(*expose.GATEWAY_API, *key)
            except ApiException as e:
                if e.status != 403:  # an operator limited to some namespaces may not read it
                    raise
    return expose.exposure(spec.expose, ingress, route, {k: v for k, v in gateways.items() if v})


def _ours(live: dict[str, Any] | None, owner: render.Owner) -> dict[str, Any] | None:
    return live if live is not None and controlled_by(live, owner.uid) else None


def _ensure_generated_secrets(kube: Kube, owner: render.Owner, spec: GatewaySpec) -> int:
    """The auth token (the gateway refuses a non-loopback bind without one) and the managed
    Redis password: generated once, never rotated behind the user's back."""
    created = 0
    if spec.auth_token_ref is None:
        created += kube.create_if_absent(render.generated_secret(
            owner, render.auth_secret_name(owner.name), "token", token_source.token_urlsafe(48), "gateway"),
            owner.uid)
    if spec.redis.managed:
        created += kube.create_if_absent(render.generated_secret(
            owner, managed_redis_name(owner.name), "password", token_source.token_urlsafe(32), "redis"), owner.uid)
    if spec.sessions_store == "redis" and spec.sessions.key_ref is None:  # a Fernet key
        key = base64.urlsafe_b64encode(token_source.token_bytes(32)).decode()
        created += kube.create_if_absent(render.generated_secret(
            owner, render.session_key_secret_name(owner.name), "key", key, "gateway"), owner.uid)
    return created


def _secret_inputs(kube: Kube, owner: render.Owner, spec: GatewaySpec, target: RedisTarget | None) -> SecretInputs:
    """Checks every Secret the pods will read (env vars are read at container start, so a
    rotated Secret must roll the pods: its resourceVersion goes into ``revision``)."""
    refs = [("spec.authTokenSecretRef", render.auth_token_ref(owner.name, spec))]
    if target is not None and target.password_ref is not None:
        refs.append(("spec.redis.passwordSecretRef", target.password_ref))
    if target is not None and target.username_ref is not None:
        refs.append(("spec.redis.usernameSecretRef", target.username_ref))
    ca_ref = target.ca_ref if target is not None else None
    if ca_ref is not None:
        refs.append(("spec.redis.tls.caSecretRef", ca_ref))
    session_key = render.session_key_ref(owner.name, spec) if target is not None else None
    if session_key is not None:
        refs.append(("spec.sessions.encryptionKeySecretRef", session_key))
    found: dict[SecretKeyRef, str] = {}
    versions = []
    for field_name, ref in refs:
        try:
            value, version = kube.secret_value(owner.namespace, ref.name, ref.key)
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
        found[ref] = value
    target_refs = (target.password_ref, target.username_ref) if target is not None else (None, None)
    return SecretInputs(found.get(target_refs[0]) if target_refs[0] else None, render.digest(sorted(versions)),
                        username=found.get(target_refs[1]) if target_refs[1] else None,
                        ca=found.get(ca_ref) if ca_ref else None)


def _managed_redis_ip(kube: Kube, owner: render.Owner, target: RedisTarget) -> str | None:
    """Probe a managed Redis at its ready pod's IP: the Service name resolves only inside
    the cluster network, the pod IP wherever pods are routable. "" when none is ready."""
    if not target.managed:
        return None
    for pod in kube.pods(owner.namespace, api.selector_for(owner.name, component="redis")):
        if serving(pod):
            return str(pod["status"]["podIP"])
    return ""


def _observe(kube: Kube, owner: render.Owner) -> Observed:
    """The Deployment's counts; a same-named Deployment of someone else counts as nothing."""
    live = kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
    return Observed() if live is None else _observed_if_ours(live_deployment(live), owner)


def _observed_if_ours(live: LiveDeployment, owner: render.Owner) -> Observed:
    return live.observed if live.controller_uid == owner.uid else Observed()


def _policy_problem(spec: GatewaySpec) -> Problem | None:
    if spec.policy == Policy.REFUSE and spec.replicas > 1 and spec.store_backend != "redis":
        return Problem(reasons.REPLICA_POLICY_VIOLATION, MSG_REPLICAS_NEED_REDIS)
    return None


def _claim_problem(claimed: Sequence[str]) -> Problem | None:
    if not claimed:
        return None
    return Problem(reasons.HOST_CLAIMED, MSG_HOST_CLAIMED.format(host=", ".join(claimed)))


def _deployment_problem(observed: Observed) -> Problem | None:
    """A pod the API server refused to create (Pod Security, a quota, an admission webhook): the
    ReplicaSet's FailedCreate, as the Deployment controller reports it."""
    if observed.failure:
        return Problem(reasons.FAILED_CREATE, f"the API server refused to create a gateway pod: {observed.failure}")
    return None


def _probe_problem(probe: ProbeResult | None) -> Problem | None:
    if probe is not None and probe.reason == reasons.TARGET_NOT_ALLOWED:
        return Problem(reasons.REDIS_TARGET_NOT_ALLOWED, probe.message)
    return None


def _pod_problem(pods: Sequence[PodView]) -> Problem | None:
    """A replica that crash-loops, or that the gateway itself refused to start (exit 78)."""
    for pod in pods:
        if pod.last_exit_code == 78:
            return Problem(reasons.GATEWAY_CONFIG_REJECTED, f"pod {pod.name} exited 78: the gateway rejected its "
                                                            "gateway.yaml (see kubectl logs); the previous replicas "
                                                            "keep serving")
    for pod in pods:
        if pod.waiting_reason == "CrashLoopBackOff":
            return Problem(reasons.CRASH_LOOP, f"pod {pod.name} is waiting: CrashLoopBackOff")
        if pod.waiting_reason in reasons.POD_WAITING:
            detail = f" ({pod.waiting_message})" if pod.waiting_message else ""
            return Problem(pod.waiting_reason, f"pod {pod.name} is waiting: {pod.waiting_reason}{detail}")
    return None


def _not_owned(e: NotOwned) -> Problem:
    return Problem(reasons.OBJECT_NOT_OWNED,
                   f"{e.kind} {e.name} already exists in namespace {e.namespace} and is not controlled by this "
                   "GatewayDeployment; the operator leaves it alone. Rename the GatewayDeployment or remove that "
                   "object.")


def _unexpected(error: Exception) -> Problem:
    """An error the operator did not foresee: named by type only (its text might quote
    input), with the traceback in the operator's log."""
    if isinstance(error, ApiException):
        return Problem(reasons.APPLY_FAILED, f"the API server refused a request: {_api_message(error)}")
    if isinstance(error, RecursionError):
        return Problem(reasons.CONFIG_OVER_LIMITS, "spec nests too deeply to process")
    return Problem(reasons.RECONCILE_ERROR, f"unexpected {type(error).__name__} while reconciling; retrying with "
                                            "backoff (details in the operator log)")


def _api_message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message", e.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)
