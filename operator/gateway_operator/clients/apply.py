"""The pass's writes: apply what the render (core/render/) says should exist (server-side apply,
owned objects only), remove what the spec no longer asks for, and read the address the edge
published for spec.expose. Synchronous API calls; reconcile.py runs them in threads.
"""
from __future__ import annotations

from typing import Any, Collection, Mapping, NamedTuple, Sequence

from kubernetes.client.rest import ApiException

from gateway_operator import api
from gateway_operator.api import workloads
from gateway_operator.api import GatewaySpec
from gateway_operator.clients.kube import Kube, NotServed, controlled_by
from gateway_operator.core import expose
from gateway_operator.core.expose import Exposure
from gateway_operator.core.render.autoscaling import HPA_API, POD_MONITOR_API
from gateway_operator.core.render.manifest import Manifest
from gateway_operator.core.render.names import Owner, gateway_network_policy_name

#: the route kinds, and the spec field that asks for each
EXPOSE_FIELD = {api.INGRESS_API[1]: "spec.expose.ingress", api.ROUTE_API[1]: "spec.expose.httpRoute"}


class Applied(NamedTuple):
    writes: int
    routes: dict[str, dict[str, Any]]  # the Ingress and HTTPRoute as applied, by kind (their status included)
    deployment_generation: int = 0     # the Deployment's metadata.generation after the apply
    deployment: dict[str, Any] | None = None  # the gateway Deployment as the apply answered, when it wrote it


#: kinds written only where the cluster serves them, skipped elsewhere (spec.podMonitor: the
#: Prometheus operator's CRD); nothing else of the gateway depends on them
OPTIONAL_KINDS = (POD_MONITOR_API[1],)


def always_absent(owner: Owner, spec: GatewaySpec) -> tuple[tuple[str, str, str], ...]:
    """(apiVersion, kind, name) of what every apply of this spec removes when it is there, whatever
    status says: the PodDisruptionBudget of one replica (render.autoscaling.disruption_budget
    renders none)."""
    return (("policy/v1", "PodDisruptionBudget", owner.name),) if spec.replicas <= 1 else ()


def apply(kube: Kube, owner: Owner, spec: GatewaySpec, objects: Sequence[Manifest],
          before: tuple[bool, bool] = (False, False), routes_allowed: bool = True,
          held: Collection[tuple[str, str]] = (), autoscaling_before: Mapping[str, str] | None = None) -> Applied:
    """``objects``: what render says should exist. ``before``: whether status says routes
    (status.expose) and the gateway NetworkPolicy (status.networkPolicy) were written, so that
    only then are they looked for to be removed; ``autoscaling_before`` likewise for the HPA and
    the PodMonitor (status.autoscaling). ``routes_allowed`` False: a host is claimed by
    someone older, so no route of this GatewayDeployment may stand (one written before the older
    claim was seen goes). ``held``: (kind, name) of objects left as they are (an operator-caused
    rollout waiting for its slot)."""
    exposed_before, policy_before = before
    writes, routes, generation, deployment = 0, {}, 0, None
    for manifest in objects:
        if manifest["kind"] in EXPOSE_FIELD and not routes_allowed or \
                (manifest["kind"], manifest["metadata"]["name"]) in held:
            continue
        try:
            result = kube.apply(manifest, owner.uid)
        except NotServed:
            if manifest["kind"] in OPTIONAL_KINDS:
                continue
            raise
        writes += result.written
        if manifest["kind"] == "Deployment" and manifest["metadata"]["name"] == owner.name:
            generation, deployment = result.generation, result.live if result.written else None
        if manifest["kind"] in EXPOSE_FIELD and result.live is not None:  # no watch covers routes: always read
            routes[manifest["kind"]] = result.live
    for api_version, kind, name in always_absent(owner, spec):
        writes += kube.delete_if_present(api_version, kind, owner.namespace, name, owner.uid)
    if policy_before and not spec.network_policy.enabled:
        writes += kube.delete_if_present("networking.k8s.io/v1", "NetworkPolicy", owner.namespace,
                                         gateway_network_policy_name(owner.name), owner.uid)
    writes += _remove_autoscaling(kube, owner, spec, autoscaling_before or {})
    if exposed_before or not routes_allowed:  # a route the spec no longer asks for, or may not have
        for (api_version, kind), wanted in ((api.INGRESS_API, spec.expose.ingress),
                                            (api.ROUTE_API, spec.expose.http_route)):
            if wanted is None or not routes_allowed:
                try:
                    writes += kube.delete_if_present(api_version, kind, owner.namespace, owner.name, owner.uid)
                except NotServed:
                    pass  # never created here
    return Applied(writes, routes, generation, deployment)


def _remove_autoscaling(kube: Kube, owner: Owner, spec: GatewaySpec, before: Mapping[str, str]) -> int:
    """The HPA and the PodMonitor status says were asked for, once the spec stops asking (only
    those this GatewayDeployment controls: kube.delete_if_present)."""
    removed = 0
    for key, (api_version, kind), wanted in (
            ("horizontalPodAutoscaler", HPA_API, spec.autoscaling.enabled),
            ("podMonitor", POD_MONITOR_API, spec.pod_monitor_enabled)):
        if before.get(key) and not wanted:
            try:
                removed += kube.delete_if_present(api_version, kind, owner.namespace, before[key], owner.uid)
            except NotServed:
                pass  # never created here
    return removed


def exposure(kube: Kube, owner: Owner, spec: GatewaySpec,
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
        ingress = route_object(*api.INGRESS_API)
    if spec.expose.http_route is not None:
        route = route_object(*api.ROUTE_API)
        # only Gateways whose controller accepted the route (so they admit this namespace's
        # routes), and only the first few
        for key in workloads.accepted_parents(route)[:4]:
            try:
                gateways[key] = kube.get(*expose.GATEWAY_API, *key)
            except ApiException as e:
                if e.status != 403:  # an operator limited to some namespaces may not read it
                    raise
    return expose.exposure(spec.expose, ingress, route, {k: v for k, v in gateways.items() if v})


def _ours(live: dict[str, Any] | None, owner: Owner) -> dict[str, Any] | None:
    return live if live is not None and controlled_by(live, owner.uid) else None


