"""Typed views of a GatewayDeployment as the loop reads it: its metadata (``Meta``), its spec as
written (``spec_of``, checked by loop/inputs.py into a GatewaySpec) and its status as last written
(``StatusView``). The object's raw mappings are dug into here and at the clients' edges only; the
loop and the core read fields by name. Each view is tolerant: a field missing or of another type
reads as absent, never as an error (the body is the API server's, but an old status may lack a
field a newer operator writes)."""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from gateway_operator.api.tenancy import Claim, claim_of
from gateway_operator.api.workloads import mapping, metadata


class Meta(NamedTuple):
    """What the loop reads of an object's metadata."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int | None = None
    resource_version: str = ""
    deleting: bool = False      # metadata.deletionTimestamp is set

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def meta_of(body: Mapping[str, Any]) -> Meta:
    meta = metadata(body)
    generation = meta.get("generation")
    return Meta(str(meta.get("name") or ""), str(meta.get("namespace") or ""), str(meta.get("uid") or ""),
                generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
                str(meta.get("resourceVersion") or ""), bool(meta.get("deletionTimestamp")))


#: what the loop reads of a GatewayDeployment's metadata (its identity, its generation and
#: resourceVersion, when it was created and whether it is being deleted); an Event names it by these
KEPT_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp",
                 "deletionTimestamp")


def kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the loop keeps it between passes: its kind, the metadata it reads
    (KEPT_METADATA), spec and status. Not kept: metadata.managedFields, which was most of a
    GatewayDeployment's size in memory, the labels and annotations it never reads, among them
    ``kubectl apply``'s last-applied-configuration (the whole spec again, as a JSON string)."""
    meta = metadata(body)
    return {**{k: v for k, v in body.items() if k != "metadata"},
            "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta}}


def resource_version(body: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as a number (0: none, or not one)."""
    try:
        return int(meta_of(body).resource_version or 0)
    except ValueError:  # resource versions are opaque; etcd's happen to be integers
        return 0


def with_generation(body: Mapping[str, Any], generation: object) -> dict[str, Any]:
    """A copy of ``body`` whose metadata.generation is ``generation``."""
    return {**body, "metadata": {**metadata(body), "generation": generation}}


def claim_of_object(kind: str, body: Mapping[str, Any]) -> Claim:
    """The object's claim on the hosts it names (tenancy.claim_of: the older one wins)."""
    return claim_of(kind, metadata(body))


def spec_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec as written (loop/inputs.check parses and checks it)."""
    spec = body.get("spec")
    return spec if isinstance(spec, Mapping) else {}


class StatusView(NamedTuple):
    """A GatewayDeployment's status as last written (by this operator, or an earlier one)."""

    raw: Mapping[str, Any] = {}

    @property
    def observed_generation(self) -> int | None:
        found = self.raw.get("observedGeneration")
        return found if isinstance(found, int) and not isinstance(found, bool) else None

    @property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        found = self.raw.get("conditions")
        return tuple(c for c in found if isinstance(c, Mapping)) if isinstance(found, list) else ()

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def says(self, type_: str, status: str | None = None, reason: str | None = None) -> bool:
        """The condition ``type_`` as last written has this status and reason (None: any)."""
        found = self.condition(type_)
        return found is not None and (status is None or found.get("status") == status) and \
            (reason is None or found.get("reason") == reason)

    @property
    def redis(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("redis"))

    @property
    def sqlite_migration(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("sqliteMigration"))

    @property
    def gateway(self) -> Mapping[str, Any] | None:
        found = self.raw.get("gateway")
        return found if isinstance(found, Mapping) else None

    @property
    def autoscaling(self) -> Mapping[str, Any]:
        return mapping(self.raw.get("autoscaling"))

    @property
    def wrote_expose(self) -> bool:
        """status.expose is there: routes were written for spec.expose (looked for, to remove)."""
        return "expose" in self.raw

    @property
    def wrote_network_policy(self) -> bool:
        return "networkPolicy" in self.raw


def status_of(body: Mapping[str, Any] | None) -> StatusView:
    return StatusView(mapping((body or {}).get("status")))
