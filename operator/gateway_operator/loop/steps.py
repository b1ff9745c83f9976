"""The steps of one reconciliation pass, in order (``run``), each a function of what the pass is
given (``Given``) and of the results of the steps before it, returning its own result
(reconcile.py runs them: ``read_inputs``, ``probe``, then ``after_the_probe``).

As Flux's source-controller runs its sub-reconcilers, each step does one job and returns a small
typed result with the problems it met (problems.py names them and says which wins); ``summarize``
then makes the pass's one ``Outcome`` of them. Nothing is shared between steps but what they
return, so each field of the outcome has one writer:
- ``read_inputs`` -> ``Read``: the spec, the Secrets, the Deployment (inputs.py); a bad input ends
  the pass there;
- ``probe`` -> ``Probed``: the operator's Redis probe (redis_probe.py);
- ``decide`` -> ``Decided``: the replica policy, a claimed host, the SQLite migration, the replicas
  to run, whether to apply;
- ``write`` -> ``Written``: apply what render says should exist (apply.py), unless a problem forbids it;
- ``read_exposure`` -> ``Exposed``: the address the edge published for spec.expose;
- ``look_at_pods`` -> ``Looked``: a replica crash-looping or refused, a pod the API server would not
  create, the operator-caused rollout still running.

The API calls are synchronous (kubernetes client) and run in threads; the probe is async,
so a slow Redis never holds a thread that another namespace's reconcile needs.
"""
from __future__ import annotations

import dataclasses
import functools
import time
import secrets as token_source
from typing import Any, Mapping, NamedTuple, Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.api.objects import Meta, StatusView, claim_of_object, meta_of, spec_of, status_of
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.tenancy import Claim, claimed_elsewhere
from gateway_operator.clients import apply, redis_protocol
from gateway_operator.clients.kube import Kube, NotOwned, NotServed
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import compat, problems, rollouts
from gateway_operator.core.conditions import Problem
from gateway_operator.core.expose import Exposure
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.pods import NONE_WATCHED, LiveDeployment, Observed, PodView, live_deployment
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


class Given(NamedTuple):
    """What a pass is given: the clients, the settings, the GatewayDeployment as the watch delivered
    it (with its metadata and status read once, ``of``), its pods, the pass's kind
    (schedule.PassKind: observe, re-apply, or full), what the last passes read (``Observation``),
    and the operator-wide cap on the rollouts it causes itself."""

    kube: Kube
    prober: Prober
    settings: ReconcileSettings
    body: Mapping[str, Any]
    pods: Sequence[PodView]
    kind: PassKind
    seen: Observation
    rollouts: RolloutGate | None
    meta: Meta
    status: StatusView

    @classmethod
    def of(cls, kube: Kube, prober: Prober, settings: ReconcileSettings, body: Mapping[str, Any],
           pods: Sequence[PodView], kind: PassKind, seen: Observation = Observation(),
           rollouts: RolloutGate | None = None) -> "Given":
        return cls(kube, prober, settings, body, pods, kind, seen, rollouts, meta_of(body), status_of(body))

    @property
    def applies(self) -> bool:
        return self.kind.applies

    @property
    def owner(self) -> Owner:
        return Owner(self.meta.name, self.meta.namespace, self.meta.uid)

    @property
    def generation(self) -> int | None:
        return self.meta.generation


class Read(NamedTuple):
    """``read_inputs``: the inputs (the spec checked, the Secrets, the problem they make) and the
    Deployment as read (a full pass) or watched."""

    prepared: Prepared
    live: LiveDeployment | None
    observed: Observed

    @property
    def spec(self) -> GatewaySpec:
        """The parsed spec: the pass goes on only when there is one (``proceeds``)."""
        assert self.prepared.spec is not None
        return self.prepared.spec

    @property
    def proceeds(self) -> bool:
        prepared = self.prepared
        return prepared.problem is None and prepared.spec is not None and not prepared.terminating


class Probed(NamedTuple):
    """``probe``: the operator's Redis probe (None: no Redis, or none free and none kept), and the
    leaving replicas whose journal Redis says was carried."""

    probe: ProbeResult | None = None
    carried: frozenset[str] = frozenset()


class Decided(NamedTuple):
    """``decide``: hosts of spec.expose claimed by someone older, the problems of the policy, the
    probe and those claims, the SQLite migration, the replicas to run, and whether to apply."""

    claimed: Sequence[str] = ()
    problems: tuple[Problem | None, ...] = ()
    migration: Migration | None = None
    replicas: int = 0
    apply_due: bool = False   # a full pass, or the scale-out gate just opened
    applying: bool = False    # ... and no problem stops the apply


class Written(NamedTuple):
    """``write``: what the apply wrote and what the API server answered."""

    writes: int = 0            # objects this step wrote
    routes: dict[str, dict[str, Any]] | None = None  # the routes as applied (None: no apply succeeded)
    live: LiveDeployment | None = None  # the Deployment as the apply's answer carries it (None: not written)
    rendered: Rendered | None = None    # this full pass's render, for the next one
    rollout: RolloutState = RolloutState.NONE  # an operator-caused rollout waiting its turn, or started
    terminating: bool = False  # the namespace is being deleted: the pass stops creating, and says nothing
    problem: Problem | None = None


class Exposed(NamedTuple):
    """``read_exposure``: status.expose as read this pass (None: not read, keep the last)."""

    exposure: Exposure | None = None
    problem: Problem | None = None


class Looked(NamedTuple):
    """``look_at_pods``: the pods' and the Deployment's problems, and the operator-caused rollout
    as the pods show it."""

    problems: tuple[Problem | None, ...] = ()
    rollout: RolloutState = RolloutState.NONE


async def read_inputs(g: Given) -> Read:
    checked = g.seen.checked
    if checked is None or g.generation is None or checked.generation != g.generation:
        checked = inputs.check(g.owner, spec_of(g.body), g.generation, g.settings.tenancy)
    # a full pass reads the Secrets afresh (and creates the generated ones); a re-apply too when
    # the last full pass left no inputs (an adopted loop, a problem since)
    fresh = g.kind is PassKind.FULL or (g.kind is PassKind.REAPPLY and g.seen.inputs is None)
    cached = None if fresh else g.seen.inputs
    if inputs.reads_the_api(checked, fresh, cached):
        prepared = await threads.run(inputs.prepare, g.kube, g.owner, checked, fresh, cached, g.seen.inputs)
    else:  # nothing to read: no thread (an observation pass, every interval, of every object)
        prepared = inputs.prepare(g.kube, g.owner, checked, fresh, cached)
    watched = g.seen.deployment
    if watched is NONE_WATCHED:
        # the index holds none with our labels: none of ours is there. One of someone else's by this
        # name is met by the apply (its create-only apply conflicts; then it is read: NotOwned)
        live = None
    elif watched is None or (g.applies and watched.controller_uid is None):
        live = await threads.run(inputs.observe, g.kube, g.owner)  # no index, or a labeled one of whose?
    else:  # as the watch delivered it, as controller-runtime's reads come from its informer's cache
        live = watched
    return Read(prepared, live, inputs.observed_if_ours(live, g.owner))


async def probe(g: Given, read: Read) -> Probed:
    spec, target = read.spec, read.prepared.target
    if target is None:
        return Probed()
    # an observation pass does not queue for a probe slot (many gateways in one namespace): it
    # keeps the last result, so that its step, and the next /health poll, are not held up; a full
    # pass probes afresh and whole; an observation pass or a re-apply over the kept connection,
    # and only what can change between full passes (redis_connection.KeptConnection)
    last, whole = g.seen.probe, g.kind is PassKind.FULL
    base = last.store if not whole and last is not None and last.ok else None
    found = await g.prober.probe(g.owner.namespace, target, read.prepared.credentials,
                                 spec.health.timeout_seconds, read.prepared.managed_ip, g.owner.name,
                                 wait=whole or last is None, kept=g.seen.probe_connection, base=base)
    if found is None and last is not None:
        found = dataclasses.replace(last, reused=True)
    carried: frozenset[str] = frozenset()
    if g.seen.leaving and found is not None and found.ok and not found.reused:
        carried = await redis_protocol.carried(g.seen.probe_connection, target.prefix, g.seen.leaving,
                                               spec.health.timeout_seconds)
    return Probed(found, carried)


async def decide(g: Given, read: Read, probed: Probed) -> Decided:
    spec, owner, found = read.spec, g.owner, probed.probe
    claimed = claimed_elsewhere(claim_of_object(api.KIND, g.body), spec.expose.hosts, g.seen.host_claims)
    met = (problems.policy_problem(spec),
           problems.target_problem(found.reason, found.message) if found else None,
           problems.claim_problem(claimed))
    previous = g.status.sqlite_migration
    state = functools.partial(
        migration_state, spec, previous,
        lambda: g.kube.get("v1", "PersistentVolumeClaim", owner.namespace,
                           state_claim_name(owner.name)) is not None,
        found.store.migrated if found and found.store else None, lambda: token_source.token_hex(8))
    migration = await threads.run(state) if reads_the_claim(spec, previous) else state()
    # the gateway release, as the last status and the pods show it
    compatibility = compat.assess(compat.releases(g.status.gateway), compat.refusals(g.pods))
    replicas = replicas_to_run(spec, bool(found and found.ok), read.observed.running, migration,
                               compatibility.compatible)
    # the scale-out gate just opened: grow now rather than at the next full pass (only a
    # Deployment that exists grows this way; creating one waits for a full pass and its backoff)
    apply_due = g.applies or (read.observed.running > 0 and replicas > read.observed.running)
    applying = apply_due and problems.applies_despite(problems.winner((read.prepared.problem, *met)))
    return Decided(claimed, met, migration, replicas, apply_due, applying)


async def write(g: Given, read: Read, decided: Decided) -> Written:
    if not decided.applying:
        return Written()
    owner, spec, prepared, status = g.owner, read.spec, read.prepared, g.status
    # routes and the gateway NetworkPolicy are looked for (to remove) only once status said they were written
    before = (status.wrote_expose, status.wrote_network_policy)
    migration = decided.migration
    token = migration.token if migration and not migration.done else ""
    rendered_from = (spec, prepared.target, decided.replicas, prepared.revision, g.settings.operator, token,
                     g.generation)
    last = g.seen.rendered
    skippable = _skippable(decided.claimed, before, status)
    if skippable and last is not None and last.inputs == rendered_from and \
            g.kube.unchanged(owner.uid, last.objects, last.absent):
        if g.rollouts is not None:  # what the render would have found: the Deployment as it carries it
            g.rollouts.not_held((owner.namespace, owner.name))
        return Written(rendered=last)
    objects = await threads.run(desired_objects, owner, spec, prepared.target, decided.replicas, prepared.revision,
                                g.settings.operator, token, pod_code=g.settings.pod_code)  # CPU: off the event loop
    held, rollout = _held_for_the_rollout_cap(g, read, next(o for o in objects if o["kind"] == "Deployment"
                                                          and meta_of(o).name == owner.name))
    try:
        applied = await threads.run(apply.apply, g.kube, owner, spec, objects, before, not decided.claimed, held,
                                    status.autoscaling)
    except (NotOwned, NotServed, ApiException) as e:
        if isinstance(e, ApiException) and problems.namespace_terminating(e):
            return Written(rollout=rollout, terminating=True)
        return Written(rollout=rollout, problem=_write_problem(e))
    if rollout is RolloutState.OPERATOR and g.rollouts is not None:
        g.rollouts.applied((owner.namespace, owner.name), applied.deployment_generation)
    rendered = None
    if skippable and not held and rollout is RolloutState.NONE:
        rendered = Rendered(rendered_from, tuple((o["kind"], owner.namespace, meta_of(o).name) for o in objects),
                            tuple((kind, owner.namespace, name) for _, kind, name in apply.always_absent(owner, spec)))
    # written: the Deployment as the API server answered the apply
    live = live_deployment(applied.deployment) if applied.deployment is not None else None
    return Written(applied.writes, applied.routes, live, rendered, rollout)


def _skippable(claimed: Sequence[str], before: tuple[bool, bool], status: StatusView) -> bool:
    """May this full pass be skipped when nothing it renders from changed and its objects are as
    verified? Not when it would also look for objects to remove (routes a claim takes away, or
    that status says were written; the NetworkPolicy; the autoscaler and PodMonitor). An object no
    watch covers (routes, the NetworkPolicy, a PVC, the autoscaler) is never shown unchanged by a
    watch (Kube.unchanged), so a pass that applies one renders and reads it every time, as before."""
    return not (claimed or any(before) or status.autoscaling)  # so ``before`` is not in Rendered.inputs


def _held_for_the_rollout_cap(g: Given, read: Read, deployment: Mapping[str, Any]
                              ) -> tuple[tuple[tuple[str, str], ...], RolloutState]:
    """The objects (kind, name) left as they are, and the rollout: a rollout the operator would
    cause itself waits for a slot (rollouts.py), the gateway's pods and their ConfigMap untouched
    meanwhile."""
    owner, key = g.owner, (g.owner.namespace, g.owner.name)
    if g.rollouts is None:
        return (), RolloutState.NONE
    live, generation = read.live, int(g.generation or 0)
    if live is None or live.controller_uid != owner.uid or not rollouts.operator_caused(
            generation, g.status.observed_generation or 0, live, deployment, read.prepared.revision):
        g.rollouts.not_held(key)
        return (), RolloutState.NONE
    if g.rollouts.admit(key, time.monotonic()):
        return (), RolloutState.OPERATOR
    return (("Deployment", owner.name), ("ConfigMap", config_map_name(owner.name))), RolloutState.QUEUED


async def read_exposure(g: Given, read: Read, decided: Decided, written: Written) -> Exposed:
    spec, claim = read.spec, problems.claim_problem(decided.claimed)
    if decided.applying and written.routes is not None:
        try:  # status.expose says why there is no route, whatever else is wrong
            return Exposed(Exposure(message=claim.message) if claim else
                           await threads.run(apply.exposure, g.kube, g.owner, spec, written.routes))
        except (NotServed, ApiException) as e:
            return Exposed(problem=_write_problem(e))
    if not decided.applying and not g.applies and spec.expose.enabled and not decided.claimed and \
            not (g.seen.exposure and g.seen.exposure.address):
        try:  # waiting for the controller to publish an address: a look each observation pass
            return Exposed(await threads.run(apply.exposure, g.kube, g.owner, spec))
        except NotServed:
            pass  # the full pass reports it
    return Exposed()


async def look_at_pods(g: Given, observed: Observed, rollout: RolloutState) -> Looked:
    """``observed``: the Deployment after the write; ``rollout``: as the write left it."""
    found = (problems.pod_problem(g.pods), problems.deployment_problem(observed.failure))
    key = (g.owner.namespace, g.owner.name)
    if g.rollouts is not None and g.rollouts.settle(key, observed.generation, observed.rolled_out):
        if rollout is RolloutState.NONE:
            rollout = RolloutState.OPERATOR  # its operator-caused rollout still runs
    elif g.rollouts is not None and rollout is RolloutState.NONE and g.rollouts.queued(key):
        rollout = RolloutState.QUEUED  # an observation pass: still waiting for its slot, as the last full pass found
    return Looked(found, rollout)


async def after_the_probe(g: Given, read: Read, probed: Probed) -> tuple[Outcome, Written]:
    """The steps after the probe, in order, and the pass's outcome (reconcile.py runs the first two:
    it keeps the probe for a pass the API server then leaves unanswered)."""
    decided = await decide(g, read, probed)
    written = await write(g, read, decided)
    exposed = await read_exposure(g, read, decided, written)
    looked = await look_at_pods(g, observed_after(g, read, written), written.rollout)
    return summarize(g, read, probed, decided, written, exposed, looked), written


def observed_after(g: Given, read: Read, written: Written) -> Observed:
    """The Deployment's counts after the write: as its apply's answer carries them, else as read."""
    return inputs.observed_if_ours(written.live, g.owner) if written.live is not None else read.observed


def summarize(g: Given, read: Read, probed: Probed = Probed(), decided: Decided | None = None,
              written: Written = Written(), exposed: Exposed = Exposed(), looked: Looked | None = None) -> Outcome:
    """The pass's one outcome: the problem that wins among all the steps met, and each step's own
    result (a pass that ended at its inputs has only those)."""
    met = (read.prepared.problem, *(decided.problems if decided else ()), written.problem, exposed.problem,
           *(looked.problems if looked else ()))
    return Outcome(read.prepared.target, problems.winner(met), probed.probe, observed_after(g, read, written),
                   read.prepared.writes + written.writes, decided.apply_due if decided else g.applies,
                   exposure=exposed.exposure, migration=decided.migration if decided else None,
                   rollout=looked.rollout if looked else written.rollout, refused=tuple(compat.refusals(g.pods)),
                   carried=probed.carried)


def _write_problem(e: Exception) -> Problem:
    if isinstance(e, NotOwned):
        return problems.not_owned(e.kind, e.name, e.namespace)
    if isinstance(e, NotServed):
        return problems.not_served(e.kind, e.api_version, apply.EXPOSE_FIELD.get(e.kind, "spec.expose"))
    assert isinstance(e, ApiException)
    return problems.refused(e, "change")
