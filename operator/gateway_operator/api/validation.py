"""The rules a GatewayDeployment must obey, in one place.

Each rule is written twice on purpose, side by side: as a CEL expression that the CRD
carries (so the API server refuses a bad object at ``kubectl apply``), and as a Python
predicate with the same message (so the operator refuses to act on a bad object even when
the CRD's rule is missing - defence in depth - and so ``gateway-operator check`` gives the
API server's message offline). tests/sim/test_crd_admission.py proves both say the same.

``LIMITS`` are the bounds CEL cannot express (it cannot see inside free-form config): the
operator and ``check`` apply them, and an object over them is Stalled, never acted on.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from gateway_operator import api
from gateway_operator.api import fields
from gateway_operator.api import Policy, coalesced_hooks, store_backend_of
from gateway_operator.api import replica_state
from gateway_operator.api.redis_target import DNS_NAME, HOST_PATTERN, MAX_HOST_LENGTH, URL_PATTERN, valid_host

Spec = Mapping[str, Any]


class Subject(NamedTuple):
    """What a rule judges: the object's name and its spec (defaults applied)."""

    name: str
    spec: Spec


MAX_NAME_LENGTH = 57  # "<name>-redis" must still be a 63-character Service name
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_BYTES = 256 * 1024  # the rendered ConfigMap (gateway.yaml + launcher) must stay under 1 MiB
RESERVED_ENV = (api.AUTH_TOKEN_ENV, api.REDIS_PASSWORD_ENV, api.REDIS_USERNAME_ENV, api.SESSION_KEY_ENV, "HOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
# Every other place 0.1.16 reads the idempotency backend from (praisonai_bot.gateway.server
# _apply_hooks_from_config). Only config.hooks.idempotency is allowed, so admission, the
# operator and the launcher all read the one the user wrote.
OTHER_IDEMPOTENCY_FORMS = (("hooks_idempotency",), ("idempotency",), ("gateway", "hooks_idempotency"),
                           ("gateway", "hooks"))

MSG_NAME = (
    f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters (lowercase letters, digits "
    "and '-', starting with a letter): it names the gateway's Service and the managed Redis '<name>-redis'."
)
MSG_REPLICAS_NEED_REDIS = (
    "replicas > 1 needs config.hooks.idempotency.store_backend: redis (with spec.redis) "
    "under replicaPolicy Refuse: each replica otherwise dedups webhooks in its own SQLite "
    "store, so a webhook fanned to two replicas can run the agent twice. Set store_backend: "
    "redis and spec.redis, keep replicas: 1, or set replicaPolicy: Warn to accept duplicates."
)
MSG_AUTOSCALING_NEEDS_REDIS = (
    "spec.autoscaling with maxReplicas > 1 needs config.hooks.idempotency.store_backend: redis (with "
    "spec.redis) under replicaPolicy Refuse: the autoscaler would run replicas that each dedup webhooks in their "
    "own SQLite store, so a webhook fanned to two replicas can run the agent twice. Set store_backend: redis and "
    "spec.redis, keep maxReplicas: 1, or set replicaPolicy: Warn to accept duplicates."
)
MSG_COALESCE_ONE_REPLICA = (
    "config.hooks.hooks[].coalesce needs at most one replica (replicas <= 1, and spec.autoscaling off or up to "
    "maxReplicas: 1) under replicaPolicy Refuse: the gateway records a coalesced delivery and answers 202 before its "
    "group runs, and a replica that stops (rolling update, scale-in, eviction, a crash) drops the groups it holds, so "
    "the provider's retry to another replica is answered 'deduplicated' and the message never runs. Remove "
    "coalesce, keep one replica, or set replicaPolicy: Warn to accept lost deliveries."
)
MSG_CLAIM_LEASE_BOUND = (
    f"spec.redis.claimLeaseSeconds must be at most {api.MAX_CLAIM_LEASE_SECONDS}: a replica killed or cut off "
    "mid-turn holds its webhooks' claims until the lease ends, and a dead holder's claim must free within 90 s so "
    "that the provider's retry runs the message on another replica."
)
MSG_AUTOSCALING_BOUNDS = "spec.autoscaling.minReplicas must not exceed spec.autoscaling.maxReplicas."
MSG_AUTOSCALING_DRAIN = (
    f"spec.autoscaling needs spec.drainSeconds <= {api.MAX_AUTOSCALING_DRAIN_SECONDS}: the autoscaler removes one "
    f"replica per period of the pods' grace period (drainSeconds + {api.PRESTOP_SECONDS + api.EXIT_MARGIN_SECONDS} "
    f"s), so that no two replicas drain at once, and autoscaling/v2 allows at most {api.HPA_MAX_PERIOD_SECONDS} s."
)
MSG_AUTOSCALING_PERSISTENCE = (
    "spec.persistence holds one replica's SQLite store and cannot be shared; with spec.autoscaling up to "
    "maxReplicas > 1 use store_backend: redis (persistence is then unnecessary), keep maxReplicas: 1, or disable "
    "persistence."
)
MSG_REDIS_BACKEND_NEEDS_REDIS = (
    "config.hooks.idempotency.store_backend: redis needs spec.redis: set spec.redis.url, "
    "spec.redis.host, or spec.redis.managed.enabled: true."
)
MSG_REDIS_ONE_SOURCE = (
    "spec.redis: set exactly one of url, host, or managed.enabled: true."
)
MSG_REDIS_URL_SCHEME = (
    "spec.redis.url must look like redis://host:port/db or rediss://host:port/db: a DNS name, an IPv4 "
    "address or a bracketed IPv6 address, port 1-65535, db 0-15, no query."
)
MSG_REDIS_URL_CREDENTIALS = (
    "spec.redis.url must not carry credentials: put the password in a Secret and name it "
    "in spec.redis.passwordSecretRef."
)
MSG_REDIS_HOST = (
    "spec.redis.host must be a DNS name or an IP address alone (no scheme, port or credentials: use "
    "spec.redis.port and spec.redis.passwordSecretRef)."
)
MSG_PUSH_REDIS_OWNED = (
    "config.push.redis is written by the operator from spec.redis; remove it from config."
)
MSG_SESSIONS_NEED_REDIS = (
    "spec.sessions.store: redis keeps webhook session history in the GatewayDeployment's Redis; set "
    "spec.redis (url, host or managed) or use store: replica."
)
MSG_PERSISTENCE_ONE_REPLICA = (
    "spec.persistence holds one replica's SQLite store and cannot be shared; with replicas > 1 "
    "use store_backend: redis (persistence is then unnecessary) or disable persistence."
)
MSG_CONFIG_SECTIONS = (
    "config needs agents and channels sections: the gateway refuses to start without them."
)
MSG_IDEMPOTENCY_FORMS = (
    "config: set the idempotency store only as hooks.idempotency.store_backend; remove hooks_idempotency, "
    "idempotency, gateway.hooks_idempotency and gateway.hooks (the gateway would read those instead, and "
    "the operator's replica guard would not see them)."
)
MSG_RESERVED_ENV = (
    f"spec.env must not set {', '.join(RESERVED_ENV)}: the operator sets them (the auth token and Redis "
    "password come from the Secrets named in spec)."
)
MSG_TLS_OPTIONS_NEED_TLS = (
    "spec.redis.tls.caSecretRef, serverName and insecureSkipVerify configure a TLS connection: set "
    "spec.redis.tls.enabled: true or use a rediss:// url."
)
MSG_TLS_SKIP_VERIFY_ALONE = (
    "spec.redis.tls.insecureSkipVerify turns off the checks that caSecretRef and serverName configure: "
    "set those, or insecureSkipVerify, not both."
)
MSG_TLS_SERVER_NAME = (
    "spec.redis.tls.serverName must be a DNS name (at most 253 characters), the name the Redis server's "
    "certificate carries."
)
MSG_USERNAME_NEEDS_PASSWORD = (
    "spec.redis.usernameSecretRef names an ACL user, which signs in with a password: set "
    "spec.redis.passwordSecretRef too."
)
MSG_MANAGED_OWN_CREDENTIALS = (
    "spec.redis.managed runs the operator's own Redis (plain TCP inside the namespace, its own password): "
    "usernameSecretRef and tls.caSecretRef, serverName and insecureSkipVerify apply to url or host only."
)
MAX_PREFIX_LENGTH = fields.prop_of(api.RedisSpec, "prefix").keywords["maxLength"]
MSG_PREFIX_FORMAT = f"spec.redis.prefix may hold only letters, digits and . _ : - (at most {MAX_PREFIX_LENGTH})."
MSG_IMAGE_BLANK = "spec.image must name an image: it is empty or only white space."

_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_URL_RE = re.compile(URL_PATTERN)
_URL_CREDENTIALS_RE = re.compile(r"^rediss?://[^/]*@")
_PREFIX_RE = re.compile(rf"^[A-Za-z0-9._:-]{{1,{MAX_PREFIX_LENGTH}}}$")
_DEFAULTS = api.GatewaySpec()  # the spec nobody wrote: what an absent field reads as


def cel_string(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Rule:
    """One admission rule: where the CRD carries it, its CEL form, its Python form."""

    at: str  # schema node that carries the CEL rule: "root", "spec", "spec.autoscaling", "spec.redis" or "spec.config"
    cel: str
    message: str
    holds: Callable[[Subject], bool]  # given the name and the whole spec (defaults applied)


def _redis(spec: Spec) -> Mapping[str, Any]:
    redis = spec.get("redis")
    return redis if isinstance(redis, Mapping) else {}


def _config(spec: Spec) -> Mapping[str, Any]:
    config = spec.get("config")
    return config if isinstance(config, Mapping) else {}


def _redis_sources(spec: Spec) -> int:
    r = _redis(spec)
    return sum([bool(r.get("url")), bool(r.get("host")), _managed(spec)])


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) else default


def _replicas(spec: Spec) -> int:
    value = spec.get("replicas", _DEFAULTS.replicas)
    return value if isinstance(value, int) else _DEFAULTS.replicas


def _autoscaling(spec: Spec) -> Mapping[str, Any]:
    autoscaling = spec.get("autoscaling")
    return autoscaling if isinstance(autoscaling, Mapping) else {}


def autoscales_past_one(spec: Spec) -> int:
    """The most replicas spec.autoscaling may run when that is more than one, else 0."""
    autoscaling = _autoscaling(spec)
    most = autoscaling.get("maxReplicas", _DEFAULTS.autoscaling.max_replicas)
    return most if autoscaling.get("enabled") and isinstance(most, int) and most > 1 else 0


def idempotency_form_paths(config: Mapping[str, Any]) -> list[str]:
    """The non-documented idempotency settings present in ``config`` (dotted paths)."""
    found = []
    for path in OTHER_IDEMPOTENCY_FORMS:
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            found.append(".".join(path))
    return found




_HAS_REDIS_BACKEND = (
    "(has(self.config) && has(self.config.hooks) && has(self.config.hooks.idempotency) && "
    "has(self.config.hooks.idempotency.store_backend) && "
    "self.config.hooks.idempotency.store_backend == 'redis')"
)
_REDIS_SOURCES = (
    "(has(self.redis) ? ((has(self.redis.url) ? 1 : 0) + (has(self.redis.host) ? 1 : 0) + "
    "(has(self.redis.managed) && self.redis.managed.enabled ? 1 : 0)) : 0)"
)

# spec.autoscaling on, up to more than one replica (its fields defaulted once the section is there)
_AUTOSCALES_PAST_ONE = "(has(self.autoscaling) && self.autoscaling.enabled && self.autoscaling.maxReplicas > 1)"

# an enabled hook of config.hooks.hooks sets coalesce (api.coalesced_hooks)
_COALESCED = ("(has(self.config) && has(self.config.hooks) && has(self.config.hooks.hooks) && "
              "self.config.hooks.hooks.exists(h, has(h.coalesce) && !(has(h.enabled) && !h.enabled)))")


def runs_past_one(spec: Spec) -> bool:
    """More than one replica may run: spec.replicas > 1, or spec.autoscaling up to more than one."""
    return _replicas(spec) > 1 or bool(autoscales_past_one(spec))


# inside spec.redis: does the connection use TLS, and are any of the TLS checks' options set?
_TLS_ON = ("((has(self.tls) && has(self.tls.enabled) && self.tls.enabled) || "
           "(has(self.url) && self.url.startsWith('rediss://')))")
_SKIP_VERIFY = "(has(self.tls) && has(self.tls.insecureSkipVerify) && self.tls.insecureSkipVerify)"
_TLS_CHECKS = "(has(self.tls) && (has(self.tls.caSecretRef) || has(self.tls.serverName)))"
_SERVER_NAME_RE = re.compile(rf"^{DNS_NAME}$")


def _tls(spec: Spec) -> Mapping[str, Any]:
    tls = _redis(spec).get("tls")
    return tls if isinstance(tls, Mapping) else {}


def _tls_on(spec: Spec) -> bool:
    return bool(_tls(spec).get("enabled")) or str(_redis(spec).get("url") or "").startswith("rediss://")


def _tls_checks(spec: Spec) -> bool:
    return "caSecretRef" in _tls(spec) or "serverName" in _tls(spec)


def _managed(spec: Spec) -> bool:
    managed = _redis(spec).get("managed")
    return bool(isinstance(managed, Mapping) and managed.get("enabled"))


RULES: tuple[Rule, ...] = (
    Rule("root",
         f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && "
         f"self.metadata.name.matches({cel_string(_NAME_RE.pattern)})",
         MSG_NAME,
         lambda s: len(s.name) <= MAX_NAME_LENGTH and bool(_NAME_RE.match(s.name))),
    Rule("spec",
         f"self.replicaPolicy == 'Warn' || self.replicas <= 1 || {_HAS_REDIS_BACKEND}",
         MSG_REPLICAS_NEED_REDIS,
         lambda s: s.spec.get("replicaPolicy", _DEFAULTS.policy) == Policy.WARN
         or _replicas(s.spec) <= 1 or store_backend_of(_config(s.spec)) == "redis"),
    Rule("spec",  # the same guard as replicas > 1: the autoscaler writes spec.replicas up to maxReplicas
         f"self.replicaPolicy == 'Warn' || !{_AUTOSCALES_PAST_ONE} || {_HAS_REDIS_BACKEND}",
         MSG_AUTOSCALING_NEEDS_REDIS,
         lambda s: s.spec.get("replicaPolicy", _DEFAULTS.policy) == Policy.WARN
         or not autoscales_past_one(s.spec) or store_backend_of(_config(s.spec)) == "redis"),
    Rule("spec",  # counts replicas as the two rules above do: spec.replicas, or the autoscaler's maxReplicas
         f"self.replicaPolicy == 'Warn' || (self.replicas <= 1 && !{_AUTOSCALES_PAST_ONE}) || !{_COALESCED}",
         MSG_COALESCE_ONE_REPLICA,
         lambda s: s.spec.get("replicaPolicy", _DEFAULTS.policy) == Policy.WARN
         or not runs_past_one(s.spec) or not coalesced_hooks(_config(s.spec))),
    Rule("spec",
         "!(has(self.persistence) && self.persistence.enabled && "
         f"{_AUTOSCALES_PAST_ONE} && !{_HAS_REDIS_BACKEND})",
         MSG_AUTOSCALING_PERSISTENCE,
         lambda s: not ((s.spec.get("persistence") or {}).get("enabled") and autoscales_past_one(s.spec)
                        and store_backend_of(_config(s.spec)) != "redis")),
    Rule("spec",
         f"!(has(self.autoscaling) && self.autoscaling.enabled) || self.drainSeconds <= "
         f"{api.MAX_AUTOSCALING_DRAIN_SECONDS}",
         MSG_AUTOSCALING_DRAIN,
         lambda s: not _autoscaling(s.spec).get("enabled")
         or _int(s.spec.get("drainSeconds"), _DEFAULTS.drain_seconds) <= api.MAX_AUTOSCALING_DRAIN_SECONDS),
    Rule("spec",
         f"!{_HAS_REDIS_BACKEND} || {_REDIS_SOURCES} >= 1",
         MSG_REDIS_BACKEND_NEEDS_REDIS,
         lambda s: store_backend_of(_config(s.spec)) != "redis" or _redis_sources(s.spec) >= 1),
    Rule("spec",
         f"{_REDIS_SOURCES} <= 1",
         MSG_REDIS_ONE_SOURCE,
         lambda s: _redis_sources(s.spec) <= 1),
    Rule("spec",
         f"!(has(self.sessions) && has(self.sessions.store) && self.sessions.store == 'redis' && {_REDIS_SOURCES} == 0)",
         MSG_SESSIONS_NEED_REDIS,
         lambda s: not ((s.spec.get("sessions") or {}).get("store") == "redis" and _redis_sources(s.spec) == 0)),
    Rule("spec",
         "!(has(self.persistence) && self.persistence.enabled && self.replicas > 1 && "
         f"!{_HAS_REDIS_BACKEND})",
         MSG_PERSISTENCE_ONE_REPLICA,
         lambda s: not ((s.spec.get("persistence") or {}).get("enabled") and _replicas(s.spec) > 1
                        and store_backend_of(_config(s.spec)) != "redis")),
    Rule("spec",
         "!has(self.env) || self.env.all(e, !(e.name in "
         f"[{', '.join(cel_string(n) for n in RESERVED_ENV)}]))",
         MSG_RESERVED_ENV,
         lambda s: not replica_state.env_names(s.spec.get("env")) & set(RESERVED_ENV)),
    Rule("spec",
         "self.image.matches('\\\\S')",
         MSG_IMAGE_BLANK,
         lambda s: bool(str(s.spec.get("image") or "").strip())),
    Rule("spec.autoscaling",
         "self.minReplicas <= self.maxReplicas",
         MSG_AUTOSCALING_BOUNDS,
         lambda s: _int(_autoscaling(s.spec).get("minReplicas"), _DEFAULTS.autoscaling.min_replicas)
         <= _int(_autoscaling(s.spec).get("maxReplicas"), _DEFAULTS.autoscaling.max_replicas)),
    Rule("spec.redis",
         f"!has(self.url) || self.url.matches({cel_string(URL_PATTERN)})",
         MSG_REDIS_URL_SCHEME,
         lambda s: not _redis(s.spec).get("url") or bool(_URL_RE.match(str(_redis(s.spec)["url"])))),
    Rule("spec.redis",
         "!has(self.url) || !self.url.matches('^rediss?://[^/]*@')",
         MSG_REDIS_URL_CREDENTIALS,
         lambda s: not _redis(s.spec).get("url") or not _URL_CREDENTIALS_RE.match(str(_redis(s.spec)["url"]))),
    Rule("spec.redis",
         f"!has(self.host) || (self.host.size() <= {MAX_HOST_LENGTH} && "
         f"self.host.matches({cel_string(HOST_PATTERN)}))",
         MSG_REDIS_HOST,
         lambda s: not _redis(s.spec).get("host") or valid_host(str(_redis(s.spec)["host"]))),
    Rule("spec.redis",
         f"!({_TLS_CHECKS} || {_SKIP_VERIFY}) || {_TLS_ON}",
         MSG_TLS_OPTIONS_NEED_TLS,
         lambda s: not (_tls_checks(s.spec) or _tls(s.spec).get("insecureSkipVerify")) or _tls_on(s.spec)),
    Rule("spec.redis",
         f"!({_SKIP_VERIFY} && {_TLS_CHECKS})",
         MSG_TLS_SKIP_VERIFY_ALONE,
         lambda s: not (_tls(s.spec).get("insecureSkipVerify") and _tls_checks(s.spec))),
    Rule("spec.redis",
         "!has(self.tls) || !has(self.tls.serverName) || (self.tls.serverName.size() <= "
         f"{MAX_HOST_LENGTH} && self.tls.serverName.matches({cel_string(_SERVER_NAME_RE.pattern)}))",
         MSG_TLS_SERVER_NAME,
         lambda s: "serverName" not in _tls(s.spec) or (len(str(_tls(s.spec)["serverName"])) <= MAX_HOST_LENGTH
                                                        and bool(_SERVER_NAME_RE.match(str(_tls(s.spec)["serverName"]))))),
    Rule("spec.redis",
         "!has(self.usernameSecretRef) || has(self.passwordSecretRef)",
         MSG_USERNAME_NEEDS_PASSWORD,
         lambda s: "usernameSecretRef" not in _redis(s.spec) or "passwordSecretRef" in _redis(s.spec)),
    Rule("spec.redis",
         "!(has(self.managed) && has(self.managed.enabled) && self.managed.enabled) || "
         f"!(has(self.usernameSecretRef) || {_TLS_CHECKS} || {_SKIP_VERIFY})",
         MSG_MANAGED_OWN_CREDENTIALS,
         lambda s: not _managed(s.spec) or not ("usernameSecretRef" in _redis(s.spec) or _tls_checks(s.spec)
                                                 or _tls(s.spec).get("insecureSkipVerify"))),
    Rule("spec.redis",
         f"!has(self.claimLeaseSeconds) || self.claimLeaseSeconds <= {api.MAX_CLAIM_LEASE_SECONDS}",
         MSG_CLAIM_LEASE_BOUND,
         lambda s: _int(_redis(s.spec).get("claimLeaseSeconds"), _DEFAULTS.redis.claim_lease_seconds)
         <= api.MAX_CLAIM_LEASE_SECONDS),
    Rule("spec.redis",
         f"!has(self.prefix) || self.prefix.matches({cel_string(_PREFIX_RE.pattern)})",
         MSG_PREFIX_FORMAT,
         lambda s: not _redis(s.spec).get("prefix") or bool(_PREFIX_RE.match(str(_redis(s.spec)["prefix"])))),
    Rule("spec.config",
         "has(self.agents) && has(self.channels)",
         MSG_CONFIG_SECTIONS,
         lambda s: {"agents", "channels"} <= set(_config(s.spec))),
    Rule("spec.config",
         "!has(self.push) || !has(self.push.redis)",
         MSG_PUSH_REDIS_OWNED,
         lambda s: not isinstance(_config(s.spec).get("push"), Mapping)
         or "redis" not in _config(s.spec)["push"]),
    Rule("spec.config",
         "!has(self.hooks_idempotency) && !has(self.idempotency) && "
         "(!has(self.gateway) || (!has(self.gateway.hooks_idempotency) && !has(self.gateway.hooks)))",
         MSG_IDEMPOTENCY_FORMS,
         lambda s: not idempotency_form_paths(_config(s.spec))),
)


def warn_message(replicas: int) -> str:
    """What the API server prints at ``kubectl apply`` under replicaPolicy Warn (the chart's
    ValidatingAdmissionPolicy says the same; a test keeps them equal)."""
    return (f"replicaPolicy Warn: {replicas} replicas without hooks.idempotency.store_backend: redis each "
            "dedup webhooks in their own SQLite store, so the same webhook can run the agent twice "
            "(exactly-once admission is NOT held). Set store_backend: redis and spec.redis to fix it.")


def autoscaling_warn_message(max_replicas: int) -> str:
    """``warn_message`` for spec.autoscaling (the chart's policy says the same; a test keeps them equal)."""
    return (f"replicaPolicy Warn: spec.autoscaling up to {max_replicas} replicas without hooks.idempotency."
            "store_backend: redis: each replica dedups webhooks in its own SQLite store, so the same webhook can run "
            "the agent twice (exactly-once admission is NOT held). Set store_backend: redis and spec.redis to fix it.")


COALESCE_WARNING = (
    "replicaPolicy Warn: hooks with coalesce on more than one replica: the gateway records a coalesced delivery and "
    "answers 202 before its group runs, so a replica that stops with a group pending loses it (the provider's retry "
    "to another replica is answered deduplicated; exactly-once admission is NOT held). Remove coalesce or keep one "
    "replica to fix it."
)


def warnings(spec: Spec) -> list[str]:
    found: list[str] = []
    if _replicas(spec) > 1 and store_backend_of(_config(spec)) != "redis":
        found.append(warn_message(_replicas(spec)))
    if autoscales_past_one(spec) and store_backend_of(_config(spec)) != "redis":
        found.append(autoscaling_warn_message(autoscales_past_one(spec)))
    if runs_past_one(spec) and coalesced_hooks(_config(spec)):
        found.append(COALESCE_WARNING)
    channels = replica_state.channels_on_every_replica(_config(spec), spec.get("env"), _replicas(spec))
    if channels:
        found.append(replica_state.channel_warning(_replicas(spec), channels))
    return found


def violations(name: str, spec: Spec) -> list[str]:
    """Messages of every rule the object breaks, in rule order; empty when it is admissible."""
    subject = Subject(name, spec)
    return [rule.message for rule in RULES if not rule.holds(subject)]


class Measure(NamedTuple):
    depth: int      # deepest nesting seen (stops counting past the limit)
    too_deep: bool


def nesting_depth(value: Any, limit: int = MAX_CONFIG_DEPTH) -> Measure:
    """How deep ``value`` nests, without recursion (a hostile config may nest thousands of
    levels) and without walking further than one level past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (Mapping, list)):
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return Measure(deepest, True)
        children = node.values() if isinstance(node, Mapping) else node
        stack.extend((child, depth + 1) for child in children)
    return Measure(deepest, False)


def limit_violations(spec: Spec) -> list[str]:
    """The bounds CEL cannot check (depth and size of the free-form config)."""
    config = spec.get("config")
    measure = nesting_depth(config)
    if measure.too_deep:
        return [f"spec.config nests deeper than {MAX_CONFIG_DEPTH} levels; the gateway config needs far fewer"]
    size = len(json.dumps(config, ensure_ascii=False).encode())
    if size > MAX_CONFIG_BYTES:
        return [f"spec.config is {size} bytes; at most {MAX_CONFIG_BYTES} fit the gateway's ConfigMap"]
    return []
