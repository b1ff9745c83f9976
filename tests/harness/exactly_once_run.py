"""The exactly-once checker's run on the REAL node (issue 18): deliveries, a nemesis, records.

``run(cluster, Settings(...))`` sets up a GatewayDeployment (3 replicas of the real gateway image
on a managed Redis, exposed at the node's edge) beside the LLM STAND-IN (the one stand-in: no
model provider exists here), then at once:

* **deliveries**: W unique webhooks, each delivered k times as a provider fans out and retries:
  to a pod IP, to the Service's ClusterIP, or through the edge, each redelivery after a seeded
  random delay (up to ``redeliver_max_s``); a delivery with no 2xx (a 503 "in progress" included)
  is retried with backoff, up to ``retries`` times. A seeded share of the messages asks the stand-in for a long model turn.
  Every message belongs to one of ``sessions`` conversations (the hook's ``session_key``).
* **the nemesis**: a seeded schedule of faults (harness.exactly_once.Fault), one every
  ``fault_gap_s``: first (when scheduled) the switch from one SQLite replica to ``replicas`` on
  a managed Redis, then a gateway pod SIGKILLed (every process of its container, from the node's
  host), a rolling update, scaling (3 -> 5 -> 2 -> 3, 3 -> 2 -> 3), Redis paused (SIGSTOP),
  restarted, flushed, its persistence flipped, the operator's leader (or with --shards the holder of
  the GatewayDeployment's shard) SIGKILLed; and the partial
  failures (PARTIAL_FAILURES): a pod force-deleted mid-turn, a 0.2-2 s stall of Redis, one
  replica's packets to Redis dropped in its network namespace, a replica stopped while Redis is
  paused, Redis refusing writes (OOM); and the holders at risk (HOLDERS_AT_RISK, issue 56): a
  replica cut off from Redis past the claim lease while a slow turn it admitted runs, its gateway
  process SIGSTOPped mid-turn past the lease then SIGCONTed (each with redeliveries of that
  message to the other replicas meanwhile), and a coalesced hook on more than one replica offered
  to the API server (refused under replicaPolicy Refuse, warned under Warn; server-side dry runs);
* **records**: every answer, the stand-in's turns (GET /turns), and the GatewayDeployment's
  conditions from a watch.

Then harness.exactly_once.classify makes the report. Traffic goes to the node's own ranges
(198.18.0.0/15) and the edge's loopback address only.
"""
from __future__ import annotations

import heapq
import itertools
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from gateway_operator.api import DEFAULT_CLAIM_LEASE_SECONDS
from gateway_operator.core import pods as pods_module
from gateway_operator.core import shards

from . import llm_pod, node
from .cluster import Cluster
from .exactly_once import CLAIMS_AT_RISK_BOUND_S, Delivery, Expectation, Fault, Sample, Turn, classify
from .gateways import is_ready, ready_pods, wait_condition, wait_ready_pods
from .wait import until

NAMESPACE = "exactly-once"
NAME = "eo-bot"
HOST = "eo-bot.gateway.test"
# sqlite_to_redis is the run's first fault when it is scheduled: the run then starts on one
# replica with the SQLite store (no Redis) and switches to ``replicas`` on a managed Redis
# the partial failures (issue 35): one replica force-deleted mid-turn (no drain, never back), Redis
# stalled for a blip (0.2-2 s), one replica's packets to Redis dropped in its own network namespace,
# a replica stopped while Redis is paused, Redis refusing writes (maxmemory under noeviction: OOM)
PARTIAL_FAILURES = ("force_delete", "redis_latency", "replica_partition", "stop_during_outage",
                    "redis_refuses_writes")
# the holders at risk (issue 56): a holder cut off from Redis past its claim's lease while its turn
# runs, a holder paused (SIGSTOP) past it, a coalesced hook on more than one replica (refused)
HOLDERS_AT_RISK = ("long_partition", "holder_pause", "coalesced_stop")
FAULT_KINDS = ("sqlite_to_redis", "kill_pod", "rolling_update", "scale_up", "scale_down", "redis_pause",
               "redis_flush", "redis_restart", "operator_kill", "redis_persistence_flip", *PARTIAL_FAILURES,
               *HOLDERS_AT_RISK)
SWITCH = "sqlite_to_redis"
HOLD_PAST_LEASE_S = 15.0   # a holder at risk is cut off or paused this long past its claim's lease


@dataclass
class Settings:
    seed: int = 1
    messages: int = 1250          # W
    copies: int = 4               # k: deliveries per message (fan-out + redeliveries)
    sessions: int = 50
    spread_s: float = 400.0       # first deliveries spread over this long
    redeliver_max_s: float = 90.0
    long_share: float = 0.03      # messages whose model turn is long
    long_s: tuple[float, float] = (15.0, 45.0)
    retries: int = 8              # a provider retries for minutes (backoff 1, 2, 4 ... 30 s)
    fault_gap_s: float = 25.0
    faults: tuple[str, ...] = FAULT_KINDS
    replicas: int = 3
    workers: int = 96
    session_window: int = 25      # turns a bounded session history keeps (maxMessages / 2)
    tail_s: float = 240.0         # after the last redelivery, how long retries may still run
    spec: dict[str, Any] = field(default_factory=dict)   # extra spec of the GatewayDeployment


def manifest(settings: Settings, llm_env: dict[str, str]) -> dict[str, Any]:
    """The GatewayDeployment: ``replicas`` on a managed Redis, or (when the switch is scheduled)
    one replica on SQLite, without Redis."""
    solo = SWITCH in settings.faults
    spec: dict[str, Any] = {
        "replicas": 1 if solo else settings.replicas,
        "image": node.images().gateway, "imagePullPolicy": "Never",
        # one SQLite replica keeps its records on a PVC (else ExactlyOnceAdmission is False,
        # StoreNotPersistent), which the switch's migration reads; it stays on through the switch
        **({"persistence": {"enabled": True, "size": "1Gi"}} if solo else {"redis": {"managed": {"enabled": True}}}),
        "health": {"intervalSeconds": 2, "timeoutSeconds": 1},
        "env": [{"name": k, "value": v} for k, v in llm_env.items()],
        "config": {
            "agents": {"assistant": {"instructions": "Reply in one short sentence.", "model": "gpt-4o-mini"}},
            "channels": {"telegram": {"token": "${TELEGRAM_BOT_TOKEN}"}},  # unset: no bot starts
            "hooks": {"idempotency": {"store_backend": "sqlite" if solo else "redis"}, "hooks": [
                {"path": node.HOOK, "message": "Event: {text}", "idempotency_key": "{id}",
                 "session_key": "{session}"}]},
        },
        "expose": {"httpRoute": {"parentRefs": [{"name": "edge", "namespace": "gwop-edge"}], "hostnames": [HOST]}},
    }
    for key, value in settings.spec.items():
        spec[key] = {**spec[key], **value} if isinstance(value, dict) and isinstance(spec.get(key), dict) else value
    return {"apiVersion": "gateway-operator.dev/v1alpha1", "kind": "GatewayDeployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE}, "spec": spec}


class Pods:
    """The ready gateway pods' IPs and the Service's ClusterIP, refreshed every second."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.ips, self.cluster_ip = cluster, [], ""
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        self.ips = [p["status"]["podIP"] for p in ready_pods(self.cluster, NAMESPACE, NAME)]
        self.cluster_ip = self.cluster.get_json("service", NAME, "-n", NAMESPACE)["spec"]["clusterIP"]

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.refresh()
            except (AssertionError, OSError, KeyError, ValueError):
                pass

    def stop(self) -> None:
        self._stop.set()


class ConditionWatch:
    """The GatewayDeployment's conditions from a watch (kubernetes client), each change timestamped."""

    def __init__(self, cluster: Cluster) -> None:
        from kubernetes import client, config, watch
        self.samples: list[Sample] = []
        self._api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
        self._watch = watch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _note(self, body: dict[str, Any]) -> None:
        conds = {c["type"]: (c["status"], c.get("reason", "")) for c in (body.get("status") or {}).get("conditions") or []}
        if not self.samples or self.samples[-1].conditions != conds:
            self.samples.append(Sample(time.time(), conds))

    def _loop(self) -> None:
        while not self._stop.is_set():
            w = self._watch.Watch()
            try:
                for event in w.stream(self._api.list_namespaced_custom_object, "gateway-operator.dev", "v1alpha1",
                                      NAMESPACE, "gatewaydeployments", field_selector=f"metadata.name={NAME}",
                                      timeout_seconds=60):
                    self._note(event["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - a watch that ends or fails is opened again
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()


def netns_pid(uid: str) -> int:
    """A process of the pod's containers inside the pod's network namespace (never one whose
    namespace is the host's: runc's parent stage lives in the pod's cgroup for a moment)."""
    host = os.stat("/proc/self/ns/net").st_ino  # this process runs in the host's namespace
    for pid in pids_of_pod(uid):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != host:
                return pid
        except OSError:
            continue
    raise AssertionError(f"no process of pod {uid} in its own network namespace")


def pids_of_pod(uid: str, exclude: tuple[str, ...] = ("/pause",)) -> list[int]:
    """The host PIDs of a pod's containers (not its sandbox's pause), from their cgroups."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if f"pod{uid}" not in (proc / "cgroup").read_text():
                continue
            command = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if command and command not in exclude:
            found.append(int(proc.name))
    return found


def host_procs() -> list[Proc]:
    """The host's processes with their cgroups and argv; the environment only of a launcher (the
    one process the lookup may need it of)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = tuple(a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a)
            entry = Proc(int(proc.name), (proc / "cgroup").read_text(), cmdline)
        except OSError:   # gone meanwhile
            continue
        if is_launcher(cmdline):
            try:
                entry = Proc(entry.pid, entry.cgroup, cmdline, parse_environ((proc / "environ").read_bytes()))
            except OSError:   # not ours to read: the cgroup still names its pod
                pass
        found.append(entry)
    return found


def _stand_in_turns(base: str, since: int) -> tuple[list[dict[str, Any]], int]:
    """The LLM stand-in's named turns from index ``since`` on, and how many it has seen."""
    with urllib.request.urlopen(f"{base}/turns?since={since}", timeout=10) as r:
        body = json.loads(r.read())
    return body["turns"], int(body["next"])


# -- the holders at risk (issue 56): pure parts, unit-tested ---------------------------------

@dataclass(frozen=True)
class Proc:
    """What /proc says of one host process: its cgroups, its argv, its environment (None: not read)."""

    pid: int
    cgroup: str
    cmdline: tuple[str, ...]
    environ: dict[str, str] | None = None


def in_pod(cgroup: str, uid: str) -> bool:
    """The cgroup paths name the pod: ``pod<uid>`` (the cgroupfs driver) or ``pod<uid with _>``
    (the systemd driver's ``kubepods-...-pod<uid>.slice``)."""
    return f"pod{uid}" in cgroup or f"pod{uid.replace('-', '_')}" in cgroup


def is_launcher(cmdline: tuple[str, ...]) -> bool:
    """The gateway pod's one process: ``python3 /etc/gateway-operator/launch.py ...`` (the launcher
    runs the gateway in-process: stopping it stops the gateway and its turns)."""
    return bool(cmdline) and Path(cmdline[0]).name.startswith("python") and any(
        arg == "launch.py" or arg.endswith("/launch.py") for arg in cmdline[1:2])


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/<pid>/environ: NUL-separated NAME=value."""
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if b"=" in item)
    return {name: value for name, _, value in pairs}


def launcher_pids(procs: Iterable[Proc], uid: str, pod_name: str) -> list[int]:
    """The host PIDs of a pod's gateway launcher: by the pod's cgroup (as ``pids_of_pod``), else
    (a cgroup layout that does not name the pod) by ``HOSTNAME=<pod name>`` in its environment."""
    launchers = [p for p in procs if is_launcher(p.cmdline)]
    mine = [p.pid for p in launchers if in_pod(p.cgroup, uid)]
    return sorted(mine or [p.pid for p in launchers if (p.environ or {}).get("HOSTNAME") == pod_name])


@dataclass(frozen=True)
class RiskPlan:
    """A holder at risk: cut off (or paused) for ``hold_s``, past the claim's lease; its turn takes
    ``delay_s`` (running from before the cut until after the heal); the message is redelivered to
    the other replicas ``redeliver_at`` seconds after the cut: while its claim still holds, and after
    the lease (when another replica could admit it)."""

    lease_s: float
    hold_s: float
    delay_s: float
    redeliver_at: tuple[float, ...]


def risk_plan(lease: float, rng: random.Random) -> RiskPlan:
    hold = lease + HOLD_PAST_LEASE_S
    return RiskPlan(lease, hold, round(hold + 30.0, 1),
                    (round(rng.uniform(2.0, 8.0), 1), round(lease / 2, 1), round(lease + rng.uniform(1.0, 4.0), 1),
                     round(lease + rng.uniform(8.0, HOLD_PAST_LEASE_S - 2.0), 1)))


def coalesced(body: dict[str, Any], policy: str, name: str, replicas: int) -> dict[str, Any]:
    """A copy of the GatewayDeployment ``body`` named ``name``, with ``replicas`` (more than one)
    under ``policy``, whose every hook coalesces its deliveries by conversation: what issue 56
    found loses webhooks at any stop, so the API server must refuse it under Refuse."""
    spec = json.loads(json.dumps(body["spec"]))
    spec.update(replicas=replicas, replicaPolicy=policy)
    for hook in ((spec.get("config") or {}).get("hooks") or {}).get("hooks") or []:
        hook["coalesce"] = {"group_key": "{session}", "window_seconds": 5}
    return {"apiVersion": body.get("apiVersion", "gateway-operator.dev/v1alpha1"), "kind": "GatewayDeployment",
            "metadata": {"name": name, "namespace": body["metadata"]["namespace"]}, "spec": spec}


def coalesce_outcome(refuse: tuple[int, str], warn: tuple[int, str]) -> tuple[bool, bool, str]:
    """From the two dry runs' (exit code, stderr): refused under Refuse (the apply failed, its message
    names coalesce), warned under Warn (accepted, with a warning that names coalesce), and what
    was said (the first line of each)."""
    (refuse_code, refuse_err), (warn_code, warn_err) = refuse, warn
    refused = refuse_code != 0 and "coalesce" in refuse_err.lower()
    warnings = [line for line in warn_err.splitlines() if line.lower().startswith("warning")]
    warned = warn_code == 0 and any("coalesce" in line.lower() for line in warnings)
    said = [f"Refuse: {'refused' if refuse_code else 'ACCEPTED'} {_first(refuse_err)}",
            f"Warn: {'accepted' if not warn_code else 'REFUSED'} {_first(warnings[0] if warnings else warn_err)}"]
    return refused, warned, "; ".join(said)


def _first(text: str, limit: int = 160) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:limit] + ("..." if len(line) > limit else "")


def fault_order(faults: tuple[str, ...], rng: random.Random) -> Iterator[str]:
    """The nemesis's schedule: the switch first when it is scheduled, then the other kinds in a
    seeded order, round and round."""
    kinds = [k for k in faults if k != SWITCH]
    rng.shuffle(kinds)
    return itertools.chain([SWITCH] if SWITCH in faults else [], itertools.cycle(kinds))


class Nemesis:
    def __init__(self, cluster: Cluster, settings: Settings, rng: random.Random,
                 provider: "Provider | None" = None) -> None:
        self.cluster, self.settings, self.rng = cluster, settings, rng
        self.provider = provider   # the holders at risk deliver their own slow message through it
        self._injected = itertools.count()
        self.faults: list[Fault] = []
        self.replicas = 1 if SWITCH in settings.faults else settings.replicas
        self.persistent = True   # a managed Redis for 3 replicas persists by default
        self.lag = 2 + 1 + 1.0   # health interval + timeout + 1 s

    def _all_pods(self, component: str, namespace: str = NAMESPACE, instance: str = NAME) -> list[dict[str, Any]]:
        return self.cluster.get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={instance},"
                                     f"app.kubernetes.io/component={component}")["items"]

    def _pods(self, component: str, namespace: str = NAMESPACE, instance: str = NAME) -> list[dict[str, Any]]:
        """The ready ones."""
        return [p for p in self._all_pods(component, namespace, instance) if is_ready(p)]

    def _patch(self, spec: dict[str, Any]) -> None:
        self.cluster.kubectl("patch", "gatewaydeployment", NAME, "-n", NAMESPACE, "--type", "merge",
                             "-p", json.dumps({"spec": spec}))

    def _kill(self, pod: dict[str, Any], sig: int) -> int:
        pids = pids_of_pod(pod["metadata"]["uid"])
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return len(pids)

    def _redis_cli(self, *args: str) -> str:
        command = 'REDISCLI_AUTH="$REDIS_PASSWORD" exec redis-cli "$@"'
        return self.cluster.kubectl("exec", "-n", NAMESPACE, f"deploy/{NAME}-redis", "--", "sh", "-c", command,
                                    "redis-cli", *args).stdout.strip()

    def run(self, kind: str) -> Fault:
        start, detail, expect = time.time(), "", None
        if kind == SWITCH:
            # what a user does to scale out: Redis, the Redis store, more replicas, in one change; the
            # operator holds one replica while its launcher copies the SQLite records into Redis
            self._patch({"replicas": self.settings.replicas, "redis": {"managed": {"enabled": True}},
                         "config": {"hooks": {"idempotency": {"store_backend": "redis"}}}})
            self.replicas = self.settings.replicas

            def switched() -> bool:  # migrated (an operator that migrates holds one replica until then)
                state = ((self.cluster.get_json("gatewaydeployment", NAME, "-n", NAMESPACE).get("status") or {})
                         .get("sqliteMigration") or {}).get("state")
                return state == "Done" or (state is None and len(self._pods("gateway")) == self.replicas)
            until(switched, timeout=240, interval=1, what="the switch (the SQLite records migrated)")
            self._settle()
            detail = f"1 (SQLite) -> {self.settings.replicas} (Redis)"
        elif kind == "kill_pod":
            pods = self._pods("gateway")
            if pods:
                pod = self.rng.choice(pods)
                detail = f"{pod['metadata']['name']}: {self._kill(pod, signal.SIGKILL)} processes"
        elif kind == "rolling_update":
            self._patch({"podAnnotations": {"exactly-once.test/rollout": uuid.uuid4().hex[:8]}})
            self._settle()
        elif kind in ("scale_up", "scale_down"):
            # 3 -> 5 -> 2 (three pods stop at once, each draining) -> 3, or 3 -> 2 -> 3
            steps = [5, 2, self.settings.replicas] if kind == "scale_up" else [2, self.settings.replicas]
            for self.replicas in steps:
                self._patch({"replicas": self.replicas})
                self._settle()
            detail = " -> ".join(str(n) for n in [self.settings.replicas, *steps])
        elif kind == "redis_pause":
            pod = self._pods("redis")[0]
            self._kill(pod, signal.SIGSTOP)
            time.sleep(8)
            self._kill(pod, signal.SIGCONT)
            expect = Expectation("RedisReachable", "False")
        elif kind == "redis_flush":
            detail = self._redis_cli("FLUSHALL")
            start = time.time()  # the flush ran as kubectl exec returned (its start-up took the time)
            expect = Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False)
        elif kind == "redis_restart":
            persistent = "aof_enabled:1" in self._redis_cli("INFO", "persistence")
            pod = self._pods("redis")[0]
            self._kill(pod, signal.SIGKILL)
            until(lambda: self._pods("redis"), timeout=120, what="the managed Redis Ready again")
            detail = "with persistence (AOF)" if persistent else "without persistence"
            # a Redis that persists keeps the records: nothing to announce (a duplicate would be silent)
            expect = None if persistent else Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False,
                                                         since_end=True)
        elif kind == "redis_persistence_flip":
            # the operator recreates its managed Redis: without its PVC (empty), or back on the old PVC
            # (what it kept from before): either way the records it answers with are not the latest
            self.persistent = on = not self.persistent
            before = {p["metadata"]["uid"] for p in self._pods("redis")}
            self._patch({"redis": {"managed": {"enabled": True, "persistence": {"enabled": on}}}})
            until(lambda: [p for p in self._pods("redis") if p["metadata"]["uid"] not in before], timeout=180,
                  interval=1, what="the managed Redis recreated")
            detail = "persistence on (the old PVC)" if on else "persistence off (an emptyDir)"
            expect = Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False, since_end=True)
        elif kind == "force_delete":
            # a lost node or a force delete: no preStop, no drain, no process of the pod comes back to
            # release what it held (a long turn is in flight on some replica most of the time)
            pods = self._pods("gateway")
            if pods:
                pod = self.rng.choice(pods)
                self.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--grace-period=0",
                                     "--force", "--wait=false")
                self._kill(pod, signal.SIGKILL)  # what a lost node does to it, at once
                detail = pod["metadata"]["name"]
                self._settle()
        elif kind == "redis_latency":
            # a blip: every command stalls 0.2-2 s (longer than the gateways' 0.3 s socket timeout)
            pod, pause = self._pods("redis")[0], round(self.rng.uniform(0.2, 2.0), 2)
            self._kill(pod, signal.SIGSTOP)
            time.sleep(pause)
            self._kill(pod, signal.SIGCONT)
            detail = f"stalled {pause:g}s"
        elif kind == "replica_partition":
            # one replica cut off from Redis (its packets dropped inside its own network namespace)
            # while the others and the operator reach it; half the time a replica that has not built
            # its store yet (0.1.16 builds it on the first webhook): a pod replaced, cut off as soon
            # as its containers run, before it is Ready
            pods, redis = self._pods("gateway"), self._pods("redis")
            if pods and redis:
                pod, fresh = self.rng.choice(pods), self.rng.random() < 0.5
                service = self.cluster.get_json("service", f"{NAME}-redis", "-n", NAMESPACE)["spec"]["clusterIP"]
                rules = [["OUTPUT", "-d", address, "-p", "tcp", "--dport", "6379", "-j", "DROP"]
                         for address in (service, redis[0]["status"]["podIP"])]
                if fresh:
                    pod = self._replacement(pod)
                uid = pod["metadata"]["uid"]
                # a process of the pod in its namespace: an init container's may end meanwhile, so
                # each step looks one up again (the namespace itself lives as long as the pod)
                until(lambda: self._iptables(uid, "-I", rules), timeout=60, interval=0.2,
                      what=f"{pod['metadata']['name']} cut off from Redis")
                cut = time.time()
                if fresh:  # cut off from its start until its containers are ready (it would take webhooks
                    # but for the operator's readiness gate), or it is gone
                    until(lambda: not self._exists(pod) or pods_module.containers_ready(
                        self.cluster.get_json("pod", pod["metadata"]["name"], "-n", NAMESPACE).get("status") or {}),
                        timeout=120, interval=0.5, what=f"{pod['metadata']['name']}'s containers ready (or gone)")
                left, traffic = self._in_traffic_until(pod, cut, time.time() + self.rng.uniform(8, 20))
                until(lambda: self._iptables(uid, "-D", rules) if self._exists(pod) else True, timeout=60,
                      interval=0.2, what=f"{pod['metadata']['name']} reaching Redis again (or gone)")
                healed = time.time()
                detail = f"{pod['metadata']['name']} ({'before' if fresh else 'after'} its store was built)"
                self._settle()
                fault = Fault(kind, start, healed, detail, expect, left_traffic_after_s=left, traffic=traffic,
                              back_after_s=round(time.time() - healed, 1) if self._exists(pod) else None)
                self.faults.append(fault)
                return fault
        elif kind == "stop_during_outage":
            # a replica stopped (gracefully) while Redis is paused: what it admitted meanwhile must
            # still reach Redis, or a redelivery to another replica runs again
            redis, pods = self._pods("redis")[0], self._pods("gateway")
            self._kill(redis, signal.SIGSTOP)
            try:
                time.sleep(3)
                if pods:
                    pod = self.rng.choice(pods)
                    self.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=false")
                    detail = pod["metadata"]["name"]
                time.sleep(5)
            finally:
                self._kill(redis, signal.SIGCONT)
            expect = Expectation("RedisReachable", "False")
            self._settle()
        elif kind == "redis_refuses_writes":
            # out of memory under noeviction: PING answers, every write is refused (OOM)
            used = next(int(line.split(":")[1]) for line in self._redis_cli("INFO", "memory").splitlines()
                        if line.startswith("used_memory:"))
            before = self._redis_cli("CONFIG", "GET", "maxmemory").splitlines()[-1]
            policy = self._redis_cli("CONFIG", "GET", "maxmemory-policy").splitlines()[-1]
            self._redis_cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
            self._redis_cli("CONFIG", "SET", "maxmemory", str(max(1, used // 2)))
            try:
                time.sleep(self.rng.uniform(6, 12))
            finally:
                self._redis_cli("CONFIG", "SET", "maxmemory", before)
                self._redis_cli("CONFIG", "SET", "maxmemory-policy", policy)
            detail = "OOM (maxmemory under noeviction)"
            # the replicas name it (the launcher's refusal text), the operator's reason says what to do
            expect = Expectation("IdempotencyDegraded", "True", "RedisOutOfMemory")
        elif kind in ("long_partition", "holder_pause"):
            return self._holder_at_risk(kind)   # recorded there, before the replicas settle
        elif kind == "coalesced_stop":
            # offered to the API server only (server-side dry runs): no traffic goes through a
            # coalesced hook, nothing is created
            live = self.cluster.get_json("gatewaydeployment", NAME, "-n", NAMESPACE)
            replicas = max(2, self.settings.replicas)
            runs = []
            for policy in ("Refuse", "Warn"):
                body = coalesced(live, policy, f"{NAME}-coalesced", replicas)
                done = self.cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
                runs.append((done.returncode, done.stderr))
            refused, warned, said = coalesce_outcome(runs[0], runs[1])
            fault = Fault(kind, start, time.time(), f"{replicas} replicas: {said}", refused=refused, warned=warned)
            self.faults.append(fault)
            return fault
        elif kind == "operator_kill":
            holder = self._operator_holder()
            pods = [p for p in self.cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE)["items"]
                    if p["metadata"]["name"] in holder or not holder]
            if pods:
                detail = f"{pods[0]['metadata']['name']}: {self._kill(pods[0], signal.SIGKILL)} processes"
        fault = Fault(kind, start, time.time(), detail, expect)
        self.faults.append(fault)
        return fault

    def _holder_at_risk(self, kind: str) -> Fault:
        """long_partition / holder_pause: a replica admits a slow turn of the nemesis's own message
        (pinned to its pod IP); once the LLM stand-in shows that turn running, the replica is cut off
        from Redis (its packets dropped in its network namespace, as replica_partition) or its
        gateway process SIGSTOPped, for the claim's lease + HOLD_PAST_LEASE_S, while the message is
        redelivered to the other replicas (before the lease ran out and after); then healed or
        SIGCONTed. Its condition: ExactlyOnceAdmission not True within CLAIMS_AT_RISK_BOUND_S of the
        cut (the claim is still valid then: before another replica could admit the message)."""
        pods, redis = self._pods("gateway"), self._pods("redis")
        if not pods or not redis or self.provider is None:
            raise AssertionError("no ready gateway pod, no Redis, or no provider to deliver the slow turn")
        plan = risk_plan(self._claim_lease(), self.rng)
        pod = self.rng.choice(pods)
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        partition = kind == "long_partition"
        others = [p["status"]["podIP"] for p in pods if p["metadata"]["uid"] != uid]
        targets = [(f"pod:{ip}", ip) for ip in others] or [("service", self.cluster.get_json(
            "service", NAME, "-n", NAMESPACE)["spec"]["clusterIP"])]
        rules: list[list[str]] = []
        if partition:
            service = self.cluster.get_json("service", f"{NAME}-redis", "-n", NAMESPACE)["spec"]["clusterIP"]
            rules = [["OUTPUT", "-d", address, "-p", "tcp", "--dport", "6379", "-j", "DROP"]
                     for address in (service, redis[0]["status"]["podIP"])]
        restarts = self._restarts(pod)
        msg, turn = self._slow_turn(kind, pod, plan.delay_s)
        stopped: list[int] = []
        left, traffic, cut = None, (), time.time()
        try:
            if partition:
                until(lambda: self._iptables(uid, "-I", rules), timeout=30, interval=0.2,
                      what=f"{name} cut off from Redis")
            else:
                stopped = launcher_pids(host_procs(), uid, name)
                if not stopped:
                    raise AssertionError(f"no gateway launcher process of {name} on this host")
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
            cut = time.time()
            self.provider.inject(msg, self.provider.sessions[msg], plan.delay_s,
                                 [(cut + at, *targets[i % len(targets)]) for i, at in enumerate(plan.redeliver_at)],
                                 first_copy=1)
            if partition:   # the readiness gate meanwhile, as replica_partition measures it
                left, traffic = self._in_traffic_until(pod, cut, cut + plan.hold_s)
            time.sleep(max(0.0, cut + plan.hold_s - time.time()))
        finally:
            if partition:
                until(lambda: self._iptables(uid, "-D", rules) if self._exists(pod) else True, timeout=60,
                      interval=0.2, what=f"{name} reaching Redis again (or gone)")
            else:
                # the same launcher (a liveness restart may have killed it meanwhile: its pid is then
                # another process's, or none)
                alive = set(launcher_pids(host_procs(), uid, name))
                for pid in stopped:
                    if pid in alive:
                        os.kill(pid, signal.SIGCONT)
        healed = time.time()
        restarted = self._restarts(pod) - restarts if self._exists(pod) else None
        detail = (f"{name}: {msg}'s turn running {cut - turn:.1f}s at the {'cut' if partition else 'SIGSTOP'}, "
                  f"{'cut off' if partition else f'pid {stopped} stopped'} {healed - cut:.0f}s (lease {plan.lease_s:g}s), "
                  f"redelivered at +{', +'.join(f'{x:g}' for x in plan.redeliver_at)}s to "
                  f"{f'{len(others)} other replicas' if others else 'the Service'}"
                  + ("" if not restarted else f"; its gateway container restarted {restarted}x meanwhile (liveness)")
                  + ("; the pod is gone" if restarted is None else ""))
        # shown while the claim is still valid: before another replica could admit the message
        expect = Expectation("ExactlyOnceAdmission", "False", clears=False, within=CLAIMS_AT_RISK_BOUND_S)
        fault = Fault(kind, cut, healed, detail, expect, left_traffic_after_s=left, traffic=traffic)
        try:
            self._settle()
        finally:   # recorded even when the replicas do not settle: the fault happened
            if partition and self._exists(pod):
                fault = replace(fault, back_after_s=round(time.time() - healed, 1))
            self.faults.append(fault)
        return fault

    def _slow_turn(self, kind: str, pod: dict[str, Any], delay: float) -> tuple[str, float]:
        """Deliver a message of its own conversation (so that its long turn holds no other message's
        session lock) whose model turn takes ``delay``, to ``pod``'s IP; return it and when its turn
        started, once the LLM stand-in shows it running there (its delivery still unanswered:
        nothing else can have run it)."""
        assert self.provider is not None
        n = next(self._injected)
        msg = f"m{self.settings.seed}-{'lp' if kind == 'long_partition' else 'hp'}{n:03d}"
        stand_in = f"http://{llm_pod.pod_ip(self.cluster, NAMESPACE)}:{llm_pod.PORT}"
        since = _stand_in_turns(stand_in, 10 ** 9)[1]   # how many turns it has seen so far
        ip = pod["status"]["podIP"]
        self.provider.inject(msg, f"x{self.settings.seed}-{n:03d}", delay, [(time.time(), f"pod:{ip}", ip)])

        def running() -> dict[str, Any] | None:
            # {"delivery": ...} when its delivery was answered first; else the stand-in's turn record
            # (whose own "answered" says whether the model's answer reached the caller)
            if self.provider.answers(msg):
                return {"delivery": self.provider.answers(msg)[0]}
            turn = next((t for t in _stand_in_turns(stand_in, since)[0] if t["msg"] == msg), None)
            if turn is not None and self.provider.answers(msg):   # answered meanwhile: a retry's turn
                return {"delivery": self.provider.answers(msg)[0]}
            return turn
        seen = until(running, timeout=60, interval=0.3, what=f"{msg}'s turn running on {pod['metadata']['name']}",
                     tolerate=(OSError, ValueError))
        if "delivery" in seen:
            d = seen["delivery"]
            raise AssertionError(f"{msg} was answered {d.status or d.error} {d.said} by "
                                 f"{pod['metadata']['name']} before its turn ran there")
        return msg, float(seen["started"])

    def _claim_lease(self) -> float:
        """The claim lease in force (spec.redis.claimLeaseSeconds, else the default)."""
        spec = self.cluster.get_json("gatewaydeployment", NAME, "-n", NAMESPACE)["spec"]
        return float((spec.get("redis") or {}).get("claimLeaseSeconds") or DEFAULT_CLAIM_LEASE_SECONDS)

    def _restarts(self, pod: dict[str, Any]) -> int:
        """The gateway container's restarts so far (a liveness probe's, while it was paused)."""
        found = self.cluster.get_json("pods", "-n", NAMESPACE, "--field-selector",
                                      f"metadata.name={pod['metadata']['name']}")["items"]
        return sum(c.get("restartCount", 0) for p in found for c in (p.get("status") or {}).get("containerStatuses") or []
                   if c.get("name") == "gateway")

    def _operator_holder(self) -> str:
        """The operator process that reconciles the checker's GatewayDeployment: the leader, or
        with --shards (read from the operator's Deployment) the holder of its shard's Lease; ""
        when none holds it."""
        leases = {lease["metadata"]["name"]: lease["spec"].get("holderIdentity") or ""
                  for lease in self.cluster.get_json("lease", "-n", node.SYSTEM_NAMESPACE)["items"]}
        args = [a for d in self.cluster.get_json("deployments", "-n", node.SYSTEM_NAMESPACE)["items"]
                for c in d["spec"]["template"]["spec"]["containers"] for a in c.get("args") or ()]
        count = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--shards=")), 0)
        if count:
            uid = self.cluster.get_json("gatewaydeployment", NAME, "-n", NAMESPACE)["metadata"]["uid"]
            return leases.get(f"{node.RELEASE}-shard-{shards.shard_of(uid, count)}", "")
        return leases.get(f"{node.RELEASE}-leader", "")

    def _in_traffic_until(self, pod: dict[str, Any], since: float,
                          until_at: float) -> tuple[float | None, tuple[tuple[float, str], ...]]:
        """Watch a cut-off pod's Ready until ``until_at``: the seconds from ``since`` to the first time
        it was seen out of the traffic (not Ready) after any time in it (0.0 when it was never
        Ready), None when it stayed in the traffic throughout; and each change seen meanwhile of its
        Ready, the operator's readiness gate and its containers' readiness (seconds from ``since``),
        so that a late exit shows which of them was late, or whether the pod came back meanwhile."""
        left, was_ready = None, False
        seen: list[tuple[float, str]] = []
        while time.time() < until_at:
            if not self._exists(pod):
                break
            now = self.cluster.get_json("pod", pod["metadata"]["name"], "-n", NAMESPACE)
            ready = is_ready(now)
            status = now.get("status") or {}
            gate = pods_module.gate(status)
            state = (f"ready {ready}, gate {gate}, containers "
                     f"{'ready' if pods_module.containers_ready(status) else 'not ready'}")
            if not seen or seen[-1][1] != state:
                seen.append((round(time.time() - since, 1), state))
            if ready:
                left, was_ready = None, True
            elif left is None:
                left = round(time.time() - since, 1) if was_ready else 0.0
            time.sleep(0.5)
        return left, tuple(seen)

    def _exists(self, pod: dict[str, Any]) -> bool:
        """The pod is still there (the same one: its namespace goes with it)."""
        found = self.cluster.get_json("pods", "-n", NAMESPACE, "--field-selector",
                                      f"metadata.name={pod['metadata']['name']}")["items"]
        return any(p["metadata"]["uid"] == pod["metadata"]["uid"] for p in found)

    @staticmethod
    def _iptables(uid: str, action: str, rules: list[list[str]]) -> bool:
        """Insert (-I) or delete (-D) ``rules`` in the pod's network namespace; each rule that is
        already in place (-I) or already gone (-D) is left."""
        pid = str(netns_pid(uid))
        for rule in rules:
            present = subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-C", *rule],
                                     capture_output=True).returncode == 0
            if present != (action == "-I"):
                done = subprocess.run(["nsenter", "-t", pid, "-n", "iptables", action, *rule], capture_output=True)
                if done.returncode != 0:
                    raise AssertionError(f"iptables {action} in pod {uid}: {done.stderr.decode().strip()}")
        return True

    def _replacement(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Delete ``pod`` (gracefully) and return the pod that replaces it as soon as a process of its
        containers runs in its own network namespace (before it is Ready, so before any webhook)."""
        before = {p["metadata"]["uid"] for p in self._all_pods("gateway")}
        self.cluster.kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=false")
        found: dict[str, Any] = {}

        def started() -> bool:
            for p in self._all_pods("gateway"):
                if p["metadata"]["uid"] not in before and not is_ready(p):
                    try:
                        netns_pid(p["metadata"]["uid"])
                    except AssertionError:
                        continue
                    found["pod"] = p
                    return True
            return False
        until(started, timeout=120, interval=0.2, what="the replacement pod's containers running")
        return found["pod"]

    def _settle(self, timeout: float = 300) -> None:
        until(lambda: len(self._pods("gateway")) == self.replicas, timeout=timeout, interval=1,
              what=f"{self.replicas} ready {NAME} pods")

    def schedule(self, stop: threading.Event, say: Callable[[str], None]) -> None:
        """One fault every ``fault_gap_s`` (the first after half of it): the switch first when it is
        scheduled, then the other kinds in a seeded order, round and round until the run ends."""
        order = fault_order(self.settings.faults, self.rng)
        gap = self.settings.fault_gap_s / 2
        while not stop.wait(gap):
            gap = self.settings.fault_gap_s
            kind = next(order, None)
            if kind is None:
                return
            try:
                fault = self.run(kind)
                say(f"  fault {kind} {fault.detail} ({fault.ended - fault.started:.1f}s)")
            except Exception as e:  # noqa: BLE001 - a fault that cannot be made is reported, the run goes on
                say(f"  fault {kind} could not be made: {e}")


class Provider:
    """Delivers the messages as a webhook provider does: k copies to varied targets, retries on failure."""

    def __init__(self, settings: Settings, rng: random.Random, pods: Pods, token: str) -> None:
        self.settings, self.rng, self.pods, self.token = settings, rng, pods, token
        self.deliveries: list[Delivery] = []
        self.sessions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._queue: list[tuple[float, int, str, int, int, str]] = []
        self._seq = 0
        self._pending = 0
        self._in_flight: dict[str, int] = {}
        self.unfinished: set[str] = set()   # messages still queued or in flight at the deadline
        self._cv = threading.Condition(self._lock)
        self._pinned: dict[int, tuple[str, str]] = {}   # queue entry (its seq) -> (label, address)
        self._slow: dict[str, float] = {}               # an injected message's model turn (s)

    def plan(self, t0: float) -> None:
        s = self.settings
        for i in range(s.messages):
            msg = f"m{s.seed}-{i:05d}"
            session = f"s{self.rng.randrange(s.sessions):03d}"
            delay = self.rng.uniform(*s.long_s) if self.rng.random() < s.long_share else 0.0
            self.plan_message(msg, session, delay, t0 + self.rng.uniform(0, s.spread_s))

    def plan_message(self, msg: str, session: str, delay: float, first: float) -> None:
        """One message of ``session`` whose model turn takes ``delay``: its first delivery at
        ``first``, each further copy after a seeded redelivery delay."""
        s = self.settings
        self.sessions[msg] = session
        text = f"msg={msg} session={session} delay={delay:.1f}"
        for copy in range(s.copies):
            at = first if copy == 0 else first + self.rng.uniform(0, s.redeliver_max_s)
            self._push(at, msg, copy, 0, text)

    def inject(self, msg: str, session: str, delay: float, copies: list[tuple[float, str, str]],
               first_copy: int = 0) -> None:
        """The nemesis's own message (a holder at risk): its copies at the given times to the given
        targets ((at, label, address): a pod's IP, to reach the replica chosen), numbered from
        ``first_copy``; a copy that fails is retried as any other (to a varied target)."""
        with self._cv:
            self.sessions[msg] = session
            self._slow[msg] = delay
        text = f"msg={msg} session={session} delay={delay:.1f}"
        for copy, (at, label, address) in enumerate(copies, start=first_copy):
            self._push(at, msg, copy, 0, text, (label, address))

    def answers(self, msg: str) -> list[Delivery]:
        """The deliveries of ``msg`` answered (or failed) so far."""
        with self._cv:
            return [d for d in self.deliveries if d.msg == msg]

    def _push(self, at: float, msg: str, copy: int, retry: int, text: str,
              pinned: tuple[str, str] | None = None) -> None:
        with self._cv:
            self._seq += 1
            self._pending += 1
            if pinned is not None:
                self._pinned[self._seq] = pinned
            heapq.heappush(self._queue, (at, self._seq, msg, copy, retry, text))
            self._cv.notify()

    def _target(self) -> tuple[str, str]:
        roll = self.rng.random()
        if roll < 0.6 and self.pods.ips:
            ip = self.rng.choice(self.pods.ips)
            return f"pod:{ip}", ip
        if roll < 0.8:
            return "service", self.pods.cluster_ip
        return "edge", HOST

    def _deliver(self, msg: str, copy: int, retry: int, text: str, pinned: tuple[str, str] | None = None) -> None:
        label, address = pinned or self._target()
        sent = time.time()
        status, dedup, error, said = None, False, "", ""
        try:
            answer = node.webhook(address, self.token, msg, text,
                                  timeout=max(self.settings.long_s[1], self._slow.get(msg, 0.0)) + 150,
                                  session=self.sessions[msg])
            status, dedup = answer.status, bool(answer.body.get("deduplicated"))
            said = "retry" if answer.body.get("retry") else "in_progress" if answer.body.get("in_progress") else ""
        except Exception as e:  # noqa: BLE001 - a refused, reset or timed-out delivery is a record too
            error = type(e).__name__
        d = Delivery(msg, copy * 10 + retry, label, sent, time.time(), status, dedup, error, said)
        with self._cv:
            self.deliveries.append(d)
        if not d.ok and retry < self.settings.retries:
            self._push(time.time() + min(2 ** retry, 30), msg, copy, retry + 1, text)
        with self._cv:
            self._pending -= 1
            self._in_flight[msg] -= 1
            if not self._in_flight[msg]:
                del self._in_flight[msg]
            self._cv.notify_all()

    def run(self, deadline: float) -> None:
        """Until every delivery and retry is done, or ``deadline`` (unix time): then what is still
        queued or in flight is left (``unfinished``), and its messages are not judged."""
        pool = ThreadPoolExecutor(self.settings.workers)
        try:
            while True:
                with self._cv:
                    if not self._pending:
                        return
                    if time.time() > deadline:
                        self.unfinished = {q[2] for q in self._queue} | set(self._in_flight)
                        return
                    if not self._queue:
                        self._cv.wait(1.0)
                        continue
                    at = self._queue[0][0]
                    now = time.time()
                    if at > now:
                        self._cv.wait(min(at - now, 1.0))
                        continue
                    _, seq, msg, copy, retry, text = heapq.heappop(self._queue)
                    self._in_flight[msg] = self._in_flight.get(msg, 0) + 1
                    pinned = self._pinned.pop(seq, None)
                pool.submit(self._deliver, msg, copy, retry, text, pinned)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def setup(cluster: Cluster, settings: Settings, say: Callable[[str], None]) -> None:
    # the operator as installed now: a rollout still under way (`make demo` just upgraded it) leaves
    # the old leader rendering the GatewayDeployment with its own launcher until it exits
    cluster.kubectl("rollout", "status", "deployment", "-n", node.SYSTEM_NAMESPACE, "--timeout=300s")
    until(lambda: not [p for p in cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE)["items"]
                       if p["metadata"].get("deletionTimestamp")], timeout=300, interval=1,
          what="no operator pod still stopping")
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
    cluster.kubectl("delete", "gatewaydeployment", NAME, "-n", NAMESPACE, "--ignore-not-found", "--wait=true",
                    "--timeout=180s")
    cluster.kubectl("delete", "deployment", llm_pod.NAME, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    llm_env = llm_pod.deploy(cluster, NAMESPACE, node.images().gateway)
    body = manifest(settings, llm_env)
    cluster.apply(json.dumps(body))
    replicas = body["spec"]["replicas"]
    wait_ready_pods(cluster, NAMESPACE, NAME, replicas, timeout=300)
    wait_condition(cluster, NAMESPACE, NAME, "ExactlyOnceAdmission", "True", timeout=120)
    say(f"  {NAME}: {replicas} replica(s) Ready ({'SQLite' if SWITCH in settings.faults else 'Redis'}), ExactlyOnceAdmission=True")


def turns(cluster: Cluster) -> list[Turn]:
    ip = llm_pod.pod_ip(cluster, NAMESPACE)
    with urllib.request.urlopen(f"http://{ip}:{llm_pod.PORT}/turns", timeout=30) as r:
        return [Turn.of(t) for t in json.loads(r.read())["turns"]]


def run(cluster: Cluster, settings: Settings, say: Callable[[str], None] = print) -> dict[str, Any]:
    rng = random.Random(settings.seed)
    say(f"exactly-once checker: seed {settings.seed}, {settings.messages} messages x {settings.copies}, "
        f"faults {', '.join(settings.faults) or 'none'}")
    setup(cluster, settings, say)
    pods, watch = Pods(cluster), ConditionWatch(cluster)
    provider = Provider(settings, random.Random(rng.random()), pods, node.gateway_token(cluster, NAMESPACE, NAME))
    nemesis = Nemesis(cluster, settings, random.Random(rng.random()), provider)
    stop = threading.Event()
    t0 = time.time()
    provider.plan(t0 + 2)
    chaos = threading.Thread(target=nemesis.schedule, args=(stop, say), daemon=True)
    chaos.start()
    try:
        provider.run(t0 + settings.spread_s + settings.redeliver_max_s + settings.tail_s)
    finally:
        stop.set()
        chaos.join(timeout=400)
    time.sleep(2 * nemesis.lag)  # the last answers' conditions
    watch.stop()
    pods.stop()
    # spec.sessions.maxMessages (50 by default) keeps the last 25 turns of a session
    with provider._cv:
        judged = [d for d in provider.deliveries if d.msg not in provider.unfinished]
    recorded = turns(cluster)
    report = classify(judged, recorded, watch.samples, nemesis.faults, lag=nemesis.lag,
                      window=settings.session_window)
    # what was classified, so that a report can be classified again (harness.exactly_once.reclassify)
    report["records"] = {"deliveries": [asdict(d) for d in judged], "turns": [asdict(t) for t in recorded],
                         "faults": [asdict(f) for f in nemesis.faults]}
    report["unfinished_messages"] = len(provider.unfinished)  # still queued at the deadline: not judged
    report.update(seed=settings.seed, started=t0, duration_s=round(time.time() - t0, 1),
                  settings={k: v for k, v in asdict(settings).items() if k != "spec"},
                  timeline=[{"at": s.at, "state": s.state, "conditions": {k: list(v) for k, v in s.conditions.items()}}
                            for s in watch.samples])
    return report


def picture(report: dict[str, Any], path: str) -> Path:
    """The run as one picture: the faults as shaded spans, exactly-once held or not over time (from
    the watch), and the duplicates and lost messages as they happened."""
    from .plots import Chart, write_figure
    t0 = report["started"]
    end = t0 + report["duration_s"]
    spans = [(f["started"] - t0, max(f["ended"], f["started"] + 2) - t0, f["kind"]) for f in report["faults"]]
    states: dict[str, list[tuple[float, float]]] = {"exactly-once=True": [], "exactly-once=False": []}
    samples = report["timeline"]
    step = 1.0
    for i, s in enumerate(samples):
        upto = samples[i + 1]["at"] if i + 1 < len(samples) else end
        x = s["at"] - t0
        while x < upto - t0:
            held = s["state"] == "held"
            states["exactly-once=True"].append((x, 1 if held else 0))
            states["exactly-once=False"].append((x, 0 if held else 1))
            x += step
    bucket = 10.0
    marks = {}
    for name, key in (("announced duplicates", "announced"), ("silent duplicates", "silent"),
                      ("excused duplicates (a forgetting fault)", "excused")):
        counts = [0] * (int((end - t0) // bucket) + 1)
        for at in report["duplicates_at"].get(key, []):   # a report before issue 56 has no "excused"
            counts[min(len(counts) - 1, max(0, int((at - t0) // bucket)))] += 1
        marks[name] = [(i * bucket, float(n)) for i, n in enumerate(counts)]
    return write_figure(path, [
        Chart("exactly-once held (ExactlyOnceAdmission=True, IdempotencyDegraded not True)", states,
              xlabel="seconds", kind="states", spans=spans, step=step, xlim=(0, end - t0)),
        Chart(f"duplicates per {bucket:g} s (by when the second turn started)", marks, xlabel="seconds",
              kind="step", spans=spans, xlim=(0, end - t0)),
    ], title=f"exactly-once checker, seed {report['seed']}: {report['deliveries']} deliveries, "
             f"{report['silent_duplicates']} silent duplicates, {report['lost']} lost", columns=1,
       panel_size=(11, 2.2))
