#!/usr/bin/env python3
"""`make demo`: the gateway operator in a local sandbox, with real gateways and a real Redis.

    hack/demo.py up      start (or reuse) everything, print the conditions, then follow the
                         pods until Ctrl-C / SIGTERM, which stops everything (as `down` does);
                         DEMO_EXIT_AFTER_SETUP=1 returns after printing, leaving it all running
    hack/demo.py down    stop everything the demo started, by pid, then the control plane

What runs, all on this host (GWOP_CLUSTER_DIR, default <repo>/.cluster/sandbox):

* REAL: the local control plane (hack/cluster.sh: etcd, kube-apiserver,
  kube-controller-manager); the CRD, the Helm chart's RBAC and ValidatingAdmissionPolicy;
  the operator (`gateway-operator run`, under the chart's ServiceAccount); one
  `redis-server` per operator-managed Redis pod, at that pod's IP with the generated
  password; one gateway process (praisonai-bot 0.1.16 through the operator's launcher) per
  ready gateway pod, at its pod IP, from the pod's own ConfigMap, Secrets and env
  (tests/support/pod_runner.py).
* STOOD IN: the kubelet and scheduler (hack/kubelet_standin.py binds pods and reports them
  Running/Ready at 127.x pod IPs; this script then starts the pods' processes, as a
  container runtime would); cluster DNS + kube-proxy (a `sitecustomize` in the gateway
  processes resolves `<service>.<namespace>.svc` to a ready endpoint's pod IP); the LLM
  (tests/support/llm_standin.py, offline, OpenAI-compatible); persistent volumes (a
  PersistentVolumeClaim volume becomes a scratch directory: no storage provisioner here).

Every process the demo starts runs in its own session, is recorded as
``<dir>/run/demo/<key>.json`` (pid + what it is) and carries ``<dir>/demo/`` in its command
line, so `down` stops exactly those pids (and checks the command line before signalling a
pid, so a recycled pid is never hit).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the sandbox harness: tests/support

from support.cluster import Cluster, tool  # noqa: E402
from support.operator import install_crd  # noqa: E402
from support.pod_runner import LocalPodProcess, PodRunError, run_pod_locally  # noqa: E402
from support.redis_server import free_port  # noqa: E402
from support import wait  # noqa: E402

NAMESPACE = "gateway-demo"
SYSTEM_NAMESPACE = "gateway-operator-system"
RELEASE = "gateway-operator"
CHART = REPO / "charts/gateway-operator"
EXAMPLES = [  # (file, what is expected at kubectl apply)
    ("examples/gateway-managed-redis.yaml", "accepted: 2 replicas on an operator-managed Redis"),
    ("examples/gateway-refused.yaml", "REFUSED: 3 replicas without a shared store (replicaPolicy Refuse)"),
    ("examples/gateway-warned.yaml", "accepted WITH A WARNING: replicaPolicy Warn, 2 replicas, no shared store"),
    ("examples/gateway-single.yaml", "accepted: one replica on a persistent SQLite store"),
]
SHOWCASE = "ops-bot"  # the GatewayDeployment that must reach ExactlyOnceAdmission=True
WARNING_TEXT = "exactly-once admission is NOT held"
GATEWAY_PORT = 8765
HOOK = "deploy"
DEFAULT_POD_NETWORK = "127.2.0.0/16"  # the test session's cluster uses 127.1.0.0/16
SETUP_TIMEOUT = 120.0
FOLLOW_INTERVAL = 2.0
RESTART_BACKOFF = 10.0  # a crashed process is restarted at most this often (kubelet-like)
STOP_ORDER = ("operator", "gateway", "redis", "llm")

SITECUSTOMIZE = '''\
# Written by hack/demo.py. STAND-IN for cluster DNS + kube-proxy in the demo's gateway
# processes: "<service>.<namespace>.svc[.cluster.local]" resolves to the pod IP of a ready
# endpoint of that Service, read from $GWOP_DEMO_HOSTS (kept current by hack/demo.py).
import os
import socket

_hosts = os.environ.get("GWOP_DEMO_HOSTS")
_getaddrinfo = socket.getaddrinfo


def _service_ip(host):
    try:
        with open(_hosts, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == host:
                    return parts[1]
    except OSError:
        pass
    return None


def _demo_getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.rstrip(".").endswith((".svc", ".svc.cluster.local")):
        host = _service_ip(name.rstrip(".")) or host
    return _getaddrinfo(host, *args, **kwargs)


if _hosts:
    socket.getaddrinfo = _demo_getaddrinfo
'''


def say(text: str = "") -> None:
    print(text, flush=True)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


# -- where things live ------------------------------------------------------------------

class Paths:
    def __init__(self, cluster_dir: Path) -> None:
        self.cluster = cluster_dir
        self.run, self.logs = cluster_dir / "run", cluster_dir / "logs"
        self.state = self.run / "demo"  # <key>.json per process the demo started
        self.follower = self.run / "demo-follower.pid"
        self.lock = self.run / "demo.lock"
        self.demo = cluster_dir / "demo"  # every demo process's files; in every demo cmdline
        self.pods = self.demo / "pods"  # pod roots (volumes) of the gateway processes
        self.redis = self.demo / "redis"
        self.pydns = self.demo / "pydns"
        self.hosts = self.demo / "hosts"
        self.llm_url = self.demo / "llm.url"
        self.operator_kubeconfig = self.demo / "operator.kubeconfig"

    @property
    def marker(self) -> str:
        """What the command line of every process the demo starts contains."""
        return str(self.demo) + "/"


def cluster_dir() -> Path:
    return Path(os.environ.get("GWOP_CLUSTER_DIR") or REPO / ".cluster/sandbox").resolve()


# -- the process registry -----------------------------------------------------------------

def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pid_alive(pid: int, marker: str) -> bool:
    """True when ``pid`` runs and its command line holds ``marker`` (zombies of ours are reaped)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    return marker in cmdline(pid)


def records(paths: Paths) -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted(paths.state.glob("*.json")) if paths.state.exists() else []:
        with contextlib.suppress(OSError, ValueError):
            out[f.stem] = json.loads(f.read_text())
    return out


def record(paths: Paths, key: str, **info: Any) -> dict[str, Any]:
    paths.state.mkdir(parents=True, exist_ok=True)
    info = {"key": key, "started": time.time(), **info}
    tmp = paths.state / f".{key}.tmp"
    tmp.write_text(json.dumps(info))
    tmp.replace(paths.state / f"{key}.json")
    return info


def alive(paths: Paths, info: dict[str, Any] | None) -> bool:
    return bool(info) and pid_alive(int(info["pid"]), paths.marker)


def signal_group(pid: int, sig: int) -> None:
    """The process was started in its own session, so its group id is its pid."""
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def stop_pids(pids: list[int], marker: str, timeout: float = 15.0) -> list[int]:
    """SIGTERM to each process group, SIGKILL after ``timeout``; only pids whose cmdline
    holds ``marker``. Returns the pids that were running."""
    running = [pid for pid in pids if pid_alive(pid, marker)]
    for pid in running:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(pid, marker) for pid in running):
        time.sleep(0.1)
    for pid in running:
        if pid_alive(pid, marker):
            signal_group(pid, signal.SIGKILL)
    end = time.monotonic() + 5
    while time.monotonic() < end and any(pid_alive(pid, marker) for pid in running):
        time.sleep(0.05)
    return running


def forget(paths: Paths, infos: list[dict[str, Any]], quiet: bool = False) -> None:
    """Stop recorded processes (in parallel), keep their logs, remove their files and records."""
    stopped = set(stop_pids([int(i["pid"]) for i in infos], paths.marker))
    for info in infos:
        root = info.get("root")
        if root:
            log = Path(root) / "container.log"
            if log.exists():
                paths.logs.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log, paths.logs / f"gateway-{info.get('pod', info['key'])}.log")
            shutil.rmtree(root, ignore_errors=True)
        if info.get("data"):
            shutil.rmtree(info["data"], ignore_errors=True)
        with contextlib.suppress(OSError):
            (paths.state / f"{info['key']}.json").unlink()
        if int(info["pid"]) in stopped and not quiet:
            say(f"  stopped {info['key']} (pid {info['pid']})")


@contextlib.contextmanager
def locked(paths: Paths) -> Iterator[None]:
    """One demo.py at a time starts or stops pod processes."""
    paths.run.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- steps and timings -----------------------------------------------------------------

class Timer:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.steps: list[tuple[str, float]] = []
        # hack/demo.sh installed packages, the venv and the binaries before this process ran
        started = os.environ.get("GWOP_DEMO_STARTED")
        if started:
            setup = max(0.0, time.time() - float(started))
            self.steps.append(("setup (apt, venv, binaries)", setup))
            self.start -= setup

    @contextlib.contextmanager
    def step(self, label: str, title: str) -> Iterator[None]:
        say(f"\n==> {title}")
        t = time.monotonic()
        yield
        took = time.monotonic() - t
        self.steps.append((label, took))
        say(f"    ({took:.1f}s)")

    def summary(self) -> str:
        width = max(len(t) for t, _ in self.steps)
        lines = [f"  {t:<{width}}  {s:6.1f}s" for t, s in self.steps]
        lines.append(f"  {'total':<{width}}  {time.monotonic() - self.start:6.1f}s")
        return "\n".join(lines)


def until(what: str, condition: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    return wait.until(condition, timeout=timeout, interval=interval, what=what,
                      tolerate=(AssertionError, OSError, PodRunError))


# -- control plane, CRD, RBAC, admission policy ------------------------------------------

def cluster_up(paths: Paths) -> Cluster:
    env = dict(os.environ, GWOP_CLUSTER_DIR=str(paths.cluster))
    env.setdefault("GWOP_POD_NETWORK", DEFAULT_POD_NETWORK)
    out = subprocess.run([str(REPO / "hack/cluster.sh"), "up"], env=env, check=True, stdout=subprocess.PIPE,
                         stderr=sys.stdout, text=True).stdout
    return Cluster(Path(out.strip().splitlines()[-1]), owned=False, env=env)


def cluster_id(cluster: Cluster) -> str:
    """Changes whenever the control plane is recreated (etcd is wiped by cluster.sh down)."""
    return cluster.get_json("namespace", "kube-system")["metadata"]["uid"]


def install_operator_objects(cluster: Cluster) -> None:
    install_crd(cluster)  # the harness's: it waits out the moment the new CRD has no conditions yet
    say("    CRD gatewaydeployments.gateway-operator.dev established")
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}))
    rendered = subprocess.run(
        [tool("helm"), "template", RELEASE, str(CHART), "--namespace", SYSTEM_NAMESPACE,
         "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
         "--show-only", "templates/admission-policy.yaml"],
        check=True, capture_output=True, text=True).stdout
    cluster.apply(rendered, "-n", SYSTEM_NAMESPACE)
    say(f"    chart ServiceAccount + RBAC: {SYSTEM_NAMESPACE}/{RELEASE}; "
        f"ValidatingAdmissionPolicy {RELEASE}-replica-warning (helm template {CHART.relative_to(REPO)})")


def operator_kubeconfig(cluster: Cluster, paths: Paths) -> Path:
    """A kubeconfig with a token of the chart's ServiceAccount: the operator runs with the
    permissions the chart grants, not as the admin."""
    token = cluster.kubectl("-n", SYSTEM_NAMESPACE, "create", "token", RELEASE, "--duration=72h").stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "operator",
              "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
              "users": [{"name": RELEASE, "user": {"token": token}}],
              "contexts": [{"name": "operator", "context": {"cluster": "local", "user": RELEASE}}]}
    paths.demo.mkdir(parents=True, exist_ok=True)
    tmp = paths.operator_kubeconfig.with_suffix(".tmp")
    tmp.write_text(json.dumps(config))
    tmp.chmod(0o600)
    tmp.replace(paths.operator_kubeconfig)
    return paths.operator_kubeconfig


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def ensure_operator(cluster: Cluster, paths: Paths, incarnation: str) -> dict[str, Any]:
    info = records(paths).get("operator")
    if alive(paths, info) and info.get("cluster") == incarnation and healthz(info["liveness_port"]):
        say(f"    operator already running (pid {info['pid']})")
        return info
    if info:
        forget(paths, [info])
    kubeconfig = operator_kubeconfig(cluster, paths)
    metrics, liveness = free_port(), free_port()
    paths.logs.mkdir(parents=True, exist_ok=True)
    log_path = paths.logs / "operator.log"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway_operator.cli", "run", "--kubeconfig", str(kubeconfig),
             "--metrics-port", str(metrics), "--liveness-port", str(liveness), "--bind-address", "127.0.0.1",
             "--resync-seconds", "10", "--log-format", "plain"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    info = record(paths, "operator", kind="operator", pid=proc.pid, metrics_port=metrics,
                  liveness_port=liveness, log=str(log_path), cluster=incarnation)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited with {proc.returncode}; see {log_path}")
        return healthz(liveness)
    until("operator liveness", up, 60, 0.3)
    say(f"    operator running: pid {proc.pid}, identity system:serviceaccount:{SYSTEM_NAMESPACE}:{RELEASE}, "
        f"metrics http://127.0.0.1:{metrics}/metrics, log {log_path}")
    return info


# -- the examples, as a user applies them ------------------------------------------------

def kubectl_shown(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    say(f"  $ kubectl {' '.join(args)}")
    proc = cluster.kubectl(*args, check=False)
    text = (proc.stdout + proc.stderr).strip()
    if text:
        say(indent(text))
    return proc


def wait_for_admission_policy(cluster: Cluster, example: Path) -> None:
    """A new ValidatingAdmissionPolicy takes a moment to be enforced: dry-run CREATE a renamed
    copy of the example until the warning comes back, so the real apply shows it."""
    import yaml
    body = yaml.safe_load(example.read_text())
    body["metadata"]["name"] = "admission-policy-probe"
    manifest = json.dumps(body)

    def warns() -> bool:
        p = cluster.kubectl("create", "-n", NAMESPACE, "--dry-run=server", "-f", "-", input=manifest, check=False)
        return WARNING_TEXT in p.stderr
    with contextlib.suppress(TimeoutError):
        until("the admission policy's warning", warns, 30, 0.3)


def apply_examples(cluster: Cluster) -> None:
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
    for example, expected in EXAMPLES:
        shown = example if (Path.cwd() / example).resolve() == REPO / example else str(REPO / example)
        if "warned" in example:
            wait_for_admission_policy(cluster, REPO / example)
        say(f"\n  # {example}: {expected}")
        proc = kubectl_shown(cluster, "apply", "-n", NAMESPACE, "-f", shown)
        if "warned" in example and proc.returncode == 0 and "Warning:" not in proc.stderr:
            # unchanged since an earlier `make demo`: apply sent nothing, so nothing was admitted
            say("  # unchanged, so apply sent no request; a server-side dry-run update goes through admission:")
            kubectl_shown(cluster, "replace", "-n", NAMESPACE, "--dry-run=server", "-f", shown)


# -- the sandbox pod runtime ---------------------------------------------------------------

def is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (not pod["metadata"].get("deletionTimestamp") and bool(status.get("podIP"))
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []))


def component(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/component", "")


def instance(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/instance", "")


def secret_value(cluster: Cluster, name: str, key: str) -> str:
    data = cluster.get_json("secret", name, "-n", NAMESPACE)["data"]
    return base64.b64decode(data[key]).decode()


class Runtime:
    """Starts what the kubelet stand-in's pods would run: redis-server for managed-Redis
    pods, the gateway for gateway pods; stops the processes of pods that are gone."""

    def __init__(self, cluster: Cluster, paths: Paths) -> None:
        self.cluster, self.paths = cluster, paths

    # ---- shared pieces
    def ensure_llm(self) -> dict[str, str]:
        info = records(self.paths).get("llm")
        if not alive(self.paths, info):
            if info:
                forget(self.paths, [info], quiet=True)
            self.paths.demo.mkdir(parents=True, exist_ok=True)
            self.paths.llm_url.unlink(missing_ok=True)
            with open(self.paths.logs / "llm-standin.log", "ab") as log:
                proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "llm-standin",
                                         "--url-file", str(self.paths.llm_url)], stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            record(self.paths, "llm", kind="llm", pid=proc.pid)
            until("the LLM stand-in", lambda: self.paths.llm_url.exists(), 30, 0.1)
            say(f"    LLM STAND-IN (offline, OpenAI-compatible) at {self.paths.llm_url.read_text()}, pid {proc.pid}")
        base_url = self.paths.llm_url.read_text().strip()
        from support.llm_standin import API_KEY
        return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": API_KEY}

    def write_dns(self, pods: list[dict[str, Any]]) -> None:
        self.paths.pydns.mkdir(parents=True, exist_ok=True)
        site = self.paths.pydns / "sitecustomize.py"
        if not site.exists() or site.read_text() != SITECUSTOMIZE:
            site.write_text(SITECUSTOMIZE)
        lines = []
        for svc in self.cluster.get_json("services", "-n", NAMESPACE)["items"]:
            selector = svc["spec"].get("selector")
            if not selector:
                continue
            ready = sorted((p for p in pods if is_ready(p)
                            and selector.items() <= (p["metadata"].get("labels") or {}).items()),
                           key=lambda p: p["metadata"]["name"])
            if ready:
                name, ip = svc["metadata"]["name"], ready[0]["status"]["podIP"]
                lines += [f"{name}.{NAMESPACE}.svc {ip}", f"{name}.{NAMESPACE}.svc.cluster.local {ip}"]
        text = "".join(line + "\n" for line in lines)
        if not self.paths.hosts.exists() or self.paths.hosts.read_text() != text:
            tmp = self.paths.hosts.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(self.paths.hosts)

    # ---- one pass
    def sync(self, llm_env: dict[str, str], quiet: bool = False) -> list[str]:
        """Make the processes match the pods; returns what changed, one line each."""
        changes: list[str] = []
        with locked(self.paths):
            pods = self.cluster.get_json("pods", "-n", NAMESPACE)["items"]
            live = {p["metadata"]["uid"]: p for p in pods if is_ready(p)}
            self.write_dns(pods)
            recs = records(self.paths)
            gone = [info for info in recs.values()  # pods replaced, scaled in or deleted
                    if info.get("kind") in ("gateway", "redis") and info["uid"] not in live]
            forget(self.paths, gone, quiet=True)
            changes += [f"{info['kind']} of pod {info['pod']} stopped (pod gone)" for info in gone]
            recs = records(self.paths)
            by_uid = {info.get("uid"): info for info in recs.values()}
            wanted = []
            for uid, pod in sorted(live.items(), key=lambda kv: kv[1]["metadata"]["name"]):
                info = by_uid.get(uid)
                if alive(self.paths, info):
                    continue
                if info:  # the process died: restart it, as the kubelet restarts a container
                    if time.time() - info["started"] < RESTART_BACKOFF:
                        continue
                    forget(self.paths, [info], quiet=True)
                    changes.append(f"process of pod {pod['metadata']['name']} had exited: restarting it")
                if component(pod) in ("redis", "gateway"):
                    wanted.append(pod)
            for pod in [p for p in wanted if component(p) == "redis"]:
                changes.append(self.start_redis(pod))
            gateways = [p for p in wanted if component(p) == "gateway"]
            if gateways:
                with ThreadPoolExecutor(max_workers=len(gateways)) as pool:
                    changes += list(pool.map(lambda p: self.start_gateway(p, llm_env), gateways))
        if not quiet:
            for line in changes:
                say(f"    {line}")
        return changes

    # ---- redis-server for a managed-Redis pod
    def start_redis(self, pod: dict[str, Any]) -> str:
        name, ip, uid = pod["metadata"]["name"], pod["status"]["podIP"], pod["metadata"]["uid"]
        password = secret_value(self.cluster, f"{instance(pod)}-redis", "password")
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        data = self.paths.redis / name
        data.mkdir(parents=True, exist_ok=True)
        conf = self.paths.redis / f"{name}.conf"  # the password stays out of the process list
        conf.write_text(f'port 6379\nbind {ip}\nset-proc-title no\nrequirepass "{password}"\nsave ""\nappendonly no\n'
                        f'dir "{data}"\ndaemonize no\nloglevel warning\n')
        conf.chmod(0o600)
        log_path = self.paths.logs / f"redis-{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([binary, str(conf)], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        record(self.paths, f"redis-{name}", kind="redis", pid=proc.pid, pod=name, uid=uid, ip=ip,
               instance=instance(pod), data=str(data), conf=str(conf))
        import redis
        client = redis.Redis(host=ip, port=6379, password=password, socket_timeout=1)

        def pong() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server for {name} exited; see {log_path}")
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False
        until(f"redis-server at {ip}:6379", pong, 15, 0.05)
        return (f"redis-server (real) for pod {name} at {ip}:6379, password from Secret "
                f"{instance(pod)}-redis, pid {proc.pid}")

    # ---- the gateway for a gateway pod
    def start_gateway(self, pod: dict[str, Any], llm_env: dict[str, str]) -> str:
        name, uid, ip = pod["metadata"]["name"], pod["metadata"]["uid"], pod["status"]["podIP"]
        note = ""
        volumes = pod["spec"].get("volumes") or []
        if any("persistentVolumeClaim" in v for v in volumes):
            pod = json.loads(json.dumps(pod))
            pod["spec"]["volumes"] = [{"name": v["name"], "emptyDir": {}} if "persistentVolumeClaim" in v else v
                                      for v in volumes]
            note = " (its PersistentVolumeClaim is STOOD IN by a scratch directory)"
        env = {**llm_env, "PRAISONAI_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "true",
               "PYTHONPATH": str(self.paths.pydns), "GWOP_DEMO_HOSTS": str(self.paths.hosts)}
        self.paths.pods.mkdir(parents=True, exist_ok=True)
        process: LocalPodProcess = run_pod_locally(self.cluster, pod, container="gateway", port=GATEWAY_PORT,
                                                   extra_env=env, live_path=None)
        record(self.paths, f"gateway-{name}", kind="gateway", pid=process.proc.pid, pod=name, uid=uid, ip=ip,
               root=str(process.root), instance=instance(pod))
        process.wait_live("/live", timeout=90)
        warm = self.warm_up(process, instance(pod))
        return f"gateway (real, praisonai-bot 0.1.16) for pod {name} at {ip}:{GATEWAY_PORT}, pid {process.proc.pid}" \
               f"{note}; {warm}"

    def warm_up(self, process: LocalPodProcess, gd: str) -> str:
        """0.1.16 builds a replica's idempotency store on its first webhook: send one."""
        token = secret_value(self.cluster, f"{gd}-gateway-auth", "token")
        delivery = f"demo-warmup-{process.pod}-{int(time.time())}"
        body = json.dumps({"id": delivery, "text": "warm-up"}).encode()
        req = urllib.request.Request(f"{process.base_url}/hooks/{HOOK}", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                answer = json.loads(r.read() or b"{}")
                return f"warm-up webhook: HTTP {r.status} action={answer.get('action')}"
        except urllib.error.HTTPError as e:
            return f"warm-up webhook: HTTP {e.code}"
        except OSError as e:
            return f"warm-up webhook failed: {e}"


# -- what the user sees ------------------------------------------------------------------

def gateway_deployments(cluster: Cluster) -> list[dict[str, Any]]:
    return sorted(cluster.get_json("gatewaydeployments", "-n", NAMESPACE)["items"],
                  key=lambda g: g["metadata"]["name"])


def condition(gd: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (gd.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def all_answered(gd: dict[str, Any]) -> bool:
    """IdempotencyDegraded says "(N of M polled replicas answered)": every replica answered."""
    message = condition(gd, "IdempotencyDegraded").get("message", "")
    found = re.search(r"\((\d+) of (\d+) polled replicas answered\)", message)
    return not found or found.group(1) == found.group(2)


def expected_pods(cluster: Cluster) -> dict[str, int]:
    """Pods each GatewayDeployment should have running: its gateways and a managed Redis."""
    out = {}
    for gd in gateway_deployments(cluster):
        name, spec = gd["metadata"]["name"], gd["spec"]
        out[f"{name}/gateway"] = int(spec.get("replicas", 1))
        if ((spec.get("redis") or {}).get("managed") or {}).get("enabled"):
            out[f"{name}/redis"] = 1
    return out


def running_pods(paths: Paths) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in records(paths).values():
        if info.get("kind") in ("gateway", "redis") and alive(paths, info):
            key = f"{info.get('instance')}/{info['kind']}"
            out[key] = out.get(key, 0) + 1
    return out


def condition_table(gd: dict[str, Any]) -> str:
    rows = [("TYPE", "STATUS", "REASON", "MESSAGE")]
    rows += [(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
             for c in (gd.get("status") or {}).get("conditions") or []]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"    {a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}" for a, b, c, d in rows)


def show_status(cluster: Cluster) -> None:
    say()
    kubectl_shown(cluster, "get", "gatewaydeployments", "-n", NAMESPACE)
    for gd in gateway_deployments(cluster):
        spec = gd["spec"]
        store = "Redis (operator-managed)" if ((spec.get("redis") or {}).get("managed") or {}).get("enabled") \
            else ("Redis" if spec.get("redis") else "per-replica SQLite")
        say(f"\n  {gd['metadata']['name']}: {spec.get('replicas', 1)} replica(s), store {store}, "
            f"replicaPolicy {spec.get('replicaPolicy', 'Refuse')}")
        say(condition_table(gd))


def show_usage(cluster: Cluster, paths: Paths) -> None:
    bin_dir = Path(tool("kubectl")).parent
    procs = records(paths)
    redis_pid = next((i["pid"] for i in procs.values() if i.get("kind") == "redis"), None)
    gateway_ip = next((i["ip"] for i in sorted(procs.values(), key=lambda i: i["key"])
                       if i.get("kind") == "gateway" and i.get("instance") == SHOWCASE), None)
    say(f"""
  kubeconfig: {cluster.kubeconfig}
  binaries:   kubectl {bin_dir / 'kubectl'}
              helm    {bin_dir / 'helm'}

  export KUBECONFIG={cluster.kubeconfig}
  export PATH={bin_dir}:$PATH

  Try:
    kubectl get gatewaydeployments -n {NAMESPACE}
    kubectl describe gatewaydeployment {SHOWCASE} -n {NAMESPACE}
    kubectl wait --for=condition=Ready gatewaydeployment/{SHOWCASE} -n {NAMESPACE} --timeout=60s
    kubectl get pods,svc,secrets,networkpolicies -n {NAMESPACE} -o wide
    kubectl get events -n {NAMESPACE} --field-selector involvedObject.kind=GatewayDeployment""")
    if gateway_ip:
        say(f"    curl -s http://{gateway_ip}:{GATEWAY_PORT}/health      # a real gateway replica of {SHOWCASE}")
    if redis_pid:
        say(f"    kill -STOP {redis_pid}   # pause the real Redis, then watch the operator notice:")
        say(f"    kubectl wait --for=condition=RedisReachable=False gatewaydeployment/{SHOWCASE} -n {NAMESPACE} "
            "--timeout=60s")
        say(f"    kill -CONT {redis_pid}   # resume it")
    selector = f"app.kubernetes.io/instance={SHOWCASE},app.kubernetes.io/component=gateway"
    say(f"""    kubectl delete pod -n {NAMESPACE} -l {selector}
                       # new pods get new gateway processes while `make demo` runs
  Logs: {paths.logs}/operator.log, {paths.pods}/*/container.log
        ({paths.logs}/gateway-<pod>.log once a gateway stopped)
  Stop everything: {down_command(paths)}   (or Ctrl-C where `make demo` runs)""")


def down_command(paths: Paths) -> str:
    default = (REPO / ".cluster/sandbox").resolve()
    return "make demo-down" if paths.cluster == default else f"GWOP_CLUSTER_DIR={paths.cluster} make demo-down"


# -- up / follow / down --------------------------------------------------------------------

def follower_pid(paths: Paths) -> int | None:
    try:
        pid = int(paths.follower.read_text())
    except (OSError, ValueError):
        return None
    return pid if pid != os.getpid() and "hack/demo.py" in cmdline(pid) else None


def raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def up() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even if started with SIGINT ignored
    signal.signal(signal.SIGTERM, raise_interrupt)
    paths = Paths(cluster_dir())
    os.environ.setdefault("GWOP_POD_NETWORK", DEFAULT_POD_NETWORK)
    timer = Timer()
    say(f"gateway-operator sandbox in {paths.cluster} (pod network {os.environ['GWOP_POD_NETWORK']})")
    try:
        with timer.step("control plane", "control plane (hack/cluster.sh up): etcd, kube-apiserver, "
                        "kube-controller-manager, kubelet STAND-IN"):
            cluster = cluster_up(paths)
            incarnation = cluster_id(cluster)
        with timer.step("CRD, RBAC, admission policy, operator",
                        "CRD, the chart's RBAC and admission policy; the operator"):
            install_operator_objects(cluster)
            ensure_operator(cluster, paths, incarnation)
        with timer.step("examples applied", f"examples, applied with kubectl in namespace {NAMESPACE}"):
            apply_examples(cluster)
        with timer.step("pod processes (redis, gateways, warm-up)",
                        "sandbox pod runtime: the kubelet is STOOD IN (it binds pods and reports them Ready at "
                        "127.x pod IPs, running nothing); this script runs each pod's process at its pod IP"):
            say("    cluster DNS + kube-proxy STOOD IN: <service>.<namespace>.svc resolves to a ready endpoint's "
                "pod IP")
            tempfile.tempdir = str(paths.pods)  # pod_runner's pod roots: under <dir>/demo/, see `down`
            runtime = Runtime(cluster, paths)
            llm_env = runtime.ensure_llm()

            def all_running() -> bool:
                runtime.sync(llm_env)
                want, have = expected_pods(cluster), running_pods(paths)
                return all(have.get(k, 0) >= n for k, n in want.items())
            until("a process for every pod", all_running, SETUP_TIMEOUT, 1.0)
            procs = [i for i in records(paths).values() if i.get("kind") in ("redis", "gateway")]
            say(f"    running: {sum(i['kind'] == 'gateway' for i in procs)} gateway processes, "
                f"{sum(i['kind'] == 'redis' for i in procs)} redis-server(s) "
                f"(pids {', '.join(str(i['pid']) for i in procs)}), the LLM stand-in, the operator")
        healthy = True
        with timer.step("conditions settled", f"waiting for {SHOWCASE} ExactlyOnceAdmission=True and every "
                        "replica's /health to be polled by the operator"):
            try:
                until(f"{SHOWCASE} ExactlyOnceAdmission=True", lambda: condition(
                    next(g for g in gateway_deployments(cluster) if g["metadata"]["name"] == SHOWCASE),
                    "ExactlyOnceAdmission").get("status") == "True", 60, 0.5)
                until("every GatewayDeployment Ready, every replica polled", lambda: all(
                    condition(g, "Ready").get("status") == "True" and all_answered(g)
                    for g in gateway_deployments(cluster)), 30, 0.5)
            except TimeoutError as e:
                healthy = False
                say(f"    WARNING: {e}; see {paths.logs}/operator.log")
        show_status(cluster)
        show_usage(cluster, paths)
        say("\nTimings:\n" + timer.summary())
        if os.environ.get("DEMO_EXIT_AFTER_SETUP") == "1":
            say(f"\nDEMO_EXIT_AFTER_SETUP=1: leaving the sandbox running; `{down_command(paths)}` stops it.")
            return 0 if healthy else 1
        other = follower_pid(paths)
        if other:
            say(f"\n`make demo` (pid {other}) already follows this sandbox; this one exits. "
                f"Ctrl-C there or `{down_command(paths)}` stops it.")
            return 0 if healthy else 1
        return follow(cluster, paths, runtime, llm_env)
    except KeyboardInterrupt:
        say("\ninterrupted: stopping the sandbox")
        down(paths, from_follower=True)
        return 130


def follow(cluster: Cluster, paths: Paths, runtime: Runtime, llm_env: dict[str, str]) -> int:
    paths.follower.write_text(str(os.getpid()))
    say("\nThe sandbox is running; following pods (replaced pods get new processes). Ctrl-C stops everything.")
    try:
        while True:
            time.sleep(FOLLOW_INTERVAL)
            try:
                for line in runtime.sync(llm_env, quiet=True):
                    say(f"[{time.strftime('%H:%M:%S')}] {line}")
            except (AssertionError, PodRunError, RuntimeError, TimeoutError, OSError) as e:
                say(f"[{time.strftime('%H:%M:%S')}] {e}".splitlines()[0])
    except KeyboardInterrupt:
        say("\nstopping the sandbox (Ctrl-C / SIGTERM)")
        down(paths, from_follower=True)
        return 0


def down(paths: Paths | None = None, from_follower: bool = False) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the cleanup once it started
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    paths = paths or Paths(cluster_dir())
    t = time.monotonic()
    other = follower_pid(paths)
    if other and not from_follower:  # a running `make demo`: it stops everything itself
        say(f"  asking `make demo` (pid {other}) to stop")
        with contextlib.suppress(OSError):
            os.kill(other, signal.SIGTERM)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and follower_pid(paths):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(other, os.WNOHANG)
            if not cmdline(other):
                break
            time.sleep(0.2)
    procs = records(paths)
    for kind in STOP_ORDER:
        forget(paths, [info for info in procs.values() if info.get("kind") == kind])
    # anything of this demo that escaped the records (interrupted between start and record)
    strays = [int(e.name) for e in Path("/proc").iterdir()
              if e.name.isdigit() and int(e.name) != os.getpid() and paths.marker in cmdline(int(e.name))]
    for pid in stop_pids(strays, paths.marker):
        say(f"  stopped unrecorded demo process {pid}")
    env = dict(os.environ, GWOP_CLUSTER_DIR=str(paths.cluster))
    subprocess.run([str(REPO / "hack/cluster.sh"), "down"], env=env, check=False, stderr=sys.stdout)
    shutil.rmtree(paths.demo, ignore_errors=True)
    shutil.rmtree(paths.state, ignore_errors=True)
    with contextlib.suppress(OSError):
        if from_follower or not follower_pid(paths):
            paths.follower.unlink()
    say(f"demo down ({paths.cluster}) in {time.monotonic() - t:.1f}s")
    return 0


def llm_standin(url_file: str) -> int:
    """The LLM stand-in as its own process, so it outlives `hack/demo.py up`."""
    from support.llm_standin import StandInLLM
    llm = StandInLLM().start()
    target = Path(url_file)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(llm.base_url)
    tmp.replace(target)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        signal.pause()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("up")
    sub.add_parser("down")
    llm = sub.add_parser("llm-standin")
    llm.add_argument("--url-file", required=True, help="where to write the stand-in's base URL")
    args = parser.parse_args()
    if args.command == "down":
        return down()
    if args.command == "llm-standin":
        return llm_standin(args.url_file)
    return up()


if __name__ == "__main__":
    sys.exit(main())
