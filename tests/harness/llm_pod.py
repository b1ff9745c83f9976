"""The LLM STAND-IN as a pod on the real node (the one stand-in left: no model provider exists
here). Its code (harness/llm_standin.py and what it imports) goes in a ConfigMap and runs in the
gateway image's python3, behind a Service; gateways reach it as ``OPENAI_BASE_URL``.
``completions`` reads its counter from the host at the pod's IP (198.18.x.x, the node's own
bridge), which is how a test or the demo sees how many agent turns ran across all replicas.
"""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from .cluster import Cluster
from .gateways import is_ready
from .llm_standin import API_KEY

NAME = "llm-standin"
PORT = 8080
_FILES = ("__init__.py", "http.py", "llm_standin.py")  # harness/ as a package inside the pod
_SUPPORT = Path(__file__).resolve().parent


def manifests(namespace: str, image: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gateway-operator-sandbox"}
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
        "data": {name.replace("__init__", "init"): (_SUPPORT / name).read_text() for name in _FILES},
    }
    restricted = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                  "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": NAME, "image": image,
                    "args": ["python3", "-m", "harness.llm_standin", "--port", str(PORT)],
                    "workingDir": "/opt/standin",
                    "ports": [{"name": "http", "containerPort": PORT}],
                    "readinessProbe": {"httpGet": {"path": "/v1/models", "port": "http"}, "periodSeconds": 2},
                    "securityContext": restricted,
                    "volumeMounts": [{"name": "code", "mountPath": "/opt/standin/harness", "readOnly": True}],
                }],
                "volumes": [{"name": "code", "configMap": {"name": NAME, "items": [
                    {"key": name.replace("__init__", "init"), "path": name} for name in _FILES]}}],
            }},
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    return [config_map, deployment, service]


def deploy(cluster: Cluster, namespace: str, image: str, timeout: int = 120) -> dict[str, str]:
    """Applies the stand-in and waits for its pod; returns the env that points a gateway at it."""
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(namespace, image)}))
    cluster.kubectl("rollout", "status", f"deployment/{NAME}", "-n", namespace, f"--timeout={timeout}s")
    return {"OPENAI_BASE_URL": f"http://{NAME}.{namespace}.svc.cluster.local:{PORT}/v1", "OPENAI_API_KEY": API_KEY}


def pod_ip(cluster: Cluster, namespace: str) -> str:
    pods = cluster.get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/name={NAME}")["items"]
    ready = [p for p in pods if is_ready(p)]
    assert ready, f"no ready {NAME} pod in {namespace}"
    return ready[0]["status"]["podIP"]


def completions(cluster: Cluster, namespace: str) -> int:
    """Agent turns the stand-in has answered since its pod started."""
    with urllib.request.urlopen(f"http://{pod_ip(cluster, namespace)}:{PORT}/stats", timeout=5) as r:
        return int(json.loads(r.read())["completions"])
