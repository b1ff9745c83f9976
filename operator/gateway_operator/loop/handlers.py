"""kopf wiring, kept thin: watch events feed the Supervisor; the work happens in
controller/reconcile/render."""
from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import kopf

from gateway_operator import api
from gateway_operator.api import reasons, workloads
from gateway_operator.api.objects import meta_of, spec_of
from gateway_operator.api.tenancy import Claim, claim_of, route_hosts, spec_hosts
from gateway_operator.clients.kube import REQUEST_TIMEOUT, Kube, load_config
from gateway_operator.core import pods
from gateway_operator.core.pods import NONE_WATCHED, LiveDeployment, PodView, live_deployment
from gateway_operator.core.settings import ControllerSettings, ShardSettings
from gateway_operator.loop import loop_lag, watch_liveness
from gateway_operator.loop.shard_holder import ShardHolder
from gateway_operator.loop.supervisor import Supervisor

OWNED = {api.LABEL_MANAGED_BY: api.MANAGED_BY}
WAITING_MESSAGE_LIMIT = 300  # characters of a kubelet waiting message kept per pod


@dataclass(frozen=True)
class Indices:
    """kopf's live indices (the handlers below fill them; kopf hands them to the startup handler
    as keyword arguments): what the loops read between watch events."""

    pods: kopf.Index[Any, Any]         # gateway pods by (namespace, GatewayDeployment)
    deployments: kopf.Index[Any, Any]  # gateway Deployments, by the same key
    claims: tuple[kopf.Index[Any, Any], ...]  # host claims: GatewayDeployments, foreign Ingresses and HTTPRoutes
    managed_redis: tuple[kopf.Index[Any, Any], ...]  # managed Redis Services and pods: by name and by address

    def pods_of(self, key: tuple[str, str]) -> list[PodView]:
        return list(self.pods.get(key, []))

    def deployment_of(self, key: tuple[str, str]) -> LiveDeployment:
        found = list(self.deployments.get(key, []))
        # none: nothing of ours runs. kopf fills every index before any other handler runs, so the
        # index's silence is the API server's (steps.read_inputs reads nothing then)
        return found[0] if found else NONE_WATCHED

    def claims_of(self, hosts: Iterable[str]) -> dict[str, tuple[Claim, ...]]:
        """Every claimant of each host the indices know."""
        return {h: tuple(c for index in self.claims for c in index.get(h, [])) for h in hosts}

    def foreign_managed_redis(self, namespace: str, owner: str, host: str, addresses: Iterable[str]) -> bool:
        """Is ``host`` (by Service name) or one of ``addresses`` the managed Redis of a
        GatewayDeployment other than namespace/owner? A managed Redis serves its own only."""
        labels = host.lower().rstrip(".").split(".")
        keys: list[tuple[str, ...]] = [("ip", a) for a in addresses]
        if len(labels) == 1:
            keys.append(("service", namespace, labels[0]))
        elif len(labels) == 2 or labels[2] == "svc":  # name.ns, name.ns.svc, name.ns.svc.<cluster domain>
            keys.append(("service", labels[1], labels[0]))
        return any(o != (namespace, owner) for index in self.managed_redis for k in keys for o in index.get(k, []))


# ignore: kopf hands the startup handler each index by its name, which kopf's ActivityFn protocol
# (its fixed keywords and **kwargs) cannot declare
@kopf.on.startup()  # type: ignore[arg-type]
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, gateway_pods: kopf.Index[Any, Any],
                    gateway_deployments: kopf.Index[Any, Any], gateway_host_claims: kopf.Index[Any, Any],
                    ingress_host_claims: kopf.Index[Any, Any], route_host_claims: kopf.Index[Any, Any],
                    managed_redis_services: kopf.Index[Any, Any], managed_redis_pods: kopf.Index[Any, Any],
                    **_: Any) -> None:
    settings.posting.level = logging.INFO   # only the Events the operator posts on purpose
    settings.posting.reporting_component = "gateway-operator"  # "From" in kubectl describe
    settings.watching.server_timeout = 270   # re-list before most load balancers cut the watch
    settings.watching.client_timeout = 300   # a watch request never hangs for ever
    # API calls run in threads: enough of them that a slow API server for one object does
    # not queue every other namespace behind it (the Redis probe holds no thread at all)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=16,
                                                                       thread_name_prefix="kube"))
    check: WatchCheck = memo.get("watch_check") or WatchCheck()
    memo.watches = watch_liveness.Watches(bound=check.stall_seconds)
    # an apply reads back only an object the watch shows changed since it was verified
    sharding: ShardSettings | None = memo.get("sharding")
    kube = Kube(load_config(memo.get("kubeconfig")), memo.watches.version,
                sharding.timing.write_timeout if sharding is not None else REQUEST_TIMEOUT,
                memo.watches.controller, secrets_watched=bool(memo.get("watch_secrets")))
    indices = Indices(gateway_pods, gateway_deployments,
                      (gateway_host_claims, ingress_host_claims, route_host_claims),
                      (managed_redis_services, managed_redis_pods))
    holder = None
    if sharding is not None:
        # each replica's writes name it in the API server's audit log (its userAgent)
        kube.api_client.user_agent = f"gateway-operator ({sharding.identity})"
        holder = _shard_holder(memo, kube, sharding, check.namespaces)
        kube.write_bound = holder.write_bound   # each write of a loop, just before it is sent
    memo.supervisor = Supervisor(kube, memo.get("controller_settings") or ControllerSettings(), indices.pods_of,
                                 indices.deployment_of, indices.claims_of, indices.foreign_managed_redis,
                                 owns=holder.owns if holder else (lambda _: True))
    if holder is not None:
        memo.shard_holder, memo.shard_task = holder, asyncio.create_task(holder.run(), name="shard holder")
    memo.loop_lag = asyncio.create_task(loop_lag.measure_forever(), name="event loop lag")
    if check.period:
        memo.watch_checker = asyncio.create_task(watch_liveness.check_forever(
            memo.watches, lambda v, kind, selector: kube.resource_versions(v, kind, check.namespaces, selector),
            check.period, lambda why: _restart(memo, why)))


def _shard_holder(memo: kopf.Memo, kube: Kube, sharding: ShardSettings, namespaces: tuple[str, ...]) -> ShardHolder:
    from gateway_operator.clients.shard_leases import ShardLeases
    from gateway_operator.core.shards import selector

    adopting: set[asyncio.Task[None]] = set()

    async def adopt(shards: frozenset[int]) -> None:
        """Lists the shards' GatewayDeployments and starts their loops, retried (1..30 s) while
        any of them is still held. A task of its own: the holder's drains never wait on a list."""
        wanted, delay = selector(shards, sharding.shards), 1.0
        while any(memo.shard_holder.holds(s) for s in shards):
            try:
                bodies = await asyncio.to_thread(kube.gateway_deployments, namespaces, wanted)
            except Exception as e:  # noqa: BLE001 - the API server away: retried
                logging.getLogger(__name__).warning("listing shards %s: %s", sorted(shards), type(e).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            started = memo.supervisor.adopt(bodies)
            # listed == started where the API server shards lists (ShardedListAndWatch); else it
            # answered every shard's and the supervisor kept this replica's
            logging.getLogger(__name__).info("shards %s: %d GatewayDeployments started of %d listed",
                                             sorted(shards), started, len(bodies))
            return

    async def gained(shards: frozenset[int]) -> None:
        task = asyncio.create_task(adopt(shards), name=f"adopt shards {sorted(shards)}")
        adopting.add(task)
        task.add_done_callback(adopting.discard)

    async def lost(_: frozenset[int]) -> None:
        """Drain, then hand over: the loops stopped, then their writes already sent ended (each
        within its bound, at most a renew deadline and the margin's), so that none lands after
        the next holder has started."""
        holder, timing = memo.shard_holder, sharding.timing
        await memo.supervisor.drop(holder.owns, timing.renew_deadline)
        if not await asyncio.to_thread(kube.wait_for_writes, lambda uid: not holder.owns(uid),
                                       timing.renew_deadline + sum(timing.write_timeout)):
            logging.getLogger(__name__).warning("a write of a shard given up outlasted its bound")

    leases = ShardLeases(kube.api_client, sharding.namespace, sharding.group)
    return ShardHolder(leases, sharding.shards, sharding.identity, sharding.timing, gained, lost)


async def _give_up_shards(memo: kopf.Memo) -> None:
    """With --shards: drain, then hand over (bounded by the renew deadline), so that the next
    holder takes them at its next tick instead of after the lease duration."""
    if "shard_holder" in memo:
        memo.shard_task.cancel()
        await asyncio.gather(memo.shard_task, return_exceptions=True)
        await memo.shard_holder.stop()


@dataclass(frozen=True)
class WatchCheck:
    """How the watches are checked (watch_liveness.py); cli.py fills it from its flags."""

    period: float = 60.0         # seconds between lists; 0: no check
    stall_seconds: float = 90.0  # a listed change the watch has not delivered for this long: stalled
    namespaces: tuple[str, ...] = ()  # the operator's (--namespace); empty: all
    leader: Any = None           # leader.ElectionSettings when elected: given up before the exit


async def _restart(memo: kopf.Memo, why: str) -> None:
    """A stalled watch: give up the Lease (a standby takes over now) or the shards, then exit; the
    Deployment restarts the pod with fresh watches. Until the exit, /healthz fails (watch_probe)."""
    check: WatchCheck = memo.get("watch_check") or WatchCheck()
    await _give_up_shards(memo)
    if check.leader is not None:
        from gateway_operator.loop.leader import give_up
        try:
            await asyncio.to_thread(give_up, check.leader)
        except Exception as e:  # noqa: BLE001 - exit anyway: the Lease then expires on its own
            logging.getLogger(__name__).warning("could not give up the Lease: %s", type(e).__name__)
    logging.shutdown()
    os._exit(1)


@kopf.on.probe(id="watches")
def watch_probe(memo: kopf.Memo, **_: Any) -> str:
    """/healthz: fails once a watch is found stalled."""
    watches = memo.get("watches")
    if watches is not None and watches.stalled:
        raise kopf.PermanentError(watches.stalled)
    return "delivering"


@kopf.index("", "v1", "services", labels={**OWNED, api.LABEL_COMPONENT: "redis"})
def managed_redis_services(namespace: str | None, name: str, labels: kopf.Labels, spec: kopf.Spec,
                           **_: Any) -> dict[tuple[str | None, ...], tuple[str | None, str]]:
    """Where each managed Redis is: its Service by name and by cluster IP ..."""
    owner = (namespace, labels.get(api.LABEL_INSTANCE, ""))
    keys: list[tuple[str | None, ...]] = [("service", namespace, name),
                                         *(("ip", ip) for ip in spec.get("clusterIPs") or [] if ip != "None")]
    return {k: owner for k in keys}


@kopf.index("", "v1", "pods", labels={**OWNED, api.LABEL_COMPONENT: "redis"})
def managed_redis_pods(namespace: str | None, labels: kopf.Labels, status: kopf.Status,
                       **_: Any) -> dict[tuple[str, ...], tuple[str | None, str]]:
    """... and its pods by IP."""
    ip = status.get("podIP")
    return {("ip", ip): (namespace, labels.get(api.LABEL_INSTANCE, ""))} if ip else {}


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    if "watch_checker" in memo:
        memo.watch_checker.cancel()
    if "loop_lag" in memo:
        memo.loop_lag.cancel()
    await _give_up_shards(memo)
    if "supervisor" in memo:
        await memo.supervisor.stop_all()


@kopf.index("", "v1", "pods", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
def gateway_pods(namespace: str | None, name: str, uid: str, labels: kopf.Labels, status: kopf.Status,
                 meta: kopf.Meta, spec: kopf.Spec, **_: Any) -> dict[tuple[str | None, str], PodView]:
    return {(namespace, labels.get(api.LABEL_INSTANCE, "")): pod_view(name, uid, meta, status, spec)}


@kopf.index("apps", "v1", "deployments", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
def gateway_deployments(namespace: str | None, name: str, body: kopf.Body,
                        **_: Any) -> dict[tuple[str | None, str], LiveDeployment]:
    return {(namespace, name): live_deployment(body)}


def pod_view(name: str, uid: str, meta: Mapping[str, Any], status: Mapping[str, Any],
             spec: Mapping[str, Any] | None = None) -> PodView:
    containers = status.get("containerStatuses") or []
    state: Mapping[str, Any] = next((c["state"]["waiting"] for c in containers if (c.get("state") or {}).get("waiting")), {})
    waiting = state.get("reason")
    # the kubelet's words for an image or config problem (stable across retries, unlike a
    # crash loop's back-off countdown, so the status is not rewritten on every retry)
    message = str(state.get("message") or "")[:WAITING_MESSAGE_LIMIT] if waiting in reasons.POD_WAITING else ""
    terminated: Mapping[str, Any] = next((c["lastState"]["terminated"] for c in containers
                       if (c.get("lastState") or {}).get("terminated")), {})
    last_exit = terminated.get("exitCode")
    return PodView(name=name, uid=uid, ip=status.get("podIP"),
                   ready=pods.ready(status),
                   deleting=bool(meta.get("deletionTimestamp")), waiting_reason=waiting,
                   waiting_message=message, last_exit_code=last_exit,
                   refused_gateway=pods.refused_gateway(last_exit, terminated.get("message")),
                   containers_ready=pods.containers_ready(status), gated=pods.gated(spec or {}),
                   gate=pods.gate(status))


_INGRESS_GROUP, _INGRESS_VERSION = api.INGRESS_API[0].split("/")
_ROUTE_GROUP, _ROUTE_VERSION = api.ROUTE_API[0].split("/")


# Host claims (tenancy.py): every host a GatewayDeployment exposes, and every host of an Ingress or
# HTTPRoute the operator did not write (someone with rights on routes made it: it holds the edge
# as much as ours do). Other route kinds (GRPCRoute, Traefik's IngressRoute, ...) are not read:
# the operator writes none and has no rights on them.
@kopf.index(api.GROUP, api.VERSION, api.PLURAL)
def gateway_host_claims(meta: kopf.Meta, spec: kopf.Spec, **_: Any) -> dict[str, Claim]:
    if meta.get("deletionTimestamp"):
        return {}
    claim = claim_of(api.KIND, meta)
    return {h: claim for h in spec_hosts(spec)}


def _foreign_route_claims(kind: str, body: kopf.Body, meta: kopf.Meta, labels: kopf.Labels) -> dict[str, Claim]:
    if labels.get(api.LABEL_MANAGED_BY) == api.MANAGED_BY or meta.get("deletionTimestamp"):
        return {}  # the operator's own: the GatewayDeployment's claim stands for it
    claim = claim_of(kind, meta)
    return {h: claim for h in route_hosts(kind, body)}


@kopf.index(_INGRESS_GROUP, _INGRESS_VERSION, "ingresses")
def ingress_host_claims(body: kopf.Body, meta: kopf.Meta, labels: kopf.Labels, **_: Any) -> dict[str, Claim]:
    return _foreign_route_claims(api.INGRESS_API[1], body, meta, labels)


@kopf.index(_ROUTE_GROUP, _ROUTE_VERSION, "httproutes")
def route_host_claims(body: kopf.Body, meta: kopf.Meta, labels: kopf.Labels, **_: Any) -> dict[str, Claim]:
    return _foreign_route_claims(api.ROUTE_API[1], body, meta, labels)


@kopf.on.event(api.GROUP, api.VERSION, api.PLURAL)
async def gateway_deployment_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _delivered(memo, type, body)
    memo.supervisor.observe(type, body)
    key = meta_of(body).key
    _nudge_claimants(memo, memo.supervisor.hosts_seen(key, spec_hosts(spec_of(body)), type == "DELETED"), key)


@kopf.on.event(_INGRESS_GROUP, _INGRESS_VERSION, "ingresses")
@kopf.on.event(_ROUTE_GROUP, _ROUTE_VERSION, "httproutes")
async def route_changed(body: kopf.Body, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    """A route appeared, moved or went: the GatewayDeployments claiming its hosts look again."""
    if labels.get(api.LABEL_MANAGED_BY) != api.MANAGED_BY and "supervisor" in memo:
        _nudge_claimants(memo, route_hosts(body.get("kind", ""), body), None)


def _nudge_claimants(memo: kopf.Memo, hosts: Iterable[str], own: tuple[str, str] | None) -> None:
    """A claim came or went: every other GatewayDeployment claiming one of these hosts
    reconciles soon (the younger one stops, or gets, its routes)."""
    for claims in memo.supervisor.claims_of(hosts).values():
        for c in claims:
            if c.kind == api.KIND and (c.namespace, c.name) != own:
                memo.supervisor.nudge(c.namespace, c.name)


@kopf.on.event("", "v1", "pods", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
@kopf.on.event("apps", "v1", "deployments", labels=OWNED)
@kopf.on.event("", "v1", "configmaps", labels=OWNED)
@kopf.on.event("", "v1", "services", labels=OWNED)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=OWNED)
async def owned_object_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, type: str | None,
                               body: kopf.Body,
                               **_: Any) -> None:
    """Drift or progress of something the operator owns: reconcile its gateway soon."""
    if "supervisor" in memo and type not in (None, "DELETED"):
        memo.supervisor.kube.status_moved(body)   # only its status moved: the next pass reads it no more
    _delivered(memo, type, body)
    if "supervisor" in memo:
        memo.supervisor.nudge(namespace, labels.get(api.LABEL_INSTANCE), listed=type is None)


def _delivered(memo: kopf.Memo, event_type: str | None, body: kopf.Body, controller: str | None = None) -> None:
    if "watches" in memo:
        meta = meta_of(body)
        memo.watches.delivered(body.get("kind", ""), meta.key, meta.resource_version or None,
                               deleted=event_type == "DELETED", controller=controller)


async def secret_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """With --watch-secrets (``watch_secrets``): every Secret's version and controller, nothing of
    its data. A full pass then reads a Secret only when it changed since the pass that last read it,
    and a generated one the watch shows is known to be there and ours (inputs.prepare)."""
    _delivered(memo, type, body, workloads.controller_uid(body))


def watch_secrets() -> None:
    """Register the Secret watch (cli: before kopf runs; the chart's RBAC then lists and watches
    Secrets). Without it, each full pass reads the Secrets it uses, as the RBAC of ``get`` allows."""
    kopf.on.event("", "v1", "secrets")(secret_changed)
