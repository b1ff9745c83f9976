"""spec.expose: what brings webhooks and WebSocket clients in from outside (pure).

Two kinds of route, either or both: a networking.k8s.io Ingress and a Gateway API HTTPRoute.
What a WebSocket gateway needs from the edge, written for the controllers users run:

- long timeouts: a webhook's answer waits for a whole agent turn, and a WebSocket stays open;
  ingress-nginx reads them from Ingress annotations, Gateway API from the route rule's
  ``timeouts.request`` (Traefik has no per-route timeout: its entry point's, see docs/install.md).
- with more than one replica, a cookie that pins a client to one replica (the Service's
  ClientIP affinity sees the controller's address, not the client's, so it would pin every
  client to one replica): ingress-nginx reads it from Ingress annotations, Traefik from the
  Service's. Webhook providers send no cookie, so their deliveries still spread over every
  ready replica; the HTTPRoute gives ``/hooks/`` a rule of its own for the same reason.

``exposure`` reads the address the controller published (Ingress status, or the status of
the Gateway that accepted the HTTPRoute) for the GatewayDeployment's status.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from gateway_operator.api import ExposeSpec, workloads
from gateway_operator.api.tenancy import NGINX

Manifest = dict[str, Any]

GATEWAY_API = ("gateway.networking.k8s.io/v1", "Gateway")
HOOKS_PREFIX = "/hooks/"

TRAEFIK_SERVICE = "traefik.ingress.kubernetes.io/service."


def ingress_annotations(expose: ExposeSpec, replicas: int) -> dict[str, str]:
    """ingress-nginx's timeouts and cookie affinity; the user's annotations win."""
    timeout = str(expose.timeout_seconds)
    annotations = {f"{NGINX}proxy-read-timeout": timeout, f"{NGINX}proxy-send-timeout": timeout}
    if replicas > 1:
        annotations.update({f"{NGINX}affinity": "cookie", f"{NGINX}affinity-mode": "persistent",
                            f"{NGINX}session-cookie-name": expose.affinity_cookie})
    assert expose.ingress is not None
    return {**annotations, **expose.ingress.annotations}


def service_annotations(expose: ExposeSpec, replicas: int) -> dict[str, str]:
    """Traefik's cookie affinity for an Ingress backend is set on the Service."""
    if expose.ingress is None or replicas <= 1:
        return {}
    return {f"{TRAEFIK_SERVICE}sticky.cookie": "true",
            f"{TRAEFIK_SERVICE}sticky.cookie.name": expose.affinity_cookie,
            f"{TRAEFIK_SERVICE}sticky.cookie.httponly": "true",
            f"{TRAEFIK_SERVICE}sticky.cookie.samesite": "lax"}


def ingress_spec(expose: ExposeSpec, service: str, port: int) -> dict[str, Any]:
    ingress = expose.ingress
    assert ingress is not None
    spec: dict[str, Any] = {"rules": [{"host": ingress.host, "http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": service, "port": {"number": port}}}}]}}]}
    if ingress.class_name:
        spec["ingressClassName"] = ingress.class_name
    if ingress.tls_secret:
        spec["tls"] = [{"hosts": [ingress.host], "secretName": ingress.tls_secret}]
    return spec


def http_route_spec(expose: ExposeSpec, service: str, port: int, namespace: str) -> dict[str, Any]:
    route = expose.http_route
    assert route is not None
    def rule(prefix: str) -> dict[str, Any]:  # each rule its own objects (no YAML anchors in `render`)
        return {"matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                "backendRefs": [{"name": service, "port": port}],
                "timeouts": {"request": f"{expose.timeout_seconds}s"}}
    spec: dict[str, Any] = {
        "parentRefs": [_parent_ref(r, namespace) for r in route.parent_refs],
        "rules": [rule(HOOKS_PREFIX), rule("/")],
    }
    if route.hostnames:
        spec["hostnames"] = list(route.hostnames)
    return spec


def _parent_ref(ref: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A parentRef as the API server defaults it (group, kind, namespace spelled out), so that
    the live route equals what was applied."""
    out = {"group": "gateway.networking.k8s.io", "kind": "Gateway", **dict(ref)}
    out.setdefault("namespace", namespace)
    return out


def origins(expose: ExposeSpec) -> list[str]:
    """Browser origins of the exposed host names (the gateway checks a WebSocket's Origin)."""
    schemes = ("https", "http")
    return [f"{scheme}://{host}" for host in expose.hosts for scheme in schemes]


class Exposure(NamedTuple):
    """What status.expose says: the address a client outside uses, or why there is none yet."""

    address: str = ""
    url: str = ""
    message: str = ""

    def status(self) -> dict[str, str]:
        return {k: v for k, v in self._asdict().items() if v}


def exposure(expose: ExposeSpec, ingress: Mapping[str, Any] | None, route: Mapping[str, Any] | None,
             gateways: Mapping[tuple[str, str], Mapping[str, Any]]) -> Exposure:
    """The address the controller published: the Ingress's load balancer first, else the
    address of a Gateway whose listener accepted the HTTPRoute. ``gateways``: the parent
    Gateways found, by (namespace, name)."""
    found: list[tuple[str, str]] = []   # (address, url)
    waiting: list[str] = []
    if expose.ingress is not None:
        scheme = "https" if expose.ingress.tls_secret else "http"
        for address in workloads.ingress_addresses(ingress):
            found.append((address, f"{scheme}://{expose.ingress.host}/"))
        if not found:
            waiting.append("the Ingress has no address yet (its controller publishes one)")
    if expose.http_route is not None:
        accepted = workloads.accepted_parents(route)
        for key in accepted:
            for address in workloads.gateway_addresses(gateways.get(key)):
                host = expose.http_route.hostnames[0] if expose.http_route.hostnames else address
                found.append((address, f"http://{host}/"))
        if not accepted:
            waiting.append("no parent Gateway has accepted the HTTPRoute yet")
        elif not any(a for a, _ in found):
            waiting.append("the Gateway that accepted the HTTPRoute has no address yet")
    if found:
        address, url = found[0]
        return Exposure(address, url)
    return Exposure(message="; ".join(waiting))

