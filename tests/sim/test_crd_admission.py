"""The CRD's rules at the real API server, and ``gateway-operator check`` offline, agree:
same verdict, same message, for good and bad GatewayDeployments."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from gateway_operator import offline
from gateway_operator.api import pod_schemas, validation
from gateway_operator.api.crd import crd
from harness.cluster import REPO, Cluster, field_errors_as_newest
from harness.operator import gateway_deployment, install_crd, redis_store

REDIS = {"url": "redis://redis.example:6379/0", "passwordSecretRef": {"name": "redis-auth"}}


def with_config(**extra) -> dict:
    """The default config plus ``extra`` sections."""
    return {**gateway_deployment("x")["spec"]["config"], **extra}


def with_hook(**fields) -> dict:
    return with_config(hooks={"hooks": [{"path": "deploy", "message": "Event: {text}", **fields}]})


COALESCED = {"path": "github", "message": "{text}", "coalesce": {"group_key": "{repository.full_name}"}}


AFFINITY = {  # what a real Deployment carries
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
            {"key": "node-role/bots", "operator": "Exists"}]}}],
    },
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "a"}},
        "topologyKey": "kubernetes.io/hostname"}}]},
}
TOLERATIONS = [{"key": "dedicated", "operator": "Equal", "value": "bots", "effect": "NoSchedule"},
               {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
          "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "a"}}}
QUANTITY_PATTERN = "should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))"
NOT_CHECKED = "some validation rules were not checked because the object was invalid"


def without_channels() -> dict:
    doc = gateway_deployment("a")
    del doc["spec"]["config"]["channels"]
    return doc


CASES = {
    "one replica on sqlite": (gateway_deployment("a"), None),
    "three on redis": (gateway_deployment("a", replicas=3, config=redis_store(), redis=REDIS), None),
    "three under Warn": (gateway_deployment("a", replicas=3, replicaPolicy="Warn"), None),
    "three without redis": (gateway_deployment("a", replicas=3), validation.MSG_REPLICAS_NEED_REDIS),
    "redis backend, no redis": (gateway_deployment("a", config=redis_store()), validation.MSG_REDIS_BACKEND_NEEDS_REDIS),
    "url and host": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "host": "r"}),
                     validation.MSG_REDIS_ONE_SOURCE),
    "credentials in url": (gateway_deployment("a", config=redis_store(), redis={"url": "redis://:pw@r:6379/0"}),
                           validation.MSG_REDIS_URL_CREDENTIALS),
    "not a redis url": (gateway_deployment("a", config=redis_store(), redis={"url": "http://r:6379"}),
                        validation.MSG_REDIS_URL_SCHEME),
    "push.redis in config": (gateway_deployment("a", config={**redis_store(), "push": {"redis": {"url": "x"}}},
                                                redis=REDIS), validation.MSG_PUSH_REDIS_OWNED),
    "persistence with replicas": (gateway_deployment("a", replicas=2, replicaPolicy="Warn",
                                                     persistence={"enabled": True}),
                                  validation.MSG_PERSISTENCE_ONE_REPLICA),
    "no channels": (without_channels(), validation.MSG_CONFIG_SECTIONS),
    "bad prefix": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "prefix": "has space"}),
                   validation.MSG_PREFIX_FORMAT),
    "unknown policy": (gateway_deployment("a", replicaPolicy="Maybe"), 'Unsupported value: "Maybe"'),
    "replicas as text": (gateway_deployment("a", replicas="two"), "must be of type integer"),
    # hostile input (issue 7): every form the operator could not act on is refused up front
    **{f"redis url {url}": (gateway_deployment("a", config=redis_store(), redis={"url": url}),
                            validation.MSG_REDIS_URL_SCHEME)
       for url in ("redis://r:0", "redis://r:99999", "redis://[::1", "redis://[fe80::1%eth0]:6379",
                   "redis://r:6379/0?password=x", "redis://r:6379/99", "redis://r:6379/0#x", "redis://r:port")},
    "ipv6 url": (gateway_deployment("a", config=redis_store(), redis={"url": "rediss://[fd00::5]:6380/2"}), None),
    "host with credentials": (gateway_deployment("a", config=redis_store(), redis={"host": ":pw@evil.example"}),
                              validation.MSG_REDIS_HOST),
    "secret name with a slash": (gateway_deployment("a", authTokenSecretRef={"name": "Not/A Name"}),
                                 "spec.authTokenSecretRef.name in body should match"),
    "secret key with a slash": (gateway_deployment("a", authTokenSecretRef={"name": "tok", "key": "a/b"}),
                                "spec.authTokenSecretRef.key in body should match"),
    "broken ipv6 url": (gateway_deployment("a", config=redis_store(), redis={"url": "redis://[:::]:1/0"}),
                        validation.MSG_REDIS_URL_SCHEME),
    "host with port": (gateway_deployment("a", config=redis_store(), redis={"host": "r:6380"}),
                       validation.MSG_REDIS_HOST),
    # your own Redis (issue 20): an ACL user, a private CA, a server name, no silent skip of checks
    "tls with a CA, a server name and a user": (gateway_deployment("a", config=redis_store(), redis={
        "host": "10.0.0.5", "port": 6380, "passwordSecretRef": {"name": "r"}, "usernameSecretRef": {"name": "r"},
        "tls": {"enabled": True, "caSecretRef": {"name": "redis-ca"}, "serverName": "redis.prod.internal"}}), None),
    "rediss url with a CA": (gateway_deployment("a", config=redis_store(), redis={
        "url": "rediss://redis.prod:6380/0", "tls": {"caSecretRef": {"name": "redis-ca", "key": "bundle.pem"}}}),
        None),
    "skip verify alone": (gateway_deployment("a", config=redis_store(), redis={
        "url": "rediss://redis.prod:6380/0", "tls": {"insecureSkipVerify": True}}), None),
    "a CA without tls": (gateway_deployment("a", config=redis_store(), redis={
        **REDIS, "tls": {"caSecretRef": {"name": "redis-ca"}}}), validation.MSG_TLS_OPTIONS_NEED_TLS),
    "skip verify without tls": (gateway_deployment("a", config=redis_store(), redis={
        "host": "r", "tls": {"insecureSkipVerify": True}}), validation.MSG_TLS_OPTIONS_NEED_TLS),
    "skip verify with a CA": (gateway_deployment("a", config=redis_store(), redis={
        "url": "rediss://r:6380/0", "tls": {"insecureSkipVerify": True, "caSecretRef": {"name": "ca"}}}),
        validation.MSG_TLS_SKIP_VERIFY_ALONE),
    "skip verify with a server name": (gateway_deployment("a", config=redis_store(), redis={
        "url": "rediss://r:6380/0", "tls": {"insecureSkipVerify": True, "serverName": "r.example"}}),
        validation.MSG_TLS_SKIP_VERIFY_ALONE),
    **{f"server name {name!r}": (gateway_deployment("a", config=redis_store(), redis={
        "url": "rediss://10.0.0.5:6380/0", "tls": {"serverName": name}}), validation.MSG_TLS_SERVER_NAME)
       for name in ("redis.prod:6380", "10.0.0.5/32", "-bad.example", "a b")},
    "user without password": (gateway_deployment("a", config=redis_store(), redis={
        "url": "redis://redis.example:6379/0", "usernameSecretRef": {"name": "r"}}),
        validation.MSG_USERNAME_NEEDS_PASSWORD),
    "managed with a user": (gateway_deployment("a", config=redis_store(), redis={
        "managed": {"enabled": True}, "passwordSecretRef": {"name": "r"}, "usernameSecretRef": {"name": "r"}}),
        validation.MSG_MANAGED_OWN_CREDENTIALS),
    "managed with a CA": (gateway_deployment("a", config=redis_store(), redis={
        "managed": {"enabled": True}, "tls": {"enabled": True, "caSecretRef": {"name": "ca"}}}),
        validation.MSG_MANAGED_OWN_CREDENTIALS),
    "name too long": ({**gateway_deployment("a"), "metadata": {"name": "a" * 58}}, validation.MSG_NAME),
    "name with dots": ({**gateway_deployment("a"), "metadata": {"name": "a.b"}}, validation.MSG_NAME),
    **{f"env {name}": (gateway_deployment("a", env=[{"name": name, "value": "x"}]), validation.MSG_RESERVED_ENV)
       for name in validation.RESERVED_ENV},
    "env of a user": (gateway_deployment("a", env=[{"name": "OPENAI_API_KEY", "valueFrom": {
        "secretKeyRef": {"name": "llm", "key": "key"}}}]), None),
    "top-level hooks_idempotency": (gateway_deployment("a", replicas=3, config={
        **redis_store(), "hooks_idempotency": {"store_backend": "sqlite"}}, redis=REDIS),
        validation.MSG_IDEMPOTENCY_FORMS),
    "top-level idempotency": (gateway_deployment("a", config={**redis_store(), "idempotency": {"x": 1}},
                                                 redis=REDIS), validation.MSG_IDEMPOTENCY_FORMS),
    "gateway.hooks_idempotency": (gateway_deployment("a", config={
        **redis_store(), "gateway": {"hooks_idempotency": {"store_backend": "sqlite"}}}, redis=REDIS),
        validation.MSG_IDEMPOTENCY_FORMS),
    # spec.expose (issue 12): the CRD admits any Ingress annotation (the tenancy policy decides)
    "ingress with its own annotations": (gateway_deployment("a", expose={"ingress": {
        "host": "bot.example.com", "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "1m"}}}), None),
    # edge annotations are the administrator's tenancy policy (tests/sim/test_tenancy.py), not the CRD's
    "blank image": (gateway_deployment("a", image="   "), validation.MSG_IMAGE_BLANK),
    "image with a tab only": (gateway_deployment("a", image="\t"), validation.MSG_IMAGE_BLANK),
    "ingress host with a scheme": (gateway_deployment("a", expose={"ingress": {"host": "https://bot.example.com"}}),
                                   "spec.expose.ingress.host"),
    "route without parents": (gateway_deployment("a", expose={"httpRoute": {"parentRefs": []}}),
                              "spec.expose.httpRoute.parentRefs"),
    "hooks_idempotency as text": (gateway_deployment("a", config={**redis_store(), "hooks_idempotency": "sqlite"},
                                                     redis=REDIS), "must be of type object"),
    "config.gateway as text": (gateway_deployment("a", config={**redis_store(), "gateway": "x"}, redis=REDIS),
                               "must be of type object"),
    # typed pod fields (issue 11): the real core/v1 schemas, generated from the API server's OpenAPI
    "real affinity, tolerations, spread": (gateway_deployment(
        "a", affinity=AFFINITY, tolerations=TOLERATIONS, topologySpreadConstraints=[SPREAD],
        nodeSelector={"kubernetes.io/os": "linux"}, priorityClassName="bots", imagePullSecrets=[{"name": "reg"}]),
        None),
    "resources with quantities": (gateway_deployment("a", resources={
        "requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": 1, "memory": "1Gi",
                                                                   "ephemeral-storage": "2e9"}}), None),
    "env from secret, configmap and field": (gateway_deployment("a", env=[
        {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "key", "optional": True}}},
        {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "models", "key": "default"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MEMORY", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]),
        None),
    "managed redis resources": (gateway_deployment("a", config=redis_store(), redis={"managed": {
        "enabled": True, "resources": {"limits": {"memory": "128Mi"}}}}), None),
    "affinity typo": (gateway_deployment("a", affinity={"nodeAfinity": AFFINITY["nodeAffinity"]}),
                      'unknown field "spec.affinity.nodeAfinity"'),
    "toleration typo": (gateway_deployment("a", tolerations=[{"key": "k", "opertor": "Exists"}]),
                        'unknown field "spec.tolerations[0].opertor"'),
    "cpu: lots": (gateway_deployment("a", resources={"requests": {"cpu": "lots"}}),
                  'spec.resources.requests.cpu: Invalid value: "lots": spec.resources.requests.cpu in body '
                  + QUANTITY_PATTERN),
    "cpu as a fraction number": (gateway_deployment("a", resources={"limits": {"cpu": 0.5}}),
                                 "spec.resources.limits.cpu in body must be of type integer,string"),
    "resources typo": (gateway_deployment("a", resources={"request": {"cpu": "1"}}),
                       'unknown field "spec.resources.request"'),
    "resources claims": (gateway_deployment("a", resources={"claims": [{"name": "gpu"}]}),
                         'unknown field "spec.resources.claims"'),
    "managed redis memory: lots": (gateway_deployment("a", config=redis_store(), redis={"managed": {
        "enabled": True, "resources": {"limits": {"memory": "lots"}}}}),
        'spec.redis.managed.resources.limits.memory: Invalid value: "lots"'),
    "toleration operator": (gateway_deployment("a", tolerations=[{"key": "k", "operator": "Equals"}]),
                            'spec.tolerations[0].operator: Unsupported value: "Equals": supported values: '
                            '"Equal", "Exists"'),
    "toleration effect": (gateway_deployment("a", tolerations=[{"operator": "Exists", "effect": "NoRun"}]),
                          'spec.tolerations[0].effect: Unsupported value: "NoRun"'),
    "env without name": (gateway_deployment("a", env=[{"value": "x"}]), "spec.env[0].name: Required value"),
    "env name repeated": (gateway_deployment("a", env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
                          'spec.env[1]: Duplicate value: {"name":"A"}'),
    "env of 201": (gateway_deployment("a", env=[{"name": f"E{i}", "value": "x"} for i in range(201)]),
                   "spec.env: Too many: 201: must have at most 200 items"),
    "env as text": (gateway_deployment("a", env=["A=B"]), "must be an object for an array of list-type map"),
    "secretKeyRef without key": (gateway_deployment("a", env=[{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s"}}}]), "spec.env[0].valueFrom.secretKeyRef.key: Required value"),
    "spread whenUnsatisfiable": (gateway_deployment("a", topologySpreadConstraints=[
        {**SPREAD, "whenUnsatisfiable": "Never"}]),
        'spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "Never": supported values: '
        '"DoNotSchedule", "ScheduleAnyway"'),
    "spread without topologyKey": (gateway_deployment("a", topologySpreadConstraints=[
        {"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]),
        "spec.topologySpreadConstraints[0].topologyKey: Required value"),
    "spread repeated": (gateway_deployment("a", topologySpreadConstraints=[SPREAD, {**SPREAD, "maxSkew": 2}]),
                        'spec.topologySpreadConstraints[1]: Duplicate value: {"topologyKey":'
                        '"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}'),
    "image pull secret repeated": (gateway_deployment("a", imagePullSecrets=[{"name": "r"}, {"name": "r"}]),
                                   'spec.imagePullSecrets[1]: Duplicate value: {"name":"r"}'),
    "node affinity operator": (gateway_deployment("a", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "k", "operator": "Within"}]}]}}}),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        '.matchExpressions[0].operator: Unsupported value: "Within"'),
    "priorityClassName as number": (gateway_deployment("a", priorityClassName=1000),
                                    "spec.priorityClassName in body must be of type string"),
    "nodeSelector value as number": (gateway_deployment("a", nodeSelector={"zone": 1}),
                                     "spec.nodeSelector.zone in body must be of type string"),
    # typed config (issue 11): what the launcher and the gateway read
    "typed hooks and turn lock": (gateway_deployment("a", redis=REDIS, config={
        **redis_store(), "turn_lock": {"backend": "redis", "ttl": 30, "url": "${TURN_LOCK_URL}"},
        "hooks": {"idempotency": {"store_backend": "redis"}, "hooks": [{
            "path": "/github/", "agent": "assistant", "action": "agent", "message": "Event: {text}",
            "idempotency_key": "{id}", "secret": "${GITHUB_SECRET}", "signature_header": "X-Hub-Signature-256",
            "signature_scheme": "hmac_hex", "signature_prefix": "sha256=", "signature_tolerance_seconds": 0,
            "events": ["issues.opened"], "event_header": "X-GitHub-Event", "enabled": True, "deliver_only": False,
            "deliver_to": "telegram:1", "metadata": {"team": "ops"}, "owner": "kept in metadata",
            "coalesce": {"group_key": "{repository.full_name}", "window_seconds": 0.5, "max_wait_seconds": 60}},
            {"path": "wake", "action": "wake"}]}}), None),
    # coalesce (issue 56): a coalesced delivery is recorded before its run, so more than one replica is refused
    # under Refuse, counted as the replica rules count (spec.replicas, or the autoscaler's maxReplicas)
    "coalesce on two replicas": (gateway_deployment("a", replicas=2, redis=REDIS, config=with_config(
        hooks={"idempotency": {"store_backend": "redis"}, "hooks": [COALESCED]})), validation.MSG_COALESCE_ONE_REPLICA),
    "coalesce with an autoscaler": (gateway_deployment("a", redis=REDIS, autoscaling={"enabled": True}, config=with_config(
        hooks={"idempotency": {"store_backend": "redis"}, "hooks": [COALESCED]})), validation.MSG_COALESCE_ONE_REPLICA),
    "coalesce on one replica": (gateway_deployment("a", config=with_hook(coalesce=COALESCED["coalesce"])), None),
    "coalesce on two under Warn": (gateway_deployment("a", replicas=2, replicaPolicy="Warn", redis=REDIS, config=with_config(
        hooks={"idempotency": {"store_backend": "redis"}, "hooks": [COALESCED]})), None),
    "coalesce on a disabled hook": (gateway_deployment("a", replicas=2, redis=REDIS, config=with_config(
        hooks={"idempotency": {"store_backend": "redis"}, "hooks": [{**COALESCED, "enabled": False}]})), None),
    # a dead holder's claim frees within 90 s; a record lives 1 hour to 7 days
    "claim lease 900": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "claimLeaseSeconds": 900}),
                        validation.MSG_CLAIM_LEASE_BOUND),
    "claim lease 60": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "claimLeaseSeconds": 60}), None),
    "record ttl under an hour": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "recordTTLSeconds": 600}),
                                 "spec.redis.recordTTLSeconds in body should be greater than or equal to 3600"),
    "record ttl of 8 days": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "recordTTLSeconds": 691200}),
                             "spec.redis.recordTTLSeconds in body should be less than or equal to 604800"),
    "record ttl of 7 days": (gateway_deployment("a", config=redis_store(), redis={**REDIS, "recordTTLSeconds": 604800}),
                             None),
    "request body of 100 bytes": (gateway_deployment("a", maxRequestBodyBytes=100),
                                  "spec.maxRequestBodyBytes in body should be greater than or equal to 1024"),
    "turn_lock backend: redsi": (gateway_deployment("a", config=with_config(turn_lock={"backend": "redsi"})),
                                 'spec.config.turn_lock.backend: Unsupported value: "redsi": supported values: '
                                 '"local", "redis"'),
    "turn_lock backend: memory": (gateway_deployment("a", config=with_config(turn_lock={"backend": "memory"})),
                                  'spec.config.turn_lock.backend: Unsupported value: "memory"'),
    "gateway.turn_lock backend": (gateway_deployment("a", config=with_config(gateway={"turn_lock": {
        "backend": "etcd"}})), 'spec.config.gateway.turn_lock.backend: Unsupported value: "etcd"'),
    "turn_lock ttl 0": (gateway_deployment("a", config=with_config(turn_lock={"ttl": 0})),
                        "spec.config.turn_lock.ttl: Invalid value: 0: spec.config.turn_lock.ttl in body should be "
                        "greater than 0"),
    "turn_lock typo": (gateway_deployment("a", config=with_config(turn_lock={"bakend": "redis"})),
                       'unknown field "spec.config.turn_lock.bakend"'),
    "hook pth": (gateway_deployment("a", config=with_config(hooks={"hooks": [{"pth": "deploy"}]})),
                 "spec.config.hooks.hooks[0].path: Required value"),
    "hook path of slashes": (gateway_deployment("a", config=with_hook(path="//")),
                             'spec.config.hooks.hooks[0].path: Invalid value: "//": spec.config.hooks.hooks[0].path '
                             "in body should match"),
    "hook action": (gateway_deployment("a", config=with_hook(action="run")),
                    'spec.config.hooks.hooks[0].action: Unsupported value: "run": supported values: "agent", '
                    '"wake"'),
    "hook signature scheme": (gateway_deployment("a", config=with_hook(signature_scheme="hmac")),
                              'spec.config.hooks.hooks[0].signature_scheme: Unsupported value: "hmac"'),
    "hook negative tolerance": (gateway_deployment("a", config=with_hook(signature_tolerance_seconds=-1)),
                                "spec.config.hooks.hooks[0].signature_tolerance_seconds in body should be greater "
                                "than or equal to 0"),
    "hook enabled as text": (gateway_deployment("a", config=with_hook(enabled="yes")),
                             "spec.config.hooks.hooks[0].enabled in body must be of type boolean"),
    "hook coalesce typo": (gateway_deployment("a", config=with_hook(coalesce={"group_key": "k", "window": 5})),
                           'unknown field "spec.config.hooks.hooks[0].coalesce.window"'),
    "hook coalesce window 0": (gateway_deployment("a", config=with_hook(coalesce={"group_key": "k",
                                                                                 "window_seconds": 0})),
                               "spec.config.hooks.hooks[0].coalesce.window_seconds in body should be greater than 0"),
    "hooks typo": (gateway_deployment("a", config=with_config(hooks={"idempotncy": {"store_backend": "redis"}})),
                   'unknown field "spec.config.hooks.idempotncy"'),
    "idempotency typo": (gateway_deployment("a", config=with_config(hooks={"idempotency": {"backend": "redis"}})),
                         'unknown field "spec.config.hooks.idempotency.backend"'),
    "hooks as a list": (gateway_deployment("a", config=with_config(hooks=[{"path": "deploy"}])),
                        'unknown field "spec.config.hooks[0].path"'),
    # spec.autoscaling: the autoscaler writes spec.replicas up to maxReplicas, so it is guarded as replicas are
    "autoscaling without redis": (gateway_deployment("a", autoscaling={"enabled": True, "maxReplicas": 3}),
                                  validation.MSG_AUTOSCALING_NEEDS_REDIS),
    "autoscaling defaults without redis": (gateway_deployment("a", autoscaling={"enabled": True}),
                                           validation.MSG_AUTOSCALING_NEEDS_REDIS),
    "autoscaling on redis": (gateway_deployment("a", autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 6,
                                                                  "target": {"averageValue": "1.5"}},
                                                config=redis_store(), redis=REDIS), None),
    "autoscaling under Warn": (gateway_deployment("a", replicaPolicy="Warn", autoscaling={"enabled": True}), None),
    "autoscaling up to one": (gateway_deployment("a", autoscaling={"enabled": True, "maxReplicas": 1}), None),
    "autoscaling off without redis": (gateway_deployment("a", autoscaling={"maxReplicas": 5}), None),
    "autoscaling min above max": (gateway_deployment("a", autoscaling={"enabled": True, "minReplicas": 4,
                                                                       "maxReplicas": 2},
                                                     config=redis_store(), redis=REDIS),
                                  validation.MSG_AUTOSCALING_BOUNDS),
    "autoscaling drain too long": (gateway_deployment("a", autoscaling={"enabled": True}, drainSeconds=1800,
                                                      config=redis_store(), redis=REDIS),
                                   validation.MSG_AUTOSCALING_DRAIN),
    "autoscaling a shared sqlite pvc": (gateway_deployment("a", replicaPolicy="Warn", autoscaling={"enabled": True},
                                                           persistence={"enabled": True}),
                                        validation.MSG_AUTOSCALING_PERSISTENCE),
    "autoscaling target zero": (gateway_deployment("a", autoscaling={"enabled": True, "target": {"averageValue": "0"}},
                                                   config=redis_store(), redis=REDIS),
                                "spec.autoscaling.target.averageValue in body should match"),
    "autoscaling past 100": (gateway_deployment("a", autoscaling={"enabled": True, "maxReplicas": 101},
                                                config=redis_store(), redis=REDIS),
                             "spec.autoscaling.maxReplicas in body should be less than or equal to 100"),
    "pod monitor interval": (gateway_deployment("a", podMonitor={"interval": "15 seconds"}),
                             "spec.podMonitor.interval in body should match"),
    # the API server still runs CEL after a non-blocking error (pattern, duplicate), and skips it after a blocking one
    "pattern and a rule": (gateway_deployment("a", replicas=3, resources={"limits": {"cpu": "x"}}),
                           validation.MSG_REPLICAS_NEED_REDIS),
    "enum and a rule": (gateway_deployment("a", replicas=3, tolerations=[{"operator": "Equals"}]), NOT_CHECKED),
}


@pytest.mark.parametrize("case", CASES)
def test_offline_check(case: str) -> None:
    doc, expected = CASES[case]
    errors = offline.check(doc)
    if expected is None:
        assert errors == []
    else:
        assert any(expected in e for e in errors), errors


@pytest.mark.parametrize("case", CASES)
def test_api_server_agrees_with_offline_check(cluster: Cluster, namespace: str, case: str) -> None:
    install_crd(cluster)
    doc, expected = CASES[case]
    result = cluster.apply(json.dumps(doc), "-n", namespace, "--dry-run=server", check=False)
    if expected is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode != 0
    stderr = field_errors_as_newest(result.stderr, cluster.server_minor).replace("\\", "")  # 1.30-1.34 word it apart
    assert expected.replace("\\", "") in stderr
    errors = [e.replace("\\", "") for e in offline.check(doc)]
    for error in errors:  # every offline message is one the server gave
        assert error.split(": ", 1)[-1].strip('"') in stderr, (error, result.stderr)
    # ... and every error the server gave, offline gives: kubectl prints one per line, or one alone,
    # or (strict field validation) the unknown fields alone
    if " is invalid: " in stderr:
        server = [line[2:] for line in stderr.splitlines() if line.startswith("* ")] or \
            [stderr.strip().split(" is invalid: ", 1)[1]]
    else:
        server = [f'{p}: unknown field "{p}"' for p in re.findall(r'unknown field "([^"]*)"', stderr)]
    assert sorted(server) == sorted(errors), (server, errors)


def test_committed_crd_is_generated_from_code() -> None:
    committed = yaml.safe_load((REPO / "crds/gatewaydeployments.yaml").read_text())
    assert committed == crd(), "regenerate: gateway-operator crd > crds/gatewaydeployments.yaml"
    chart_copy = REPO / "charts/gateway-operator/crds/gatewaydeployments.yaml"
    assert yaml.safe_load(chart_copy.read_text()) == committed, "regenerate: make crds"


def test_pod_schemas_are_generated_from_the_api_server(cluster: Cluster) -> None:
    """pod_schemas.json is what hack/gen-pod-schemas.py makes of the running API server's OpenAPI."""
    result = subprocess.run([sys.executable, str(REPO / "hack/gen-pod-schemas.py"), "--check",
                             "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True)
    if "hack/versions.env pins" in result.stderr:
        pytest.skip(result.stderr.strip())  # GWOP_TEST_KUBECONFIG at a cluster of another version
    assert result.returncode == 0, result.stderr


def test_typed_schema_is_structural_and_self_describing() -> None:
    """No $ref/allOf/oneOf/anyOf in the CRD; every field the CRD declares says what it is, and
    every field of our own says its default (or that it is required) - kubectl explain answers."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = json.dumps(schema)
    for keyword in ('"$ref"', '"allOf"', '"oneOf"', '"anyOf"'):
        assert keyword not in text
    pod_fields = set(pod_schemas.FIELDS)

    def walk(node: dict, path: str, ours: bool) -> None:
        for key, sub in (node.get("properties") or {}).items():
            where = f"{path}.{key}"
            assert sub.get("description"), where
            own = ours and not (path == "spec" and key in pod_fields) and where != "spec.redis.managed.resources"
            if own or (path == "spec" and key in pod_fields) or where == "spec.redis.managed.resources":
                assert any(w in sub["description"] for w in ("Default", "default", "Required", "Not allowed",
                                                             "must not be set")), where
            walk(sub, where, own)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]", ours)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], path + ".*", ours)

    walk(schema["properties"]["spec"], "spec", True)


def test_check_command_exit_codes(tmp_path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(CASES["three on redis"][0]))
    bad.write_text(yaml.safe_dump(CASES["three without redis"][0]))
    cli = [sys.executable, "-m", "gateway_operator.cli", "check", "-f"]
    ok = subprocess.run([*cli, str(good)], capture_output=True, text=True)
    refused = subprocess.run([*cli, str(bad)], capture_output=True, text=True)
    assert ok.returncode == 0 and "valid" in ok.stdout
    assert refused.returncode == 1 and validation.MSG_REPLICAS_NEED_REDIS in refused.stderr
    assert 'The GatewayDeployment "a" is invalid' in refused.stderr
