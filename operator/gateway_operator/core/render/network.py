"""How the gateway is reached: its Service, the Ingress and HTTPRoute of spec.expose, and the
NetworkPolicy of spec.networkPolicy."""
from __future__ import annotations

from typing import Any

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.core import expose
from gateway_operator.core.render.manifest import Manifest, owned_object
from gateway_operator.core.render.names import OPERATOR_APP_NAME, OperatorIdentity, Owner, gateway_network_policy_name


def service(owner: Owner, spec: GatewaySpec) -> Manifest:
    svc: dict[str, Any] = {
        "type": spec.service_type,
        "selector": api.selector_for(owner.name),
        "ports": [{"name": "http", "port": spec.service_port, "targetPort": "http", "protocol": "TCP"}],
        # the gateway holds per-connection WebSocket state: keep a client on one replica
        "sessionAffinity": "ClientIP" if spec.replicas > 1 else "None",
    }
    manifest = owned_object("v1", "Service", owner.name, owner, spec=svc)
    annotations = expose.service_annotations(spec.expose, spec.replicas)
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest


def ingress(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    if spec.expose.ingress is None:
        return None
    manifest = owned_object(*api.INGRESS_API, owner.name, owner,
                       spec=expose.ingress_spec(spec.expose, owner.name, spec.service_port))
    manifest["metadata"]["annotations"] = expose.ingress_annotations(spec.expose, spec.replicas)
    return manifest


def http_route(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    route = spec.expose.http_route
    if route is None:
        return None
    manifest = owned_object(*api.ROUTE_API, owner.name, owner,
                       spec=expose.http_route_spec(spec.expose, owner.name, spec.service_port, owner.namespace))
    if route.annotations:
        manifest["metadata"]["annotations"] = dict(route.annotations)
    return manifest


def gateway_network_policy(owner: Owner, spec: GatewaySpec, operator: OperatorIdentity) -> Manifest | None:
    """spec.networkPolicy: ingress to the gateway port only from the pods of this namespace (the
    Service's clients), the operator's own pods (its /health polls) and the listed namespaces
    (the edge's); to the launcher's long-poll /health (api.WATCH_PORT) only from the operator's
    pods. Where the network plugin enforces NetworkPolicy, everything else is refused."""
    if not spec.network_policy.enabled:
        return None
    the_operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator.namespace}},
                    "podSelector": {"matchLabels": {api.LABEL_NAME: OPERATOR_APP_NAME,
                                                    api.LABEL_INSTANCE: operator.instance}}}
    peers: list[dict[str, Any]] = [{"podSelector": {}}, the_operator]  # this namespace, the operator
    if spec.network_policy.from_namespaces:
        peers.append({"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": list(spec.network_policy.from_namespaces)}]}})
    return owned_object("networking.k8s.io/v1", "NetworkPolicy", gateway_network_policy_name(owner.name), owner, spec={
        "podSelector": {"matchLabels": api.selector_for(owner.name)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": peers, "ports": [{"port": api.GATEWAY_PORT, "protocol": "TCP"}]},
                    {"from": [the_operator], "ports": [{"port": api.WATCH_PORT, "protocol": "TCP"}]}],
    })
