"""What should exist for one GatewayDeployment: pure functions from spec to manifests.

Nothing here talks to the API server; ``reconcile`` applies what these return.
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import secrets as token_source
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import yaml

from gateway_operator import api
from gateway_operator.api import GatewaySpec, SecretKeyRef
from gateway_operator.api.redis_target import RedisTarget, managed_redis_name
from gateway_operator.core import expose
from gateway_operator.pod import gwop_contract as contract

Manifest = dict[str, Any]

CONFIG_DIR = "/etc/gateway-operator"
WORK_DIR = "/var/lib/gateway/work"
HOME_DIR = "/var/lib/gateway/home"
STATE_DIR = f"{HOME_DIR}/.praisonai"  # the gateway keeps its SQLite store under $HOME/.praisonai/state
POD_CODE_DIR = Path(__file__).parent.parent / "pod"  # pod code (gateway_operator.pod): launch.py and gwop_*.py


@functools.cache
def pod_code() -> dict[str, str]:
    """The pods' launcher and its modules, by ConfigMap key (the file name), read once: they ship
    inside the operator's package and never change while the operator runs."""
    return {path.name: path.read_text() for path in sorted(POD_CODE_DIR.glob("*.py")) if path.name != "__init__.py"}
RUN_AS_USER = 10001
OPERATOR_APP_NAME = "gateway-operator"  # app.kubernetes.io/name of the chart's operator pod
# redis-py URL options of the gateway's Redis clients: a hung Redis (paused, overloaded, a
# black-holed route) costs a webhook about three round trips of this before the gateway
# fails open (0.9 s measured), instead of redis-py's unbounded default (over 15 s)
REDIS_CLIENT_OPTIONS = "socket_timeout=0.3&socket_connect_timeout=1"
# a managed Redis asked to persist: every write appended and fsynced each second to /data
# (a restart loses at most the last second of dedup records)
REDIS_AOF_ARGS = '--dir /data --appendonly yes --appendfsync everysec --save ""'


@dataclass(frozen=True)
class OperatorIdentity:
    """Where the operator's own pods run (the chart's release), so that a managed Redis
    admits the operator's probe and nobody else's pods; and the image a managed Redis runs
    when its spec names none."""

    namespace: str = "gateway-operator"
    instance: str = "gateway-operator"   # app.kubernetes.io/instance: the Helm release name
    managed_redis_image: str = api.DEFAULT_MANAGED_REDIS_IMAGE


@dataclass(frozen=True)
class Owner:
    """The GatewayDeployment that owns everything rendered (for ownerReferences)."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


def auth_secret_name(name: str) -> str:
    return f"{name}-gateway-auth"


def session_key_secret_name(name: str) -> str:
    return f"{name}-session-key"


def session_key_ref(name: str, spec: GatewaySpec) -> SecretKeyRef | None:
    """The Secret holding the session history's encryption key (shared sessions only)."""
    if spec.sessions_store != "redis":
        return None
    return spec.sessions.key_ref or SecretKeyRef(session_key_secret_name(name), "key")


def config_map_name(name: str) -> str:
    return f"{name}-gateway-config"


def state_claim_name(name: str) -> str:
    return f"{name}-gateway-state"


def gateway_config(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None) -> dict[str, Any]:
    """The gateway.yaml the replicas run: the user's config plus what the operator owns.

    Secrets appear only as ${VAR} references, expanded by the gateway from Secret-backed env.
    """
    config = copy.deepcopy(dict(spec.config))
    gateway = dict(config.get("gateway") or {})
    gateway["host"] = "0.0.0.0"
    gateway["port"] = api.GATEWAY_PORT
    gateway["drain_timeout"] = spec.drain_seconds  # the launcher's drain of in-flight webhook turns
    # a non-loopback bind needs allowed origins; default to the gateway's own Service names
    gateway.setdefault("allowed_origins", [f"http://{owner.name}.{owner.namespace}.svc",
                                           f"http://{owner.name}.{owner.namespace}.svc.cluster.local",
                                           *expose.origins(spec.expose)])
    config["gateway"] = gateway
    # the launcher's own section: webhook session history, in Redis
    # or (replica) one per session in the replica's memory, never 0.1.16's one history per hook
    config[contract.SESSION_HISTORY_KEY] = {
        "store": spec.sessions_store, "max_messages": spec.sessions.max_messages,
        "ttl_seconds": spec.sessions.ttl_seconds, "max_sessions": spec.sessions.max_sessions}
    # the launcher's own section: the fail-closed window, the claims' lease, how long
    # a record lives (0.1.16's own 24 h is set aside) and the largest webhook body a replica reads
    config[contract.GUARD_KEY] = {"fail_closed_seconds": spec.redis.fail_closed_seconds,
                                  "claim_lease_seconds": spec.redis.claim_lease_seconds,
                                  "record_ttl_seconds": spec.redis.record_ttl_seconds,
                                  "max_body_bytes": spec.max_request_body_bytes}
    if redis is not None:
        push = dict(config.get("push") or {})
        push["redis"] = {"url": f"{redis.url}?{redis_url_options(redis)}", "prefix": redis.prefix}
        if redis.password_ref is not None:
            push["redis"]["password"] = "${%s}" % api.REDIS_PASSWORD_ENV
        if redis.username_ref is not None:  # the launcher puts it into the URL beside the password
            push["redis"]["username"] = "${%s}" % api.REDIS_USERNAME_ENV
        if redis.tls and redis.tls_options.server_name:  # the launcher's: redis-py has no such URL option
            push["redis"]["tls_server_name"] = redis.tls_options.server_name
        config["push"] = push
        if spec.store_backend == "redis":
            turn_lock = dict(config.get("turn_lock") or {})
            turn_lock.setdefault("backend", "redis")  # documented best practice, unless the user chose
            config["turn_lock"] = turn_lock
    return config


def redis_url_options(redis: RedisTarget) -> str:
    """The query of the gateway's Redis URL: the timeouts, and for TLS how redis-py checks the
    server (the CA bundle mounted from spec.redis.tls.caSecretRef; nothing with insecureSkipVerify)."""
    options = REDIS_CLIENT_OPTIONS  # rediss:// verifies the certificate and its name by default
    if redis.tls and redis.tls_options.insecure_skip_verify:
        options += "&ssl_cert_reqs=none"
    elif redis.ca_ref is not None:
        options += f"&ssl_ca_certs={api.REDIS_CA_DIR}/{api.REDIS_CA_FILE}"
    return options


def config_map(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None) -> Manifest:
    return _object("v1", "ConfigMap", config_map_name(owner.name), owner, data={
        "gateway.yaml": yaml.safe_dump(gateway_config(owner, spec, redis), sort_keys=True),
        **pod_code(),
    })


def config_hash(config_map_manifest: Manifest) -> str:
    """Pod-template annotation: a config change rolls the pods, as the gateway only rebuilds
    its idempotency store on restart."""
    return digest(config_map_manifest["data"])


def deployment(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None, replicas: int,
               config_checksum: str, secrets_revision: str = "", migration: str = "") -> Manifest:
    """``migration``: the operator's token while one Redis-backed replica, with the single SQLite
    replica's state PVC still mounted, copies that replica's records to Redis (see migrating())."""
    single_sqlite = spec.store_backend != "redis" and spec.replicas <= 1
    strategy: dict[str, Any] = (
        {"type": "Recreate"} if single_sqlite or migration  # never two pods with separate stores at once
        else {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    pod_labels = {**dict(spec.pod.get("podLabels") or {}), **api.labels_for(owner.name)}
    annotations = {**dict(spec.pod.get("podAnnotations") or {}), api.ANNOTATION_CONFIG_HASH: config_checksum}
    if secrets_revision:  # a rotated password or token reaches the pods only by a restart
        annotations[api.ANNOTATION_SECRETS_REVISION] = secrets_revision
    pod_spec: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                            "fsGroup": RUN_AS_USER, "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds(spec),
        "containers": [_gateway_container(spec, redis, auth_token_ref(owner.name, spec), migration,
                                          session_key_ref(owner.name, spec) if redis is not None else None)],
        "volumes": _volumes(owner, spec, redis, bool(migration)),
    }
    if gated(spec):
        pod_spec["readinessGates"] = [{"conditionType": api.READINESS_GATE}]
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        if spec.pod.get(key):
            pod_spec[key] = spec.pod[key]
    if spec.pod.get("topologySpreadConstraints"):
        # a constraint without a selector counts no pods: default it to this gateway's pods
        pod_spec["topologySpreadConstraints"] = [
            {"labelSelector": {"matchLabels": api.selector_for(owner.name)}, **dict(c)}
            for c in spec.pod["topologySpreadConstraints"]]
    template = {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": pod_spec}
    manifest = _object("apps/v1", "Deployment", owner.name, owner, spec={
        "replicas": replicas,
        "selector": {"matchLabels": api.selector_for(owner.name)},
        "strategy": strategy,
        "template": template,
    })
    # what an operator upgrade would change (rollouts.py): the pods, not the replica count
    manifest["metadata"]["annotations"] = {api.ANNOTATION_TEMPLATE_HASH: digest(template)}
    return manifest


def gated(spec: GatewaySpec) -> bool:
    """The pods carry the operator's readiness gate (api.READINESS_GATE): Redis store, and not
    turned off (spec.health.readinessGate)."""
    return spec.store_backend == "redis" and spec.health.readiness_gate


def auth_token_ref(name: str, spec: GatewaySpec) -> SecretKeyRef:
    """The user's token Secret, or the one the operator generates."""
    return spec.auth_token_ref or SecretKeyRef(auth_secret_name(name), "token")


def _gateway_container(spec: GatewaySpec, redis: RedisTarget | None, auth: SecretKeyRef,
                       migration: str = "", session_key: SecretKeyRef | None = None) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": HOME_DIR},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": api.AUTH_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": auth.name, "key": auth.key}}},
    ]
    if redis is not None and redis.password_ref is not None:
        env.append({"name": api.REDIS_PASSWORD_ENV, "valueFrom": {"secretKeyRef": {
            "name": redis.password_ref.name, "key": redis.password_ref.key}}})
    if redis is not None and redis.username_ref is not None:
        env.append({"name": api.REDIS_USERNAME_ENV, "valueFrom": {"secretKeyRef": {
            "name": redis.username_ref.name, "key": redis.username_ref.key}}})
    if session_key is not None:  # the shared session history is encrypted with it (launcher.SharedSessions)
        env.append({"name": api.SESSION_KEY_ENV, "valueFrom": {"secretKeyRef": {
            "name": session_key.name, "key": session_key.key}}})
    if migration:  # the launcher copies the SQLite records, then writes this token to Redis
        env.append({"name": contract.SQLITE_MIGRATION_ENV, "value": migration})
    env.extend(spec.pod.get("env") or [])
    probe = {"timeoutSeconds": 3, "periodSeconds": 10}
    container: dict[str, Any] = {
        "name": "gateway",
        "image": spec.image,
        "command": ["python3", f"{CONFIG_DIR}/launch.py", "--config", f"{CONFIG_DIR}/gateway.yaml",
                    "--workdir", WORK_DIR, "--host", "0.0.0.0", "--port", str(api.GATEWAY_PORT),
                    "--watch-port", str(api.WATCH_PORT)],
        "ports": [{"name": "http", "containerPort": api.GATEWAY_PORT, "protocol": "TCP"},
                  {"name": "health-watch", "containerPort": api.WATCH_PORT, "protocol": "TCP"}],
        "env": env,
        # /health always answers 200, so it proves nothing: probe /live and /ready instead
        "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}, "failureThreshold": 6, **probe},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "failureThreshold": 3, **probe},
        "startupProbe": {"httpGet": {"path": "/live", "port": "http"}, "failureThreshold": 30, **probe},
        # a terminating pod leaves the Service's and the edge's endpoints while it still serves;
        # only then does SIGTERM make it stop taking requests (the kubelet's own sleep: no binary)
        "lifecycle": {"preStop": {"sleep": {"seconds": api.PRESTOP_SECONDS}}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "work", "mountPath": WORK_DIR},
            {"name": "state", "mountPath": STATE_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if redis is not None and redis.ca_ref is not None:
        container["volumeMounts"].append({"name": "redis-ca", "mountPath": api.REDIS_CA_DIR, "readOnly": True})
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if spec.pod.get("resources"):
        container["resources"] = spec.pod["resources"]
    return container


def _volumes(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None,
             migrating: bool = False) -> list[dict[str, Any]]:
    state: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": state_claim_name(owner.name)}}
        if spec.persistence.enabled and (spec.replicas <= 1 or migrating) else {"emptyDir": {}})
    volumes = [
        {"name": "config", "configMap": {"name": config_map_name(owner.name)}},
        {"name": "work", "emptyDir": {}},
        {"name": "state", **state},
        {"name": "tmp", "emptyDir": {}},
    ]
    ca = redis.ca_ref if redis is not None else None
    if ca is not None:  # the PEM bundle alone, read-only
        volumes.append({"name": "redis-ca", "secret": {"secretName": ca.name, "defaultMode": 0o444,
                                                       "items": [{"key": ca.key, "path": api.REDIS_CA_FILE}]}})
    return volumes


def state_claim(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    if not (spec.persistence.enabled and spec.replicas <= 1):
        return None
    claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": spec.persistence.size}}}
    if spec.persistence.storage_class:
        claim_spec["storageClassName"] = spec.persistence.storage_class
    return _object("v1", "PersistentVolumeClaim", state_claim_name(owner.name), owner, spec=claim_spec)


def service(owner: Owner, spec: GatewaySpec) -> Manifest:
    svc: dict[str, Any] = {
        "type": spec.service_type,
        "selector": api.selector_for(owner.name),
        "ports": [{"name": "http", "port": spec.service_port, "targetPort": "http", "protocol": "TCP"}],
        # the gateway holds per-connection WebSocket state: keep a client on one replica
        "sessionAffinity": "ClientIP" if spec.replicas > 1 else "None",
    }
    manifest = _object("v1", "Service", owner.name, owner, spec=svc)
    annotations = expose.service_annotations(spec.expose, spec.replicas)
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest


def ingress(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    if spec.expose.ingress is None:
        return None
    manifest = _object(*api.INGRESS_API, owner.name, owner,
                       spec=expose.ingress_spec(spec.expose, owner.name, spec.service_port))
    manifest["metadata"]["annotations"] = expose.ingress_annotations(spec.expose, spec.replicas)
    return manifest


def http_route(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    route = spec.expose.http_route
    if route is None:
        return None
    manifest = _object(*api.ROUTE_API, owner.name, owner,
                       spec=expose.http_route_spec(spec.expose, owner.name, spec.service_port, owner.namespace))
    if route.annotations:
        manifest["metadata"]["annotations"] = dict(route.annotations)
    return manifest


def gateway_network_policy_name(name: str) -> str:
    return f"{name}-gateway"


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
    return _object("networking.k8s.io/v1", "NetworkPolicy", gateway_network_policy_name(owner.name), owner, spec={
        "podSelector": {"matchLabels": api.selector_for(owner.name)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": peers, "ports": [{"port": api.GATEWAY_PORT, "protocol": "TCP"}]},
                    {"from": [the_operator], "ports": [{"port": api.WATCH_PORT, "protocol": "TCP"}]}],
    })


def disruption_budget(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    if spec.replicas <= 1:
        return None
    return _object("policy/v1", "PodDisruptionBudget", owner.name, owner, spec={
        "maxUnavailable": 1, "selector": {"matchLabels": api.selector_for(owner.name)}})


HPA_API = ("autoscaling/v2", "HorizontalPodAutoscaler")
POD_MONITOR_API = ("monitoring.coreos.com/v1", "PodMonitor")
# the HPA's scale-down stabilisation: at least its own default, 5 minutes, so that a lull between
# two bursts of model turns does not stop a replica the next burst needs again
MIN_SCALE_DOWN_WINDOW_SECONDS = 300


def grace_seconds(spec: GatewaySpec) -> int:
    """The gateway pods' terminationGracePeriodSeconds: the drain, the preStop pause, the exit."""
    return spec.drain_seconds + api.PRESTOP_SECONDS + api.EXIT_MARGIN_SECONDS


def autoscaling_bounds(spec: GatewaySpec) -> tuple[int, int]:
    """(minReplicas, maxReplicas) of the autoscaler: one at most without the Redis store under
    Refuse (the CRD refuses that spec; this holds even if its rule were missing, as replicas do)."""
    low, high = spec.autoscaling.min_replicas, spec.autoscaling.max_replicas
    if spec.policy == api.Policy.REFUSE and spec.store_backend != "redis":
        return 1, 1
    return min(low, high), high


def canonical_quantity(value: str) -> str:
    """A positive decimal as the API server writes the quantity back ('1.5' -> '1500m', '3.0' -> '3'),
    so that the applied HPA is found unchanged at the next pass instead of written again."""
    whole, _, fraction = value.partition(".")
    milli = int(whole or "0") * 1000 + int((fraction + "000")[:3])
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def autoscaler(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    """spec.autoscaling: an autoscaling/v2 HPA whose target is this GatewayDeployment's own /scale
    (so the CRD's replica rules and the operator's guard apply to every replica count it writes), on
    a per-pod metric of the custom metrics API (api.AUTOSCALING_METRICS). Scale-in removes one
    replica per grace period, so a stopping replica has drained its turns (and released the
    claims of those it could not finish) before the next one stops."""
    if not spec.autoscaling.enabled:
        return None
    low, high = autoscaling_bounds(spec)
    metric_name, _ = api.AUTOSCALING_METRICS[spec.autoscaling.target.metric]
    grace = grace_seconds(spec)
    return _object(HPA_API[0], HPA_API[1], owner.name, owner, spec={
        "scaleTargetRef": {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": owner.name},
        "minReplicas": low,
        "maxReplicas": high,
        "metrics": [{"type": "Pods", "pods": {
            "metric": {"name": metric_name},
            "target": {"type": "AverageValue",
                       "averageValue": canonical_quantity(spec.autoscaling.target.average_value)}}}],
        "behavior": {"scaleDown": {
            "stabilizationWindowSeconds": min(max(MIN_SCALE_DOWN_WINDOW_SECONDS, grace), 3600),
            # one replica per grace period (validation: it fits the HPA's 1800 s at most)
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": min(grace, api.HPA_MAX_PERIOD_SECONDS)}]}},
    })


def pod_monitor(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    """spec.podMonitor: the Prometheus operator's scrape of every gateway pod's token-protected
    GET /metrics. The bearer token is named by reference (the auth Secret's name and key), which
    Prometheus reads itself: the token is never in this or any other rendered object."""
    if not spec.pod_monitor_enabled:
        return None
    token = auth_token_ref(owner.name, spec)
    manifest = _object(POD_MONITOR_API[0], POD_MONITOR_API[1], owner.name, owner, spec={
        "selector": {"matchLabels": api.selector_for(owner.name)},
        "podMetricsEndpoints": [{
            "port": "http", "path": "/metrics", "scheme": "http", "interval": spec.pod_monitor.interval,
            "authorization": {"type": "Bearer", "credentials": {"name": token.name, "key": token.key}},
        }],
    })
    manifest["metadata"]["labels"] = {**dict(spec.pod_monitor.labels), **manifest["metadata"]["labels"]}
    return manifest


def autoscaling_status(name: str, spec: GatewaySpec) -> dict[str, str]:
    """status.autoscaling: the autoscaler and the PodMonitor the spec asks for (by name), so that
    a later pass looks for them to remove only once they were asked for."""
    found = {}
    if spec.autoscaling.enabled:
        found["horizontalPodAutoscaler"] = name
    if spec.pod_monitor_enabled:
        found["podMonitor"] = name
    return found


def managed_redis(owner: Owner, spec: GatewaySpec, operator: OperatorIdentity) -> list[Manifest]:
    """Deployment + Service + NetworkPolicy of an operator-managed Redis (its password Secret
    is generated by the I/O side, once)."""
    if not spec.redis.managed:
        return []
    name = managed_redis_name(owner.name)
    selector = api.selector_for(owner.name, component="redis")
    persistence = spec.redis.managed_persistence
    persistent = persistence is not None
    container = {
        "name": "redis", "image": spec.redis.managed_image or operator.managed_redis_image,
        # noeviction: every dedup record has a TTL, so any other policy (volatile-* too) may drop them
        "command": ["sh", "-c", 'exec redis-server --port 6379 --requirepass "$REDIS_PASSWORD" '
                                '--maxmemory-policy noeviction '
                                + (REDIS_AOF_ARGS if persistent else '--save "" --appendonly no')],
        "env": [{"name": "REDIS_PASSWORD",
                 "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}}}],
        "ports": [{"name": "redis", "containerPort": 6379, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 10},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    if spec.redis.managed_resources:
        container["resources"] = dict(spec.redis.managed_resources)
    deployment_ = _object("apps/v1", "Deployment", name, owner, component="redis", spec={
        "replicas": 1,
        "selector": {"matchLabels": selector},
        "strategy": {"type": "Recreate"},
        "template": {"metadata": {"labels": api.labels_for(owner.name, "redis")}, "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [{"name": "data", **({"persistentVolumeClaim": {"claimName": redis_data_claim_name(owner.name)}}
                                            if persistent else {"emptyDir": {}})}],
        }},
    })
    service_ = _object("v1", "Service", name, owner, component="redis", spec={
        "selector": selector, "ports": [{"name": "redis", "port": 6379, "targetPort": "redis"}]})
    policy = _object("networking.k8s.io/v1", "NetworkPolicy", name, owner, component="redis", spec={
        "podSelector": {"matchLabels": selector},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [
            {"podSelector": {"matchLabels": api.selector_for(owner.name)}},
            # the operator's own Redis probe: its release's pods, in its namespace only (a pod
            # label alone can be set by anyone who can create a pod somewhere)
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator.namespace}},
             "podSelector": {"matchLabels": {api.LABEL_NAME: OPERATOR_APP_NAME,
                                             api.LABEL_INSTANCE: operator.instance}}},
        ], "ports": [{"port": 6379, "protocol": "TCP"}]}],
    })
    objects = [deployment_, service_, policy]
    if persistence is not None:
        claim_spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                      "resources": {"requests": {"storage": persistence.size}}}
        if persistence.storage_class:
            claim_spec["storageClassName"] = persistence.storage_class
        objects.insert(0, _object("v1", "PersistentVolumeClaim", redis_data_claim_name(owner.name), owner,
                                  component="redis", spec=claim_spec))
    return objects


def redis_data_claim_name(name: str) -> str:
    return f"{managed_redis_name(name)}-data"


def generated_secret(owner: Owner, name: str, key: str, value: str, component: str) -> Manifest:
    """A Secret the operator generates once (auth token, managed Redis password)."""
    return _object("v1", "Secret", name, owner, component=component, type="Opaque",
                   stringData={key: value})


class Generated(NamedTuple):
    """A Secret the operator generates once, when it is absent, and never rotates."""

    name: str
    key: str
    component: str
    value: Callable[[], str]  # a fresh random value (an existing Secret keeps its own: create_if_absent)

    def manifest(self, owner: Owner) -> Manifest:
        """The Secret to create when it is absent, with a freshly drawn value."""
        return generated_secret(owner, self.name, self.key, self.value(), self.component)


def generated_secrets(owner: Owner, spec: GatewaySpec) -> list[Generated]:
    """The Secrets this spec needs the operator to generate: the auth token (the gateway refuses a
    non-loopback bind without one), the managed Redis password, the sessions' Fernet key."""
    wanted = []
    if spec.auth_token_ref is None:
        wanted.append(Generated(auth_secret_name(owner.name), "token", "gateway", lambda: token_source.token_urlsafe(48)))
    if spec.redis.managed:
        wanted.append(Generated(managed_redis_name(owner.name), "password", "redis",
                                lambda: token_source.token_urlsafe(32)))
    if spec.sessions_store == "redis" and spec.sessions.key_ref is None:
        wanted.append(Generated(session_key_secret_name(owner.name), "key", "gateway",
                                lambda: base64.urlsafe_b64encode(token_source.token_bytes(32)).decode()))
    return wanted


def desired_objects(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None, replicas: int,
                    secrets_revision: str = "", operator: OperatorIdentity = OperatorIdentity(),
                    migration: str = "") -> list[Manifest]:
    """Everything the gateway needs, in apply order (config before the pods that mount it)."""
    cm = config_map(owner, spec, redis)
    objects = [cm]
    claim = state_claim(owner, spec)
    if claim:
        objects.append(claim)
    objects += managed_redis(owner, spec, operator)
    objects.append(deployment(owner, spec, redis, replicas, config_hash(cm), secrets_revision, migration))
    objects.append(service(owner, spec))
    pdb = disruption_budget(owner, spec)
    if pdb:
        objects.append(pdb)
    policy = gateway_network_policy(owner, spec, operator)
    if policy:
        objects.append(policy)
    # after the Deployment: the HPA's target (this GatewayDeployment) exists already; the scrape the
    # autoscaler's metric comes from
    objects += [m for m in (autoscaler(owner, spec), pod_monitor(owner, spec)) if m]
    # last: a route to the replicas (or an API that is not served) never holds them back
    objects += [m for m in (ingress(owner, spec), http_route(owner, spec)) if m]
    return objects


def _object(api_version: str, kind: str, name: str, owner: Owner, component: str = "gateway",
            **body: Any) -> Manifest:
    return {
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": owner.namespace,
                     "labels": api.labels_for(owner.name, component),
                     "ownerReferences": [owner.reference()]},
        **body,
    }


def digest(value: Mapping[str, Any] | list[Any]) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def applied_hash(manifest: Manifest) -> str:
    """Fingerprint of what the operator applies, stored on the object so that a field the
    operator stops rendering is removed (a subset check alone would never notice)."""
    return digest(manifest)
