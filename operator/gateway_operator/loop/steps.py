"""The steps of one reconciliation pass, in order (``STEPS``), on one ``Pass``.

As Flux's source-controller lists its sub-reconcilers, each step does one job and records its
small result on the pass, with the problems it met (problems.py names them and says which
wins); a step that finds nothing more can be done returns False and the pass ends there:
- ``read_inputs``: the spec, the Secrets, the Deployment (inputs.py); a bad input ends the pass;
- ``probe``: the operator's Redis probe (redis_probe.py);
- ``decide``: the replica policy, a claimed host, the SQLite migration, the replicas to run;
- ``write``: apply what render says should exist (apply.py), unless a problem forbids it;
- ``read_exposure``: the address the edge published for spec.expose;
- ``look_at_pods``: a replica crash-looping or refused, a pod the API server would not create.

The API calls are synchronous (kubernetes client) and run in threads; the probe is async,
so a slow Redis never holds a thread that another namespace's reconcile needs.
"""
from __future__ import annotations

import dataclasses
import functools
import time
import secrets as token_source
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, NamedTuple, Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.tenancy import Claim, claim_of, claimed_elsewhere
from gateway_operator.clients import apply, redis_protocol
from gateway_operator.clients.kube import Kube, NotOwned, NotServed
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import compat, problems, rollouts
from gateway_operator.core.conditions import Problem
from gateway_operator.core.expose import Exposure
from gateway_operator.core.pods import LiveDeployment, Observed, PodView, live_deployment
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.render.names import Owner, config_map_name, state_claim_name
from gateway_operator.core.render.objects import desired_objects
from gateway_operator.core.replicas import Migration, migration_state, reads_the_claim, replicas_to_run
from gateway_operator.core.rollouts import RolloutGate, RolloutState
from gateway_operator.core.schedule import PassKind
from gateway_operator.core.settings import ReconcileSettings
from gateway_operator.loop import inputs, threads
from gateway_operator.loop.inputs import Checked, Prepared, SecretInputs


class Rendered(NamedTuple):
    """What a full pass rendered and found in place (applied, or verified unchanged): the render's
    inputs and each object's (kind, namespace, name), and the objects that must stay absent. The
    next full pass whose inputs are the same, and whose objects the watches show unchanged since
    they were verified, would render the same objects and find each as it is: it does neither.
    Only for passes that look for nothing to remove beyond ``apply.always_absent`` (``_skippable``);
    an object no watch covers is never shown unchanged (``Kube.unchanged``)."""

    inputs: tuple[object, ...]
    objects: tuple[tuple[str, str, str], ...]
    absent: tuple[tuple[str, str, str], ...] = ()


class Observation(NamedTuple):
    """What an observation pass reuses instead of reading the API: the Deployment as the
    watch delivered it, and the Secret inputs of the last full pass that read them fine."""

    deployment: LiveDeployment | None = None
    inputs: SecretInputs | None = None
    exposure: Exposure | None = None  # the last one read: an observation pass reads again until it has an address
    host_claims: Mapping[str, Sequence[Claim]] = {}  # every known claimant of each host spec.expose names
    checked: Checked | None = None  # the spec as checked for its generation (inputs.check)
    probe: ProbeResult | None = None  # the last pass's Redis probe
    probed: RedisTarget | None = None  # ... of which target
    probe_connection: KeptConnection | None = None  # the GatewayDeployment's own, for observation probes
    leaving: tuple[str, ...] = ()  # replicas gone with a journal: their stop's word is read (unrecorded.Leaving)
    rendered: Rendered | None = None  # the last full pass's render, if its objects were all found in place


@dataclass
class Pass:
    kube: Kube
    prober: Prober
    settings: ReconcileSettings
    body: Mapping[str, Any]
    pods: Sequence[PodView]
    kind: PassKind           # observe (probe, the Deployment's status), re-apply, or full (schedule.PassKind)
    seen: Observation
    prepared: Prepared = None  # type: ignore[assignment]  # read_inputs sets it first
    observed: Observed = Observed()
    probe: ProbeResult | None = None
    claimed: Sequence[str] = ()   # hosts of spec.expose claimed by someone older
    migration: Migration | None = None
    replicas: int = 0
    apply_due: bool = False       # a full pass, or the scale-out gate just opened
    applying: bool = False        # ... and no problem stops the apply
    routes: dict[str, dict[str, Any]] | None = None  # the routes as applied (None: no apply succeeded)
    exposure: Exposure | None = None
    writes: int = 0
    problems: list[Problem | None] = field(default_factory=list)
    terminating: bool = False     # the namespace is being deleted: the pass stops creating, and says nothing
    rollouts: RolloutGate | None = None  # the operator-wide cap on the rollouts it causes itself
    live: LiveDeployment | None = None   # the Deployment as read (full pass) or watched
    rollout: RolloutState = RolloutState.NONE  # an operator-caused rollout waiting its turn, or running
    carried: frozenset[str] = frozenset()  # of seen.leaving: those that said their journal is all in Redis
    rendered: Rendered | None = None  # this full pass's render, for the next one (write)

    @property
    def applies(self) -> bool:
        return self.kind.applies

    @property
    def spec(self) -> GatewaySpec:
        """The parsed spec: read_inputs ends the pass when there is none."""
        assert self.prepared.spec is not None
        return self.prepared.spec

    @property
    def owner(self) -> Owner:
        meta = self.body["metadata"]
        return Owner(meta["name"], meta["namespace"], meta["uid"])


async def read_inputs(p: Pass) -> bool:
    generation = p.body["metadata"].get("generation")
    checked = p.seen.checked
    if checked is None or generation is None or checked.generation != generation:
        checked = inputs.check(p.owner, p.body.get("spec") or {}, generation, p.settings.tenancy)
    # a full pass reads the Secrets afresh (and creates the generated ones); a re-apply too when
    # the last full pass left no inputs (an adopted loop, a problem since)
    fresh = p.kind is PassKind.FULL or (p.kind is PassKind.REAPPLY and p.seen.inputs is None)
    cached = None if fresh else p.seen.inputs
    if inputs.reads_the_api(checked, fresh, cached):
        p.prepared = await threads.run(inputs.prepare, p.kube, p.owner, checked, fresh, cached)
    else:  # nothing to read: no thread (an observation pass, every interval, of every object)
        p.prepared = inputs.prepare(p.kube, p.owner, checked, fresh, cached)
    p.writes, p.apply_due = p.prepared.writes, p.applies
    watched = p.seen.deployment
    if watched is None or (p.applies and watched.controller_uid is None):
        p.live = await threads.run(inputs.observe, p.kube, p.owner)  # none watched: one of someone else's?
    else:  # as the watch delivered it, as controller-runtime's reads come from its informer's cache
        p.live = watched
    p.observed = inputs.observed_if_ours(p.live, p.owner)
    p.problems.append(p.prepared.problem)
    p.terminating = p.prepared.terminating
    return p.prepared.problem is None and p.prepared.spec is not None and not p.terminating


async def probe(p: Pass) -> bool:
    spec, target = p.spec, p.prepared.target
    if target is not None:
        # an observation pass does not queue for a probe slot (many gateways in one namespace):
        # it keeps the last result, so that its step, and the next /health poll, are not held up
        # a full pass probes afresh and whole; an observation pass or a re-apply over the kept
        # connection, and only what can change between full passes (redis_connection.KeptConnection)
        last, whole = p.seen.probe, p.kind is PassKind.FULL
        base = last.store if not whole and last is not None and last.ok else None
        p.probe = await p.prober.probe(p.owner.namespace, target, p.prepared.credentials,
                                       spec.health.timeout_seconds, p.prepared.managed_ip, p.owner.name,
                                       wait=whole or last is None, kept=p.seen.probe_connection, base=base)
        if p.probe is None and last is not None:
            p.probe = dataclasses.replace(last, reused=True)
        if p.seen.leaving and p.probe is not None and p.probe.ok and not p.probe.reused:
            p.carried = await redis_protocol.carried(p.seen.probe_connection, target.prefix, p.seen.leaving,
                                                     spec.health.timeout_seconds)
    return True


async def decide(p: Pass) -> bool:
    spec, owner = p.spec, p.owner
    p.claimed = claimed_elsewhere(claim_of(api.KIND, p.body["metadata"]), spec.expose.hosts, p.seen.host_claims)
    p.problems += [problems.policy_problem(spec),
                   problems.target_problem(p.probe.reason, p.probe.message) if p.probe else None,
                   problems.claim_problem(p.claimed)]
    previous = (p.body.get("status") or {}).get("sqliteMigration") or {}
    state = functools.partial(
        migration_state, spec, previous,
        lambda: p.kube.get("v1", "PersistentVolumeClaim", owner.namespace,
                           state_claim_name(owner.name)) is not None,
        p.probe.store.migrated if p.probe and p.probe.store else None, lambda: token_source.token_hex(8))
    p.migration = await threads.run(state) if reads_the_claim(spec, previous) else state()
    # the gateway release, as the last status and the pods show it
    compatibility = compat.assess(compat.releases((p.body.get("status") or {}).get("gateway")),
                                  compat.refusals(p.pods))
    p.replicas = replicas_to_run(spec, bool(p.probe and p.probe.ok), p.observed.running, p.migration,
                                 compatibility.compatible)
    # the scale-out gate just opened: grow now rather than at the next full pass (only a
    # Deployment that exists grows this way; creating one waits for a full pass and its backoff)
    p.apply_due = p.applies or (p.observed.running > 0 and p.replicas > p.observed.running)
    p.applying = p.apply_due and problems.applies_despite(problems.winner(p.problems))
    return True


async def write(p: Pass) -> bool:
    if not p.applying:
        return True
    status = p.body.get("status") or {}
    # routes and the gateway NetworkPolicy are looked for (to remove) only once status said they were written
    before = ("expose" in status, "networkPolicy" in status)
    token = p.migration.token if p.migration and not p.migration.done else ""
    rendered_from = (p.spec, p.prepared.target, p.replicas, p.prepared.revision, p.settings.operator, token,
                     p.body["metadata"].get("generation"))
    last = p.seen.rendered
    skippable = _skippable(p, before, status)
    if skippable and last is not None and last.inputs == rendered_from and \
            p.kube.unchanged(p.owner.uid, last.objects, last.absent):
        if p.rollouts is not None:  # what the render would have found: the Deployment as it carries it
            p.rollouts.not_held((p.owner.namespace, p.owner.name))
        p.rendered = last
        return True
    objects = await threads.run(desired_objects, p.owner, p.spec, p.prepared.target, p.replicas, p.prepared.revision,
                                p.settings.operator, token, pod_code=p.settings.pod_code)  # CPU: off the event loop
    held = _held_for_the_rollout_cap(p, next(o for o in objects if o["kind"] == "Deployment"
                                             and o["metadata"]["name"] == p.owner.name))
    try:
        applied = await threads.run(apply.apply, p.kube, p.owner, p.spec, objects, before, not p.claimed, held,
                                          status.get("autoscaling") or {})
        p.writes, p.routes = p.writes + applied.writes, applied.routes
        if p.rollout is RolloutState.OPERATOR and p.rollouts is not None:
            p.rollouts.applied((p.owner.namespace, p.owner.name), applied.deployment_generation)
        if applied.deployment is not None:  # written: as the API server answered the apply
            p.live = live_deployment(applied.deployment)
            p.observed = inputs.observed_if_ours(p.live, p.owner)
        if skippable and not held and p.rollout is RolloutState.NONE:
            p.rendered = Rendered(rendered_from, tuple((o["kind"], p.owner.namespace, o["metadata"]["name"])
                                                       for o in objects),
                                  tuple((kind, p.owner.namespace, name)
                                        for _, kind, name in apply.always_absent(p.owner, p.spec)))
    except (NotOwned, NotServed, ApiException) as e:
        p.terminating = isinstance(e, ApiException) and problems.namespace_terminating(e)
        if not p.terminating:
            p.problems.append(_write_problem(e))
    return True


def _skippable(p: Pass, before: tuple[bool, bool], status: Mapping[str, Any]) -> bool:
    """May this full pass be skipped when nothing it renders from changed and its objects are as
    verified? Not when it would also look for objects to remove (routes a claim takes away, or
    that status says were written; the NetworkPolicy; the autoscaler and PodMonitor). An object no
    watch covers (routes, the NetworkPolicy, a PVC, the autoscaler) is never shown unchanged by a
    watch (Kube.unchanged), so a pass that applies one renders and reads it every time, as before."""
    return not (p.claimed or any(before) or status.get("autoscaling"))  # so ``before`` is not in Rendered.inputs


def _held_for_the_rollout_cap(p: Pass, deployment: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The objects (kind, name) left as they are: a rollout the operator would cause itself waits
    for a slot (rollouts.py), the gateway's pods and their ConfigMap untouched meanwhile."""
    status = p.body.get("status") or {}
    generation = int(p.body["metadata"].get("generation") or 0)
    if p.rollouts is None:
        return ()
    if p.live is None or p.live.controller_uid != p.owner.uid or not rollouts.operator_caused(
            generation, int(status.get("observedGeneration") or 0), p.live, deployment, p.prepared.revision):
        p.rollouts.not_held((p.owner.namespace, p.owner.name))
        return ()
    if p.rollouts.admit((p.owner.namespace, p.owner.name), time.monotonic()):
        p.rollout = RolloutState.OPERATOR
        return ()
    p.rollout = RolloutState.QUEUED
    return ("Deployment", p.owner.name), ("ConfigMap", config_map_name(p.owner.name))


async def read_exposure(p: Pass) -> bool:
    spec, claim = p.spec, problems.claim_problem(p.claimed)
    if p.applying and p.routes is not None:
        try:  # status.expose says why there is no route, whatever else is wrong
            p.exposure = (Exposure(message=claim.message) if claim else
                          await threads.run(apply.exposure, p.kube, p.owner, spec, p.routes))
        except (NotServed, ApiException) as e:
            p.problems.append(_write_problem(e))
    elif not p.applying and not p.applies and spec.expose.enabled and not p.claimed and \
            not (p.seen.exposure and p.seen.exposure.address):
        try:  # waiting for the controller to publish an address: a look each observation pass
            p.exposure = await threads.run(apply.exposure, p.kube, p.owner, spec)
        except NotServed:
            pass  # the full pass reports it
    return True


async def look_at_pods(p: Pass) -> bool:
    p.problems += [problems.pod_problem(p.pods), problems.deployment_problem(p.observed.failure)]
    key = (p.owner.namespace, p.owner.name)
    if p.rollouts is not None and p.rollouts.settle(key, p.observed.generation, p.observed.rolled_out):
        if p.rollout is RolloutState.NONE:
            p.rollout = RolloutState.OPERATOR  # its operator-caused rollout still runs
    elif p.rollouts is not None and p.rollout is RolloutState.NONE and p.rollouts.queued(key):
        p.rollout = RolloutState.QUEUED  # an observation pass: still waiting for its slot, as the last full pass found
    return True


#: the pass, in order; a step returning False ends it
STEPS: tuple[Callable[[Pass], Awaitable[bool]], ...] = (read_inputs, probe, decide, write, read_exposure, look_at_pods)


def _write_problem(e: Exception) -> Problem:
    if isinstance(e, NotOwned):
        return problems.not_owned(e.kind, e.name, e.namespace)
    if isinstance(e, NotServed):
        return problems.not_served(e.kind, e.api_version, apply.EXPOSE_FIELD.get(e.kind, "spec.expose"))
    assert isinstance(e, ApiException)
    return problems.refused(e, "change")
