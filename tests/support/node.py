"""The operator on the REAL node (hack/cluster.sh with GWOP_NODE=1): the locally built images,
the chart installed with Helm, and webhooks sent to gateway pods at their pod IPs (198.18.x.x,
on the node's own bridge). Shared by `make demo` (hack/demo.py) and the node tests."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from gateway_operator.api import GATEWAY_PORT
from gateway_operator.render import auth_secret_name

from . import llm_pod
from .cluster import REPO, Cluster

CACHE = Path(os.environ.get("GWOP_CACHE") or Path.home() / ".cache/gateway-operator")
IMAGES_LIST = CACHE / "images/images.txt"  # hack/images.sh: "NAME ARCHIVE" per line
CHART = REPO / "charts/gateway-operator"
SYSTEM_NAMESPACE = "gateway-operator-system"
RELEASE = "gateway-operator"
HOOK = "deploy"  # the examples' webhook path (/hooks/deploy)


def unavailable(message: str) -> NoReturn:
    """A real part that cannot run on this machine: under CI a failure (never a silent
    fallback), elsewhere a skip that says why in one line."""
    import pytest
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must run it")
    pytest.skip(message)


def why_no_real_node() -> str | None:
    """Why this machine cannot run the real node, or None."""
    if os.geteuid() != 0:
        return "not root"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "no overlayfs in this kernel"
    return None


class Images(NamedTuple):
    operator: str
    gateway: str
    redis: str
    health_standin: str  # a TEST IMAGE: the HEALTH ENDPOINT STAND-IN as a pod (images/test-health-standin)


def images() -> Images:
    """The image references `make images` built (hack/images.sh lists them)."""
    if not IMAGES_LIST.exists():
        subprocess.run([str(REPO / "hack/images.sh")], check=True, stdout=subprocess.DEVNULL)
    names = [line.split()[0] for line in IMAGES_LIST.read_text().splitlines() if line.strip()]

    def named(part: str) -> str:
        return next(n for n in names if n.rsplit("/", 1)[-1].split(":")[0] == part)
    return Images(named("operator"), named("gateway"), named("redis"), named("test-health-standin"))


def cluster_up(directory: Path) -> Cluster:
    """The control plane with the real node in ``directory`` (started unless it runs)."""
    return Cluster.start(directory, GWOP_NODE="1")


def install_operator(cluster: Cluster, *extra: str, release: str = RELEASE,
                     namespace: str = SYSTEM_NAMESPACE) -> subprocess.CompletedProcess[str]:
    """`helm upgrade --install` of the chart with the local images, in a namespace that enforces
    the restricted Pod Security profile; waits for the operator pods."""
    built = images()
    repository, tag = built.operator.rsplit(":", 1)
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
    return cluster.helm(
        "upgrade", "--install", release, str(CHART), "-n", namespace, "--wait", "--timeout", "180s",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",  # imported into the node's containerd; no registry here
        "--set", f"managedRedis.image={built.redis}", "--set", f"tests.image={built.operator}", *extra)


def secret_value(cluster: Cluster, namespace: str, name: str, key: str) -> str:
    return base64.b64decode(cluster.get_json("secret", name, "-n", namespace)["data"][key]).decode()


def gateway_token(cluster: Cluster, namespace: str, name: str) -> str:
    """The bearer token of a GatewayDeployment's hooks (the Secret the operator generates)."""
    return secret_value(cluster, namespace, auth_secret_name(name), "token")


class Answer(NamedTuple):
    status: int
    body: dict[str, Any]


def _answer(request: urllib.request.Request | str, timeout: float) -> Answer:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return Answer(r.status, json.loads(r.read() or b"{}"))
    except urllib.error.HTTPError as e:
        return Answer(e.code, json.loads(e.read() or b"{}"))


def webhook(address: str, token: str | None, delivery_id: str, text: str = "deployed", timeout: float = 60) -> Answer:
    """POST /hooks/deploy to a gateway pod (or its Service's ClusterIP), as a webhook provider's
    retry would; ``token`` None sends no Authorization header."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token is not None else {})}
    return _answer(urllib.request.Request(
        f"http://{address}:{GATEWAY_PORT}/hooks/{HOOK}", method="POST",
        data=json.dumps({"id": delivery_id, "text": text}).encode(), headers=headers), timeout)


def health(address: str, timeout: float = 10) -> Answer:
    """GET /health of a gateway pod, unauthenticated, as the operator polls it."""
    return _answer(f"http://{address}:{GATEWAY_PORT}/health", timeout)


class Delivery(NamedTuple):
    turns: int              # agent turns it caused, counted at the LLM stand-in
    answers: list[Answer]   # one per address, in order


def deliver(cluster: Cluster, namespace: str, name: str, addresses: list[str], delivery_id: str) -> Delivery:
    """The same delivery to each address (pod IPs, or a ClusterIP repeated), as a provider's
    retries fan it out; the LLM stand-in in ``namespace`` counts what ran."""
    token = gateway_token(cluster, namespace, name)
    before = llm_pod.completions(cluster, namespace)
    answers = [webhook(address, token, delivery_id) for address in addresses]
    return Delivery(llm_pod.completions(cluster, namespace) - before, answers)
