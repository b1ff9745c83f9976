"""The GatewayDeployment CustomResourceDefinition, built from code.

``crds/gatewaydeployments.yaml`` and the Helm chart's copy are generated from this module
(``gateway-operator crd > crds/gatewaydeployments.yaml``; a test fails when a copy is stale),
so the schema, the CEL rules and their messages (validation.RULES) live in one place. The spec's
fields are declared in api.py (fields.py); ``object_schema`` turns a section's declarations into
its schema, and the builders below give the shapes that are not a scalar's (Secret references,
pod fields, the gateway's own config, the edge).
"""
from __future__ import annotations

import copy
from typing import Any

from gateway_operator import api
from gateway_operator.api import fields, pod_schemas, reasons
from gateway_operator.api.validation import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, RESERVED_ENV, RULES

Schema = dict[str, Any]

MAX_ENV = 200
MAX_ENV_NAME = 256
# praisonaiagents 1.7.17 (the gateway's core): TurnLockConfig and HookConfig accept exactly these
TURN_LOCK_BACKENDS = ("local", "redis")
SIGNATURE_SCHEMES = ("hmac_hex", "hmac_base64", "hmac_timestamped", "structured")
# HookConfig strips whitespace, then '/', and refuses what is left empty
HOOK_PATH_PATTERN = r"[^/\t\n\v\f\r ]"


def _s(type_: str, description: str, **extra: Any) -> Schema:
    return {"type": type_, "description": description, **extra}


# what the API server accepts as a Secret's name and key (a name with '/' would address
# another resource path)
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"


def _secret_ref(what: str, default_key: str, default: str = "none") -> Schema:
    return _s("object", f"Secret (in the same namespace) holding {what}. Default: {default}.", required=["name"],
              properties={
                  "name": _s("string", "Required. Name of the Secret: a DNS subdomain, 1-253 characters.",
                             minLength=1, maxLength=253, pattern=SECRET_NAME_PATTERN),
                  "key": _s("string", f"Key inside the Secret ([-._a-zA-Z0-9]+). Default {default_key!r}.",
                            default=default_key, minLength=1, maxLength=253, pattern=SECRET_KEY_PATTERN),
              })


def _free(description: str, type_: str = "object") -> Schema:
    return {"type": type_, "description": description, "x-kubernetes-preserve-unknown-fields": True}


def _forbidden(description: str) -> Schema:
    """A key that must not be set: declared (as an object, the only shape CEL can see) so that
    a CEL rule can refuse it with a message; any other shape fails the type check."""
    return {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}


def _rules(at: str) -> list[dict[str, str]]:
    return [{"rule": r.cel, "message": r.message} for r in RULES if r.at == at]


def object_schema(cls: type, description: str, validations: str | None = None) -> Schema:
    """The schema of a spec section declared in api.py (fields.py): one property per field, in order."""
    props = [member for prop in fields.props(cls) for member in (prop.members or (prop,))]
    schema: Schema = {"type": "object", "description": description}
    if any(prop.required for prop in props):
        schema["required"] = [prop.name for prop in props if prop.required]
    if validations:
        schema["x-kubernetes-validations"] = _rules(validations)
    schema["properties"] = {prop.name: prop_schema(prop) for prop in props}
    return schema


def prop_schema(prop: fields.Prop) -> Schema:
    if prop.section is not None:
        return object_schema(prop.section, prop.text, prop.validations)
    if prop.kind is not None:
        return _built(prop, prop.kind)
    if prop.type == "array":
        assert prop.items is not None
        return {"type": "array", **prop.keywords, "description": prop.text, "items": prop_schema(prop.items)}
    schema = _s(prop.type, prop.text, **{k: prop.keywords[k] for k in fields.SCALAR_KEYWORDS if k in prop.keywords})
    if prop.default is not fields.NO_DEFAULT:
        schema["default"] = prop.default
    return schema


def _built(prop: fields.Prop, kind: str) -> Schema:
    """The schema of a field whose shape is not a scalar's: a Secret reference, the gateway's own
    config, the edge, a string map, or a pod field as the pinned Kubernetes publishes it."""
    if kind == "secret":
        return _secret_ref(prop.text, prop.secret_key, prop.secret_default)
    if kind == "config":
        return config_schema()
    if kind == "expose":
        return _expose_schema()
    if kind == "env":
        return _env()
    if kind == "map":
        return {"type": "object", "description": prop.text, "additionalProperties": {"type": "string"}}
    if kind == "resources":
        return _resources(prop.text)
    return _pod_field(kind, prop.text)


def _pod_field(name: str, description: str) -> Schema:
    """A pod field exactly as the pinned Kubernetes publishes it (pod_schemas.py, generated by
    hack/gen-pod-schemas.py from the API server's OpenAPI), under this CRD's own description."""
    return {**copy.deepcopy(pod_schemas.FIELDS[name]), "description": description}


def _resources(description: str) -> Schema:
    schema = _pod_field("resources", description)
    # claims name entries of the pod's spec.resourceClaims, which a GatewayDeployment cannot set:
    # a Deployment carrying them would be refused, so they are refused here
    del schema["properties"]["claims"]
    return schema


def _hook_schema() -> Schema:
    """One ``hooks.hooks[]`` entry: praisonai_bot 0.1.16 HookSchema / praisonaiagents HookConfig.
    That model is open (``extra="allow"``: unknown keys are folded into ``metadata``), so
    unknown keys are kept; the documented ones are typed."""
    def s(description: str, **extra: Any) -> Schema:
        return _s("string", description, **extra)

    return {
        "type": "object",
        "description": ("An inbound trigger: POST /hooks/<path> runs an agent turn (or wakes a session) and "
                        "delivers the reply. Keys other than these are kept and folded into metadata by the gateway."),
        "required": ["path"],
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "path": s("Required. URL path segment: the hook answers POST /hooks/<path>. Must hold a character other "
                      "than '/' and whitespace (leading and trailing ones are stripped).",
                      pattern=HOOK_PATH_PATTERN),
            "agent": s("Agent id (a key of config.agents) that runs the turn. Default: the gateway's first agent."),
            "action": s("agent (default): run an agent turn on the templated message. wake: nudge the session "
                        "without a new user message.", enum=["agent", "wake"]),
            "auth": s("Bearer token or shared secret required on the request (${VAR} is expanded). Default: the "
                      "gateway auth token."),
            "session_key": s("Template for the session id, e.g. hook:gmail:{message_id}. Default hook:<path> (one "
                             "session per hook)."),
            "idempotency_key": s("Template for the dedup key, e.g. {message_id}. Default: a hash of the whole "
                                 "payload."),
            "deliver_to": s("channel:target delivery of the reply, e.g. telegram:123456789. Default: none (no "
                            "outbound delivery)."),
            "message": s("Template of the message built from the payload ({field} or {{ payload.a.b }}), e.g. "
                         "'Event: {text}'. Default: empty."),
            "enabled": _s("boolean", "Whether the hook is active. Default true."),
            "metadata": _free("Free-form extra settings. Default empty."),
            "secret": s("HMAC signing secret (${VAR} is expanded); when set, a request without a valid provider "
                        "signature over the raw body is refused (401). Default: none (no signature check)."),
            "signature_header": s("Header carrying the signature. Default X-Hub-Signature-256 when secret is set."),
            "signature_algo": s("hashlib digest of the HMAC (sha256, sha1, sha512, ...). Default sha256."),
            "signature_prefix": s("Prefix of the signature value, e.g. 'sha256='. Default: none."),
            "signature_scheme": s("hmac_hex (default), hmac_base64, hmac_timestamped (signs '{timestamp}.{body}'; "
                                  "needs timestamp_header) or structured (a 't=...,v1=...' header).",
                                  enum=list(SIGNATURE_SCHEMES)),
            "timestamp_header": s("Header carrying the provider timestamp (unix seconds); only with "
                                  "hmac_timestamped or structured. Default: none."),
            "signature_tolerance_seconds": _s(
                "integer", "Replay window of the timestamped schemes, in seconds, 0 or more (0 disables the "
                "freshness check). Default 300.", minimum=0),
            "events": {"type": "array", "description": "Allow-list of event types (e.g. issues, issues.opened); "
                       "other deliveries are acknowledged without a turn. Default: all events.",
                       "items": s("An event type.")},
            "event_header": s("Header carrying the event type, e.g. X-GitHub-Event. Default: the payload's event "
                              "field."),
            "deliver_only": _s("boolean", "Deliver the rendered message through deliver_to with no LLM turn. "
                               "Default false."),
            "coalesce": {
                "type": "object",
                "description": "Collapse a burst of deliveries with the same group_key into one run. Default: none "
                               "(one run per delivery).",
                "required": ["group_key"],
                "properties": {
                    "group_key": s("Required. Template over the payload, e.g. "
                                   "'{repository.full_name}#{pull_request.number}'; at least one character.",
                                   minLength=1),
                    "window_seconds": _s("number", "Quiet window in seconds, greater than 0 (at most "
                                         "max_wait_seconds). Default 30.", minimum=0, exclusiveMinimum=True),
                    "max_wait_seconds": _s("number", "Cap in seconds from a group's first delivery, greater than 0 "
                                           "and at least window_seconds. Default 300.", minimum=0,
                                           exclusiveMinimum=True),
                },
            },
        },
    }


def _turn_lock_schema(where: str) -> Schema:
    """praisonaiagents TurnLockConfig: backend, ttl, url (nothing else is read)."""
    return {
        "type": "object",
        "description": (f"Cluster-wide per-turn serialisation ({where}). Default: backend local, or redis when "
                        "hooks.idempotency.store_backend is redis (set by the operator unless this says otherwise)."),
        "properties": {
            "backend": _s("string", "local (in-process lock, one replica) or redis (a lease shared by every "
                          "replica, through spec.redis). Default local (redis with store_backend redis).",
                          enum=list(TURN_LOCK_BACKENDS)),
            "ttl": _s("number", "Lease time-to-live in seconds of the redis backend, greater than 0. Default 60.",
                      minimum=0, exclusiveMinimum=True),
            "url": _s("string", "Redis URL of the redis backend (${VAR} is expanded). Default: the Redis of "
                      "spec.redis."),
        },
    }


def config_schema() -> Schema:
    """gateway.yaml as the user writes it: typed where the operator or the gateway reads, kept otherwise."""
    return {
        "type": "object",
        "description": ("Required. The gateway's gateway.yaml in its documented shape (gateway, agents, channels, "
                        "hooks, turn_lock, ...). Kept as given, except push.redis, which the operator "
                        f"writes from spec.redis. At most {MAX_CONFIG_DEPTH} levels deep and "
                        f"{MAX_CONFIG_BYTES // 1024} KiB (the operator stalls on a bigger one)."),
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-validations": _rules("spec.config"),
        "properties": {
            "gateway": {
                "type": "object",
                "description": ("Gateway server settings, as the gateway documents them. host and port are set by "
                                "the operator; allowed_origins defaults to the Service's DNS names."),
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "hooks": _forbidden("Not allowed: put hooks in config.hooks."),
                    "hooks_idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
                    "turn_lock": _turn_lock_schema("read only when config.turn_lock is absent"),
                },
            },
            "hooks_idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
            "idempotency": _forbidden("Not allowed: use config.hooks.idempotency."),
            "agents": _free("Required. Agents, as the gateway documents them."),
            "channels": _free("Required. Channels, as the gateway documents them."),
            "hooks": {
                "type": "object",
                "description": "Inbound webhook hooks and their idempotency store. Default: no hooks, sqlite store.",
                "properties": {
                    "idempotency": {
                        "type": "object",
                        "description": "How replicas dedup inbound webhooks. Default store_backend sqlite.",
                        "properties": {
                            "store_backend": _s(
                                "string",
                                "sqlite (default: per replica) or redis (shared through spec.redis; required for "
                                "replicas > 1 under replicaPolicy Refuse).",
                                enum=["sqlite", "redis"]),
                        },
                    },
                    "hooks": {"type": "array", "description": "Hook definitions. Default none; any number.",
                              "items": _hook_schema()},
                },
            },
            "turn_lock": _turn_lock_schema("the gateway reads config.turn_lock first, then config.gateway.turn_lock"),
            "push": {
                "type": "object",
                "description": ("Push settings, as the gateway documents them. Default: none; push.redis is "
                                "written by the operator (from spec.redis)."),
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"redis": _free("Written by the operator; must not be set here.")},
            },
        },
    }


def spec_schema() -> Schema:
    return object_schema(api.GatewaySpec, "Desired state of a set of PraisonAI gateway replicas.", validations="spec")


# what the API server accepts as an Ingress host (a DNS name, optionally one leading '*.' label)
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
COOKIE_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


def _annotations(description: str) -> Schema:
    return {"type": "object", "description": description, "maxProperties": 64,
            "additionalProperties": {"type": "string", "maxLength": 4096}}


def _expose_schema() -> Schema:
    host = _s("string", "Required. The host name clients outside use, e.g. gateway.example.com (a leading '*.' "
              "allowed).", minLength=1, maxLength=253, pattern=HOSTNAME_PATTERN)
    parent_ref = {"type": "object", "required": ["name"], "description": "A Gateway the route attaches to.",
                  "properties": {
                      "name": _s("string", "Required. Name of the Gateway.", minLength=1, maxLength=253),
                      "namespace": _s("string", "Its namespace. Default: the GatewayDeployment's.", minLength=1,
                                      maxLength=63),
                      "sectionName": _s("string", "One listener of the Gateway. Default: every listener that "
                                        "allows the route.", minLength=1, maxLength=253),
                      "port": _s("integer", "Listener port, 1-65535. Default: any.", minimum=1, maximum=65535),
                  }}
    return {
        "type": "object",
        "description": ("Routes from outside the cluster to the replicas: an Ingress, a Gateway API HTTPRoute, or "
                        "both, owned by this resource. With more than one replica the edge pins a client to one "
                        "replica by cookie (webhook deliveries carry none and spread over every ready replica). "
                        "status.expose shows the address once the controller publishes one. Default: none."),
        "properties": {
            "ingress": {"type": "object", "required": ["host"],
                        "description": "A networking.k8s.io/v1 Ingress named like the resource. Default: none.",
                        "properties": {
                            "className": _s("string", "IngressClass. Default: the cluster's default class.",
                                            minLength=1, maxLength=253),
                            "host": host,
                            "tlsSecretName": _s("string", "Secret (same namespace) with the TLS certificate for "
                                                "host. Default: no TLS.", minLength=1, maxLength=253,
                                                pattern=SECRET_NAME_PATTERN),
                            "annotations": _annotations("Extra Ingress annotations; they win over the operator's "
                                                        "(timeouts, affinity). Default none."),
                        }},
            "httpRoute": {"type": "object", "required": ["parentRefs"],
                          "description": ("A gateway.networking.k8s.io/v1 HTTPRoute named like the resource "
                                          "(the Gateway API CRDs must be installed). Default: none."),
                          "properties": {
                              "parentRefs": {"type": "array", "minItems": 1, "maxItems": 32, "items": parent_ref,
                                             "description": "Required. The Gateways to attach to."},
                              "hostnames": {"type": "array", "maxItems": 16, "description": "Host names the route "
                                            "answers. Default: every host of the listener.",
                                            "items": _s("string", "A host name.", minLength=1, maxLength=253,
                                                        pattern=HOSTNAME_PATTERN)},
                              "annotations": _annotations("HTTPRoute annotations. Default none."),
                          }},
            "timeoutSeconds": _s("integer", "How long the edge waits for an answer (a webhook's runs a whole agent "
                                 "turn) and keeps an idle WebSocket, 1-86400 seconds. Default "
                                 f"{api.DEFAULT_EDGE_TIMEOUT_SECONDS}.", minimum=1, maximum=86400,
                                 default=api.DEFAULT_EDGE_TIMEOUT_SECONDS),
            "affinityCookie": _s("string", "Name of the cookie that pins a client to one replica (more than one "
                                 f"replica). Default {api.DEFAULT_AFFINITY_COOKIE}.", pattern=COOKIE_NAME_PATTERN,
                                 default=api.DEFAULT_AFFINITY_COOKIE),
        },
    }


def _env() -> Schema:
    schema = _pod_field("env", f"Extra container env vars (e.g. LLM API keys from Secrets), as in a container: "
                        f"name (1-{MAX_ENV_NAME} characters, unique) with value or valueFrom; at most {MAX_ENV} "
                        f"entries. Default none. {', '.join(RESERVED_ENV)} are set by the operator.")
    # bounds the CEL cost of the reserved-name rule (validation.RULES) over every entry
    schema["maxItems"] = MAX_ENV
    schema["items"]["properties"]["name"].update(minLength=1, maxLength=MAX_ENV_NAME)
    return schema


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
        # Until the operator's first status write the API server shows observedGeneration 0
        # (its default for a missing status), so kstatus (helm --wait, Flux) and Argo CD see a
        # generation not yet observed, InProgress, instead of a resource without conditions,
        # which kstatus takes for Current (helm install --wait returned at once).
        "default": {"observedGeneration": 0},
        "properties": {
            "observedGeneration": _s("integer", "Last generation reconciled (0: not yet).", format="int64"),
            "replicas": _s("integer", "Replicas the operator runs now (may trail spec while gated)."),
            "readyOfDesired": _s("string", "Ready and desired replicas, as 'ready/desired' (for kubectl get)."),
            "selector": _s("string", "Label selector of the gateway pods (for the scale subresource)."),
            "readyReplicas": _s("integer", "Ready gateway pods."),
            "degradedReplicas": _s("integer", "Replicas reporting durability:idempotency in degraded_owners."),
            "storeBackend": _s("string", "Effective idempotency store: sqlite or redis."),
            "exactlyOnce": _s("string", "Status of the ExactlyOnceAdmission condition (for columns)."),
            "expose": {"type": "object", "description": "Where clients outside reach the replicas "
                       "(spec.expose).", "properties": {
                           "address": _s("string", "The address the ingress controller or Gateway published."),
                           "url": _s("string", "The URL for webhooks and WebSocket clients."),
                           "message": _s("string", "Why there is no address yet."),
                       }},
            "gateway": {"type": "object", "description": "What the polled replicas run, as each one's launcher "
                        "tells it in GET /health.", "properties": {
                            "versions": {"type": "array", "description": "Each set of versions found, with how "
                                         "many replicas run it (more than one while a rollout runs).",
                                         "items": {"type": "object", "properties": {
                                             "praisonaiBot": _s("string", "praisonai-bot's version."),
                                             "praisonaiagents": _s("string", "praisonaiagents' version."),
                                             "replicas": _s("integer", "Polled replicas running it."),
                                         }}},
                        }},
            "autoscaling": {"type": "object", "description": "What spec.autoscaling and spec.podMonitor ask for, "
                            "by name (removed with the fields).", "properties": {
                                "horizontalPodAutoscaler": _s("string", "The HorizontalPodAutoscaler's name."),
                                "podMonitor": _s("string", "The PodMonitor's name (written where the cluster "
                                                 "serves PodMonitor)."),
                            }},
            "networkPolicy": {"type": "object", "description": "The gateway pods' NetworkPolicy (spec.networkPolicy), "
                              "when enabled.", "properties": {"name": _s("string", "Its name.")}},
            "sqliteMigration": {"type": "object", "description": "The switch from one SQLite replica with "
                                "spec.persistence to the Redis store: one replica with the old state volume mounted "
                                "copies the records it admitted into Redis before others take traffic.",
                                "properties": {
                                    "token": _s("string", "Names this switch; the launcher writes it to Redis "
                                                "(<prefix>sqlite-migrated) once the records are there."),
                                    "state": _s("string", "Pending or Done.", enum=["Pending", "Done"]),
                                }},
            "redis": {"type": "object", "description": "Redis in use, without credentials.", "properties": {
                "endpoint": _s("string", "host:port/db."),
                "prefix": _s("string", "Key prefix."),
                "canary": _s("string", "The value of the operator's canary key (<prefix>operator-canary, no TTL) in "
                             "this Redis: when it vanishes, so did the dedup records."),
                "runId": _s("string", "The Redis server's run_id when INFO is allowed (a new one on a Redis "
                            "without persistence means its records are gone)."),
                "replId": _s("string", "The primary's replication id (INFO replication's master_replid) when INFO is "
                             "allowed: a server answering whose second replication id is this one was promoted from "
                             "a replica (a failover), and may lack the last records."),
                "dedupHistoryLost": {"type": "object", "description": "Set while the store may have forgotten "
                                     "admitted webhooks (IdempotencyDegraded=True DedupHistoryLost).", "properties": {
                                         "at": _s("string", "When the loss was seen.", format="date-time"),
                                         "until": _s("string", "When every record written before it would have "
                                                     "expired (one record TTL later).", format="date-time"),
                                         "why": _s("string", "What showed it."),
                                     }},
                "unrecordedAdmissions": {"type": "object", "description": "Set while webhooks a replica admitted "
                                         "may never have been recorded in Redis: its outage journal dropped them or "
                                         "stopped before Redis took them, or a claim's lease ran out mid-turn "
                                         "(IdempotencyDegraded=True AdmissionsNotRecorded).", "properties": {
                                             "at": _s("string", "The first such admission seen.", format="date-time"),
                                             "until": _s("string", "The last one plus one record TTL: a redelivery "
                                                         "until then can run again.", format="date-time"),
                                             "admissions": {"type": "integer", "format": "int64", "minimum": 0,
                                                            "description": "How many, at least."},
                                             "why": _s("string", "How they were left unrecorded.", maxLength=200),
                                         }},
            }},
            "conditions": {"type": "array", "description": "Ready, Reconciling, Stalled, RedisReachable, "
                           "IdempotencyDegraded, ExactlyOnceAdmission, RedisDurable, SessionsShared, RedisTLSVerified, "
                           "GatewayCompatible, ReplicaSafeChannels.", "items": condition,
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
                    {"name": "Gateway", "type": "string", "jsonPath": ".status.gateway.versions[*].praisonaiBot",
                     "priority": 1, "description": "the praisonai-bot releases the replicas run"},
                    {"name": "Address", "type": "string", "jsonPath": ".status.expose.address", "priority": 1},
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


# The chart's tenancy policy (charts/gateway-operator/templates/tenancy-policy.yaml) is generated
# from tenancy.RULES like this CRD is from validation.RULES: the CEL and its message live once,
# and the administrator's values reach the CEL as variables that Helm fills in.
_VALUE_PLACEHOLDER = "__tenancy_value_{}__"


def tenancy_policy_template() -> str:
    """The ValidatingAdmissionPolicy (and its Deny binding) of tenancy.RULES, as a Helm template."""
    import yaml

    from gateway_operator.api.tenancy import RULES, TenancyPolicy
    keys = list(TenancyPolicy().variables())
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "__name__", "labels": "__labels__"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [api.GROUP], "apiVersions": [api.VERSION], "operations": ["CREATE", "UPDATE"],
                "resources": [api.PLURAL]}]},
            "variables": [{"name": k, "expression": _VALUE_PLACEHOLDER.format(k)} for k in keys],
            "validations": [{"expression": r.cel, "message": r.message, "reason": "Forbidden"} for r in RULES],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "__name__", "labels": "__labels__"},
        "spec": {"policyName": "__name__", "validationActions": ["Deny"], "matchResources": "__namespaces__"},
    }
    body = yaml.safe_dump_all([policy, binding], sort_keys=False, width=120)
    for k in keys:
        body = body.replace(_VALUE_PLACEHOLDER.format(k), "{{ toJson .Values.tenancy.%s | quote }}" % k)
    body = (body.replace("__name__", "{{ $fullname }}-tenancy")
            .replace("labels: __labels__", 'labels: {{- include "gateway-operator.labels" . | nindent 4 }}')
            .replace("  matchResources: __namespaces__\n", _NAMESPACES))
    return (_TENANCY_HEADER + body + "{{- end }}\n")


_TENANCY_HEADER = """\
{{- if .Values.admissionPolicy.enabled }}
{{- $fullname := include "gateway-operator.fullname" . }}
# GENERATED by `make crds` from operator/gateway_operator/api/tenancy.py (RULES): do not edit.
# What a tenant may ask of the operator (values tenancy.*): the API server refuses a
# GatewayDeployment that breaks it; the operator stalls one that got in anyway.
"""
_NAMESPACES = """\
  {{- if .Values.watchNamespaces }}
  matchResources:
    namespaceSelector:
      matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{- toYaml .Values.watchNamespaces | nindent 8 }}
  {{- end }}
"""
