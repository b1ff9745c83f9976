"""The Argo CD health check (docs/argocd-health.lua) in a real Lua 5.1 interpreter: a table of
GatewayDeployments -> (Argo CD health status, message). The statuses come from the operator's
own status computation (status.build over Facts) plus the states it never writes itself (no
status yet, a newer generation); tests/node/test_readiness.py runs the same check on objects read
from the running operator."""
from __future__ import annotations

from typing import Any

import pytest

from gateway_operator.api import reasons as R
from gateway_operator.core import status
from gateway_operator.core.conditions import Problem
from gateway_operator.core.health import Idempotency, ReplicaHealth
from gateway_operator.core.probe_result import ProbeResult
from harness.argocd import ARGOCD_CM_KEY, SCRIPT, health, readme_argocd_cm
from test_pure import facts

REFUSED = ProbeResult(False, R.CONNECTION_FAILED, "connection refused")
MISSING = Problem(R.SECRET_NOT_FOUND, "Secret 'gw-token' named by spec.authTokenSecretRef does not exist in "
                  "namespace shop")


def resource(generation: int = 2, **fact_overrides: Any) -> dict[str, Any]:
    """A GatewayDeployment whose status the operator computed from these facts."""
    body = {"apiVersion": "gateway-operator.dev/v1alpha1", "kind": "GatewayDeployment",
            "metadata": {"name": "support-bot", "namespace": "shop", "generation": generation}}
    if fact_overrides.pop("no_status", False):
        return body
    body["status"] = status.build(None, facts(**fact_overrides), None, "2026-01-01T00:00:00Z")
    return body


CASES = {
    "created, no status yet": (
        resource(no_status=True), "Progressing", "waiting for the gateway-operator to report status"),
    "created, the CRD's default status (observedGeneration 0)": (
        {**resource(no_status=True), "status": {"observedGeneration": 0}},
        "Progressing", "waiting for the gateway-operator to report status"),
    "ready": (resource(), "Healthy", "Available: 3 of 3 replicas ready"),
    "ready, replicaPolicy Warn on SQLite": (
        resource(store_backend="sqlite", policy="Warn", redis_configured=False, probe=None),
        "Healthy", "Available: 3 of 3 replicas ready; exactly-once webhook admission is NOT held "
                   "(replicaPolicy Warn)"),
    "spec changed, not yet observed": (
        resource(generation=3), "Progressing",
        "waiting for the gateway-operator to observe generation 3 (observed: 2)"),
    "stalled on a missing Secret": (
        resource(problem=MISSING), "Degraded", f"SecretNotFound: {MISSING.message}"),
    "stalled, then the spec changed (the fix may be in it)": (
        resource(generation=3, problem=MISSING), "Progressing",
        "waiting for the gateway-operator to observe generation 3 (observed: 2)"),
    "scale-out waits for Redis": (
        resource(running_replicas=1, ready_replicas=1, updated_replicas=1, probe=REFUSED), "Progressing",
        "WaitingForRedis: holding 1 of 3 replicas until the operator's Redis probe passes"),
    "rolling out a new config": (
        resource(updated_replicas=1), "Progressing", "RollingOut: 1 of 3 replicas updated, 3 ready"),
    "Deployment controller has not seen the new template": (
        resource(rollout_observed=False), "Progressing", "RollingOut: 3 of 3 replicas updated, 3 ready"),
    # Ready False with nothing reconciling and nothing stalled: Ready's reason decides
    "replicas not ready, nothing to roll": (
        resource(desired_replicas=3, running_replicas=2, ready_replicas=2, updated_replicas=2),
        "Progressing", "ReplicasNotReady: 2 of 3 replicas ready"),
    # the check reads Ready/Reconciling/Stalled only, as kstatus does; a degraded store is
    # the IdempotencyDegraded / ExactlyOnceAdmission conditions' business (and the alerts')
    "ready, one replica degraded": (
        resource(health=(ReplicaHealth("p0", Idempotency.RUNTIME_OUTAGE),
                         ReplicaHealth("p1", Idempotency.HEALTHY), ReplicaHealth("p2", Idempotency.HEALTHY))),
        "Healthy", "Available: 3 of 3 replicas ready"),
}


@pytest.mark.parametrize("name", CASES)
def test_argocd_health(name: str) -> None:
    obj, expected_status, expected_message = CASES[name]
    assert health(obj) == (expected_status, expected_message)


def test_the_readme_argocd_cm_carries_the_check() -> None:
    cm = readme_argocd_cm()
    assert (cm["apiVersion"], cm["kind"], cm["metadata"]["name"]) == ("v1", "ConfigMap", "argocd-cm")
    assert cm["data"][ARGOCD_CM_KEY] == SCRIPT.read_text()
    # what Argo CD runs is that text: one case through it
    assert health(CASES["ready"][0], cm["data"][ARGOCD_CM_KEY]).status == "Healthy"
