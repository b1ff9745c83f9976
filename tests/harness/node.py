"""The operator on the REAL node (hack/cluster.sh with GWOP_NODE=1): the locally built images,
the chart installed with Helm, and webhooks sent to gateway pods at their pod IPs (198.18.x.x,
on the node's own bridge). Shared by `make demo` (hack/demo.py) and the node tests."""
from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from websockets.sync.client import connect

from gateway_operator.api import GATEWAY_PORT
from gateway_operator.core.render.names import auth_secret_name

from . import llm_pod
from .cluster import REPO, Cluster
from .wait import until

CACHE = Path(os.environ.get("GWOP_CACHE") or Path.home() / ".cache/gateway-operator")
IMAGES_LIST = CACHE / "images/images.txt"  # hack/images.sh: "NAME ARCHIVE" per line
CHART = REPO / "charts/gateway-operator"
SYSTEM_NAMESPACE = "gateway-operator-system"
RELEASE = "gateway-operator"
HOOK = "deploy"  # the examples' webhook path (/hooks/deploy)
EDGE = "127.0.80.1"  # the node's edge (Traefik, hack/node.sh): Ingresses and the Gateway gwop-edge/edge


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
    """The control plane with the real node in ``directory`` (started unless it runs; a node that
    runs takes the images of `make images` again, so a rebuilt image reaches it)."""
    env = dict(os.environ, GWOP_CLUSTER_DIR=str(directory))
    running = subprocess.run([str(REPO / "hack/node.sh"), "status"], env=env, capture_output=True).returncode == 0
    cluster = Cluster.start(directory, GWOP_NODE="1")
    if running:
        subprocess.run([str(REPO / "hack/node.sh"), "images"], env=env, check=True, stdout=subprocess.DEVNULL)
    return cluster


def install_operator(cluster: Cluster, *extra: str, release: str = RELEASE,
                     namespace: str = SYSTEM_NAMESPACE) -> subprocess.CompletedProcess[str]:
    """`helm upgrade --install` of the chart with the local images, in a namespace that enforces
    the restricted Pod Security profile; waits for the operator pods."""
    built = images()
    repository, tag = built.operator.rsplit(":", 1)
    # the archive's name carries a hash of the image's inputs: a rebuilt operator image under the
    # same tag rolls the operator pods (the node re-imported it: hack/node.sh images)
    archive = next(line.split()[1] for line in IMAGES_LIST.read_text().splitlines() if line.startswith(built.operator + " "))
    build = Path(archive).stem.rsplit("-", 1)[-1].split(".")[0]
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
    # helm installs crds/ once and never upgrades them: a reused cluster gets the chart's CRD here
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    return cluster.helm(
        "upgrade", "--install", release, str(CHART), "-n", namespace, "--wait", "--timeout", "180s",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",  # imported into the node's containerd; no registry here
        "--set", f"managedRedis.image={built.redis}", "--set", f"tests.image={built.operator}",
        "--set-string", f"podAnnotations.gateway-operator\\.dev/image-build={build}", *extra)


def stop_the_session_operator(cluster: Cluster, operators: dict[Path, Any]) -> None:
    """The operator CLI other modules share watches every namespace: it goes (the next module that
    wants it starts it again), so that only a module's installed release acts on its objects."""
    running = operators.pop(cluster.kubeconfig, None)
    if running is not None:
        running.stop()


def secret_value(cluster: Cluster, namespace: str, name: str, key: str) -> str:
    return base64.b64decode(cluster.get_json("secret", name, "-n", namespace)["data"][key]).decode()


def gateway_token(cluster: Cluster, namespace: str, name: str) -> str:
    """The bearer token of a GatewayDeployment's hooks (the Secret the operator generates)."""
    return secret_value(cluster, namespace, auth_secret_name(name), "token")


class Answer(NamedTuple):
    status: int
    body: dict[str, Any]


def _answer(request: urllib.request.Request | str, timeout: float) -> Answer:
    """The status of whatever answered, and its JSON object ({} when the body is none: the edge's
    own 502/503 is plain text)."""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        body = {}
    return Answer(status, body if isinstance(body, dict) else {})


def base_url(address: str) -> tuple[str, dict[str, str]]:
    """The URL and Host header for ``address``: a pod IP or ClusterIP (the gateway's port), or a
    host name exposed at the node's edge (port 80 of EDGE, that name in the Host header)."""
    if address[0].isdigit():
        return f"http://{address}:{GATEWAY_PORT}", {}
    return f"http://{EDGE}", {"Host": address}


def webhook(address: str, token: str | None, delivery_id: str, text: str = "deployed", timeout: float = 60,
            **fields: str) -> Answer:
    """POST /hooks/deploy to a gateway pod, its Service's ClusterIP or its exposed host name, as
    a webhook provider's retry would; ``token`` None sends no Authorization header. ``fields``
    go into the payload beside ``id`` and ``text`` (``session=`` for a hook's ``session_key``)."""
    url, headers = base_url(address)
    headers.update({"Content-Type": "application/json",
                    **({"Authorization": f"Bearer {token}"} if token is not None else {})})
    return _answer(urllib.request.Request(
        f"{url}/hooks/{HOOK}", method="POST",
        data=json.dumps({"id": delivery_id, "text": text, **fields}).encode(), headers=headers), timeout)


def health(address: str, timeout: float = 10) -> Answer:
    """GET /health of a gateway pod (or an exposed host name), unauthenticated, as the operator polls it."""
    url, headers = base_url(address)
    return _answer(urllib.request.Request(f"{url}/health", headers=headers), timeout)


class Delivery(NamedTuple):
    turns: int              # agent turns it caused, counted at the LLM stand-in
    answers: list[Answer]   # one per address, in order


def deliver(cluster: Cluster, namespace: str, name: str, addresses: list[str], delivery_id: str) -> Delivery:
    """The same delivery to each address (pod IPs, or a ClusterIP or exposed host repeated), as a
    provider's retries fan it out; the LLM stand-in in ``namespace`` counts what ran."""
    token = gateway_token(cluster, namespace, name)
    before = llm_pod.completions(cluster, namespace)
    answers = [webhook(address, token, delivery_id) for address in addresses]
    return Delivery(llm_pod.completions(cluster, namespace) - before, answers)


def edge_backends(cluster: Cluster, host: str, since: int, method: str = "POST") -> list[str]:
    """The replica (pod IP) the edge sent each ``method`` request for ``host`` to, from line
    ``since`` of its access log on (hack/node.sh writes it; its length is the next ``since``)."""
    lines = edge_log(cluster)[since:]
    entries = [json.loads(line) for line in lines if line.strip()]
    return [e["ServiceAddr"].rsplit(":", 1)[0] for e in entries
            if e.get("RequestHost") == host and e.get("RequestMethod") == method and e.get("ServiceAddr")]


def edge_log(cluster: Cluster) -> list[str]:
    return (Path(cluster.kubeconfig).parent / "node/logs/edge-access.log").read_text().splitlines()


class WebSocketVisit(NamedTuple):
    replica: str  # the pod that held the connection
    cookie: str   # the affinity cookie the edge set ("" when it set none)


def websocket_replica(host: str, token: str, pods: dict[str, str], cookie: str = "",
                      timeout: float = 10) -> WebSocketVisit:
    """Opens the gateway's WebSocket (/ws, its token in the query string, a browser's Origin) at
    the edge as ``host``, finds the replica holding it (``pods``: name -> IP; the one whose
    /health counts a client), closes it and waits until that replica counts it gone."""
    def holding() -> list[str]:
        return [name for name, ip in pods.items() if health(ip).body.get("clients")]

    until(lambda: not holding(), timeout=timeout, what="no open WebSocket on any replica")
    sock = socket.create_connection((EDGE, 80), timeout=timeout)
    headers = {"Origin": f"http://{host}", **({"Cookie": cookie} if cookie else {})}
    with connect(f"ws://{host}/ws?token={token}", sock=sock, additional_headers=headers,
                 open_timeout=timeout) as ws:
        set_cookie = (ws.response.headers.get("Set-Cookie") or "").split(";")[0]
        replica = until(lambda: holding() or None, timeout=timeout, what="the replica holding the WebSocket")
    until(lambda: not holding(), timeout=timeout, what="the WebSocket closed on its replica")
    assert len(replica) == 1, replica
    return WebSocketVisit(replica[0], set_cookie)
