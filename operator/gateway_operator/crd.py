"""The GatewayDeployment CustomResourceDefinition, built from code.

``crds/gatewaydeployments.yaml`` and the Helm chart's copy are generated from this module
(``gateway-operator crd > crds/gatewaydeployments.yaml``; a test fails when a copy is stale),
so the schema, the CEL rules and their messages (validation.RULES) live in one place.
"""
from __future__ import annotations

from typing import Any

from . import api, reasons
from .validation import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, RESERVED_ENV, RULES

Schema = dict[str, Any]


def _s(type_: str, description: str, **extra: Any) -> Schema:
    return {"type": type_, "description": description, **extra}


def _secret_ref(what: str, default_key: str) -> Schema:
    return _s("object", f"Secret (in the same namespace) holding {what}.", required=["name"], properties={
        "name": _s("string", "Name of the Secret.", minLength=1, maxLength=253),
        "key": _s("string", f"Key inside the Secret (default {default_key!r}).", default=default_key),
    })


def _free(description: str, type_: str = "object") -> Schema:
    return {"type": type_, "description": description, "x-kubernetes-preserve-unknown-fields": True}


def _forbidden(description: str) -> Schema:
    """A key that must not be set: declared (as an object, the only shape CEL can see) so that
    a CEL rule can refuse it with a message; any other shape fails the type check."""
    return {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}


def _rules(at: str) -> list[dict[str, str]]:
    return [{"rule": r.cel, "message": r.message} for r in RULES if r.at == at]


def config_schema() -> Schema:
    """gateway.yaml as the user writes it: typed where the operator reads, kept otherwise."""
    return {
        "type": "object",
        "description": ("The gateway's gateway.yaml in its documented shape (gateway, agents, channels, "
                        "hooks, turn_lock, ...). Kept as given, except push.redis, which the operator "
                        f"writes from spec.redis. At most {MAX_CONFIG_DEPTH} levels deep and "
                        f"{MAX_CONFIG_BYTES // 1024} KiB (the operator stalls on a bigger one)."),
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-validations": _rules("spec.config"),
        "properties": {
            "gateway": {
                "type": "object",
                "description": "Gateway server settings; host and port are set by the operator.",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "hooks": _forbidden("Not allowed: put hooks in config.hooks."),
                    "hooks_idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
                },
            },
            "hooks_idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
            "idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
            "agents": _free("Agents, as the gateway documents them (required by the gateway)."),
            "channels": _free("Channels, as the gateway documents them (required by the gateway)."),
            "hooks": {
                "type": "object",
                "description": "Webhook hooks and their idempotency store.",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "idempotency": {
                        "type": "object",
                        "description": "How replicas dedup inbound webhooks.",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {
                            "store_backend": _s(
                                "string",
                                "sqlite (per replica, the default) or redis (shared through spec.redis; "
                                "required for replicas > 1 under replicaPolicy Refuse).",
                                enum=["sqlite", "redis"]),
                        },
                    },
                    "hooks": {"type": "array", "description": "Hook definitions, as the gateway documents them.",
                              "items": _free("One hook definition.")},
                },
            },
            "turn_lock": {
                "type": "object",
                "description": ("Turn lock. With store_backend redis the operator sets backend: redis "
                                 "unless this says otherwise."),
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"backend": _s("string", "Turn lock backend, e.g. memory or redis.")},
            },
            "push": {
                "type": "object",
                "description": "Push settings; push.redis is owned by the operator (from spec.redis).",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"redis": _free("Written by the operator; must not be set here.")},
            },
        },
    }


def spec_schema() -> Schema:
    return {
        "type": "object",
        "description": "Desired state of a set of PraisonAI gateway replicas.",
        "required": ["image", "config"],
        "x-kubernetes-validations": _rules("spec"),
        "properties": {
            "replicas": _s("integer", "Number of gateway replicas. More than one needs store_backend: redis "
                           "under replicaPolicy Refuse.", format="int32", minimum=0, maximum=100, default=1),
            "replicaPolicy": _s("string", "Refuse (default): refuse replicas > 1 without a shared Redis "
                                "idempotency store. Warn: run them and report that exactly-once webhook "
                                "admission is not held.", enum=[api.Policy.REFUSE, api.Policy.WARN],
                                default=api.Policy.REFUSE),
            "image": _s("string", "Gateway container image (praisonai-bot[gateway] 0.1.16 with python3).",
                        minLength=1, maxLength=1024),
            "imagePullPolicy": _s("string", "Image pull policy.", enum=["Always", "IfNotPresent", "Never"]),
            "imagePullSecrets": {"type": "array", "description": "Secrets for pulling the image.",
                                 "items": {"type": "object", "required": ["name"],
                                           "properties": {"name": _s("string", "Secret name.")}}},
            "config": config_schema(),
            "redis": {
                "type": "object",
                "description": ("Redis for the shared idempotency store and turn lock; the operator writes it "
                                "into push.redis. Set one of url, host or managed."),
                "x-kubernetes-validations": _rules("spec.redis"),
                "properties": {
                    "url": _s("string", "redis://host:port/db or rediss://host:port/db, without credentials.",
                              maxLength=2048),
                    "host": _s("string", "Redis host (instead of url).", maxLength=253),
                    "port": _s("integer", "Redis port (with host).", minimum=1, maximum=65535, default=6379),
                    "db": _s("integer", "Redis database number (with host).", minimum=0, maximum=15, default=0),
                    "passwordSecretRef": _secret_ref("the Redis password", "password"),
                    "prefix": _s("string", "Key prefix. Default gwop:<namespace>:<name>: so environments sharing "
                                 "one Redis never collide.", maxLength=100),
                    "tls": {"type": "object", "description": "TLS to Redis.", "properties": {
                        "enabled": _s("boolean", "Connect with TLS (rediss://).", default=False)}},
                    "managed": {"type": "object", "description": "An operator-managed Redis for this gateway.",
                                "properties": {
                                    "enabled": _s("boolean", "Create and wire a Redis.", default=False),
                                    "image": _s("string", "Redis image.", default="redis:7.2-alpine", maxLength=1024),
                                    "resources": _free("Resources of the Redis container."),
                                }},
                },
            },
            "authTokenSecretRef": _secret_ref(
                "the gateway auth token (GATEWAY_AUTH_TOKEN). When absent the operator generates one in "
                "<name>-gateway-auth; the gateway refuses a non-loopback bind without it", "token"),
            "health": {
                "type": "object",
                "description": "How the operator polls each ready replica's GET /health.",
                "properties": {
                    "intervalSeconds": _s("integer", "Seconds between polls.", minimum=1, maximum=3600, default=10),
                    "timeoutSeconds": _s("integer", "Timeout of one poll.", minimum=1, maximum=60, default=2),
                    "maxConcurrency": _s("integer", "Replicas polled at once.", minimum=1, maximum=100, default=8),
                    "restartStaleReplicas": _s(
                        "boolean", "Restart, one at a time, replicas stuck on the build-time SQLite fallback "
                        "while Redis answers.", default=True),
                    "restartCooldownSeconds": _s("integer", "Minimum seconds between two such restarts.",
                                                 minimum=0, default=60),
                },
            },
            "persistence": {
                "type": "object",
                "description": "A PersistentVolumeClaim for the single replica's SQLite state directory.",
                "properties": {
                    "enabled": _s("boolean", "Keep the SQLite store on a PVC.", default=False),
                    "size": _s("string", "Requested size.", default="1Gi"),
                    "storageClassName": _s("string", "Storage class."),
                },
            },
            "service": {
                "type": "object",
                "description": "The Service in front of the replicas.",
                "properties": {
                    "type": _s("string", "Service type.", enum=["ClusterIP", "NodePort", "LoadBalancer"],
                               default="ClusterIP"),
                    "port": _s("integer", "Service port.", minimum=1, maximum=65535, default=api.GATEWAY_PORT),
                },
            },
            "resources": _free("Container resources (requests/limits)."),
            "env": {"type": "array", "maxItems": 200,
                    "description": ("Extra container env vars (e.g. LLM API keys from Secrets); "
                                    f"{', '.join(RESERVED_ENV)} are set by the operator."),
                    "items": {"type": "object", "description": "A core/v1 EnvVar.", "required": ["name"],
                              "properties": {
                                  "name": _s("string", "Variable name.", minLength=1, maxLength=256),
                                  "value": _s("string", "Value."),
                                  "valueFrom": _free("Source of the value (secretKeyRef, configMapKeyRef, ...)."),
                              }}},
            "nodeSelector": {"type": "object", "description": "Pod node selector.",
                             "additionalProperties": {"type": "string"}},
            "tolerations": {"type": "array", "description": "Pod tolerations.", "items": _free("A toleration.")},
            "affinity": _free("Pod affinity."),
            "podAnnotations": {"type": "object", "description": "Extra pod annotations.",
                               "additionalProperties": {"type": "string"}},
            "podLabels": {"type": "object", "description": "Extra pod labels.",
                          "additionalProperties": {"type": "string"}},
        },
    }


def status_schema() -> Schema:
    condition = {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": _s("string", "Condition type."),
            "status": _s("string", "True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": _s("string", "CamelCase reason: " + ", ".join(reasons.ALL) + "."),
            "message": _s("string", "Human readable detail."),
            "lastTransitionTime": _s("string", "When status last changed.", format="date-time"),
            "observedGeneration": _s("integer", "Generation the condition was computed for.", format="int64"),
        },
    }
    return {
        "type": "object",
        "description": "Observed state, written by the operator.",
        "properties": {
            "observedGeneration": _s("integer", "Last generation reconciled.", format="int64"),
            "replicas": _s("integer", "Replicas the operator runs now (may trail spec while gated)."),
            "readyOfDesired": _s("string", "Ready and desired replicas, as 'ready/desired' (for kubectl get)."),
            "selector": _s("string", "Label selector of the gateway pods (for the scale subresource)."),
            "readyReplicas": _s("integer", "Ready gateway pods."),
            "degradedReplicas": _s("integer", "Replicas reporting durability:idempotency in degraded_owners."),
            "storeBackend": _s("string", "Effective idempotency store: sqlite or redis."),
            "exactlyOnce": _s("string", "Status of the ExactlyOnceAdmission condition (for columns)."),
            "redis": {"type": "object", "description": "Redis in use, without credentials.", "properties": {
                "endpoint": _s("string", "host:port/db."),
                "prefix": _s("string", "Key prefix."),
            }},
            "conditions": {"type": "array", "description": "Ready, Reconciling, Stalled, RedisReachable, "
                           "IdempotencyDegraded, ExactlyOnceAdmission.", "items": condition,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        },
    }


def _condition_column(type_: str, name: str) -> dict[str, str]:
    return {"name": name, "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{type_}")].status'}


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{api.PLURAL}.{api.GROUP}",
                     "labels": {"app.kubernetes.io/part-of": "gateway-operator"}},
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {"plural": api.PLURAL, "singular": api.SINGULAR, "kind": api.KIND,
                      "shortNames": api.SHORT_NAMES, "categories": ["praisonai"]},
            "versions": [{
                "name": api.VERSION,
                "served": True,
                "storage": True,
                # /scale lets kubectl scale, an HPA or KEDA drive replicas; the replica guard still
                # holds: CEL runs on the whole object, and the operator never runs more than one
                # SQLite replica under Refuse
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    _condition_column("Ready", "Ready"),
                    {"name": "Reason", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
                    {"name": "Replicas", "type": "string", "jsonPath": ".status.readyOfDesired",
                     "description": "ready/desired replicas"},
                    {"name": "Store", "type": "string", "jsonPath": ".status.storeBackend"},
                    _condition_column("ExactlyOnceAdmission", "Exactly-Once"),
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Degraded", "type": "integer", "jsonPath": ".status.degradedReplicas", "priority": 1},
                    {"name": "Redis", "type": "string", "jsonPath": ".status.redis.endpoint", "priority": 1},
                    {"name": "Message", "type": "string", "priority": 1,
                     "jsonPath": '.status.conditions[?(@.type=="Ready")].message'},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-validations": _rules("root"),
                    "description": ("GatewayDeployment runs PraisonAI gateway replicas and guards exactly-once "
                                    "webhook admission (shared Redis idempotency store, health-driven conditions)."),
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
            }],
        },
    }
