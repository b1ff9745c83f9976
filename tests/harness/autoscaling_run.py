"""The autoscaling proof on the REAL node (issue 34): the gateway's own load scales a
GatewayDeployment out and back in, with the exactly-once checker's deliveries running through both.

``run(cluster, Settings(...))`` uses the checker's GatewayDeployment (harness.exactly_once_run: the
real gateway image on a managed Redis, beside the LLM STAND-IN, the one stand-in: no model provider
exists here) with ``spec.autoscaling`` on and one replica to begin with, and the real parts around it:

* **Prometheus** (the real server, hack/build-binaries.sh --monitoring) scrapes each gateway pod's
  token-protected ``GET /metrics`` as the operator's PodMonitor says: its port, path, interval and
  the bearer token read from the Secret it names (written to a 0600 file, as prometheus-operator
  mounts it). prometheus-operator itself does not run here (no image registry): ``PodMonitorScrape``
  is its STAND-IN, turning the PodMonitor into a scrape job with file-based targets that it keeps
  to the Running pods the PodMonitor selects, labelled ``namespace`` and ``pod`` as it labels them.
* **prometheus-adapter** (built from the Go module proxy: --autoscaling) as a host process behind
  the APIService ``v1beta1.custom.metrics.k8s.io`` (a Service without selector whose Endpoints are
  the node's bridge address), with the rule of examples/autoscaling/prometheus-adapter-values.yaml;
* **the HPA controller** of kube-controller-manager, on the HPA the operator renders.

The load: the checker's Provider with a burst of slow model turns (``burst_*``: turns of
``burst_turn_s`` seconds), then a trickle of quick ones (``trickle_*``) while the HPA scales back in,
so that deliveries run through the scale-in's drains too. Every ``sample_s`` the timeline records
the HPA's metric and replica counts, the GatewayDeployment's replicas and ready pods, the metric as
the custom metrics API serves it and the turns the provider has in flight. The report is
harness.exactly_once.classify's (no nemesis: every duplicate is silent) with the timeline and
``autoscaling``: the most replicas reached, when, and when the HPA was back at its minimum.
Traffic goes to the node's own ranges (198.18.0.0/15) and loopback only.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import exactly_once_run as checker
from . import monitoring, node, tls
from .cluster import REPO, Cluster, tool
from .exactly_once import classify
from .gateways import ready_pods
from .processes import free_port, terminate
from .wait import until

NODE_ADDRESS = "198.18.0.1"   # hack/node.sh's bridge: the API server reaches the adapter there
ADAPTER_NAMESPACE = "gwop-autoscaling"
ADAPTER_SERVICE = "prometheus-adapter"
METRIC = "gateway_turns_in_flight"
ADAPTER_VALUES = REPO / "examples/autoscaling/prometheus-adapter-values.yaml"


@dataclass
class Settings:
    seed: int = 1
    burst_messages: int = 260        # slow turns, first deliveries over burst_s
    burst_s: float = 240.0
    burst_turn_s: tuple[float, float] = (6.0, 12.0)
    trickle_messages: int = 90       # quick turns over trickle_s, after the burst
    trickle_s: float = 600.0
    trickle_turn_s: tuple[float, float] = (0.2, 1.0)
    copies: int = 2
    min_replicas: int = 1
    max_replicas: int = 3
    average_value: str = "3"
    drain_seconds: int = 20          # the grace period (drain + 25 s) paces the scale-in
    sample_s: float = 5.0
    settle_timeout_s: float = 900.0  # after the deliveries: how long the HPA may take back to min
    spec: dict[str, Any] = field(default_factory=dict)


def checker_settings(s: Settings) -> checker.Settings:
    spec = {"autoscaling": {"enabled": True, "minReplicas": s.min_replicas, "maxReplicas": s.max_replicas,
                            "target": {"metric": "turnsInFlight", "averageValue": s.average_value}},
            "podMonitor": {"enabled": True, "interval": "15s"},
            "drainSeconds": s.drain_seconds, **s.spec}
    return checker.Settings(seed=s.seed, messages=s.burst_messages + s.trickle_messages, copies=s.copies,
                            spread_s=s.burst_s + s.trickle_s, redeliver_max_s=60.0, faults=(),
                            replicas=s.min_replicas, tail_s=180.0, spec=spec)


class Provider(checker.Provider):
    """The checker's provider with a two-phase plan: the burst of slow turns, then the trickle."""

    def __init__(self, s: Settings, *args: Any) -> None:
        super().__init__(*args)
        self.phases = s

    def plan(self, t0: float) -> None:
        s, c = self.phases, self.settings
        phases = [(0, s.burst_messages, 0.0, s.burst_s, s.burst_turn_s),
                  (s.burst_messages, s.trickle_messages, s.burst_s, s.trickle_s, s.trickle_turn_s)]
        for first_index, count, start, length, turn_s in phases:
            for i in range(first_index, first_index + count):
                session = f"s{self.rng.randrange(c.sessions):03d}"
                delay = self.rng.uniform(*turn_s)
                self.plan_message(f"a{s.seed}-{i:05d}", session, delay, t0 + start + self.rng.uniform(0, length))

    def in_flight(self) -> int:
        with self._cv:
            return sum(self._in_flight.values())


class PodMonitorScrape:
    """STAND-IN for prometheus-operator (named so wherever used): the operator's PodMonitor as a
    Prometheus scrape job. The job's targets (a file_sd file) follow the Running pods its selector
    matches, every second."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.monitor = until(lambda: self._get(name), timeout=360, interval=2,
                             what=f"the operator's PodMonitor {namespace}/{name} (it looks for the kind every 5 min)")
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-podmonitor-"))
        endpoint = self.monitor["spec"]["podMetricsEndpoints"][0]
        self.port_name = endpoint["port"]
        ref = endpoint["authorization"]["credentials"]
        token = self.dir / "token"
        token.touch(mode=0o600)
        token.write_text(node.secret_value(cluster, namespace, ref["name"], ref["key"]))
        self.targets = self.dir / "targets.json"
        self.targets.write_text("[]")
        meta = self.monitor["metadata"]
        self.job = {"job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/0",
                    "scrape_interval": endpoint["interval"], "scrape_timeout": "10s",
                    "metrics_path": endpoint.get("path", "/metrics"), "scheme": endpoint.get("scheme", "http"),
                    "authorization": {"type": endpoint["authorization"].get("type", "Bearer"),
                                      "credentials_file": str(token)},
                    "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "5s"}]}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _get(self, name: str) -> dict[str, Any] | None:
        out = self.cluster.kubectl("get", "podmonitors.monitoring.coreos.com", name, "-n", self.namespace, "-o",
                                   "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def _loop(self) -> None:
        selector = ",".join(f"{k}={v}" for k, v in self.monitor["spec"]["selector"]["matchLabels"].items())
        while not self._stop.wait(1.0):
            try:
                pods = self.cluster.get_json("pods", "-n", self.namespace, "-l", selector)["items"]
            except (AssertionError, OSError, ValueError):
                continue
            groups = []
            for pod in pods:
                ip = pod.get("status", {}).get("podIP")
                ports = [p for c in pod["spec"]["containers"] for p in c.get("ports", [])
                         if p.get("name") == self.port_name]
                if ip and ports and pod["status"].get("phase") == "Running":
                    groups.append({"targets": [f"{ip}:{ports[0]['containerPort']}"],
                                   "labels": {"namespace": self.namespace, "pod": pod["metadata"]["name"]}})
            tmp = self.targets.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups))
            tmp.replace(self.targets)

    def stop(self) -> None:
        """Stops following the pods and removes the token file with the rest of the job's files."""
        self._stop.set()
        self._thread.join(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Adapter:
    """prometheus-adapter as a host process on the node's bridge address, registered as the
    custom metrics API: its serving certificate signed by the cluster's CA (the APIService's
    caBundle), delegated authentication and authorization through the API server."""

    def __init__(self, cluster: Cluster, prometheus_url: str) -> None:
        self.cluster = cluster
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-adapter-"))
        self.port = free_port(NODE_ADDRESS)
        rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
        (self.dir / "config.yaml").write_text(yaml.safe_dump({"rules": rules}, sort_keys=False))
        self._serving_cert()
        kubeconfig = str(cluster.kubeconfig)
        self.log = open(self.dir / "adapter.log", "wb")
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [tool("prometheus-adapter"), f"--secure-port={self.port}", f"--bind-address={NODE_ADDRESS}",
             f"--tls-cert-file={self.cert.cert_path}", f"--tls-private-key-file={self.cert.key_path}",
             f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
             f"--authorization-kubeconfig={kubeconfig}", f"--prometheus-url={prometheus_url}/",
             "--metrics-relist-interval=30s", f"--config={self.dir / 'config.yaml'}", "--v=1"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.register()

    def _serving_cert(self) -> None:
        ca = tls.load_ca(Path(self.cluster.kubeconfig).parent / "pki")
        self.cert = tls.server_cert(ca, self.dir, dns=(f"{ADAPTER_SERVICE}.{ADAPTER_NAMESPACE}.svc",), ips=(NODE_ADDRESS,),
                                    stem="serving")
        self.ca = ca.pem.encode()

    def register(self) -> None:
        import base64
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ADAPTER_NAMESPACE}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE},
             "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.port}]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE},
             "subsets": [{"addresses": [{"ip": NODE_ADDRESS}], "ports": [{"name": "https", "port": self.port}]}]},
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
             "metadata": {"name": "v1beta1.custom.metrics.k8s.io"},
             "spec": {"group": "custom.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                      "versionPriority": 100, "caBundle": base64.b64encode(self.ca).decode(),
                      "service": {"namespace": ADAPTER_NAMESPACE, "name": ADAPTER_SERVICE, "port": 443}}},
            # what prometheus-adapter's own chart grants: the HPA controller reads custom metrics
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "gwop-custom-metrics-reader"},
             "rules": [{"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "gwop-hpa-custom-metrics"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gwop-custom-metrics-reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}]},
        ]
        for body in objects:
            self.cluster.apply(json.dumps(body))

        def available() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus-adapter exited {self.proc.returncode}:\n{self.log_tail()}")
            status = self.cluster.get_json("apiservice", "v1beta1.custom.metrics.k8s.io").get("status", {})
            return any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions", []))
        until(available, timeout=120, interval=1, what="the APIService v1beta1.custom.metrics.k8s.io Available")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join((self.dir / "adapter.log").read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.cluster.kubectl("delete", "apiservice", "v1beta1.custom.metrics.k8s.io", "--ignore-not-found", check=False)
        self.cluster.kubectl("delete", "namespace", ADAPTER_NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
        terminate(self.proc, grace=10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)  # its serving key


def served_metric(cluster: Cluster, namespace: str) -> dict[str, float]:
    """The custom metrics API's gateway_turns_in_flight per pod, as the HPA controller reads it."""
    out = cluster.kubectl("get", "--raw", f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/{METRIC}",
                          check=False)
    if out.returncode != 0:
        return {}
    return {i["describedObject"]["name"]: _quantity(i["value"]) for i in json.loads(out.stdout).get("items", [])}


def _quantity(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


class Timeline:
    """Every ``every`` seconds: the load, the metric, the HPA and the replicas."""

    def __init__(self, cluster: Cluster, provider: Provider, every: float) -> None:
        self.cluster, self.provider, self.every = cluster, provider, every
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> dict[str, Any]:
        ns, name = checker.NAMESPACE, checker.NAME
        hpa = self.cluster.get_json("hpa", name, "-n", ns)
        gd = self.cluster.get_json("gatewaydeployment", name, "-n", ns)
        metrics = (hpa.get("status") or {}).get("currentMetrics") or []
        average = next((m["pods"]["current"]["averageValue"] for m in metrics if m.get("type") == "Pods"), None)
        served = served_metric(self.cluster, ns)
        conds = {c["type"]: c["status"] for c in (gd.get("status") or {}).get("conditions") or []}
        return {"at": time.time(), "provider_in_flight": self.provider.in_flight(),
                "metric_per_pod": served, "hpa_average": None if average is None else _quantity(average),
                "hpa_current": (hpa.get("status") or {}).get("currentReplicas"),
                "hpa_desired": (hpa.get("status") or {}).get("desiredReplicas"),
                "spec_replicas": gd["spec"].get("replicas"), "ready_pods": len(ready_pods(self.cluster, ns, name)),
                "conditions": {k: conds.get(k) for k in ("Ready", "ExactlyOnceAdmission", "IdempotencyDegraded")}}

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.rows.append(self.sample())
            except (AssertionError, OSError, KeyError, ValueError, subprocess.SubprocessError):
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def run(cluster: Cluster, settings: Settings, say: Callable[[str], None] = print) -> dict[str, Any]:
    rng = random.Random(settings.seed)
    c = checker_settings(settings)
    say(f"autoscaling proof: seed {settings.seed}; {settings.burst_messages} slow turns over {settings.burst_s:g} s, "
        f"then {settings.trickle_messages} quick ones over {settings.trickle_s:g} s; x {settings.copies} deliveries; "
        f"HPA {settings.min_replicas}-{settings.max_replicas} at {settings.average_value} turns in flight per replica")
    monitoring.install_prometheus_operator_crds(cluster)
    checker.setup(cluster, c, say)
    scrape = PodMonitorScrape(cluster, checker.NAMESPACE, checker.NAME)
    prometheus = monitoring.Prometheus([scrape.job], interval="15s").start()
    adapter = Adapter(cluster, prometheus.url)
    say(f"  Prometheus {prometheus.url} scraping the PodMonitor's pods, prometheus-adapter on "
        f"{NODE_ADDRESS}:{adapter.port} (APIService Available)")
    try:
        until(lambda: served_metric(cluster, checker.NAMESPACE), timeout=180, interval=2,
              what=f"{METRIC} served for the first replica")
        pods, watch = checker.Pods(cluster), checker.ConditionWatch(cluster)
        provider = Provider(settings, c, random.Random(rng.random()), pods,
                            node.gateway_token(cluster, checker.NAMESPACE, checker.NAME))
        timeline = Timeline(cluster, provider, settings.sample_s)
        t0 = time.time()
        provider.plan(t0 + 2)
        provider.run(t0 + c.spread_s + c.redeliver_max_s + c.tail_s)
        delivered = time.time()
        say(f"  deliveries done after {delivered - t0:.0f} s; waiting for the HPA back at {settings.min_replicas}")

        def back_at_min() -> bool:
            rows = timeline.rows[-3:]
            return len(rows) == 3 and all(r["hpa_current"] == settings.min_replicas
                                          and r["ready_pods"] == settings.min_replicas for r in rows)
        until(back_at_min, timeout=settings.settle_timeout_s, interval=5, what="the HPA back at minReplicas")
        timeline.stop()
        watch.stop()
        pods.stop()
        with provider._cv:
            judged = [d for d in provider.deliveries if d.msg not in provider.unfinished]
        recorded = checker.turns(cluster)
        report = classify(judged, recorded, watch.samples, [], lag=2 + 1 + 1.0, window=c.session_window)
    finally:
        adapter.stop()
        prometheus.stop()
        scrape.stop()
    rows = timeline.rows
    most = max((r["ready_pods"] for r in rows), default=0)
    first_most = next((r["at"] for r in rows if r["ready_pods"] == most), None)
    back = next((r["at"] for r in rows if first_most and r["at"] > first_most
                 and r["hpa_current"] == settings.min_replicas and r["ready_pods"] == settings.min_replicas), None)
    report["autoscaling"] = {
        "min_replicas": settings.min_replicas, "max_replicas": settings.max_replicas,
        "most_ready_pods": most, "most_reached_after_s": None if first_most is None else round(first_most - t0, 1),
        "back_at_min_after_s": None if back is None else round(back - t0, 1),
        "deliveries_done_after_s": round(delivered - t0, 1),
        "metric_max": max((r["hpa_average"] or 0 for r in rows), default=0),
        "scaled_out": most > settings.min_replicas, "scaled_in": back is not None,
    }
    report["records"] = {"deliveries": [asdict(d) for d in judged], "turns": [asdict(t) for t in recorded], "faults": []}
    report["unfinished_messages"] = len(provider.unfinished)
    report.update(seed=settings.seed, started=t0, duration_s=round(time.time() - t0, 1),
                  settings={k: v for k, v in asdict(settings).items()},
                  autoscaling_timeline=[{**r, "at": round(r["at"] - t0, 1)} for r in rows],
                  timeline=[{"at": s.at, "state": s.state, "conditions": {k: list(v) for k, v in s.conditions.items()}}
                            for s in watch.samples])
    return report


def targets_met(report: dict[str, Any]) -> bool:
    """Scaled out under the burst and back in after it, with no silent duplicate, nothing lost, no split."""
    a = report["autoscaling"]
    return (a["scaled_out"] and a["scaled_in"] and report["silent_duplicates"] == 0 and report["lost"] == 0
            and report["splits"] == 0 and report["avoidable_duplicates"] == 0)


def table(report: dict[str, Any]) -> str:
    a = report["autoscaling"]
    lines = [f"{'at_s':>6} {'in_flight':>9} {'metric':>7} {'hpa':>7} {'spec':>4} {'ready':>5}  conditions"]
    for r in report["autoscaling_timeline"]:
        metric = "-" if r["hpa_average"] is None else f"{r['hpa_average']:.2f}"
        conds = " ".join(f"{k}={v}" for k, v in r["conditions"].items() if v)
        lines.append(f"{r['at']:>6.0f} {r['provider_in_flight']:>9} {metric:>7} "
                     f"{r['hpa_current']}->{r['hpa_desired']!s:<4} {r['spec_replicas']!s:>4} {r['ready_pods']:>5}  {conds}")
    lines.append(f"most ready pods {a['most_ready_pods']} at {a['most_reached_after_s']} s; back at "
                 f"{a['min_replicas']} at {a['back_at_min_after_s']} s; deliveries {report['deliveries']}, "
                 f"silent duplicates {report['silent_duplicates']}, lost {report['lost']}, splits {report['splits']}")
    return "\n".join(lines)

