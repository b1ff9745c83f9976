"""The gateway.yaml the replicas run (the user's config plus what the operator owns: the bind,
the Redis store, the launcher's own sections) and the ConfigMap that carries it beside the pods'
code, with the hash that rolls the pods when it changes."""
from __future__ import annotations

import copy
from typing import Any, Mapping

import yaml

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.core import expose
from gateway_operator.core.render.manifest import Manifest, digest, owned_object
from gateway_operator.core.render.names import Owner, config_map_name
from gateway_operator.pod import gwop_contract as contract

# redis-py URL options of the gateway's Redis clients: a hung Redis (paused, overloaded, a
# black-holed route) costs a webhook about three round trips of this before the gateway
# fails open (0.9 s measured), instead of redis-py's unbounded default (over 15 s)
REDIS_CLIENT_OPTIONS = "socket_timeout=0.3&socket_connect_timeout=1"


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


def config_map(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None, pod_code: Mapping[str, str]) -> Manifest:
    """``pod_code``: the pods' launcher and its modules by file name (``gateway_operator.pod.pod_code``,
    read by the caller: nothing here reads a file)."""
    return owned_object("v1", "ConfigMap", config_map_name(owner.name), owner, data={
        "gateway.yaml": yaml.safe_dump(gateway_config(owner, spec, redis), sort_keys=True),
        **pod_code,
    })


def config_hash(config_map_manifest: Manifest) -> str:
    """Pod-template annotation: a config change rolls the pods, as the gateway only rebuilds
    its idempotency store on restart."""
    return digest(config_map_manifest["data"])
