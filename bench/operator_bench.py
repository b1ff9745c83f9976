"""Scale benchmark: the operator against a floor, on one local control plane.

    .venv/bin/python bench/operator_bench.py --gateways 200 --replicas 2 [--interval 10]
        [--timeout 1] [--idle 30] [--flips 20] [--soak 0] [--no-floor] [--json FILE]
    .venv/bin/python bench/plot.py docs/img/bench.png FILE.json ...   (docs/development.md's figure)

On its own control plane (.cluster/bench: etcd, kube-apiserver, kube-controller-manager),
pods are SIMULATED by kwok (hack/cluster.sh's simulated node) and their ``/health`` answered by
HEALTH ENDPOINT STAND-INS in a process of their own (bench/health_farm.py). Redis is a real
redis-server; the operator is the real CLI under the chart's RBAC. In order:

1. floor: a minimal direct client creates the same objects the operator creates for N gateways
   (rendered by the operator's own pure functions, the generated Secrets included; the JSON
   counts both sides: ``floor_objects_per_gateway``, ``operator_objects_per_gateway``) and waits
   for their pods to be Ready;
2. the operator, from N GatewayDeployments, until the same pods are Ready (``operator_s``,
   compared with the floor) and every resource says Ready (``operator_ready_s``);
3. idle: replica checks achieved against demanded (every ready replica once per interval: the
   launcher's long-poll health watch answering, or a poll; ``--health poll`` turns the watch off),
   the operator's API writes (audit log), CPU per replica check (the operator's CPU divided by the
   checks the interval demands, so that runs compare however the checks are made), RSS and KiB
   per GatewayDeployment;
4. flips: one replica of each of ``--flips`` gateways reports ``durability:idempotency``,
   spread over an interval: the time until the resource shows it (and clears it);
5. soak (``--soak S``): RSS sampled while the operator idles for S seconds;
6. with ``--operators N --shards S`` (N operator processes sharing S shards, ``--shards``):
   every figure above summed over the processes, each process's share, and with ``--kill`` the
   first process SIGKILLed at the end: the seconds until the others hold its shards
   (``kill_shards_moved_s``), until a GatewayDeployment of one of them is reconciled after a
   spec change (``kill_reconciled_s``), and until none of their loops waits its turn to start
   (``kill_all_started_s``).

``--tracemalloc`` runs the operator under tracemalloc (bench/traced_operator.py) and says what each
KiB per GatewayDeployment is: the Python allocations alive when all have settled less those
alive before the first, by the module that made them (``kib_per_gateway_by_source``) and by line.
Tracing slows the operator: such a run's memory figures count, its timings do not.

Prints a table; ``--json`` writes the same figures (bench/plot.py draws them).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import kubernetes
from kubernetes import watch
from kubernetes.client.rest import ApiException

from gateway_operator import api as gw_api
from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import resolve
from gateway_operator.core import pods as gw_pods
from gateway_operator.core.render.names import Owner
from gateway_operator.core.render.objects import desired_objects
from gateway_operator.core.render.secrets import generated_secrets
from gateway_operator.core.shards import shard_of
from gateway_operator.pod import pod_code
from harness import audit
from harness.cluster import REPO, Cluster
from harness.gateways import reconcile_latency
from harness.operator import IDENTITY, OperatorProcess, gateway_deployment, late_ticks, redis_store
from harness.processes import rss_mib
from harness.redis_server import RedisServer
from harness.wait import WaitTimeout, until

POD_CIDR = "127.40.0.0/16"  # loopback, apart from the test clusters' simulated pods (127.1/16)
WORKERS = 16  # client threads of the floor and of the bench's own creates


# -- measuring ---------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of a process."""
    rss = rss_mib(pid) or 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss, cpu


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process: its main thread (the event loop) and the others summed."""
    found: dict[str, float] = collections.defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        kind = "event loop" if task.name == str(pid) else "threads"  # API calls (full passes), the elector, metrics
        found[kind] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return dict(found)


def stats_of(pids: list[int]) -> tuple[float, float]:
    """RSS (MiB) and CPU seconds summed over ``pids``."""
    both = [proc_stat(pid) for pid in pids]
    return sum(r for r, _ in both), sum(c for _, c in both)


def threads_of(pids: list[int]) -> dict[str, float]:
    total: dict[str, float] = collections.Counter()
    for pid in pids:
        total.update(thread_cpu(pid))
    return dict(total)


def shards_held(operator: OperatorProcess) -> set[int]:
    """The shards ``operator`` holds, from gateway_operator_shard_held; bounded by a minute, as
    ``metric_sum`` is (the 3,000 x 2 run timed out here on the default bound)."""
    return {int(line.split('"')[1]) for line in operator.metrics(timeout=60).splitlines()
            if line.startswith("gateway_operator_shard_held{") and line.endswith(" 1.0")}


def metric_sum(operator: OperatorProcess, prefix: str) -> float:
    """The operator's series whose line starts with ``prefix``, summed. Bounded by a minute: at
    1,500 GatewayDeployments a process on a saturated machine took over 5 s to render its metrics
    (3,000 x 2 on 2 cores)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in operator.metrics(timeout=60).splitlines()
               if line.startswith(prefix))


def loops_waiting(operator: OperatorProcess) -> float:
    """gateway_operator_loops_waiting: GatewayDeployments found settled whose loop waits its turn."""
    return metric_sum(operator, "gateway_operator_loops_waiting ")


def operator_polls(operator: OperatorProcess) -> float:
    """gateway_operator_health_polls_total summed over every series, as the operator counts it."""
    return metric_sum(operator, "gateway_operator_health_polls_total{")


def loop_lag(operator: OperatorProcess) -> tuple[float, float]:
    """The operator's event-loop ticks so far, and those that woke over a second late."""
    return late_ticks(operator.metrics(timeout=60))


def lag_between(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> list[float]:
    """Per operator: the share of its ticks over a second late between two readings of loop_lag."""
    return [round((a[1] - b[1]) / max(1.0, a[0] - b[0]), 4) for b, a in zip(before, after)]


def rss_peak_mib(pid: int) -> float:
    """The process's RSS high-water mark (VmHWM): the start-up peak, whatever came down since."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


class Farm:
    """Client of bench/health_farm.py: child processes, each serving a share of the pod IPs (by
    address), so that no one of them needs more file descriptors than a process may have (a
    listener per IP and port, plus the kept and long-poll connections: about 3.5 per replica)."""

    IPS_PER_PROCESS = 2500

    def __init__(self, watch: bool = True, replicas: int = 1) -> None:
        count = max(1, -(-replicas // self.IPS_PER_PROCESS))
        self.procs = [subprocess.Popen([sys.executable, str(REPO / "bench/health_farm.py"),
                                        *(() if watch else ("--no-watch",))],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for _ in range(count)]
        self.lock = threading.Lock()

    def _ask(self, proc: subprocess.Popen[str], op: str, ips: list[str]) -> dict[str, Any]:
        assert proc.stdin and proc.stdout
        proc.stdin.write(json.dumps({"op": op, "ips": ips}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the health stand-ins exited ({proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"health stand-ins: {reply['error']} (is another benchmark using --pod-cidr?)")
        return reply

    def call(self, op: str, ips: list[str] | None = None) -> dict[str, Any]:
        """The op on the processes serving ``ips`` (every process for stats: the counts summed);
        ``at`` is the last answering process's clock (one process for one IP)."""
        shares: dict[int, list[str]] = {}
        for ip in ips or []:
            shares.setdefault(int(ipaddress.ip_address(ip)) % len(self.procs), []).append(ip)
        with self.lock:
            replies = [self._ask(self.procs[i], op, share) for i, share in sorted(shares.items())] if ips else \
                [self._ask(proc, op, []) for proc in self.procs]
        merged: dict[str, Any] = dict(replies[-1])
        for key in ("requests", "watch_answers", "cpu_s"):
            if key in merged:
                merged[key] = sum(r.get(key, 0) for r in replies)
        return merged

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(10)


@dataclass
class Watched:
    """What a list+watch of one resource kind in one namespace has seen, as it arrives."""

    summarize: Callable[[dict[str, Any]], Any]
    error: Exception | None = None  # what stopped the watch for good (values() raises it)
    objects: dict[str, Any] = field(default_factory=dict)
    history: dict[str, list[tuple[float, Any]]] = field(default_factory=dict)  # name -> (arrival, summary)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with self.lock:
            if kind == "DELETED":
                self.objects.pop(name, None)
                return
            summary = self.summarize(obj)
            self.objects[name] = summary
            self.history.setdefault(name, []).append((time.time(), summary))

    def values(self) -> list[Any]:
        if self.error is not None:
            raise RuntimeError("a watch of the benchmark failed") from self.error
        with self.lock:
            return list(self.objects.values())


def start_watch(lister: Callable[..., Any], namespace: str, watched: Watched, stop: threading.Event,
                on_event: Callable[[Any], None] | None = None) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            try:
                listing = lister(namespace, _preload_content=False)
                body = json.loads(listing.data)
                for item in body["items"]:
                    watched.record("ADDED", item)
                    if on_event:
                        on_event(watched.summarize(item))
                stream = watch.Watch().stream(lister, namespace, resource_version=body["metadata"]["resourceVersion"],
                                              timeout_seconds=60, _request_timeout=90)
                for event in stream:
                    if stop.is_set():
                        return
                    obj = event["raw_object"]
                    watched.record(event["type"], obj)
                    if on_event and event["type"] != "DELETED":
                        on_event(watched.summarize(obj))
            except ApiException as e:
                if e.status != 410:
                    time.sleep(1)
            except RuntimeError as e:  # the bench's own failure (the stand-ins): stop, say why
                watched.error = e
                return
            except Exception:  # noqa: BLE001 - a dropped watch restarts with a fresh list
                time.sleep(1)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class PodSummary:
    gateway: str
    ip: str | None
    ready: bool


def pod_summary(pod: dict[str, Any]) -> PodSummary:
    status = pod.get("status") or {}
    return PodSummary((pod["metadata"].get("labels") or {}).get(gw_api.LABEL_INSTANCE, ""), status.get("podIP"),
                      gw_pods.ready(status) and not pod["metadata"].get("deletionTimestamp"))


def gateway_summary(body: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (body.get("status") or {}).get("conditions") or []}


@dataclass
class Traced:
    """The traced operator's allocations (bench/traced_operator.py), asked for by SIGUSR2."""

    path: Path

    def __post_init__(self) -> None:
        os.environ["GWOP_TRACEMALLOC_OUT"] = str(self.path)  # before the operator starts: its environment

    def take(self, pid: int) -> list[dict[str, Any]]:
        self.path.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR2)
        until(self.path.exists, timeout=300, interval=0.5, what="the traced operator's allocations")
        return json.loads(self.path.read_text())

    @staticmethod
    def per_gateway(before: list[dict[str, Any]], after: list[dict[str, Any]], gateways: int) -> dict[str, Any]:
        """KiB per GatewayDeployment by source module and by line: what grew between the two."""
        grown: collections.Counter[str] = collections.Counter()
        for sign, lines in ((-1, before), (1, after)):
            for line in lines:
                grown[line["where"]] += sign * line["bytes"]
        by_source: collections.Counter[str] = collections.Counter()
        for where, size in grown.items():
            by_source[_source(where.rsplit(":", 1)[0])] += size
        kib = lambda size: round(size / 1024 / gateways, 2)  # noqa: E731
        return {"traced_kib_per_gateway": kib(sum(grown.values())),
                "kib_per_gateway_by_source": {k: kib(v) for k, v in by_source.most_common() if abs(kib(v)) >= 0.1},
                "kib_per_gateway_by_line": {k: kib(v) for k, v in grown.most_common(25)}}


def _source(filename: str) -> str:
    """An allocation's file as a module path: gateway_operator.core.health, kopf, redis, json, ..."""
    if filename.startswith("<"):
        return filename  # <frozen importlib._bootstrap>, <string>
    parts = Path(filename).with_suffix("").parts
    for anchor in ("gateway_operator", "site-packages"):
        if anchor in parts:
            rest = parts[parts.index(anchor) + (0 if anchor == "gateway_operator" else 1):]
            return ".".join(rest[:2]) if anchor == "gateway_operator" else rest[0]
    return ".".join(parts[-2:]) if "python3" in filename else parts[-1]


# -- the runs ----------------------------------------------------------------------------------

@dataclass
class Bench:
    args: argparse.Namespace
    cluster: Cluster
    farm: Farm
    redis: RedisServer
    core: Any = None
    custom: Any = None
    stop: threading.Event = field(default_factory=threading.Event)
    floor_objects: dict[str, float] = field(default_factory=dict)  # what the floor created, by kind, per gateway

    def __post_init__(self) -> None:
        client = kubernetes.config.new_client_from_config(str(self.cluster.kubeconfig))
        client.configuration.connection_pool_maxsize = WORKERS * 2
        self.client = client
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    @property
    def names(self) -> list[str]:
        return [f"gw{i:04d}" for i in range(self.args.gateways)]

    @property
    def pods_expected(self) -> int:
        return self.args.gateways * self.args.replicas

    def spec(self, name: str) -> dict[str, Any]:
        return gateway_deployment(
            name, replicas=self.args.replicas, config=redis_store(),
            redis={"url": self.redis.url, "passwordSecretRef": {"name": "redis-auth"}},
            health={"intervalSeconds": self.args.interval, "timeoutSeconds": self.args.timeout})

    def namespace(self) -> str:
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": ns}})
        self.core.create_namespaced_secret(ns, {"metadata": {"name": "redis-auth"},
                                                "stringData": {"password": self.redis.password or ""}})
        until(lambda: self._default_sa(ns), timeout=60, what="default service account")
        return ns

    def _default_sa(self, ns: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", ns)
            return True
        except ApiException:
            return False

    def watch_pods(self, ns: str) -> Watched:
        pods = Watched(pod_summary)

        def serve(p: PodSummary) -> None:
            if p.ip:
                self.farm.call("serve", [p.ip])
        start_watch(self.core.list_namespaced_pod, ns, pods, self.stop, on_event=serve)
        return pods

    def ready_pod_count(self, pods: Watched) -> int:
        return sum(1 for p in pods.values() if p.ready and p.ip)

    def delete_namespace(self, ns: str) -> None:
        self.core.delete_namespace(ns)
        until(lambda: not any(n.metadata.name == ns for n in self.core.list_namespace().items),
              timeout=600, interval=2, what=f"namespace {ns} gone")

    # 1. the floor
    def floor(self) -> float:
        ns = self.namespace()
        pods = self.watch_pods(ns)
        objects: list[dict[str, Any]] = []
        for name in self.names:
            raw = self.spec(name)["spec"]
            spec = GatewaySpec.parse(raw)
            owner = Owner(name, ns, str(uuid.uuid4()))
            target = resolve(spec.redis, ns, name)
            # what the operator creates: the Secrets it generates, then what render says should exist
            objects += [g.manifest(owner) for g in generated_secrets(owner, spec)]
            objects += desired_objects(owner, spec, target, spec.replicas, "floor", pod_code=pod_code())
        for manifest in objects:  # no owner exists to be garbage-collected against
            manifest["metadata"].pop("ownerReferences", None)
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(self._create, objects))
        until(lambda: self.ready_pod_count(pods) >= self.pods_expected, timeout=3600, interval=0.5,
              what="floor pods ready")
        elapsed = time.monotonic() - started
        self.floor_objects = self.objects_per_gateway(ns)
        self.delete_namespace(ns)
        return elapsed

    def _create(self, manifest: dict[str, Any]) -> None:
        ns, kind = manifest["metadata"]["namespace"], manifest["kind"]
        create = {"ConfigMap": self.core.create_namespaced_config_map, "Secret": self.core.create_namespaced_secret,
                  "Service": self.core.create_namespaced_service,
                  "Deployment": kubernetes.client.AppsV1Api(self.client).create_namespaced_deployment,
                  "PodDisruptionBudget": kubernetes.client.PolicyV1Api(self.client).create_namespaced_pod_disruption_budget,
                  "NetworkPolicy": kubernetes.client.NetworkingV1Api(self.client).create_namespaced_network_policy,
                  "PersistentVolumeClaim": self.core.create_namespaced_persistent_volume_claim,
                  }[kind]
        create(ns, manifest, _preload_content=False)

    def objects_per_gateway(self, ns: str) -> dict[str, float]:
        """The objects in ``ns`` that carry a gateway's labels, by kind, per gateway (the pods and
        ReplicaSets the controllers make are the same on both sides and not counted)."""
        selector = f"{gw_api.LABEL_MANAGED_BY}={gw_api.MANAGED_BY}"
        apps, policy = kubernetes.client.AppsV1Api(self.client), kubernetes.client.PolicyV1Api(self.client)
        net = kubernetes.client.NetworkingV1Api(self.client)
        lists = {"ConfigMap": self.core.list_namespaced_config_map, "Secret": self.core.list_namespaced_secret,
                 "Service": self.core.list_namespaced_service, "Deployment": apps.list_namespaced_deployment,
                 "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget,
                 "NetworkPolicy": net.list_namespaced_network_policy,
                 "PersistentVolumeClaim": self.core.list_namespaced_persistent_volume_claim}
        counts = {kind: len(json.loads(call(ns, label_selector=selector, _preload_content=False).data)["items"])
                  for kind, call in lists.items()}
        return {kind: round(n / self.args.gateways, 2) for kind, n in counts.items() if n}

    # 2. the operator
    def operator_run(self, ns: str, pods: Watched, gateways: Watched) -> tuple[float, float]:
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda n: self.custom.create_namespaced_custom_object(
                gw_api.GROUP, gw_api.VERSION, ns, gw_api.PLURAL, self.spec(n)), self.names))
        until(lambda: self.ready_pod_count(pods) >= self.pods_expected, timeout=3600, interval=0.5,
              what="operator pods ready")
        pods_ready = time.monotonic() - started
        until(lambda: sum(1 for g in gateways.values() if g.get("Ready") == "True") >= self.args.gateways,
              timeout=3600, interval=0.5, what="every GatewayDeployment Ready")
        return pods_ready, time.monotonic() - started

    # 4. flips
    def flips(self, pods: Watched, gateways: Watched) -> tuple[list[float], list[float]]:
        chosen = self.names[:: max(1, self.args.gateways // self.args.flips)][: self.args.flips]
        ip_of = {}
        for p in pods.values():
            if p.gateway in chosen and p.ready and p.ip:
                ip_of.setdefault(p.gateway, p.ip)
        spacing = self.args.interval / len(chosen)
        shown = self._flip(chosen, ip_of, gateways, "degrade", "True", spacing)
        cleared = self._flip(chosen, ip_of, gateways, "clear", "False", spacing)
        return shown, cleared

    def _flip(self, chosen: list[str], ip_of: dict[str, str], gateways: Watched, op: str, want: str,
              spacing: float) -> list[float]:
        began: dict[str, float] = {}
        for name in chosen:  # spread over one interval: each lands at a different point of its poll cycle
            began[name] = self.farm.call(op, [ip_of[name]])["at"]
            time.sleep(spacing)

        def arrived(name: str) -> float | None:
            with gateways.lock:
                history = list(gateways.history.get(name, []))
            return next((t for t, c in history if t >= began[name] and c.get("IdempotencyDegraded") == want), None)
        until(lambda: all(arrived(n) is not None for n in chosen), timeout=120, interval=0.2,
              what=f"IdempotencyDegraded={want} on every flipped gateway")
        return [arrived(n) - began[n] for n in chosen]  # type: ignore[operator]


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("GWOP_KCM_QPS", "200")  # pod creation is not what is measured
    os.environ["GWOP_POD_NETWORK"] = args.pod_cidr  # the simulated node's pod IPs, where the farm answers
    os.environ.setdefault("GWOP_SERVICE_CIDR", "198.19.0.0/16")  # a ClusterIP for each of thousands of Services
    t = time.monotonic()
    cluster = Cluster.from_environment(args.cluster_dir)
    if cluster.directory is None:
        raise SystemExit("the benchmark runs on a control plane of its own (unset GWOP_TEST_KUBECONFIG)")
    print(f"control plane with its simulated node up: {time.monotonic() - t:.1f}s", flush=True)
    redis = RedisServer(password="bench-password").start()
    farm = Farm(watch=args.health == "watch", replicas=args.gateways * args.replicas)
    bench = Bench(args, cluster, farm, redis)
    operators: list[OperatorProcess] = []
    out: dict[str, Any] = {"gateways": args.gateways, "replicas": args.replicas,
                           "interval_s": args.interval, "timeout_s": args.timeout}
    try:
        out["shards"] = args.shards or 1  # shards of GatewayDeployments (1: one leader works alone)
        out["operators"] = args.operators  # operator processes (with --shards, all of them work)
        if not args.no_floor:
            out["floor_s"] = round(bench.floor(), 2)
            out["floor_objects_per_gateway"] = bench.floor_objects
            print(f"floor: {out['floor_s']} s, objects per gateway {bench.floor_objects}", flush=True)

        ns = bench.namespace()
        pods = bench.watch_pods(ns)
        gateways = Watched(gateway_summary)
        start_watch(lambda n, **kw: bench.custom.list_namespaced_custom_object(
            gw_api.GROUP, gw_api.VERSION, n, gw_api.PLURAL, **kw), ns, gateways, bench.stop)
        traced = Traced(Path(cluster.directory) / "tracemalloc.json") if args.tracemalloc else None
        entry = (str(Path(__file__).parent / "traced_operator.py"),) if traced else ("-m", "gateway_operator.cli")
        for _ in range(args.operators):
            operators.append(OperatorProcess(
                cluster, resync_seconds=args.resync, lease=(15, 10, 2), entry=entry,  # the chart's lease
                extra_args=() if args.health == "watch" else ("--no-health-watch",), shards=args.shards).start())
        pids = [o.proc.pid for o in operators if o.proc is not None]
        pid = pids[0]
        print(f"operator pids {pids} (for a profiler: py-spy record -p {pid})", flush=True)
        if args.shards:   # every process holds its share before the first GatewayDeployment
            t = time.monotonic()
            until(lambda: sorted(s for o in operators for s in shards_held(o)) == list(range(args.shards))
                  and min(len(shards_held(o)) for o in operators) >= args.shards // len(operators),
                  timeout=120, interval=1, what="the shards shared")
            out["shards_by_operator"] = [sorted(shards_held(o)) for o in operators]
            print(f"shards shared in {time.monotonic() - t:.1f} s: {out['shards_by_operator']}", flush=True)
        out["rss_start_mib"] = round(stats_of(pids)[0], 1)
        lag0 = [loop_lag(o) for o in operators]
        before = traced.take(pid) if traced else []
        creating = audit.now()
        operator_s, ready_s = bench.operator_run(ns, pods, gateways)
        # what the ratio is made of: the operator's requests per GatewayDeployment while it created
        # everything, by verb and resource (the floor sends one create per object it counts)
        made = audit.completed(audit.requests(cluster, IDENTITY, creating),
                               {"get", "create", "patch", "update", "delete"})
        # None when the API server's log rotation (200 MB, one backup) dropped the first requests
        out["operator_requests_per_gateway_creating"] = {
            k: round(n / args.gateways, 2)
            for k, n in sorted(collections.Counter(f"{r.verb} {r.resource}" for r in made).items())
        } if audit.holds_since(cluster, creating) else None
        # creating every object: the start-up peak (summed over the processes' own peaks)
        out["rss_peak_start_mib"] = round(sum(rss_peak_mib(p) for p in pids), 1)
        out["operator_s"], out["operator_ready_s"] = round(operator_s, 2), round(ready_s, 2)
        out["operator_objects_per_gateway"] = bench.objects_per_gateway(ns)
        if "floor_s" in out:
            out["ratio"] = round(operator_s / out["floor_s"], 2)
        print(f"operator: pods Ready {operator_s:.1f} s (ratio {out.get('ratio')}), resources Ready {ready_s:.1f} s",
              flush=True)
        print(f"operator requests per gateway while creating: {out['operator_requests_per_gateway_creating']}",
              flush=True)

        # how far behind each operator's event loop ran while it created everything: the share of
        # its half-second ticks that woke over a second late
        lag1 = [loop_lag(o) for o in operators]
        out["loop_late_over_1s_creation"] = lag_between(lag0, lag1)
        # idle means settled: every resource holds exactly-once admission, then one more interval;
        # a run that never settles says how many did, and measures the rest regardless
        t = time.monotonic()
        admitted = lambda: sum(1 for g in gateways.values() if g.get("ExactlyOnceAdmission") == "True")
        try:
            until(lambda: admitted() >= args.gateways, timeout=600, interval=0.5,
                  what="every GatewayDeployment ExactlyOnceAdmission")
        except WaitTimeout:
            print(f"not settled: {admitted()} of {args.gateways} ExactlyOnceAdmission=True after 600 s", flush=True)
        out["admission_settled_s"], out["admission_settled"] = round(time.monotonic() - t, 1), admitted()
        time.sleep(args.interval + args.timeout)
        lag2 = [loop_lag(o) for o in operators]
        since = audit.now()
        # a traced operator answers its metrics scrape too slowly to count its polls (its timings do not count)
        counted = (lambda: 0.0) if traced else (lambda: sum(operator_polls(o) for o in operators))
        counted0, threads0 = counted(), threads_of(pids)
        stats0, (_, cpu0) = farm.call("stats"), stats_of(pids)
        each0 = [proc_stat(p)[1] for p in pids]
        time.sleep(args.idle)
        stats1 = farm.call("stats")
        polls = stats1["requests"] - stats0["requests"]
        out["health"] = args.health
        # of the checks achieved, those a health watch answered (the rest were polls)
        out["watch_answers_per_s"] = round((stats1["watch_answers"] - stats0["watch_answers"]) / args.idle, 1)
        rss, cpu1 = stats_of(pids)
        threads1, counted1 = threads_of(pids), counted()
        out["cpu_share_idle_by_operator"] = [round((proc_stat(p)[1] - c0) / args.idle, 3) for p, c0 in zip(pids, each0)]
        out["polls_demanded_per_s"] = round(bench.ready_pod_count(pods) / args.interval, 1)
        out["polls_achieved_per_s"] = round(polls / args.idle, 1)
        requests = audit.requests(cluster, IDENTITY, since)
        writes = audit.completed(requests, audit.WRITE_VERBS)
        # what the idle operator still reads (full passes at resync): only what no watch covers
        reads = audit.completed(requests, {"get"})
        out["idle_reads_by_resource"] = dict(collections.Counter(f"get {r.resource}" for r in reads))
        # of how many objects: the same few read again and again, or each once in a while
        out["idle_reads_distinct_by_resource"] = dict(collections.Counter(
            f"get {resource}" for resource, _, _ in {(r.resource, r.namespace, r.name) for r in reads}))
        # renewing the leader Lease is the one write an idle leader must make
        out["idle_writes"] = sum(1 for w in writes if w.resource != "leases")
        out["idle_writes_by_resource"] = dict(collections.Counter(f"{w.verb} {w.resource}" for w in writes))
        # the operator's own count (gateway_operator_health_polls_total) beside the farm's
        out["polls_counted_by_operator_per_s"] = round((counted1 - counted0) / args.idle, 1)
        # where the CPU went: the event loop (polls, probes, kopf) or the API threads (full passes)
        out["cpu_share_idle_by_thread"] = {name: round((threads1.get(name, 0.0) - threads0.get(name, 0.0)) / args.idle, 3)
                                           for name in sorted(threads1)}
        out["idle_lease_renewals"] = len(writes) - out["idle_writes"]
        # per replica check the interval demands (not per poll made), so that runs compare however
        # the operator checks its replicas
        out["cpu_ms_per_poll"] = round(1000 * (cpu1 - cpu0) / max(1.0, out["polls_demanded_per_s"] * args.idle), 3)
        out["cpu_share_idle"] = round((cpu1 - cpu0) / args.idle, 3)
        out["rss_mib"] = round(rss, 1)
        out["polls_extra_pct"] = round(100 * (out["polls_achieved_per_s"] / out["polls_demanded_per_s"] - 1), 1)
        # what each GatewayDeployment (and its replicas' pods, Deployment, connections) costs, settled
        out["kib_per_gateway"] = round(1024 * (rss - out["rss_start_mib"]) / args.gateways, 1)
        if traced:
            out.update(traced.per_gateway(before, traced.take(pid), args.gateways))
        out["loop_late_over_1s_idle"] = lag_between(lag2, [loop_lag(o) for o in operators])
        print(f"idle {args.idle:.0f} s: polls {out['polls_achieved_per_s']}/s of {out['polls_demanded_per_s']}/s "
              f"demanded, writes {out['idle_writes']}, RSS {out['rss_mib']} MiB", flush=True)

        if args.flips:
            shown, cleared = bench.flips(pods, gateways)
            out.update(degraded_p50_s=round(statistics.median(shown), 2), degraded_p99_s=round(quantile(shown, 0.99), 2),
                       degraded_max_s=round(max(shown), 2), cleared_p50_s=round(statistics.median(cleared), 2),
                       cleared_max_s=round(max(cleared), 2), degraded_samples=[round(s, 3) for s in shown],
                       bound_s=args.interval + args.timeout + 1)
        if args.soak:
            series = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.soak:
                series.append((round(time.monotonic() - t0), round(stats_of(pids)[0], 1)))
                time.sleep(args.sample)
            series.append((round(time.monotonic() - t0), round(stats_of(pids)[0], 1)))
            out["soak_rss_mib"] = series
        out["rss_end_mib"] = round(stats_of(pids)[0], 1)
        out["operator_restarts"] = sum(0 if o.proc is None or o.proc.poll() is None else 1 for o in operators)
        if args.kill and len(operators) > 1:
            out.update(kill(cluster, bench, ns, operators, args.shards))
    finally:
        bench.stop.set()
        for o in operators:
            if o.proc is not None and o.proc.poll() is None:
                o.stop()
        farm.close()
        redis.close()
        if not args.keep:
            cluster.stop()
    return out


def kill(cluster: Cluster, bench: "Bench", ns: str, operators: list[OperatorProcess], shards: int) -> dict[str, Any]:
    """SIGKILLs the first operator: when the others hold its shards, and when one of its
    GatewayDeployments is reconciled after a spec change, both from the kill."""
    victim, others = operators[0], operators[1:]
    theirs = shards_held(victim)
    listed = bench.custom.list_namespaced_custom_object(gw_api.GROUP, gw_api.VERSION, ns, gw_api.PLURAL)["items"]
    name = next(o["metadata"]["name"] for o in listed if shard_of(o["metadata"]["uid"], shards) in theirs)
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.proc.wait()
    victim.proc = None
    found: dict[str, Any] = {"kill_shards": sorted(theirs)}
    try:  # a bound run out is a figure too: the run's others are kept, and the exit status says it
        until(lambda: theirs <= {s for o in others for s in shards_held(o)}, timeout=120, interval=0.2,
              what="the killed operator's shards held by the others")
        found["kill_shards_moved_s"] = moved = round(time.monotonic() - killed, 2)
        # the adopted loops start a few at a time (loop/supervisor.py): until none waits, some of
        # the dead holder's GatewayDeployments are not observed yet; timed beside the spec change
        started: dict[str, float] = {}

        def all_started() -> None:
            with contextlib.suppress(WaitTimeout):
                # a survivor too busy to render its metrics within the read's bound is "not yet"
                # (the 3,000 x 2 run lost this figure to one such read)
                until(lambda: sum(loops_waiting(o) for o in others) == 0, timeout=300, interval=0.5,
                      what="the adopted loops started", tolerate=(AssertionError, OSError))
                started["at"] = time.monotonic()
        watcher = threading.Thread(target=all_started, daemon=True)
        watcher.start()
        latency = reconcile_latency(cluster, ns, name, "after-kill")
        watcher.join(timeout=300)
        if "at" in started:
            found["kill_all_started_s"] = round(started["at"] - killed, 2)
    except WaitTimeout as e:
        print(f"kill: {e}", flush=True)
        return {**found, "kill_error": str(e), "kill_waited_s": round(time.monotonic() - killed, 2)}
    reconciled_s = round(moved + latency, 2)  # the spec change was sent as the shards were seen held
    print(f"kill: shards {sorted(theirs)} held by the others {moved:.1f} s after the SIGKILL, {name} reconciled "
          f"{reconciled_s:.1f} s after it, every adopted loop started {found.get('kill_all_started_s', '-')} s "
          "after it", flush=True)
    return {**found, "kill_reconciled_s": reconciled_s, "kill_reconcile_latency_s": round(latency, 2)}


def table(out: dict[str, Any]) -> str:
    rows = [("gateways x replicas", f"{out['gateways']} x {out['replicas']}"),
            ("floor: pods Ready", f"{out['floor_s']} s" if "floor_s" in out else "not run (--no-floor)"),
            ("operator: pods Ready", f"{out['operator_s']} s  (ratio {out.get('ratio', '-')})"),
            ("objects per gateway: floor / operator", f"{sum(out.get('floor_objects_per_gateway', {}).values())} / "
                                                      f"{sum(out['operator_objects_per_gateway'].values())}"),
            ("operator: every resource Ready", f"{out['operator_ready_s']} s"),
            ("health polls achieved / demanded", f"{out['polls_achieved_per_s']} / {out['polls_demanded_per_s']} per s"
                                                 f"  (interval {out['interval_s']} s, timeout {out['timeout_s']} s)"),
            ("polls beyond those demanded", f"{out['polls_extra_pct']} %"),
            ("operator CPU per poll (idle)", f"{out['cpu_ms_per_poll']} ms  ({out['cpu_share_idle']} of a core)"),
            ("idle API writes", f"{out['idle_writes']}  (plus {out['idle_lease_renewals']} Lease renewals)"),
            ("operator RSS", f"{out['rss_start_mib']} MiB at start, {out['rss_mib']} MiB with all Ready, "
                             f"{out['rss_end_mib']} MiB at the end; peak {out['rss_peak_start_mib']} MiB while "
                             "creating them"),
            ("memory per GatewayDeployment (settled)", f"{out['kib_per_gateway']} KiB  ({out['replicas']} replicas)")]
    if "degraded_p50_s" in out:
        rows.append(("degraded fact on the resource", f"p50 {out['degraded_p50_s']} s, p99 {out['degraded_p99_s']} s, "
                     f"max {out['degraded_max_s']} s  (bound {out['bound_s']} s)"))
        rows.append(("cleared", f"p50 {out['cleared_p50_s']} s, max {out['cleared_max_s']} s"))
    if out.get("operators", 1) > 1:
        rows.append(("operators x shards", f"{out['operators']} x {out['shards']}: {out.get('shards_by_operator')}, "
                     f"CPU share each {out.get('cpu_share_idle_by_operator')}"))
    if "kill_shards_moved_s" in out:
        reconciled = (f"{out['kill_reconciled_s']} s after the kill" if "kill_reconciled_s" in out
                      else f"not within its bound ({out['kill_waited_s']} s after the kill)")
        rows.append(("one operator SIGKILLed", f"its shards held by the others in {out['kill_shards_moved_s']} s, "
                     f"one of its GatewayDeployments reconciled {reconciled}"))
    if "soak_rss_mib" in out:
        first, last = out["soak_rss_mib"][0], out["soak_rss_mib"][-1]
        rows.append(("soak RSS", f"{first[1]} MiB -> {last[1]} MiB over {last[0]} s"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--interval", type=float, default=10, help="spec.health.intervalSeconds")
    parser.add_argument("--timeout", type=float, default=1, help="spec.health.timeoutSeconds")
    parser.add_argument("--resync", type=float, default=60, help="the operator's --resync-seconds")
    parser.add_argument("--idle", type=float, default=30)
    parser.add_argument("--flips", type=int, default=20)
    parser.add_argument("--soak", type=float, default=0, help="seconds of RSS sampling after the flips")
    parser.add_argument("--sample", type=float, default=15, help="soak sampling period")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor run (throughput and memory runs)")
    parser.add_argument("--health", choices=("watch", "poll"), default="watch",
                        help="how the operator checks its replicas: the launcher's long-poll health watch (the "
                             "stand-ins serve it), or polls only (--no-health-watch; stand-ins without it)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--tracemalloc", action="store_true", help="say what each KiB per GatewayDeployment is "
                        "(the operator under tracemalloc: its timings do not count)")
    parser.add_argument("--operators", type=int, default=1, help="operator processes (more than one: --shards)")
    parser.add_argument("--shards", type=int, default=0, help="the operators' --shards (0: leader election)")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the first operator at the end and time the move")
    parser.add_argument("--keep", action="store_true", help="leave the control plane up")
    parser.add_argument("--cluster-dir", default=".cluster/bench", help="its control plane's directory")
    parser.add_argument("--pod-cidr", default=POD_CIDR, help="loopback range of the simulated pods' IPs "
                        "(two runs at once need two ranges)")
    args = parser.parse_args()
    args.flips = min(args.flips, args.gateways)
    if args.operators > 1 and not args.shards:
        parser.error("--operators above 1 needs --shards (with leader election only one works)")
    if args.tracemalloc and args.operators > 1:
        parser.error("--tracemalloc traces one operator process")
    out = run(args)
    print(table(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if "kill_error" in out:
        sys.exit(f"the killed operator's work did not move in time: {out['kill_error']}")


if __name__ == "__main__":
    main()
