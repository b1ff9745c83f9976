"""The GatewayDeployment API: names, defaults and the typed view of ``spec``. Its rules sit beside
it in this package: fields.py (how a field is declared), validation.py (each rule once: CEL +
Python + one message), crd.py (the CRD, built from both), reasons.py, tenancy.py (the
administrator's policy), redis_target.py (spec.redis -> where Redis is), redis_acl.py and
pod_schemas.py. Pure, like the core.

Each field of the spec is declared once, here, in its dataclass field's metadata (fields.py):
JSON name, type, default, bounds or allowed values, description. The CRD's schema (crd.py),
``parse`` with its defaults, and docs/reference.md's table (hack/api-reference.py) all come
from those declarations.

The operator reads a few fields of the user's ``gateway.yaml`` (the idempotency store, the
turn lock) and keeps everything else as given; those typed reads live here so the rest of
the code never digs through raw dicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from gateway_operator.api import fields
from gateway_operator.pod import gwop_contract as contract

GROUP = "gateway-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GatewayDeployment"
PLURAL = "gatewaydeployments"
# the routes spec.expose writes (and whose hosts the tenancy rule reads from others)
INGRESS_API = ("networking.k8s.io/v1", "Ingress")
ROUTE_API = ("gateway.networking.k8s.io/v1", "HTTPRoute")
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
ANNOTATION_TEMPLATE_HASH = f"{GROUP}/template-hash"  # on the Deployment: its pod template's fingerprint


GATEWAY_PORT = contract.GATEWAY_PORT
# the launcher's long-poll GET /health (pod/gwop_watch.py): only the operator asks it
WATCH_PORT = contract.WATCH_PORT
# a managed Redis's image when neither its spec nor the operator's --managed-redis-image names one
DEFAULT_MANAGED_REDIS_IMAGE = "redis:7.2-alpine"
REDIS_PASSWORD_ENV = contract.REDIS_PASSWORD_ENV
REDIS_USERNAME_ENV = contract.REDIS_USERNAME_ENV  # spec.redis.usernameSecretRef: an ACL user
# where a gateway pod finds spec.redis.tls.caSecretRef's PEM bundle (a read-only Secret volume)
REDIS_CA_DIR = "/etc/gateway-operator/redis-ca"
REDIS_CA_FILE = "ca.crt"
MAX_HOST_LENGTH = 253  # a DNS name: spec.redis.host, a URL's host, spec.redis.tls.serverName
# spec.expose: how long the edge lets a request or a WebSocket run, and its affinity cookie
DEFAULT_EDGE_TIMEOUT_SECONDS = 3600
DEFAULT_AFFINITY_COOKIE = "gateway-replica"
AUTH_TOKEN_ENV = contract.AUTH_TOKEN_ENV
SESSION_KEY_ENV = contract.SESSION_KEY_ENV  # the session history's Fernet key
# spec.redis.failClosedSeconds and claimLeaseSeconds (the launcher's idempotency_guard section)
DEFAULT_FAIL_CLOSED_SECONDS = 30
DEFAULT_CLAIM_LEASE_SECONDS = 60
# a dead holder's claim must free within 90 s (issue 56): the lease plus the pod's own margins fit in it
MIN_CLAIM_LEASE_SECONDS, MAX_CLAIM_LEASE_SECONDS = 10, 60
# spec.redis.recordTTLSeconds: how long a recorded webhook stays deduplicated (the gateway's own 24 h is
# shorter than the retries of several providers, e.g. Stripe's 3 days: docs/redis.md has the table)
DEFAULT_RECORD_TTL_SECONDS = 72 * 3600
MIN_RECORD_TTL_SECONDS, MAX_RECORD_TTL_SECONDS = 3600, 7 * 24 * 3600
# spec.maxRequestBodyBytes: the largest webhook body a replica reads (a bigger one is answered 413)
DEFAULT_MAX_REQUEST_BODY_BYTES = 1024 * 1024
MAX_REQUEST_BODY_BYTES = 32 * 1024 * 1024
# spec.drainSeconds: how long a stopping replica lets its in-flight webhook turns finish (a model
# turn can take minutes); the pod's grace period adds the preStop pause and the exit around it
DEFAULT_DRAIN_SECONDS = 120
PRESTOP_SECONDS = 5        # the Service and the edge stop sending to a terminating pod meanwhile
EXIT_MARGIN_SECONDS = 20   # WebSocket drain (at most 10 s) and releasing unfinished claims
IDEMPOTENCY_OWNER = "durability:idempotency"
# the pod condition the operator sets on each Redis-backed replica (spec.health.readinessGate): False
# while that replica cannot reach Redis and another one can (it leaves the Service and the edge)
READINESS_GATE = f"{GROUP}/redis-reachable"


class Policy:
    REFUSE = "Refuse"
    WARN = "Warn"


# spec.autoscaling: the HPA's bounds, and how long its scale-down period may be (autoscaling/v2
# refuses a policy's periodSeconds over 1800): a pod's grace period must fit in one period, so
# that scale-in never has two pods draining at once (render.autoscaling.autoscaler)
MAX_AUTOSCALING_REPLICAS = 100
DEFAULT_MAX_REPLICAS = 4
HPA_MAX_PERIOD_SECONDS = 1800
# the longest spec.drainSeconds autoscaling accepts: its grace period (drain + preStop + exit) is one period
MAX_AUTOSCALING_DRAIN_SECONDS = HPA_MAX_PERIOD_SECONDS - PRESTOP_SECONDS - EXIT_MARGIN_SECONDS
# spec.autoscaling.target.metric -> the per-pod metric a metrics adapter (prometheus-adapter) serves
# on the custom metrics API, and the gateway's own series (its token-protected GET /metrics) it sums:
# 0.1.16's admission gate (on by default: its "production" reliability posture on a non-loopback
# bind) exports the turns it runs and those waiting for a slot as gauges at every scrape. The
# histograms gateway_queue_wait_seconds and gateway_turn_latency_seconds are declared by 0.1.16's
# registry but never observed, so they have no series to scale on (docs/autoscaling.md).
AUTOSCALING_METRICS = {"turnsInFlight": ("gateway_turns_in_flight", ("admission_in_flight", "admission_queued"))}
DEFAULT_AUTOSCALING_METRIC = "turnsInFlight"
# three turns per replica: below the smallest admission ceiling 0.1.16 picks by itself (max(4, 4 x
# CPUs)), so replicas are added before turns queue for a slot
DEFAULT_TURNS_TARGET = "3"
# a positive decimal with at most three decimals (a Kubernetes quantity the HPA takes as it is)
AVERAGE_VALUE_PATTERN = r"^(0\.[0-9]{0,2}[1-9]|[1-9][0-9]{0,5}(\.[0-9]{1,3})?)$"
# spec.podMonitor.interval: a Prometheus duration in seconds or minutes
SCRAPE_INTERVAL_PATTERN = r"^[1-9][0-9]{0,3}(s|m)$"


@dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, default_key: str) -> "SecretKeyRef | None":
        if not raw or not raw.get("name"):
            return None
        return cls(name=str(raw["name"]), key=str(raw.get("key") or default_key))


def _or_none(value: Any) -> Any:
    return value or None


def _str_or_none(value: Any) -> str | None:
    return str(value) if value else None


def _secret(name: str, what: str, key: str, default: str = "none") -> fields.Prop:
    """A Secret reference (same namespace): ``what`` it holds, its key's default, what applies without it."""
    return fields.built(name, "secret", what, lambda raw: SecretKeyRef.parse(raw, key), secret_key=key,
                        secret_default=default)


QUANTITIES = "quantities such as '500m', '0.5', 1 or '256Mi' (a string or an integer: quote a fraction)"
_SIZE = fields.scalar("size", "string", "Requested size, a quantity such as 1Gi. Default {default}.", "1Gi",
                      convert=str)


@dataclass(frozen=True)
class RedisTLSSpec(fields.Section):
    """spec.redis.tls as written; ``RedisSpec.tls`` and ``tls_options`` are what the rest reads."""

    enabled: bool = fields.api(fields.scalar("enabled", "boolean", "Connect with TLS (rediss://). Default {default}.",
                                             False, convert=bool))
    ca_ref: SecretKeyRef | None = fields.api(_secret(
        "caSecretRef", "the PEM bundle of the CA that signed the Redis server's certificate, mounted read-only into "
        "the gateway pods", REDIS_CA_FILE, "the system's CAs"))
    server_name: str | None = fields.api(fields.scalar(
        "serverName", "string", "The DNS name the server's certificate must carry, and the SNI sent, when it differs "
        "from the host (e.g. a Redis reached by IP address). Default: the host.", convert=_str_or_none,
        max_length=MAX_HOST_LENGTH))
    insecure_skip_verify: bool = fields.api(fields.scalar(
        "insecureSkipVerify", "boolean", "Accept any server certificate (no CA, no name checked). Reported as "
        "RedisTLSVerified=False and a Warning Event. Default {default}.", False, convert=bool))


@dataclass(frozen=True)
class TLSOptions:
    """How a TLS connection to Redis checks the server (spec.redis.tls): against the CA bundle
    of ``ca_ref`` (else the system CAs), for the name ``server_name`` (else the host);
    ``insecure_skip_verify`` checks nothing and is reported (RedisTLSVerified=False)."""

    ca_ref: SecretKeyRef | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class PersistenceSpec(fields.Section):
    """spec.persistence: the single replica's SQLite state directory on a PVC."""

    enabled: bool = fields.api(fields.scalar("enabled", "boolean", "Keep the SQLite store on a PVC. Default {default}.",
                                             False, convert=bool))
    size: str = fields.api(_SIZE)
    storage_class: str | None = fields.api(fields.scalar("storageClassName", "string",
                                                         "Storage class. Default: the cluster's default class."))


@dataclass(frozen=True)
class ManagedPersistenceSpec(fields.Section):
    """spec.redis.managed.persistence as written (``enabled`` None: by the replica count)."""

    enabled: bool | None = fields.api(fields.scalar(
        "enabled", "boolean", "AOF on a PVC. Default: true when spec.replicas > 1 or spec.autoscaling may run more "
        "than one (maxReplicas > 1): several replicas share the records; false for one replica; false opts out.", convert=lambda v: None if v is None else bool(v)))
    size: str = fields.api(_SIZE)
    storage_class: str | None = fields.api(fields.scalar(
        "storageClassName", "string", "Storage class. Default: the cluster's default.", max_length=253))


@dataclass(frozen=True)
class ManagedRedisSpec(fields.Section):
    """spec.redis.managed as written; RedisSpec.managed, managed_image, ... are what the rest reads."""

    enabled: bool = fields.api(fields.scalar("enabled", "boolean", "Create and wire a Redis. Default {default}.",
                                             False, convert=bool))
    image: str | None = fields.api(fields.scalar(   # None: the operator's default (OperatorIdentity)
        "image", "string", "Redis image, at most {max_length} characters. Default: the operator's "
        f"--managed-redis-image (chart value managedRedis.image, {DEFAULT_MANAGED_REDIS_IMAGE} unless set).",
        convert=_str_or_none, max_length=1024))
    resources: Mapping[str, Any] = fields.api(fields.built(
        "resources", "resources", f"Resources of the Redis container: requests and limits, {QUANTITIES}. Default none.",
        lambda raw: dict(raw or {})))
    persistence: ManagedPersistenceSpec = fields.api(fields.section(
        "persistence", ManagedPersistenceSpec, "Keep the managed Redis's data (the dedup records) across a "
        "Redis pod restart: append-only file on a PersistentVolumeClaim. Without it a restarted managed Redis forgets "
        "admitted webhooks (reported as DedupHistoryLost). Default: on when spec.replicas > 1, or with "
        "spec.autoscaling.maxReplicas > 1."))


@dataclass(frozen=True)
class RedisSpec(fields.Section):
    url: str | None = fields.api(fields.scalar(
        "url", "string", "redis://host:port/db or rediss://host:port/db (port 1-65535, db 0-15), without credentials; "
        "at most {max_length} characters. Default: none.", convert=_or_none, max_length=2048))
    host: str | None = fields.api(fields.scalar(
        "host", "string", "Redis host (DNS name or IP address), instead of url; at most {max_length} characters. "
        "Default: none.", convert=_or_none, max_length=MAX_HOST_LENGTH))
    port: int = fields.api(fields.scalar("port", "integer", "Redis port (with host), {range}. Default {default}.",
                                         6379, convert=int, minimum=1, maximum=65535))
    db: int = fields.api(fields.scalar("db", "integer", "Redis database number (with host), {range}. Default "
                                       "{default}.", 0, convert=int, minimum=0, maximum=15))
    password_ref: SecretKeyRef | None = fields.api(_secret("passwordSecretRef", "the Redis password", "password"))
    prefix: str | None = fields.api(fields.scalar(
        "prefix", "string", "Key prefix: letters, digits and . _ : -, 1-{max_length} characters. Default "
        "gwop:<namespace>:<name>: so environments sharing one Redis never collide.", convert=_or_none,
        max_length=100))
    username_ref: SecretKeyRef | None = fields.api(_secret(   # an ACL user (with password_ref)
        "usernameSecretRef", "the Redis ACL user name (with passwordSecretRef; url or host only)", "username"))
    tls_spec: RedisTLSSpec = fields.api(fields.section("tls", RedisTLSSpec, "TLS to Redis (url or host). Default: off."))
    managed_spec: ManagedRedisSpec = fields.api(fields.section(
        "managed", ManagedRedisSpec, "An operator-managed Redis for this gateway. Default: off."))
    fail_closed_seconds: int = fields.api(fields.scalar(
        "failClosedSeconds", "integer", "While a replica cannot ask Redis (an outage, a stall, a partition, a Redis "
        "that refuses writes), it answers each new webhook 503 with Retry-After for this long, so the provider "
        "retries instead of the message running twice; past it the replica admits webhooks without Redis (the "
        "gateway's fail-open, announced by IdempotencyDegraded RuntimeOutage) and writes them to Redis once it "
        "answers. 0 fails open at once. {range} seconds. Default {default}.", DEFAULT_FAIL_CLOSED_SECONDS,
        convert=int, format="int32", minimum=0, maximum=600))
    claim_lease_seconds: int = fields.api(fields.scalar(
        "claimLeaseSeconds", "integer", "The lease of a webhook's in-flight claim in Redis, renewed by its replica "
        "while the turn runs: a replica killed, force-deleted or cut off mid-turn frees its claims within this, "
        "and the provider's retry runs the message elsewhere (0.1.16 alone: 900 s). "
        f"{MIN_CLAIM_LEASE_SECONDS}-{MAX_CLAIM_LEASE_SECONDS} seconds, so that a dead holder's claim frees within "
        "90 s. Default {default}.", DEFAULT_CLAIM_LEASE_SECONDS, convert=int, format="int32",
        minimum=MIN_CLAIM_LEASE_SECONDS))
    record_ttl_seconds: int = fields.api(fields.scalar(
        "recordTTLSeconds", "integer", "How long a webhook that ran stays recorded, so that the provider's "
        "redelivery of it is answered deduplicated instead of running again: set it longer than the longest retry "
        "window of the providers that call the hooks (Stripe retries for up to 3 days; docs/redis.md lists others). "
        "Each record costs Redis about 150 bytes for this long. Also the window IdempotencyDegraded keeps open after "
        "the records were lost (DedupHistoryLost, AdmissionsNotRecorded). {range} seconds. Default {default} "
        "(72 hours; 0.1.16 alone: 86400).", DEFAULT_RECORD_TTL_SECONDS, convert=int, format="int32",
        minimum=MIN_RECORD_TTL_SECONDS, maximum=MAX_RECORD_TTL_SECONDS))
    managed_persistence: "PersistenceSpec | None" = None   # AOF on a PVC when set (by parse, from replicas)

    @property
    def tls(self) -> bool:
        return self.tls_spec.enabled

    @property
    def tls_options(self) -> TLSOptions:
        return TLSOptions(self.tls_spec.ca_ref, self.tls_spec.server_name, self.tls_spec.insecure_skip_verify)

    @property
    def managed(self) -> bool:
        return self.managed_spec.enabled

    @property
    def managed_image(self) -> str | None:
        return self.managed_spec.image

    @property
    def managed_resources(self) -> Mapping[str, Any]:
        return self.managed_spec.resources

    @property
    def configured(self) -> bool:
        return bool(self.url or self.host or self.managed)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, replicas: int = 1) -> "RedisSpec":
        """``replicas``: the most replicas that may share it (GatewaySpec.replicas_at_most); a managed
        Redis persists by default when that is more than one."""
        spec = fields.parse(cls, raw)
        persistence = spec.managed_spec.persistence
        persist = replicas > 1 if persistence.enabled is None else persistence.enabled
        return replace(spec, managed_persistence=PersistenceSpec(True, persistence.size, persistence.storage_class)
                       if persist else None)


@dataclass(frozen=True)
class HealthSpec(fields.Section):
    interval_seconds: float = fields.api(fields.scalar(
        "intervalSeconds", "integer", "Seconds between polls, {range}. With the launcher's health watch (port 8766), "
        "the longest a replica stays unheard: a change is heard at once. Default {default}.", 10, convert=float,
        minimum=1, maximum=3600))
    timeout_seconds: float = fields.api(fields.scalar(
        "timeoutSeconds", "integer", "Timeout of one poll in seconds, {range}. Default {default}.", 2, convert=float,
        minimum=1, maximum=60))
    max_concurrency: int = fields.api(fields.scalar(
        "maxConcurrency", "integer", "Replicas polled at once, {range}. Default {default}.", 8, convert=int,
        minimum=1, maximum=100))
    restart_stale_replicas: bool = fields.api(fields.scalar(
        "restartStaleReplicas", "boolean", "Restart, one at a time, replicas stuck on the build-time SQLite fallback "
        "once they say (GET /health) that they reach Redis themselves. Default {default}.", True, convert=bool))
    restart_cooldown_seconds: float = fields.api(fields.scalar(
        "restartCooldownSeconds", "integer", "Minimum seconds between two such restarts, {range}. Default {default}.",
        60, convert=float, minimum=0))
    readiness_gate: bool = fields.api(fields.scalar(
        "readinessGate", "boolean", "Redis store only: each pod gets the readiness gate "
        "gateway-operator.dev/redis-reachable, which the operator sets False while that replica says (GET /health) it "
        "cannot reach Redis and another replica has reached it for a while (a partition, not an outage of Redis), so "
        "that replica leaves the Service and the edge instead of admitting webhooks it cannot deduplicate, and True "
        "again once it reaches Redis. A pod is then Ready only once the operator has polled it. Default {default}.",
        True, convert=bool))


@dataclass(frozen=True)
class SessionsSpec(fields.Section):
    """Where webhook session history lives: ``redis`` (one history per session, shared by every
    replica; the default whenever spec.redis is set) or ``replica`` (each replica keeps one
    history per session in its memory; 0.1.16 alone keeps one agent history for every session)."""

    store: str | None = fields.api(fields.scalar(   # None: redis when spec.redis is set, else replica
        "store", "string", "redis: one history per session in the GatewayDeployment's Redis (<prefix>session:<hash>), "
        "shared by every replica, turns of one session run one after another; replica: each replica keeps one history "
        "per session in its memory (lost when the pod restarts; a conversation that reaches two replicas splits). "
        "Default: redis when spec.redis is set, else replica.", convert=_or_none, enum=["redis", "replica"]))
    max_messages: int = fields.api(fields.scalar(
        "maxMessages", "integer", "Messages kept per session, {range}. Default {default}.", 50, convert=int,
        format="int32", minimum=2, maximum=10000))
    key_ref: SecretKeyRef | None = fields.api(_secret(   # None: a key the operator generates once
        "encryptionKeySecretRef", "the Fernet key (32 url-safe base64-encoded bytes) the session history is encrypted "
        "with at rest (praisonaiagents' EncryptedSessionStore: message content is encrypted; roles, the session key's "
        "hash and the list order are not)", "key", "a key the operator generates once in the Secret <name>-session-key"))
    ttl_seconds: int = fields.api(fields.scalar(
        "ttlSeconds", "integer", "How long an idle session's history is kept, {range} seconds. Default {default}.",
        7 * 24 * 3600, convert=int, format="int32", minimum=60, maximum=31536000))

    max_sessions: int = fields.api(fields.scalar(
        "maxSessions", "integer", "Sessions whose history Redis keeps, {range}; past it the least recently used "
        "histories are deleted (their conversations start afresh), so that session history stays within about "
        "maxSessions x maxMessages x the size of a message and cannot fill the memory the dedup records need. "
        "Default {default}.", 10_000, convert=int, format="int32", minimum=1, maximum=10_000_000))

    def effective(self, redis_configured: bool) -> str:
        return self.store or ("redis" if redis_configured else "replica")


@dataclass(frozen=True)
class ServiceSpec(fields.Section):
    """spec.service: the Service in front of the replicas."""

    type: str = fields.api(fields.scalar("type", "string", "{default} (default), NodePort or LoadBalancer.",
                                         "ClusterIP", convert=str, enum=["ClusterIP", "NodePort", "LoadBalancer"]))
    port: int = fields.api(fields.scalar("port", "integer", "Service port, {range}. Default {default}.", GATEWAY_PORT,
                                         convert=int, minimum=1, maximum=65535))


@dataclass(frozen=True)
class NetworkPolicySpec(fields.Section):
    """An optional NetworkPolicy for the gateway pods: only the listed namespaces (the edge's), the
    operator's health polls and the Service's clients in the same namespace reach port 8765."""

    enabled: bool = fields.api(fields.scalar("enabled", "boolean", "Write the policy. Default {default}.", False,
                                             convert=bool))
    from_namespaces: tuple[str, ...] = fields.api(fields.array(
        "fromNamespaces", "Namespaces whose pods may reach the gateways too, e.g. the ingress controller's. "
        "Default none.", fields.scalar("", "string", "A namespace name.", min_length=1, max_length=63,
                                       pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        lambda raw: tuple(str(n) for n in raw or ()), max_items=32))


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
class AutoscalingTargetSpec(fields.Section):
    """spec.autoscaling.target: the load each replica should carry on average."""

    metric: str = fields.api(fields.scalar(
        "metric", "string", "turnsInFlight (the default): webhook and channel turns a replica runs or holds for an "
        "admission slot (the gateway's admission_in_flight + admission_queued, served per pod as "
        "gateway_turns_in_flight by a metrics adapter such as prometheus-adapter: docs/autoscaling.md).",
        DEFAULT_AUTOSCALING_METRIC, convert=str, enum=list(AUTOSCALING_METRICS)))
    average_value: str = fields.api(fields.scalar(
        "averageValue", "string", "The average of the metric per replica the autoscaler keeps, a positive decimal "
        "(at most three decimals), e.g. '3' turns. Keep it below the gateway's admission ceiling "
        "(config.gateway.max_concurrent_runs; 0.1.16's own default is 4 per CPU, at least 4) so that replicas are "
        "added before turns wait. Default {default}.", DEFAULT_TURNS_TARGET, convert=str,
        pattern=AVERAGE_VALUE_PATTERN))


@dataclass(frozen=True)
class AutoscalingSpec(fields.Section):
    """spec.autoscaling: an HorizontalPodAutoscaler the operator renders against this
    GatewayDeployment's own /scale, so that every guard of the replica policy still applies."""

    enabled: bool = fields.api(fields.scalar(
        "enabled", "boolean", "Render the autoscaler (autoscaling/v2 HorizontalPodAutoscaler <name>): it writes "
        "spec.replicas through the /scale subresource, within minReplicas and maxReplicas; leave spec.replicas out "
        "of what you apply while it is on. Default {default}.", False, convert=bool))
    min_replicas: int = fields.api(fields.scalar(
        "minReplicas", "integer", "The fewest replicas, {range}. Default {default}.", 1, convert=int, format="int32",
        minimum=1, maximum=MAX_AUTOSCALING_REPLICAS))
    max_replicas: int = fields.api(fields.scalar(
        "maxReplicas", "integer", "The most replicas, {range}, at least minReplicas. More than one needs "
        "config.hooks.idempotency.store_backend: redis under replicaPolicy Refuse, as spec.replicas does. "
        "Default {default}.", DEFAULT_MAX_REPLICAS, convert=int, format="int32", minimum=1,
        maximum=MAX_AUTOSCALING_REPLICAS))
    target: AutoscalingTargetSpec = fields.api(fields.section(
        "target", AutoscalingTargetSpec, "The gateway's own load the autoscaler follows. Defaults below."))


@dataclass(frozen=True)
class PodMonitorSpec(fields.Section):
    """spec.podMonitor: the scrape of the gateway pods' /metrics, for the Prometheus operator."""

    enabled: bool | None = fields.api(fields.scalar(   # None: with spec.autoscaling.enabled
        "enabled", "boolean", "Write a PodMonitor (monitoring.coreos.com/v1) <name> that scrapes every gateway pod's "
        "GET /metrics with the gateway auth token as a bearer token, read by Prometheus from the auth Secret "
        "(authTokenSecretRef, else <name>-gateway-auth), never copied into a spec; skipped where the cluster serves "
        "no PodMonitor (no prometheus-operator). Default: true when spec.autoscaling.enabled, else false.",
        convert=lambda v: None if v is None else bool(v)))
    interval: str = fields.api(fields.scalar(
        "interval", "string", "How often Prometheus scrapes each pod, e.g. 15s or 1m. Default {default}.", "15s",
        convert=str, pattern=SCRAPE_INTERVAL_PATTERN))
    labels: Mapping[str, str] = fields.api(fields.built(
        "labels", "map", "Extra labels on the PodMonitor (what a Prometheus' podMonitorSelector matches). "
        "Default none.", lambda raw: {str(k): str(v) for k, v in (raw or {}).items()}))


def _pod(name: str, description: str) -> fields.Prop:
    """A pod field, typed as the pinned Kubernetes publishes it (crd.py: pod_schemas.py)."""
    return fields.built(name, name, description, fields.as_written)


@dataclass(frozen=True)
class GatewaySpec:
    """The typed, defaulted view of a GatewayDeployment's spec (its fields in the CRD's order)."""

    replicas: int = fields.api(fields.scalar(
        "replicas", "integer", "Number of gateway replicas, {range}. Default {default}. More than one needs "
        "config.hooks.idempotency.store_backend: redis under replicaPolicy Refuse.", 1, convert=int, format="int32",
        minimum=0, maximum=100))
    policy: str = fields.api(fields.scalar(
        "replicaPolicy", "string", "{default} (default): refuse replicas > 1 without a shared Redis idempotency store. "
        "Warn: run them and report that exactly-once webhook admission is not held.", Policy.REFUSE, convert=str,
        enum=[Policy.REFUSE, Policy.WARN]))
    autoscaling: AutoscalingSpec = fields.api(fields.section(
        "autoscaling", AutoscalingSpec, "Scale the replicas on the gateway's own load (turns in flight per replica) "
        "with an HorizontalPodAutoscaler against this GatewayDeployment's /scale, and a scale-down slow enough for "
        "every stopping replica to drain its turns first (docs/autoscaling.md). Default: off.",
        validations="spec.autoscaling"))
    pod_monitor: PodMonitorSpec = fields.api(fields.section(
        "podMonitor", PodMonitorSpec, "The Prometheus operator's scrape of the gateway pods' /metrics (what the "
        "autoscaler's metric comes from). Default: with spec.autoscaling."))
    sessions: SessionsSpec = fields.api(fields.section(
        "sessions", SessionsSpec, "Where the history of webhook sessions (the hook's session_key) lives. Default: "
        "store redis when spec.redis is set, else replica."))
    drain_seconds: int = fields.api(fields.scalar(
        "drainSeconds", "integer", "How long a stopping replica (rolling update, scale-in, eviction, drain) lets its "
        "in-flight webhook turns finish, {range} seconds. It first leaves the Service and the edge "
        f"({PRESTOP_SECONDS} s preStop pause), then stops taking requests, waits for the turns, and releases the "
        "dedup claim of any turn it could not finish so that the provider's retry runs it on another replica. The "
        f"pods' terminationGracePeriodSeconds is this plus {PRESTOP_SECONDS + EXIT_MARGIN_SECONDS}. Default "
        "{default}.", DEFAULT_DRAIN_SECONDS, convert=int, format="int32", minimum=1, maximum=3600))
    max_request_body_bytes: int = fields.api(fields.scalar(
        "maxRequestBodyBytes", "integer", "The largest webhook request body (POST /hooks/<path>) a replica reads, "
        "{range} bytes: a bigger one is answered 413 before the gateway reads it (by its Content-Length, or once "
        "that many bytes arrived). Raise it for providers that send large payloads (GitHub caps its own at 25 MB). "
        "Default {default} (1 MiB).", DEFAULT_MAX_REQUEST_BODY_BYTES, convert=int, format="int32", minimum=1024,
        maximum=MAX_REQUEST_BODY_BYTES))
    image: str = fields.api(fields.scalar(
        "image", "string", "Required. Gateway container image (praisonai-bot[gateway] 0.1.16 with python3); "
        "1-{max_length} characters.", convert=lambda v: str(v or ""), required=True, min_length=1, max_length=1024))
    image_pull_policy: str | None = fields.api(fields.scalar(
        "imagePullPolicy", "string", "Always, IfNotPresent or Never. Default: Kubernetes' (Always for :latest, "
        "IfNotPresent otherwise).", enum=["Always", "IfNotPresent", "Never"]))
    image_pull_secrets: tuple[str, ...] = fields.api(fields.built(
        "imagePullSecrets", "imagePullSecrets", "Secrets (in the same namespace) for pulling the image, as in a pod "
        "spec: [{name}], names unique. Default none.",
        lambda raw: tuple(s["name"] for s in raw or [] if s.get("name"))))
    # the gateway's own gateway.yaml: crd.config_schema() types it and says what it is (with validation's limits)
    config: Mapping[str, Any] = fields.api(fields.built("config", "config", "", lambda raw: dict(raw or {}),
                                                        required=True))
    redis: RedisSpec = fields.api(fields.section(
        "redis", RedisSpec, "Redis for the shared idempotency store and turn lock; the operator writes it into "
        "push.redis. Set exactly one of url, host or managed.enabled. Default: none.", validations="spec.redis"))
    auth_token_ref: SecretKeyRef | None = fields.api(_secret(
        "authTokenSecretRef", f"the gateway auth token ({AUTH_TOKEN_ENV}), which the gateway needs to bind beyond "
        "loopback", "token", "a token the operator generates once in the Secret <name>-gateway-auth"))
    health: HealthSpec = fields.api(fields.section(
        "health", HealthSpec, "How the operator polls each ready replica's GET /health. Defaults below."))
    persistence: PersistenceSpec = fields.api(fields.section(
        "persistence", PersistenceSpec, "A PersistentVolumeClaim for the single replica's SQLite state directory "
        "(one replica only). Default: off."))
    service: ServiceSpec = fields.api(fields.section("service", ServiceSpec, "The Service in front of the replicas. "
                                                     "Defaults below."))
    # Ingress and HTTPRoute: crd._expose_schema() and ExposeSpec.parse (their defaults named above)
    expose: ExposeSpec = fields.api(fields.built("expose", "expose", "", lambda raw: ExposeSpec.parse(raw)))
    network_policy: NetworkPolicySpec = fields.api(fields.section(
        "networkPolicy", NetworkPolicySpec, "A NetworkPolicy for the gateway pods (<name>-gateway): port 8765 only "
        "from pods of this namespace (the Service's clients), the operator's pods (its health polls) and the "
        "namespaces listed (the edge's); port 8766 (the launcher's health watch) only from the operator's pods. "
        "Binds where the network plugin enforces NetworkPolicy. Default: off (no policy for the gateway pods)."))
    pod: Mapping[str, Any] = fields.api(fields.group(  # those set, as written
        dict,
        _pod("resources", f"Gateway container resources: requests and limits, {QUANTITIES}. Default none."),
        fields.built("env", "env", "", fields.as_written),  # crd._env(): with validation's reserved names and limits
        _pod("nodeSelector", "Pod node selector: labels a node must carry. Default none."),
        _pod("tolerations", "Pod tolerations (key, operator Equal or Exists, value, effect NoSchedule, "
             "PreferNoSchedule or NoExecute, tolerationSeconds). Default none."),
        _pod("affinity", "Pod scheduling constraints: nodeAffinity, podAffinity, podAntiAffinity. Default none."),
        _pod("topologySpreadConstraints", "How the replicas spread across topology domains (maxSkew >= 1, "
             "topologyKey, whenUnsatisfiable DoNotSchedule or ScheduleAnyway), unique by topologyKey and "
             "whenUnsatisfiable. Default none."),
        _pod("priorityClassName", "PriorityClass of the gateway pods. Default: none (the cluster's global default, "
             "else priority 0)."),
        fields.built("podAnnotations", "map", "Extra pod annotations. Default none.", fields.as_written),
        fields.built("podLabels", "map", "Extra pod labels (the operator's own labels win). Default none.", fields.as_written)))

    @property
    def service_type(self) -> str:
        return self.service.type

    @property
    def service_port(self) -> int:
        return self.service.port

    @property
    def pod_monitor_enabled(self) -> bool:
        """A PodMonitor is rendered: asked for, or (unset) with autoscaling."""
        enabled = self.pod_monitor.enabled
        return self.autoscaling.enabled if enabled is None else enabled

    @property
    def sessions_store(self) -> str:
        return self.sessions.effective(self.redis.configured)

    @property
    def store_backend(self) -> str:
        return store_backend_of(self.config)

    @property
    def coalesced_hooks(self) -> tuple[str, ...]:
        return coalesced_hooks(self.config)

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
        parsed = fields.parse(cls, spec)
        # a managed Redis persists by default when more than one replica may share it: with autoscaling,
        # by the most the autoscaler may run, so that its scaling never flips the persistence (a new
        # Redis pod, every dedup record lost: DedupHistoryLost for a whole TTL)
        return replace(parsed, redis=RedisSpec.parse(spec.get("redis"), parsed.replicas_at_most))

    @property
    def replicas_at_most(self) -> int:
        """The most replicas this spec may run: spec.replicas, or the autoscaler's maxReplicas when it is on."""
        return max(self.replicas, self.autoscaling.max_replicas if self.autoscaling.enabled else 1)


def store_backend_of(config: Mapping[str, Any]) -> str:
    """``hooks.idempotency.store_backend`` of a documented gateway.yaml; sqlite when unset."""
    hooks = config.get("hooks")
    if isinstance(hooks, Mapping):
        idem = hooks.get("idempotency")
        if isinstance(idem, Mapping) and idem.get("store_backend"):
            return str(idem["store_backend"])
    return "sqlite"


def coalesced_hooks(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths of the enabled hooks of a documented gateway.yaml that set ``coalesce`` (their
    deliveries are recorded and answered 202 before the one run of their group)."""
    hooks = config.get("hooks")
    entries = hooks.get("hooks") if isinstance(hooks, Mapping) else None
    if not isinstance(entries, list):
        return ()
    return tuple(str(h.get("path")) for h in entries
                 if isinstance(h, Mapping) and h.get("coalesce") is not None and h.get("enabled", True) is not False)


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
