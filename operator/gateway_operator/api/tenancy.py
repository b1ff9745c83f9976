"""What a tenant may ask of the operator: the cluster administrator's policy, and host claims (pure).

Everyone who may write a GatewayDeployment makes the operator write Ingresses, HTTPRoutes, pods
and Services with the operator's rights. The administrator bounds that with the chart's
``tenancy`` values, enforced twice as the replica rule is: by a ValidatingAdmissionPolicy the chart
installs (the API server refuses the object at ``kubectl apply``), and by the operator, which
stalls an object that breaks the policy (the policy may be off, or installed after the object).
Each rule is written once here, as CEL + Python + one message; the chart's policy template is
generated from ``RULES`` (``gateway-operator tenancy-policy``, ``make crds``).

Host claims: a host name (an Ingress host, an HTTPRoute hostname) belongs to exactly one
claimant, the oldest by creation time and then uid, among the GatewayDeployments that expose it
and the Ingresses and HTTPRoutes the operator did not write. A younger claimant gets
``Stalled=True HostClaimed`` and no route; the message never names the other claimant.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from gateway_operator import api
from gateway_operator.api.validation import cel_string

Spec = Mapping[str, Any]

# the annotations the operator itself writes on an Ingress (timeouts, ingress-nginx cookie affinity)
NGINX = "nginx.ingress.kubernetes.io/"
# every Ingress annotation the operator writes (core/expose.py; a tenant may set these too: RULES)
OPERATOR_INGRESS_ANNOTATIONS = tuple(f"{NGINX}{k}" for k in (
    "proxy-read-timeout", "proxy-send-timeout", "affinity", "affinity-mode", "session-cookie-name"))
DEFAULT_SERVICE_TYPES = ("ClusterIP",)
SYSTEM_PRIORITY_PREFIX = "system-"


@dataclass(frozen=True)
class TenancyPolicy:
    """The chart's ``tenancy`` values (camelCase there), with their defaults."""

    allowed_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # namespace or "*": patterns
    allow_wildcard_hosts: bool = False
    ingress_annotations: tuple[str, ...] = ()       # allowed beyond the operator's own
    http_route_annotations: tuple[str, ...] = ()
    priority_class_names: tuple[str, ...] = ()      # empty: any that does not start with system-
    service_types: tuple[str, ...] = DEFAULT_SERVICE_TYPES
    allow_tolerations_without_key: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "TenancyPolicy":
        raw = raw or {}
        hosts = raw.get("allowedHosts") or {}
        if not isinstance(hosts, Mapping):
            raise ValueError("tenancy.allowedHosts must map a namespace (or *) to a list of host patterns")
        return cls(
            allowed_hosts={str(ns): tuple(str(p).lower() for p in patterns or ()) for ns, patterns in hosts.items()},
            allow_wildcard_hosts=bool(raw.get("allowWildcardHosts", False)),
            ingress_annotations=tuple(str(k) for k in raw.get("ingressAnnotations") or ()),
            http_route_annotations=tuple(str(k) for k in raw.get("httpRouteAnnotations") or ()),
            priority_class_names=tuple(str(k) for k in raw.get("priorityClassNames") or ()),
            service_types=tuple(str(k) for k in raw.get("serviceTypes") or DEFAULT_SERVICE_TYPES),
            allow_tolerations_without_key=bool(raw.get("allowTolerationsWithoutKey", False)),
        )

    @classmethod
    def from_json(cls, text: str | None) -> "TenancyPolicy":
        return cls.parse(json.loads(text) if text else {})

    def variables(self) -> dict[str, Any]:
        """The values the admission policy's CEL variables hold (the chart bakes them from its values)."""
        return {"allowedHosts": {k: list(v) for k, v in self.allowed_hosts.items()},
                "allowWildcardHosts": self.allow_wildcard_hosts,
                "ingressAnnotations": list(self.ingress_annotations),
                "httpRouteAnnotations": list(self.http_route_annotations),
                "priorityClassNames": list(self.priority_class_names),
                "serviceTypes": list(self.service_types),
                "allowTolerationsWithoutKey": self.allow_tolerations_without_key}

    def host_patterns(self, namespace: str) -> tuple[str, ...]:
        return tuple(self.allowed_hosts.get(namespace, ())) + tuple(self.allowed_hosts.get("*", ()))


# -- the spec, as far as the rules read it ----------------------------------------------------

def _get(node: Any, *path: str) -> Any:
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def spec_hosts(spec: Spec | None) -> list[str]:
    """Every host name spec.expose claims (Ingress host, HTTPRoute hostnames), lower case."""
    hosts = []
    host = _get(spec, "expose", "ingress", "host")
    if isinstance(host, str):
        hosts.append(host)
    names = _get(spec, "expose", "httpRoute", "hostnames")
    hosts += [h for h in names if isinstance(h, str)] if isinstance(names, list) else []
    return list(dict.fromkeys(h.lower().rstrip(".") for h in hosts))


def _annotation_keys(spec: Spec, route: str) -> list[str]:
    annotations = _get(spec, "expose", route, "annotations")
    return [str(k) for k in annotations] if isinstance(annotations, Mapping) else []


def host_permitted(host: str, patterns: Sequence[str]) -> bool:
    """``patterns``: exact host names, or ``*.domain`` for any name below that domain."""
    return any(p == host or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns)


class Subject(NamedTuple):
    namespace: str
    spec: Spec
    policy: TenancyPolicy


@dataclass(frozen=True)
class Rule:
    cel: str   # over `object`, `request` and the policy's `variables`
    message: str
    holds: Callable[[Subject], bool]


# CEL: the hosts of spec.expose, as spec_hosts reads them
_CEL_HOSTS = ("(has(object.spec.expose) && has(object.spec.expose.ingress) ? [object.spec.expose.ingress.host] : [])"
              " + (has(object.spec.expose) && has(object.spec.expose.httpRoute) && "
              "has(object.spec.expose.httpRoute.hostnames) ? object.spec.expose.httpRoute.hostnames : [])")
_CEL_PATTERNS = ("(request.namespace in variables.allowedHosts ? variables.allowedHosts[request.namespace] : [])"
                 " + ('*' in variables.allowedHosts ? variables.allowedHosts['*'] : [])")


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def _cel_annotations(route: str, builtin: Sequence[str], variable: str) -> str:
    where = f"object.spec.expose.{route}"
    return (f"!has(object.spec.expose) || !has({where}) || !has({where}.annotations) || "
            f"{where}.annotations.all(k, k in {_cel_list(builtin)} || k in variables.{variable})")


MSG_HOST_NOT_ALLOWED = (
    "spec.expose: a host name is outside the ones the cluster administrator lets this namespace claim "
    "(chart value tenancy.allowedHosts); ask the administrator for the host, or use one the policy allows."
)
MSG_WILDCARD_HOST = (
    "spec.expose: a wildcard host ('*.' prefix) would take every host below it; the cluster administrator "
    "has not allowed wildcard hosts (chart value tenancy.allowWildcardHosts)."
)
MSG_INGRESS_ANNOTATIONS = (
    "spec.expose.ingress.annotations: only the annotations the operator itself writes (ingress-nginx "
    "timeouts and cookie affinity) and those the cluster administrator allows (chart value "
    "tenancy.ingressAnnotations) may be set; priority, entry-point, middleware, snippet and other-namespace "
    "references would act with the ingress controller's rights for whoever may write this resource."
)
MSG_ROUTE_ANNOTATIONS = (
    "spec.expose.httpRoute.annotations: only the annotations the cluster administrator allows (chart value "
    "tenancy.httpRouteAnnotations) may be set."
)
MSG_PRIORITY_CLASS = (
    "spec.priorityClassName: this PriorityClass is not allowed for tenants (system-* classes never are unless "
    "the cluster administrator lists them in chart value tenancy.priorityClassNames): a high priority would "
    "pre-empt other tenants' pods."
)
MSG_SERVICE_TYPE = (
    "spec.service.type: the cluster administrator allows only the Service types in chart value "
    "tenancy.serviceTypes (default ClusterIP): a NodePort or LoadBalancer opens the gateway outside the "
    "cluster's edge."
)
MSG_TOLERATION_WITHOUT_KEY = (
    "spec.tolerations: a toleration without a key tolerates every taint (dedicated and control-plane nodes "
    "included); name the taint's key, or ask the cluster administrator (chart value "
    "tenancy.allowTolerationsWithoutKey)."
)


def _priority_ok(s: Subject) -> bool:
    name = s.spec.get("priorityClassName")
    if not name:
        return True
    if s.policy.priority_class_names:
        return name in s.policy.priority_class_names
    return not str(name).startswith(SYSTEM_PRIORITY_PREFIX)


def _service_type_ok(s: Subject) -> bool:
    kind = _get(s.spec, "service", "type")
    return kind is None or kind in s.policy.service_types


def _tolerations_ok(s: Subject) -> bool:
    tolerations = s.spec.get("tolerations")
    return (s.policy.allow_tolerations_without_key or not isinstance(tolerations, list)
            or all(isinstance(t, Mapping) and t.get("key") for t in tolerations))


RULES: tuple[Rule, ...] = (
    Rule(f"size(variables.allowedHosts) == 0 || ({_CEL_HOSTS}).all(h, ({_CEL_PATTERNS}).exists(p, p == h || "
         "(p.startsWith('*.') && h.endsWith(p.substring(1)))))",
         MSG_HOST_NOT_ALLOWED,
         lambda s: not s.policy.allowed_hosts or all(host_permitted(h, s.policy.host_patterns(s.namespace))
                                                     for h in spec_hosts(s.spec))),
    Rule(f"variables.allowWildcardHosts || ({_CEL_HOSTS}).all(h, !h.startsWith('*'))",
         MSG_WILDCARD_HOST,
         lambda s: s.policy.allow_wildcard_hosts or not any(h.startswith("*") for h in spec_hosts(s.spec))),
    Rule(_cel_annotations("ingress", OPERATOR_INGRESS_ANNOTATIONS, "ingressAnnotations"),
         MSG_INGRESS_ANNOTATIONS,
         lambda s: all(k in OPERATOR_INGRESS_ANNOTATIONS or k in s.policy.ingress_annotations
                       for k in _annotation_keys(s.spec, "ingress"))),
    Rule(_cel_annotations("httpRoute", (), "httpRouteAnnotations"),
         MSG_ROUTE_ANNOTATIONS,
         lambda s: all(k in s.policy.http_route_annotations for k in _annotation_keys(s.spec, "httpRoute"))),
    Rule("!has(object.spec.priorityClassName) || (size(variables.priorityClassNames) == 0 ? "
         f"!object.spec.priorityClassName.startsWith('{SYSTEM_PRIORITY_PREFIX}') : "
         "object.spec.priorityClassName in variables.priorityClassNames)",
         MSG_PRIORITY_CLASS, _priority_ok),
    Rule("!has(object.spec.service) || !has(object.spec.service.type) || "
         "object.spec.service.type in variables.serviceTypes",
         MSG_SERVICE_TYPE, _service_type_ok),
    Rule("variables.allowTolerationsWithoutKey || !has(object.spec.tolerations) || "
         "object.spec.tolerations.all(t, has(t.key) && t.key != '')",
         MSG_TOLERATION_WITHOUT_KEY, _tolerations_ok),
)


def violations(namespace: str, spec: Spec, policy: TenancyPolicy) -> list[str]:
    """Messages of every tenancy rule the spec breaks under ``policy``, in rule order."""
    subject = Subject(namespace, spec, policy)
    return [rule.message for rule in RULES if not rule.holds(subject)]


# -- host claims ------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Claim:
    """One claimant of a host: ordered oldest first (creation time, then uid)."""

    created: str   # metadata.creationTimestamp (RFC 3339 in UTC: sorts as text)
    uid: str
    kind: str = field(compare=False, default=api.KIND)
    namespace: str = field(compare=False, default="")
    name: str = field(compare=False, default="")


def claim_of(kind: str, meta: Mapping[str, Any]) -> Claim:
    return Claim(str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or ""), kind,
                 str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def route_hosts(kind: str, body: Mapping[str, Any]) -> list[str]:
    """The hosts an Ingress (rules[].host) or an HTTPRoute (hostnames) claims, lower case."""
    spec = body.get("spec") or {}
    if kind == api.INGRESS_API[1]:
        hosts = [r.get("host") for r in spec.get("rules") or [] if isinstance(r, Mapping)]
    else:
        hosts = list(spec.get("hostnames") or [])
    return list(dict.fromkeys(h.lower().rstrip(".") for h in hosts if isinstance(h, str) and h))


MSG_HOST_CLAIMED = ("spec.expose: host {host} is already claimed by an older GatewayDeployment or route; the "
                    "operator writes no route for this one while that claim stands. Choose another host.")


def claimed_elsewhere(mine: Claim, hosts: Iterable[str], claims: Mapping[str, Sequence[Claim]]) -> list[str]:
    """The hosts of ``mine`` whose oldest claimant is someone else. ``claims``: every known
    claimant of each host (``mine`` among them or not)."""
    return [h for h in hosts if min([mine, *claims.get(h, ())]).uid != mine.uid]
