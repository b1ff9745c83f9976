"""The GatewayDeployment API: names, defaults and the typed view of ``spec``.

The operator reads a few fields of the user's ``gateway.yaml`` (the idempotency store, the
turn lock) and keeps everything else as given; those typed reads live here so the rest of
the code never digs through raw dicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

GROUP = "gateway-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GatewayDeployment"
PLURAL = "gatewaydeployments"
SINGULAR = "gatewaydeployment"
SHORT_NAMES = ["gwd"]

FIELD_MANAGER = "gateway-operator"
MANAGED_BY = "gateway-operator"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"
ANNOTATION_APPLIED_HASH = f"{GROUP}/applied-hash"
ANNOTATION_SECRETS_REVISION = f"{GROUP}/secrets-revision"


GATEWAY_PORT = 8765
# a managed Redis's image when neither its spec nor the operator's --managed-redis-image names one
DEFAULT_MANAGED_REDIS_IMAGE = "redis:7.2-alpine"
REDIS_PASSWORD_ENV = "GATEWAY_REDIS_PASSWORD"
REDIS_USERNAME_ENV = "GATEWAY_REDIS_USERNAME"  # spec.redis.usernameSecretRef: an ACL user
# where a gateway pod finds spec.redis.tls.caSecretRef's PEM bundle (a read-only Secret volume)
REDIS_CA_DIR = "/etc/gateway-operator/redis-ca"
REDIS_CA_FILE = "ca.crt"
# spec.expose: how long the edge lets a request or a WebSocket run, and its affinity cookie
DEFAULT_EDGE_TIMEOUT_SECONDS = 3600
DEFAULT_AFFINITY_COOKIE = "gateway-replica"
AUTH_TOKEN_ENV = "GATEWAY_AUTH_TOKEN"
SESSION_KEY_ENV = "GATEWAY_SESSION_KEY"  # launcher.SESSION_KEY_ENV: the session history's Fernet key
# spec.drainSeconds: how long a stopping replica lets its in-flight webhook turns finish (a model
# turn can take minutes); the pod's grace period adds the preStop pause and the exit around it
DEFAULT_DRAIN_SECONDS = 120
PRESTOP_SECONDS = 5        # the Service and the edge stop sending to a terminating pod meanwhile
EXIT_MARGIN_SECONDS = 20   # WebSocket drain (at most 10 s) and releasing unfinished claims
IDEMPOTENCY_OWNER = "durability:idempotency"


class Policy:
    REFUSE = "Refuse"
    WARN = "Warn"


@dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, default_key: str) -> "SecretKeyRef | None":
        if not raw or not raw.get("name"):
            return None
        return cls(name=str(raw["name"]), key=str(raw.get("key") or default_key))


@dataclass(frozen=True)
class TLSOptions:
    """How a TLS connection to Redis checks the server (spec.redis.tls): against the CA bundle
    of ``ca_ref`` (else the system CAs), for the name ``server_name`` (else the host);
    ``insecure_skip_verify`` checks nothing and is reported (RedisTLSVerified=False)."""

    ca_ref: SecretKeyRef | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "TLSOptions":
        raw = raw or {}
        return cls(ca_ref=SecretKeyRef.parse(raw.get("caSecretRef"), REDIS_CA_FILE),
                   server_name=str(raw["serverName"]) if raw.get("serverName") else None,
                   insecure_skip_verify=bool(raw.get("insecureSkipVerify", False)))


@dataclass(frozen=True)
class RedisSpec:
    url: str | None = None
    host: str | None = None
    port: int = 6379
    db: int = 0
    password_ref: SecretKeyRef | None = None
    username_ref: SecretKeyRef | None = None   # an ACL user (with password_ref)
    prefix: str | None = None
    tls: bool = False
    tls_options: "TLSOptions" = field(default_factory=lambda: TLSOptions())
    managed: bool = False
    managed_image: str | None = None   # None: the operator's default (OperatorIdentity)
    managed_resources: Mapping[str, Any] = field(default_factory=dict)
    managed_persistence: "PersistenceSpec | None" = None   # AOF on a PVC when set

    @property
    def configured(self) -> bool:
        return bool(self.url or self.host or self.managed)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, replicas: int = 1) -> "RedisSpec":
        """``replicas``: a managed Redis persists by default when more than one replica shares it."""
        raw = raw or {}
        managed = raw.get("managed") or {}
        persistence = managed.get("persistence") or {}
        persist = persistence.get("enabled")
        persist = replicas > 1 if persist is None else bool(persist)
        return cls(
            url=raw.get("url") or None,
            host=raw.get("host") or None,
            port=int(raw.get("port", 6379)),
            db=int(raw.get("db", 0)),
            password_ref=SecretKeyRef.parse(raw.get("passwordSecretRef"), "password"),
            username_ref=SecretKeyRef.parse(raw.get("usernameSecretRef"), "username"),
            prefix=raw.get("prefix") or None,
            tls=bool((raw.get("tls") or {}).get("enabled", False)),
            tls_options=TLSOptions.parse(raw.get("tls")),
            managed=bool(managed.get("enabled", False)),
            managed_image=str(managed["image"]) if managed.get("image") else None,
            managed_resources=dict(managed.get("resources") or {}),
            managed_persistence=PersistenceSpec.parse({**persistence, "enabled": True}) if persist else None,
        )


@dataclass(frozen=True)
class HealthSpec:
    interval_seconds: float = 10.0
    timeout_seconds: float = 2.0
    max_concurrency: int = 8
    restart_stale_replicas: bool = True
    restart_cooldown_seconds: float = 60.0

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "HealthSpec":
        raw = raw or {}
        return cls(
            interval_seconds=float(raw.get("intervalSeconds", 10)),
            timeout_seconds=float(raw.get("timeoutSeconds", 2)),
            max_concurrency=int(raw.get("maxConcurrency", 8)),
            restart_stale_replicas=bool(raw.get("restartStaleReplicas", True)),
            restart_cooldown_seconds=float(raw.get("restartCooldownSeconds", 60)),
        )


@dataclass(frozen=True)
class PersistenceSpec:
    enabled: bool = False
    size: str = "1Gi"
    storage_class: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "PersistenceSpec":
        raw = raw or {}
        return cls(enabled=bool(raw.get("enabled", False)), size=str(raw.get("size", "1Gi")),
                   storage_class=raw.get("storageClassName"))


DEFAULT_SESSION_MESSAGES = 50
DEFAULT_SESSION_TTL_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class SessionsSpec:
    """Where webhook session history lives: ``redis`` (one history per session, shared by every
    replica; the default whenever spec.redis is set) or ``replica`` (each replica keeps one
    history per session in its memory; 0.1.16 alone keeps one agent history for every session)."""

    store: str | None = None    # None: redis when spec.redis is set, else replica
    max_messages: int = DEFAULT_SESSION_MESSAGES
    ttl_seconds: int = DEFAULT_SESSION_TTL_SECONDS
    key_ref: SecretKeyRef | None = None  # None: a key the operator generates once

    def effective(self, redis_configured: bool) -> str:
        return self.store or ("redis" if redis_configured else "replica")

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "SessionsSpec":
        raw = raw or {}
        return cls(store=raw.get("store") or None,
                   max_messages=int(raw.get("maxMessages", DEFAULT_SESSION_MESSAGES)),
                   ttl_seconds=int(raw.get("ttlSeconds", DEFAULT_SESSION_TTL_SECONDS)),
                   key_ref=SecretKeyRef.parse(raw.get("encryptionKeySecretRef"), "key"))


@dataclass(frozen=True)
class NetworkPolicySpec:
    """An optional NetworkPolicy for the gateway pods: only the listed namespaces (the edge's), the
    operator's health polls and the Service's clients in the same namespace reach port 8765."""

    enabled: bool = False
    from_namespaces: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "NetworkPolicySpec":
        raw = raw or {}
        return cls(enabled=bool(raw.get("enabled", False)),
                   from_namespaces=tuple(str(n) for n in raw.get("fromNamespaces") or ()))


@dataclass(frozen=True)
class IngressExpose:
    host: str
    class_name: str | None = None
    tls_secret: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteExpose:
    parent_refs: tuple[Mapping[str, Any], ...]
    hostnames: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExposeSpec:
    """How webhooks and WebSocket clients reach the replicas from outside the cluster."""

    ingress: IngressExpose | None = None
    http_route: RouteExpose | None = None
    timeout_seconds: int = DEFAULT_EDGE_TIMEOUT_SECONDS
    affinity_cookie: str = DEFAULT_AFFINITY_COOKIE

    @property
    def enabled(self) -> bool:
        return self.ingress is not None or self.http_route is not None

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host name a client outside may use (for the gateway's allowed origins)."""
        hosts = (self.ingress.host,) if self.ingress else ()
        return tuple(dict.fromkeys(hosts + (self.http_route.hostnames if self.http_route else ())))

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "ExposeSpec":
        raw = raw or {}
        ingress, route = raw.get("ingress"), raw.get("httpRoute")
        return cls(
            ingress=IngressExpose(
                host=str(ingress["host"]), class_name=ingress.get("className") or None,
                tls_secret=ingress.get("tlsSecretName") or None,
                annotations={str(k): str(v) for k, v in (ingress.get("annotations") or {}).items()},
            ) if ingress else None,
            http_route=RouteExpose(
                parent_refs=tuple(dict(r) for r in route.get("parentRefs") or []),
                hostnames=tuple(str(h) for h in route.get("hostnames") or []),
                annotations={str(k): str(v) for k, v in (route.get("annotations") or {}).items()},
            ) if route else None,
            timeout_seconds=int(raw.get("timeoutSeconds", DEFAULT_EDGE_TIMEOUT_SECONDS)),
            affinity_cookie=str(raw.get("affinityCookie") or DEFAULT_AFFINITY_COOKIE),
        )


@dataclass(frozen=True)
class GatewaySpec:
    """The typed, defaulted view of a GatewayDeployment's spec."""

    replicas: int
    policy: str
    image: str
    image_pull_policy: str | None
    image_pull_secrets: tuple[str, ...]
    config: Mapping[str, Any]
    redis: RedisSpec
    auth_token_ref: SecretKeyRef | None
    health: HealthSpec
    persistence: PersistenceSpec
    service_type: str
    service_port: int
    pod: Mapping[str, Any] = field(default_factory=dict)  # resources, env, nodeSelector, ...
    expose: ExposeSpec = field(default_factory=ExposeSpec)
    network_policy: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)
    drain_seconds: int = DEFAULT_DRAIN_SECONDS
    sessions: SessionsSpec = field(default_factory=SessionsSpec)

    @property
    def sessions_store(self) -> str:
        return self.sessions.effective(self.redis.configured)

    @property
    def store_backend(self) -> str:
        return store_backend_of(self.config)

    @property
    def turn_lock_backend(self) -> str | None:
        turn_lock = self.config.get("turn_lock")
        return turn_lock.get("backend") if isinstance(turn_lock, Mapping) else None

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> "GatewaySpec":
        """Raises ValueError (or TypeError) naming the field when a field the operator reads
        has the wrong shape (the CRD's schema normally refuses that at admission)."""
        config = spec.get("config") or {}
        if not isinstance(config, Mapping):
            raise ValueError("spec.config must be a mapping")
        for section in ("gateway", "push", "turn_lock", "hooks"):
            if config.get(section) is not None and not isinstance(config[section], Mapping):
                raise ValueError(f"spec.config.{section} must be a mapping")
        service = spec.get("service") or {}
        return cls(
            replicas=int(spec.get("replicas", 1)),
            policy=str(spec.get("replicaPolicy", Policy.REFUSE)),
            image=str(spec.get("image") or ""),
            image_pull_policy=spec.get("imagePullPolicy"),
            image_pull_secrets=tuple(s["name"] for s in spec.get("imagePullSecrets") or [] if s.get("name")),
            config=dict(spec.get("config") or {}),
            redis=RedisSpec.parse(spec.get("redis"), int(spec.get("replicas", 1))),
            auth_token_ref=SecretKeyRef.parse(spec.get("authTokenSecretRef"), "token"),
            health=HealthSpec.parse(spec.get("health")),
            persistence=PersistenceSpec.parse(spec.get("persistence")),
            service_type=str(service.get("type", "ClusterIP")),
            service_port=int(service.get("port", GATEWAY_PORT)),
            pod={k: spec[k] for k in ("resources", "env", "nodeSelector", "tolerations", "affinity",
                                       "topologySpreadConstraints", "priorityClassName",
                                       "podAnnotations", "podLabels") if spec.get(k)},
            expose=ExposeSpec.parse(spec.get("expose")),
            network_policy=NetworkPolicySpec.parse(spec.get("networkPolicy")),
            drain_seconds=int(spec.get("drainSeconds", DEFAULT_DRAIN_SECONDS)),
            sessions=SessionsSpec.parse(spec.get("sessions")),
        )


def store_backend_of(config: Mapping[str, Any]) -> str:
    """``hooks.idempotency.store_backend`` of a documented gateway.yaml; sqlite when unset."""
    hooks = config.get("hooks")
    if isinstance(hooks, Mapping):
        idem = hooks.get("idempotency")
        if isinstance(idem, Mapping) and idem.get("store_backend"):
            return str(idem["store_backend"])
    return "sqlite"


def default_prefix(namespace: str, name: str) -> str:
    """Redis key prefix for one GatewayDeployment: namespace and name are immutable, so the
    prefix never changes for the life of the resource, and two environments sharing one
    Redis never share keys."""
    return f"gwop:{namespace}:{name}:"


def labels_for(name: str, component: str = "gateway") -> dict[str, str]:
    return {LABEL_NAME: "praisonai-gateway", LABEL_INSTANCE: name,
            LABEL_COMPONENT: component, LABEL_MANAGED_BY: MANAGED_BY}


def selector_for(name: str, component: str = "gateway") -> dict[str, str]:
    return {LABEL_INSTANCE: name, LABEL_COMPONENT: component, LABEL_MANAGED_BY: MANAGED_BY}
