"""The operator under test: the real ``gateway-operator run`` CLI as a subprocess, running
under its own ServiceAccount with the RBAC the Helm chart grants (so a missing permission
fails the tests), against the session's cluster."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Sequence

from .audit import now
from .cluster import REPO, Cluster, tool
from .processes import free_port, terminate
from .wait import WaitTimeout, until

SYSTEM_NAMESPACE = "gwop-test-system"
RELEASE = "gwop-test"
NAMESPACED_RELEASE = "gwop-test-ns"  # the operator watching only some namespaces (chart's Roles)


def identity(release: str) -> str:
    return f"system:serviceaccount:{SYSTEM_NAMESPACE}:{release}"


IDENTITY = identity(RELEASE)


def install_crd(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    # kubectl wait fails (rather than waits) while the new CRD has no conditions yet
    until(lambda: cluster.kubectl("wait", "--for=condition=Established",
                                  "crd/gatewaydeployments.gateway-operator.dev", check=False).returncode == 0,
          timeout=60, what="the CRD to be established")


def render_rbac(release: str = RELEASE, namespaces: Sequence[str] = (), shards: int = 0) -> str:
    """The chart's ServiceAccount and RBAC (``watchNamespaces``: ``namespaces``; ``sharding.shards``:
    ``shards``), as helm renders them."""
    values = ["--set", "watchNamespaces={" + ",".join(namespaces) + "}"] if namespaces else []
    values += ["--set", f"sharding.shards={shards}"] if shards else []
    return subprocess.run(
        [tool("helm"), "template", release, str(REPO / "charts/gateway-operator"), "--namespace", SYSTEM_NAMESPACE,
         "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml", *values],
        check=True, capture_output=True, text=True).stdout


def install_rbac(cluster: Cluster, release: str = RELEASE, namespaces: Sequence[str] = (), shards: int = 0) -> None:
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    cluster.apply(render_rbac(release, namespaces, shards))  # every namespaced object names its namespace


def service_account_kubeconfig(cluster: Cluster, directory: Path, release: str = RELEASE,
                               server: tuple[str, Path] | None = None) -> Path:
    """``server``: another address (URL) and the CA that checks it, e.g. a proxy in between."""
    token = cluster.kubectl("-n", SYSTEM_NAMESPACE, "create", "token", release, "--duration=6h").stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    cluster_entry = admin["clusters"][0]["cluster"]
    if server is not None:
        cluster_entry = {"server": server[0], "certificate-authority": str(server[1])}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "c", "cluster": cluster_entry}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "c", "user": "operator"}}],
    }
    path = directory / "operator.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


class OperatorProcess:
    """``namespaces``: watch only those, as the chart's ``watchNamespaces`` does, under the
    chart's Roles for them and a ServiceAccount of its own (NAMESPACED_RELEASE)."""

    def __init__(self, cluster: Cluster, resync_seconds: float = 5.0, namespaces: Sequence[str] = (),
                 lease: tuple[int, int, int] = (4, 3, 1), extra_args: Sequence[str] = (),
                 server: tuple[str, Path] | None = None,
                 entry: Sequence[str] = ("-m", "gateway_operator.cli"), shards: int = 0) -> None:
        """``lease``: duration, renew deadline and retry period of its leader election (short,
        so that a restarted operator leads again within seconds). ``extra_args``: more of the
        CLI's flags, as chart values add them (e.g. ``--redis-allow``). ``entry``: how Python
        starts the CLI (the benchmark's memory attribution runs it under tracemalloc). ``shards``:
        run with ``--shards`` (every replica works on the shards it holds) instead of leader election."""
        self.cluster = cluster
        self.extra_args = list(extra_args)
        self.server = server  # (URL, CA) of an API server address other than the cluster's (a proxy)
        self.namespaces = list(namespaces)
        self.release = NAMESPACED_RELEASE if namespaces else RELEASE
        self.identity = identity(self.release)
        self.started_at = ""  # audit-log time of the start
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-operator-"))
        self.log_path = self.dir / "operator.log"
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.resync_seconds = resync_seconds
        self.leader_identity = f"{self.release}-{uuid.uuid4().hex[:6]}"  # its name in the Lease
        self.lease = lease
        self.proc: subprocess.Popen[bytes] | None = None
        self.entry = list(entry)
        self.shards = shards

    def start(self) -> "OperatorProcess":
        install_crd(self.cluster)
        install_rbac(self.cluster, self.release, self.namespaces, self.shards)
        kubeconfig = service_account_kubeconfig(self.cluster, self.dir, self.release, self.server)
        cmd = [sys.executable, *self.entry, "run", "--kubeconfig", str(kubeconfig),
               "--metrics-port", str(self.metrics_port), "--liveness-port", str(self.liveness_port),
               "--bind-address", "127.0.0.1", "--resync-seconds", str(self.resync_seconds),
               "--log-format", "plain", "--operator-namespace", SYSTEM_NAMESPACE,
               "--operator-instance", self.release, *[f"--namespace={n}" for n in self.namespaces],
               # as the chart runs it: leader election on the Lease <release>-leader, or shards
               *(["--shards", str(self.shards)] if self.shards else ["--leader-election"]),
               "--leader-identity", self.leader_identity,
               "--lease-duration", str(self.lease[0]), "--renew-deadline", str(self.lease[1]),
               "--retry-period", str(self.lease[2]), *self.extra_args]
        self.started_at = now()
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"operator exited {proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1):
                    return True
            except OSError:
                return False
        try:
            until(answers, timeout=60, interval=0.3, what="the operator's liveness endpoint", tolerate=())
        except WaitTimeout:
            raise RuntimeError(f"operator liveness never answered:\n{self.log_tail()}") from None
        return self

    def metrics(self, timeout: float = 5) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=timeout) as r:
            return r.read().decode()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> "OperatorProcess":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        terminate(self.proc, grace=15)
        self.proc = None


# no registry serves it: on a simulated node nothing pulls it, on a real node harness.gateways
# runs the HEALTH ENDPOINT STAND-IN image in its place
PLACEHOLDER_IMAGE = "example.invalid/praisonai-gateway:0.1.16"


def gateway_deployment(name: str, **spec: Any) -> dict[str, Any]:
    """A GatewayDeployment with a config the real gateway accepts, plus ``spec`` overrides."""
    body: dict[str, Any] = {
        "image": PLACEHOLDER_IMAGE,
        "health": {"intervalSeconds": 1, "timeoutSeconds": 1, "restartCooldownSeconds": 2},
        "config": {
            "agents": {"assistant": {"instructions": "Reply in one short sentence.", "model": "gpt-4o-mini"}},
            "channels": {"telegram": {"token": "${TELEGRAM_BOT_TOKEN}"}},
            "hooks": {"hooks": [{"path": "deploy", "message": "Event: {text}", "idempotency_key": "{id}"}]},
        },
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": "gateway-operator.dev/v1alpha1", "kind": "GatewayDeployment",
            "metadata": {"name": name}, "spec": body}


def redis_store(config_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config section with the shared Redis idempotency store."""
    config = gateway_deployment("x")["spec"]["config"]
    config["hooks"] = {**config["hooks"], "idempotency": {"store_backend": "redis"}}
    return {**config, **(config_extra or {})}


def late_ticks(metrics: str, over: float = 1.0) -> tuple[float, float]:
    """From an operator's metrics text: its event-loop ticks so far, and those that woke more than
    ``over`` seconds late (``over`` a bucket bound of gateway_operator_event_loop_lag_seconds)."""
    buckets = {line.split('le="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
               for line in metrics.splitlines() if line.startswith("gateway_operator_event_loop_lag_seconds_bucket")}
    total = buckets.get("+Inf", 0.0)
    return total, total - buckets.get(repr(over), 0.0)
