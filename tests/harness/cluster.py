"""The Kubernetes cluster the integration tests run against.

By default the session starts its own local control plane (``hack/cluster.sh`` with a
separate directory, so a running demo sandbox is never touched) and stops it at the end.
``GWOP_TEST_KUBECONFIG=<path>`` points the same suite at an existing cluster (kind, a real
one) instead; the harness then neither starts nor stops anything. ``GWOP_KUBE_VERSION`` (one of
hack/versions.env's KUBE_VERSION, the default, and KUBE_OLDEST_VERSION) is the version of the
control planes it starts (hack/cluster.sh; `make test-oldest`).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CACHE_BIN = Path(os.environ.get("GWOP_CACHE", Path.home() / ".cache/gateway-operator")) / "bin"


MONITORING_TOOLS = ("prometheus", "promtool")  # built by hack/build-binaries.sh --monitoring
RELEASE_TOOLS = ("registry", "cosign", "syft")  # built by hack/build-binaries.sh --release


def versions() -> dict[str, str]:
    """hack/versions.env's NAME=value lines (comments dropped)."""
    pairs = (line.split("#")[0].strip().split("=", 1) for line in (REPO / "hack/versions.env").read_text().splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def kube_version(env: dict[str, str] | None = None) -> str:
    """The Kubernetes version of the control planes hack/cluster.sh starts under ``env``."""
    return (env if env is not None else os.environ).get("GWOP_KUBE_VERSION") or versions()["KUBE_VERSION"]


def tool(name: str) -> str:
    """kubectl/helm/prometheus/promtool/registry/cosign/syft: the pinned cached binary
    (hack/build-binaries.sh)."""
    path = CACHE_BIN / name
    if not path.exists():
        flags = ["--monitoring"] if name in MONITORING_TOOLS else ["--release"] if name in RELEASE_TOOLS else []
        subprocess.run([str(REPO / "hack/build-binaries.sh"), *flags], check=True, stdout=subprocess.DEVNULL)
    return str(path)


def pod_network(path: Path) -> str:
    """The loopback /16 a simulated node in ``path`` hands its pod IPs from: one of its own per
    cluster directory (127.16-239, never hack/cluster.sh's default 127.1 nor the fuzzer's 127.5).
    Control planes run side by side (the session's and a module's own, another session's, the
    demo's), and a pod IP is where the HEALTH ENDPOINT STAND-IN of that pod answers: with one
    range for all, two clusters' pods share IPs, so one cluster's operator polls the other's
    stand-ins (a poll the test counts as its operator's) and a stand-in cannot bind its pod's IP."""
    return f"127.{16 + zlib.crc32(path.name.encode()) % 224}.0.0/16"


def field_errors_as_newest(text: str, server_minor: int) -> str:
    """An API server's field errors as the newest Kubernetes words them (the rendering
    ``gateway-operator check`` gives offline). The rule messages never differ; how the API server
    prints the bad value does: up to 1.34 a CEL rule on an object or array says `Invalid value:
    "object": <message>` (1.35 on: `Invalid value: <message>`, apiextensions-apiserver's
    field.OmitValueType), and up to 1.33 a nil value prints as `"null"` and an object (a list-map's
    duplicate entry) as Go's `map[string]interface {}{"k":"v", ...}` (1.34 on: JSON, `null`,
    `{"k":"v",...}`)."""
    if server_minor < 35:
        text = text.replace('Invalid value: "object": ', "Invalid value: ").replace(
            'Invalid value: "array": ', "Invalid value: ")
    if server_minor < 34:
        text = text.replace('Invalid value: "null": ', "Invalid value: null: ")
        text = re.sub(r"map\[string\]interface \{\}\{([^{}]*)\}", _go_map_as_json, text)
    return text


def _go_map_as_json(match: re.Match[str]) -> str:
    """Go's %#v of a map of scalars (keys sorted, ", " between entries) as encoding/json writes it."""
    entries = re.findall(r'("(?:[^"\\]|\\.)*"):("(?:[^"\\]|\\.)*"|[^,]+)(?:, |$)', match.group(1))
    return "{" + ",".join(f"{k}:{v}" for k, v in entries) + "}"


@dataclass
class Cluster:
    kubeconfig: Path
    owned: bool  # started by this test session (and so stopped by it)
    env: dict[str, str] = field(default_factory=dict)
    directory: Path | None = None  # hack/cluster.sh's directory (logs/audit.log) when owned
    real_node: bool = False  # pods run (hack/node.sh, or a cluster of GWOP_TEST_KUBECONFIG), not simulated
    kube_version: str | None = None  # the control plane's version when owned (GWOP_KUBE_VERSION)

    @classmethod
    def from_environment(cls, directory: str | None = None) -> "Cluster":
        existing = os.environ.get("GWOP_TEST_KUBECONFIG")
        if existing:
            return cls(Path(existing), owned=False, real_node=True)
        # GWOP_TEST_CLUSTER_DIR (relative to the repo): lets two test sessions run side by side
        return cls.start(REPO / (directory or os.environ.get("GWOP_TEST_CLUSTER_DIR") or ".cluster/test"))

    @classmethod
    def start(cls, path: Path, **env: str) -> "Cluster":
        """`hack/cluster.sh up` in ``path`` (started unless it runs), with ``env`` on top
        (GWOP_NODE="1": the real node; GWOP_KUBE_VERSION=<hack/versions.env's KUBE_OLDEST_VERSION>:
        the oldest supported control plane). A simulated node's pod IPs come from ``pod_network(path)``
        unless GWOP_POD_NETWORK says otherwise."""
        env = dict(os.environ, GWOP_CLUSTER_DIR=str(path), **env)
        env.setdefault("GWOP_POD_NETWORK", pod_network(path))
        out = subprocess.run([str(REPO / "hack/cluster.sh"), "up"], env=env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        return cls(Path(out.strip().splitlines()[-1]), owned=True, env=env, directory=path,
                   real_node=env.get("GWOP_NODE") == "1", kube_version=kube_version(env))

    @functools.cached_property
    def server_minor(self) -> int:
        """The API server's minor version (its /version)."""
        return int(re.match(r"\d+", self.get_json_raw("/version")["minor"]).group())

    def get_json_raw(self, path: str) -> Any:
        return json.loads(self.kubectl("get", "--raw", path).stdout)

    @property
    def audit_log(self) -> Path | None:
        """The API server's audit log (hack/cluster.sh's policy), only for a cluster this
        session started."""
        return self.directory / "logs/audit.log" if self.directory else None

    def stop(self) -> None:
        if self.owned:
            subprocess.run([str(REPO / "hack/cluster.sh"), "down"], env=self.env, check=True)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                as_user: str | None = None, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [tool("kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        if as_user:
            cmd += ["--as", as_user]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The pinned helm (v4) against this cluster."""
        proc = subprocess.run([tool("helm"), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", *args, input=manifest, check=check)

    def new_namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        if labels:
            self.kubectl("label", "namespace", name, *[f"{k}={v}" for k, v in labels.items()])
        return name
