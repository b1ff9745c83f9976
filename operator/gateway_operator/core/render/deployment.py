"""The gateway's Deployment: its pod template (the container the launcher runs in, its probes, env
and mounts, the volumes), the rollout strategy, and the state claim of a single SQLite replica."""
from __future__ import annotations

from typing import Any

from gateway_operator import api
from gateway_operator.api import GatewaySpec, SecretKeyRef
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.core.render.manifest import Manifest, digest, owned_object
from gateway_operator.core.render.names import (Owner, auth_token_ref, config_map_name, session_key_ref,
                                                state_claim_name)
from gateway_operator.pod import gwop_contract as contract

CONFIG_DIR = "/etc/gateway-operator"
WORK_DIR = "/var/lib/gateway/work"
HOME_DIR = "/var/lib/gateway/home"
STATE_DIR = f"{HOME_DIR}/.praisonai"  # the gateway keeps its SQLite store under $HOME/.praisonai/state
RUN_AS_USER = 10001


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
    manifest = owned_object("apps/v1", "Deployment", owner.name, owner, spec={
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
    return owned_object("v1", "PersistentVolumeClaim", state_claim_name(owner.name), owner, spec=claim_spec)


def grace_seconds(spec: GatewaySpec) -> int:
    """The gateway pods' terminationGracePeriodSeconds: the drain, the preStop pause, the exit."""
    return spec.drain_seconds + api.PRESTOP_SECONDS + api.EXIT_MARGIN_SECONDS
