"""The rules a GatewayDeployment must obey, in one place.

Each rule is written twice on purpose, side by side: as a CEL expression that the CRD
carries (so the API server refuses a bad object at ``kubectl apply``), and as a Python
predicate with the same message (so the operator refuses to act on a bad object even when
the CRD's rule is missing - defence in depth - and so ``gateway-operator check`` gives the
API server's message offline). tests/test_crd_admission.py proves both say the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .api import Policy, store_backend_of

Spec = Mapping[str, Any]

MSG_REPLICAS_NEED_REDIS = (
    "replicas > 1 needs config.hooks.idempotency.store_backend: redis (with spec.redis) "
    "under replicaPolicy Refuse: each replica otherwise dedups webhooks in its own SQLite "
    "store, so a webhook fanned to two replicas can run the agent twice. Set store_backend: "
    "redis and spec.redis, keep replicas: 1, or set replicaPolicy: Warn to accept duplicates."
)
MSG_REDIS_BACKEND_NEEDS_REDIS = (
    "config.hooks.idempotency.store_backend: redis needs spec.redis: set spec.redis.url, "
    "spec.redis.host, or spec.redis.managed.enabled: true."
)
MSG_REDIS_ONE_SOURCE = (
    "spec.redis: set exactly one of url, host, or managed.enabled: true."
)
MSG_REDIS_URL_SCHEME = "spec.redis.url must look like redis://host:port/db or rediss://host:port/db."
MSG_REDIS_URL_CREDENTIALS = (
    "spec.redis.url must not carry credentials: put the password in a Secret and name it "
    "in spec.redis.passwordSecretRef."
)
MSG_PUSH_REDIS_OWNED = (
    "config.push.redis is written by the operator from spec.redis; remove it from config."
)
MSG_PERSISTENCE_ONE_REPLICA = (
    "spec.persistence holds one replica's SQLite store and cannot be shared; with replicas > 1 "
    "use store_backend: redis (persistence is then unnecessary) or disable persistence."
)
MSG_CONFIG_SECTIONS = (
    "config needs agents and channels sections: the gateway refuses to start without them."
)
MSG_PREFIX_FORMAT = "spec.redis.prefix may hold only letters, digits and . _ : - (at most 100)."

_URL_RE = re.compile(r"^rediss?://[^\s/]+(/[0-9]+)?$")
_URL_CREDENTIALS_RE = re.compile(r"^rediss?://[^/]*@")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")


@dataclass(frozen=True)
class Rule:
    """One admission rule: where the CRD carries it, its CEL form, its Python form."""

    at: str  # schema node that carries the CEL rule: "spec", "spec.redis" or "spec.config"
    cel: str
    message: str
    holds: Callable[[Spec], bool]  # given the whole spec (defaults applied)


def _redis(spec: Spec) -> Mapping[str, Any]:
    return spec.get("redis") or {}


def _redis_sources(spec: Spec) -> int:
    r = _redis(spec)
    return sum([bool(r.get("url")), bool(r.get("host")), bool((r.get("managed") or {}).get("enabled"))])


_HAS_REDIS_BACKEND = (
    "(has(self.config) && has(self.config.hooks) && has(self.config.hooks.idempotency) && "
    "has(self.config.hooks.idempotency.store_backend) && "
    "self.config.hooks.idempotency.store_backend == 'redis')"
)
_REDIS_SOURCES = (
    "(has(self.redis) ? ((has(self.redis.url) ? 1 : 0) + (has(self.redis.host) ? 1 : 0) + "
    "(has(self.redis.managed) && self.redis.managed.enabled ? 1 : 0)) : 0)"
)

RULES: tuple[Rule, ...] = (
    Rule("spec",
         f"self.replicaPolicy == 'Warn' || self.replicas <= 1 || {_HAS_REDIS_BACKEND}",
         MSG_REPLICAS_NEED_REDIS,
         lambda s: s.get("replicaPolicy", Policy.REFUSE) == Policy.WARN
         or int(s.get("replicas", 1)) <= 1 or store_backend_of(s.get("config") or {}) == "redis"),
    Rule("spec",
         f"!{_HAS_REDIS_BACKEND} || {_REDIS_SOURCES} >= 1",
         MSG_REDIS_BACKEND_NEEDS_REDIS,
         lambda s: store_backend_of(s.get("config") or {}) != "redis" or _redis_sources(s) >= 1),
    Rule("spec",
         f"{_REDIS_SOURCES} <= 1",
         MSG_REDIS_ONE_SOURCE,
         lambda s: _redis_sources(s) <= 1),
    Rule("spec",
         "!(has(self.persistence) && self.persistence.enabled && self.replicas > 1 && "
         f"!{_HAS_REDIS_BACKEND})",
         MSG_PERSISTENCE_ONE_REPLICA,
         lambda s: not ((s.get("persistence") or {}).get("enabled") and int(s.get("replicas", 1)) > 1
                        and store_backend_of(s.get("config") or {}) != "redis")),
    Rule("spec.redis",
         "!has(self.url) || self.url.matches('^rediss?://[^\\\\s/]+(/[0-9]+)?$')",
         MSG_REDIS_URL_SCHEME,
         lambda s: not _redis(s).get("url") or bool(_URL_RE.match(str(_redis(s)["url"])))),
    Rule("spec.redis",
         "!has(self.url) || !self.url.matches('^rediss?://[^/]*@')",
         MSG_REDIS_URL_CREDENTIALS,
         lambda s: not _redis(s).get("url") or not _URL_CREDENTIALS_RE.match(str(_redis(s)["url"]))),
    Rule("spec.redis",
         "!has(self.prefix) || self.prefix.matches('^[A-Za-z0-9._:-]{1,100}$')",
         MSG_PREFIX_FORMAT,
         lambda s: not _redis(s).get("prefix") or bool(_PREFIX_RE.match(str(_redis(s)["prefix"])))),
    Rule("spec.config",
         "has(self.agents) && has(self.channels)",
         MSG_CONFIG_SECTIONS,
         lambda s: {"agents", "channels"} <= set(s.get("config") or {})),
    Rule("spec.config",
         "!has(self.push) || !has(self.push.redis)",
         MSG_PUSH_REDIS_OWNED,
         lambda s: "redis" not in ((s.get("config") or {}).get("push") or {})),
)


def violations(spec: Spec) -> list[str]:
    """Messages of every rule the spec breaks, in rule order; empty when it is admissible."""
    return [rule.message for rule in RULES if not rule.holds(spec)]
