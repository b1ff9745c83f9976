"""Readiness as the ecosystem reads it (issue 10, item 3), against the running operator:
Helm 4's `helm install --wait` (kstatus: status.observedGeneration, Reconciling, Stalled, Ready)
on an application chart that ships a GatewayDeployment (tests/charts/gwd-app), `kubectl wait`
on the Ready condition and on status.observedGeneration, and the Argo CD health check
(docs/argocd-health.lua) run on the objects the API server returned.

Real parts: helm v4.1.4, kubectl, the local control plane with the real node, the operator CLI.
Each replica is the HEALTH ENDPOINT STAND-IN image (a TEST IMAGE) as a real pod."""
from __future__ import annotations

import json
import re
import uuid

from gateway_operator.api import reasons
from harness import node
from harness.argocd import ARGOCD_CM_KEY, health, readme_argocd_cm
from harness.cluster import REPO, Cluster
from harness.gateways import conditions, runnable, wait_condition
from harness.operator import OperatorProcess, gateway_deployment

APP_CHART = str(REPO / "tests/charts/gwd-app")
GWD = "gatewaydeployment.gateway-operator.dev"


def install(cluster: Cluster, namespace: str, release: str, *args: str, wait: str = "--wait",
            timeout: str = "90s"):
    # on the real node the replicas run the HEALTH ENDPOINT STAND-IN image (present: never pulled)
    image = ("--set", f"image={node.images().health_standin}") if cluster.real_node else ()
    return cluster.helm("install", release, APP_CHART, "-n", namespace, wait, "--timeout", timeout, *image, *args,
                        check=False)


def argocd_cm_script(cluster: Cluster, namespace: str) -> str:
    """The check as Argo CD reads it: the README's block merged into an existing argocd-cm the
    way the README says, then the key read back."""
    cluster.kubectl("-n", namespace, "create", "configmap", "argocd-cm", "--from-literal=url=https://argocd.test")
    patch = readme_argocd_cm()
    del patch["metadata"]["namespace"]  # argocd, in the README
    cluster.kubectl("-n", namespace, "patch", "configmap", "argocd-cm", "--type", "merge", "-p", json.dumps(patch))
    data = cluster.get_json("-n", namespace, "configmap/argocd-cm")["data"]
    assert data["url"] == "https://argocd.test"  # Argo CD's own settings stay
    return data[ARGOCD_CM_KEY]


def test_helm_wait_returns_once_ready_and_kubectl_wait_follows_the_generation(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    script = argocd_cm_script(cluster, namespace)
    done = install(cluster, namespace, "shop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "STATUS: deployed" in done.stdout
    # helm returned: the GatewayDeployment is Ready for the generation helm applied, not
    # merely created (before the CRD defaulted status.observedGeneration to 0, kstatus took
    # the fresh object without conditions for Current and helm returned at once)
    body = cluster.get_json("-n", namespace, "gwd", "shop")
    assert body["metadata"]["generation"] == body["status"]["observedGeneration"] == 1
    found = {c["type"]: c for c in body["status"]["conditions"]}
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("True", reasons.AVAILABLE)
    assert found["Reconciling"]["status"] == found["Stalled"]["status"] == "False"
    assert health(body, script) == ("Healthy", "Available: 1 of 1 replicas ready")

    ready = cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gwd/shop", "--timeout=5s")
    assert ready.stdout.strip() == f"{GWD}/shop condition met"

    # a spec change (new pod annotation: the pods roll): generation 2, which the API
    # server's answer shows not yet observed
    patched = json.loads(cluster.kubectl(
        "-n", namespace, "patch", "gwd", "shop", "--type=merge", "-o", "json",
        "-p", json.dumps({"spec": {"podAnnotations": {"example.com/revision": "2"}}})).stdout)
    assert (patched["metadata"]["generation"], patched["status"]["observedGeneration"]) == (2, 1)
    assert health(patched, script) == (
        "Progressing", "waiting for the gateway-operator to observe generation 2 (observed: 1)")
    # kubectl wait on Ready honours the conditions' observedGeneration: the object it
    # returns is Ready for generation 2, never the stale Ready of generation 1
    met = json.loads(cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gwd/shop",
                                     "--timeout=60s", "-o", "json").stdout)
    ready_condition = next(c for c in met["status"]["conditions"] if c["type"] == "Ready")
    assert (ready_condition["status"], ready_condition["observedGeneration"]) == ("True", 2)
    observed = cluster.kubectl("-n", namespace, "wait", "--for=jsonpath={.status.observedGeneration}=2",
                               "gwd/shop", "--timeout=60s")
    assert observed.stdout.strip() == f"{GWD}/shop condition met"
    never = cluster.kubectl("-n", namespace, "wait", "--for=jsonpath={.status.observedGeneration}=3",
                            "gwd/shop", "--timeout=2s", check=False)
    assert never.returncode != 0 and "timed out waiting for the condition" in never.stderr


def test_helm_wait_fails_at_once_naming_what_stalls(cluster: Cluster, operator: OperatorProcess,
                                                    namespace: str) -> None:
    """The chart names an auth-token Secret nobody created: the operator stalls on it at
    reconcile (SecretNotFound); kstatus reads Stalled=True as Failed and helm gives up
    without waiting out --timeout, printing the condition's message."""
    script = argocd_cm_script(cluster, namespace)
    failed = install(cluster, namespace, "stuck", "--set", "authToken.existingSecret=gw-token", timeout="120s")
    assert failed.returncode == 1
    assert failed.stderr.strip() == (
        f"Error: INSTALLATION FAILED: resource GatewayDeployment/{namespace}/stuck not ready. status: Failed, "
        f"message: Secret 'gw-token' named by spec.authTokenSecretRef does not exist in namespace {namespace}")
    assert "context deadline exceeded" not in failed.stderr  # it did not wait for the timeout
    # the reason code: not in helm's error, but in `helm status` (the kind's printer columns)
    shown = cluster.helm("status", "stuck", "-n", namespace).stdout
    assert "STATUS: failed" in shown and re.search(r"\nstuck +False +SecretNotFound +0/1 ", shown), shown
    stalled = conditions(cluster, namespace, "stuck")["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", reasons.SECRET_NOT_FOUND)
    assert health(cluster.get_json("-n", namespace, "gwd", "stuck"), script) == (
        "Degraded", f"SecretNotFound: Secret 'gw-token' named by spec.authTokenSecretRef does not exist in "
                    f"namespace {namespace}")
    # kubectl wait: on Stalled it answers at once, on Ready it times out
    assert cluster.kubectl("-n", namespace, "wait", "--for=condition=Stalled", "gwd/stuck",
                           "--timeout=5s").stdout.strip() == f"{GWD}/stuck condition met"
    not_ready = cluster.kubectl("-n", namespace, "wait", "--for=condition=Ready", "gwd/stuck", "--timeout=2s",
                                check=False)
    assert not_ready.returncode != 0 and "timed out waiting for the condition" in not_ready.stderr

    # --wait=legacy (Helm 3's waiter) knows only built-in kinds: it reports the same spec deployed
    legacy = install(cluster, namespace, "stuck-legacy", "--set", "authToken.existingSecret=gw-token",
                     wait="--wait=legacy")
    assert legacy.returncode == 0 and "STATUS: deployed" in legacy.stdout, legacy.stderr
    wait_condition(cluster, namespace, "stuck-legacy", "Stalled", "True", reasons.SECRET_NOT_FOUND)


def test_helm_wait_times_out_while_reconciling(cluster: Cluster, operator: OperatorProcess,
                                               namespace: str) -> None:
    """Two Redis-backed replicas whose Redis does not answer: the operator holds the scale-out
    (Reconciling=True, WaitingForRedis), kstatus says InProgress, helm waits out --timeout and
    prints the Reconciling message."""
    script = argocd_cm_script(cluster, namespace)
    args = ["--set", "replicas=2", "--set", "config.hooks.idempotency.store_backend=redis",
            "--set", "redis.url=redis://127.0.0.1:1/0"]
    timed_out = install(cluster, namespace, "gated", *args, timeout="8s")
    assert timed_out.returncode == 1
    assert timed_out.stderr.strip() == (
        f"Error: INSTALLATION FAILED: resource GatewayDeployment/{namespace}/gated not ready. status: InProgress, "
        "message: holding 1 of 2 replicas until the operator's Redis probe passes\ncontext deadline exceeded")
    body = cluster.get_json("-n", namespace, "gwd", "gated")
    assert health(body, script) == (
        "Progressing", "WaitingForRedis: holding 1 of 2 replicas until the operator's Redis probe passes")


def test_a_new_object_reads_as_not_yet_observed(cluster: Cluster, operator: OperatorProcess,
                                                namespace: str) -> None:
    """The API server's answer to the create, before the operator acted: status defaulted to
    observedGeneration 0 by the CRD, which kstatus reads as InProgress and Argo CD as
    Progressing (without it, kstatus calls an object with no conditions Current)."""
    name = f"fresh-{uuid.uuid4().hex[:4]}"
    created = json.loads(cluster.kubectl("-n", namespace, "create", "-o", "json", "-f", "-",
                                         input=json.dumps(runnable(cluster, gateway_deployment(name)))).stdout)
    assert (created["metadata"]["generation"], created["status"]) == (1, {"observedGeneration": 0})
    assert health(created) == ("Progressing", "waiting for the gateway-operator to report status")
    # and a status written by the operator replaces it
    wait_condition(cluster, namespace, name, "Ready", "True")
    assert cluster.get_json("-n", namespace, "gwd", name)["status"]["observedGeneration"] == 1
