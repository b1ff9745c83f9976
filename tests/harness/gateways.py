"""Reading GatewayDeployments and their objects the way a user does: through kubectl."""
from __future__ import annotations

import copy
import json
import time
from typing import Any

from gateway_operator.core import pods

from .cluster import Cluster
from .operator import PLACEHOLDER_IMAGE, gateway_deployment, redis_store
from .redis_server import RedisServer
from .standins import HealthStandIn, HealthStandIns
from .wait import stays, until


def conditions(cluster: Cluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    body = cluster.get_json("-n", namespace, "gatewaydeployment", name)
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}


def wait_condition(cluster: Cluster, namespace: str, name: str, type_: str, status: str,
                   reason: str | None = None, timeout: float = 60) -> dict[str, Any]:
    def matches() -> dict[str, Any] | None:
        c = conditions(cluster, namespace, name).get(type_)
        if c and c["status"] == status and (reason is None or c["reason"] == reason):
            return c
        return None
    return until(matches, timeout=timeout, what=f"{type_}={status} ({reason or 'any reason'}) on {name}")


def events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cluster.get_json("-n", namespace, "events", "--field-selector",
                           f"involvedObject.name={name},involvedObject.kind=GatewayDeployment")
    return out["items"]


def wait_event(cluster: Cluster, namespace: str, name: str, reason: str, type_: str,
               timeout: float = 30) -> dict[str, Any]:
    return until(lambda: next((e for e in events(cluster, namespace, name)
                               if e["reason"] == reason and e["type"] == type_), None),
                 timeout=timeout, what=f"{type_} event {reason} for {name}")


def reconcile_latency(cluster: Cluster, namespace: str, name: str, annotation: str) -> float:
    """Seconds from a spec change of ``name`` until its status reports that generation."""
    started = time.monotonic()
    cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", name, "--type=merge", "-p",
                    json.dumps({"spec": {"podAnnotations": {"example.dev/touch": annotation}}}))
    generation = cluster.get_json("-n", namespace, "gatewaydeployment", name)["metadata"]["generation"]
    until(lambda: cluster.get_json("-n", namespace, "gatewaydeployment", name).get("status", {})
          .get("observedGeneration") == generation, timeout=60, interval=0.1, what=f"{name} to observe {generation}")
    return time.monotonic() - started


def is_ready(pod: dict[str, Any]) -> bool:
    """The one pod-ready check (the operator's: Ready, with an IP, not being deleted)."""
    return pods.serving(pod)


def ready_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = cluster.get_json("-n", namespace, "pods", "-l",
                            f"app.kubernetes.io/instance={name},app.kubernetes.io/component=gateway")["items"]
    return [p for p in pods if is_ready(p)]


def wait_ready_pods(cluster: Cluster, namespace: str, name: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    return until(lambda: (lambda pods: pods if len(pods) == count else None)(ready_pods(cluster, namespace, name)),
                 timeout=timeout, what=f"{count} ready pods of {name}")


def runnable(cluster: Cluster, manifest: dict[str, Any]) -> dict[str, Any]:
    """A GatewayDeployment as ``cluster`` can run it: on a real node, one that names the
    placeholder image runs the HEALTH ENDPOINT STAND-IN image (a TEST IMAGE, never pulled)."""
    if not cluster.real_node or manifest["spec"].get("image") != PLACEHOLDER_IMAGE:
        return manifest
    from . import node  # here: node imports llm_pod, which imports this module
    manifest = copy.deepcopy(manifest)
    manifest["spec"].update(image=node.images().health_standin, imagePullPolicy="Never")
    return manifest


def apply_gateway(cluster: Cluster, namespace: str, manifest: dict[str, Any], check: bool = True):
    """kubectl apply of a GatewayDeployment (``runnable`` on ``cluster``)."""
    manifest = runnable(cluster, manifest)
    return cluster.apply(json.dumps(manifest), "-n", namespace, check=check)


def replica_warning(cluster: Cluster, namespace: str, timeout: float = 30) -> str:
    """kubectl apply of a 3-replica ``Warn`` GatewayDeployment without Redis until the chart's
    replica-warning admission policy answers with its warning (the policy takes a moment to be
    enforced after helm install); returns kubectl's stderr. The object is deleted each time."""
    manifest = gateway_deployment("warned", replicas=3, replicaPolicy="Warn")

    def warned() -> str | None:
        out = apply_gateway(cluster, namespace, manifest)
        cluster.kubectl("-n", namespace, "delete", "gatewaydeployment", "warned", "--wait=false")
        return out.stderr if "exactly-once admission is NOT held" in out.stderr else None
    return until(warned, timeout=timeout, what="the replica-warning admission policy's warning")


def create_password_secret(cluster: Cluster, namespace: str, name: str, password: str) -> None:
    cluster.kubectl("-n", namespace, "create", "secret", "generic", name, f"--from-literal=password={password}")


def redis_gateway(name: str, redis: RedisServer, replicas: int = 3, **spec: Any) -> dict[str, Any]:
    """A GatewayDeployment on the shared Redis store of ``redis``, its password in Secret redis-auth."""
    return gateway_deployment(name, replicas=replicas, config=redis_store(), redis={
        "url": redis.url, "passwordSecretRef": {"name": "redis-auth"}}, **spec)


def serve_health(cluster: Cluster, standins: HealthStandIns, namespace: str, name: str,
                 count: int) -> dict[str, HealthStandIn]:
    """Stand-ins at every ready pod's IP; returns them by pod name."""
    pods = wait_ready_pods(cluster, namespace, name, count)
    return {p["metadata"]["name"]: standins.at(p["status"]["podIP"]) for p in pods}


def hostile_health(cluster: Cluster, standins: HealthStandIns, namespace: str, name: str,
                   pods: list[dict[str, Any]], timeout: float = 30) -> None:
    """Three replicas' stand-ins answer /health with an endless, a huge and a deep body, until
    the operator reports none answered; then ten poll intervals more, never Stalled."""
    for pod, mode in zip(pods, ("endless", "huge", "deep")):
        standins.at(pod["status"]["podIP"]).hostile(mode)
    until(lambda: "0 of 3 polled replicas answered" in conditions(cluster, namespace, name)["IdempotencyDegraded"]
          ["message"], timeout=timeout, what=f"three unanswered polls on {name}")
    stays(lambda: conditions(cluster, namespace, name)["Stalled"]["status"] == "False", 10, interval=1,
          what=f"{name} not Stalled under hostile /health answers")
