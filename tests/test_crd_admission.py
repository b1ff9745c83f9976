"""The CRD's rules at the real API server, and ``gateway-operator check`` offline, agree:
same verdict, same message, for good and bad GatewayDeployments."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from gateway_operator import offline, validation
from gateway_operator.crd import crd
from support.cluster import REPO, Cluster
from support.operator import gateway_deployment, install_crd, redis_store

REDIS = {"url": "redis://redis.example:6379/0", "passwordSecretRef": {"name": "redis-auth"}}

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
    "host with port": (gateway_deployment("a", config=redis_store(), redis={"host": "r:6380"}),
                       validation.MSG_REDIS_HOST),
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
    "hooks_idempotency as text": (gateway_deployment("a", config={**redis_store(), "hooks_idempotency": "sqlite"},
                                                     redis=REDIS), "must be of type object"),
    "config.gateway as text": (gateway_deployment("a", config={**redis_store(), "gateway": "x"}, redis=REDIS),
                               "must be of type object"),
}


@pytest.mark.parametrize("case", CASES)
def test_offline_check(case: str) -> None:
    doc, expected = CASES[case]
    errors = offline.check(doc)
    if expected is None:
        assert errors == []
    else:
        assert any(expected in e for e in errors), errors


@pytest.mark.cluster
@pytest.mark.parametrize("case", CASES)
def test_api_server_agrees_with_offline_check(cluster: Cluster, namespace: str, case: str) -> None:
    install_crd(cluster)
    doc, expected = CASES[case]
    result = cluster.apply(json.dumps(doc), "-n", namespace, "--dry-run=server", check=False)
    if expected is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode != 0
    assert expected in result.stderr
    for error in offline.check(doc):  # every offline message is one the server gave
        assert error.split(": ", 1)[-1].strip('"') in result.stderr.replace("\\", ""), (error, result.stderr)


def test_committed_crd_is_generated_from_code() -> None:
    committed = yaml.safe_load((REPO / "crds/gatewaydeployments.yaml").read_text())
    assert committed == crd(), "regenerate: gateway-operator crd > crds/gatewaydeployments.yaml"
    chart_copy = REPO / "charts/gateway-operator/crds/gatewaydeployments.yaml"
    assert yaml.safe_load(chart_copy.read_text()) == committed, "regenerate: make crds"


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
