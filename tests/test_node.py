"""A REAL node on the local control plane (issue 8, step 2): hack/node.sh joins containerd, a CNI
bridge, kube-scheduler, a real kubelet and kube-proxy to a control plane of the test's own
(.cluster/node-test, no kubelet stand-in, Services in 198.19.0.0/16), a pod from the locally
built redis image (imagePullPolicy Never) becomes Ready behind a readiness probe and answers
PING from the host at its pod IP (198.18.x.x) and through its ClusterIP Service (198.19.x.x)
via kube-proxy; then the node and the control plane go down and nothing of them is left.

Deselected by default (`-m "not images and not node"` in pyproject); needs root and the images
of `make images`: `pytest -m node tests/test_node.py`. Traffic goes only to loopback and to the
198.18.0.0/15 addresses of the node's own bridge."""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GWOP_CACHE") or Path.home() / ".cache/gateway-operator")
DIR = REPO / ".cluster/node-test"
BRIDGE = "gwop0"
REDIS = "localhost/gateway-operator/redis:7"

pytestmark = pytest.mark.node


def env() -> dict[str, str]:
    return dict(os.environ, GWOP_CLUSTER_DIR=str(DIR), GWOP_STANDIN="0", GWOP_SERVICE_CIDR="198.19.0.0/16")


def sh(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=env(), capture_output=True, text=True,
                          timeout=timeout)


def kubectl(*args: str, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(CACHE / "bin/kubectl"), "--kubeconfig", str(DIR / "kubeconfig"), *args],
                         capture_output=True, text=True, timeout=120, **kw)
    assert out.returncode == 0, out.stderr
    return out


def redis_ping(host: str, port: int = 6379) -> bytes:
    ip = ipaddress.ip_address(host)
    assert ip in ipaddress.ip_network("198.18.0.0/15"), f"{host} is outside the node's range"
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64)


def node_processes() -> list[str]:
    """Processes of this test's node: their command line names its directory."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(DIR / "node") in cmd:
            found.append(f"{p.name} {cmd}")
    return found


def leftovers() -> list[str]:
    left = []
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
        left.append(f"bridge {BRIDGE}")
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    left += [f"iptables chain {line.split()[0][1:]}" for line in saved.splitlines()
             if line.startswith(":") and line[1:].split()[0].startswith(("KUBE-", "GWOP-", "CNI-"))]
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    left += [f"route {line}" for line in routes.splitlines() if "198.18." in line or "198.19." in line]
    left += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
             if str(DIR) in line.split()[1]]
    left += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/gwop-node")]
    left += [f"process {p}" for p in node_processes()]
    if (DIR / "node").exists():
        left.append(f"directory {DIR / 'node'}")
    return left


@pytest.fixture(scope="module")
def node():
    if os.geteuid() != 0:
        pytest.skip("a real node needs root")
    if not (CACHE / "images/images.txt").exists():
        pytest.skip("no images: run `make images` first")
    timings = {}
    try:
        t0 = time.monotonic()
        up = sh(REPO / "hack/cluster.sh", "up")
        assert up.returncode == 0, up.stderr[-3000:]
        timings["control plane up"] = time.monotonic() - t0
        t0 = time.monotonic()
        up = sh(REPO / "hack/node.sh", "up")
        assert up.returncode == 0, up.stderr[-3000:]
        timings["node up (Ready)"] = time.monotonic() - t0
        yield timings
    finally:
        t0 = time.monotonic()
        down = sh(REPO / "hack/node.sh", "down")
        timings["node down"] = time.monotonic() - t0
        sh(REPO / "hack/cluster.sh", "down")
        print("\ntimings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        assert down.returncode == 0, down.stderr[-3000:]


def test_real_node_runs_a_local_image_reachable_by_pod_ip_and_cluster_ip(node):
    nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["gwop-node-0"]  # no stand-in node
    assert nodes[0]["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")

    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "redis", "namespace": "default", "labels": {"app": "redis-node-test"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "redis", "image": REDIS, "imagePullPolicy": "Never",
                "command": ["redis-server", "--port", "6379", "--protected-mode", "no", "--save", ""],
                "ports": [{"containerPort": 6379}],
                "readinessProbe": {"exec": {"command": ["redis-cli", "ping"]}, "periodSeconds": 1},
            }],
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "redis", "namespace": "default"},
        "spec": {"selector": {"app": "redis-node-test"}, "ports": [{"port": 6379, "targetPort": 6379}]},
    }
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, service]}))
    kubectl("wait", "--for=condition=Ready", "pod/redis", "--timeout=90s")
    node["pod Ready"] = time.monotonic() - t0

    got = json.loads(kubectl("get", "pod", "redis", "-o", "json").stdout)
    pod_ip = got["status"]["podIP"]
    assert got["spec"]["nodeName"] == "gwop-node-0"
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network("198.18.0.0/16")
    assert redis_ping(pod_ip) == b"+PONG\r\n"

    cluster_ip = json.loads(kubectl("get", "service", "redis", "-o", "json").stdout)["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network("198.19.0.0/16")
    deadline = time.monotonic() + 30  # kube-proxy programs the Service's rules once it sees the endpoints
    while True:
        try:
            reply = redis_ping(cluster_ip)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert reply == b"+PONG\r\n"


def test_teardown_leaves_nothing(node):
    """Runs after the pod test: take the node down here (the fixture's down is then a no-op)."""
    down = sh(REPO / "hack/node.sh", "down")
    assert down.returncode == 0, down.stderr[-3000:]
    assert leftovers() == []
