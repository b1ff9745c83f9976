"""Typed reads of the Kubernetes objects the operator watches or reads besides its own resource: a
pod's conditions, readiness gates and IP, a Deployment's counts and annotations, the addresses an
Ingress, an HTTPRoute's parents and a Gateway publish, and any object's controller. The raw
mappings are dug into here (and in api/objects.py, for the GatewayDeployment); core/pods.py and
core/expose.py read fields by name. Each read is tolerant: a field missing or of another type
reads as absent (the objects are the API server's, but another controller's status may lack a
field or carry one of its own shape)."""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _entries(value: Any) -> tuple[Mapping[str, Any], ...]:
    return tuple(e for e in value if isinstance(e, Mapping)) if isinstance(value, list) else ()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(body.get("metadata"))


def spec(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(body.get("spec"))


def status(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(body.get("status"))


def annotations_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(metadata(body).get("annotations"))


def controller_uid(body: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its ownerReference marked controller), if any."""
    return next((str(r.get("uid")) for r in _entries(metadata(body).get("ownerReferences"))
                 if r.get("controller") and r.get("uid")), None)


def condition_status(status_: Mapping[str, Any], type_: str) -> str | None:
    """The ``status`` ("True", "False", "Unknown") of the condition ``type_`` in a status
    section's conditions (None: no such condition)."""
    found = next((c.get("status") for c in _entries(status_.get("conditions")) if c.get("type") == type_), None)
    return None if found is None else str(found)


def condition_message(status_: Mapping[str, Any], type_: str, value: str = "True") -> str | None:
    """The message (else the reason) of the condition ``type_`` when its status is ``value``."""
    return next((str(c.get("message") or c.get("reason") or "") for c in _entries(status_.get("conditions"))
                 if c.get("type") == type_ and c.get("status") == value), None)


def readiness_gates(spec_: Mapping[str, Any]) -> tuple[str, ...]:
    """The condition types a pod's spec lists as readiness gates."""
    return tuple(str(g.get("conditionType")) for g in _entries(spec_.get("readinessGates")))


def pod_ip(pod: Mapping[str, Any]) -> str:
    return str(status(pod).get("podIP") or "")


def deleting(body: Mapping[str, Any]) -> bool:
    return bool(metadata(body).get("deletionTimestamp"))


class DeploymentRead(NamedTuple):
    """What the operator reads of a Deployment (as watched, or as an apply answered it)."""

    replicas: int                    # spec.replicas
    generation: int                  # metadata.generation
    observed_generation: int         # status.observedGeneration
    ready: int                       # status.readyReplicas
    updated: int                     # status.updatedReplicas
    current: int                     # status.replicas
    annotations: Mapping[str, Any]           # metadata.annotations
    template_annotations: Mapping[str, Any]  # spec.template.metadata.annotations
    replica_failure: str             # the ReplicaFailure condition's message, while True ("" : none)


def deployment(body: Mapping[str, Any]) -> DeploymentRead:
    spec_, status_ = spec(body), status(body)
    return DeploymentRead(
        _int(spec_.get("replicas")), _int(metadata(body).get("generation")), _int(status_.get("observedGeneration")),
        _int(status_.get("readyReplicas")), _int(status_.get("updatedReplicas")), _int(status_.get("replicas")),
        annotations_of(body), mapping(metadata(mapping(spec_.get("template"))).get("annotations")),
        condition_message(status_, "ReplicaFailure") or "")


def ingress_addresses(ingress: Mapping[str, Any] | None) -> list[str]:
    """The addresses (IP or host name) an Ingress's controller published in its load balancer status."""
    balancer = mapping(status(ingress or {}).get("loadBalancer"))
    return [str(e[k]) for e in _entries(balancer.get("ingress")) for k in ("ip", "hostname") if e.get(k)]


def gateway_addresses(gateway: Mapping[str, Any] | None) -> list[str]:
    """The addresses a Gateway's controller published in its status."""
    return [str(e["value"]) for e in _entries(status(gateway or {}).get("addresses")) if e.get("value")]


def accepted_parents(route: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(namespace, name) of each parent Gateway of an HTTPRoute whose controller set Accepted=True
    (a parentRef without a namespace is in the route's)."""
    if not route:
        return []
    namespace = str(metadata(route).get("namespace") or "")
    out = []
    for parent in _entries(status(route).get("parents")):
        ref = mapping(parent.get("parentRef"))
        if ref.get("kind", "Gateway") == "Gateway" and condition_status(parent, "Accepted") == "True":
            out.append((str(ref.get("namespace") or namespace), str(ref.get("name"))))
    return out
