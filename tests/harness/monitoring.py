"""The chart's monitoring objects and a real Prometheus to run them.

``Prometheus`` is the real server (``hack/build-binaries.sh --monitoring``) on a loopback port
with a throwaway TSDB; the chart's PrometheusRule becomes its rule file and the chart's
ServiceMonitor its scrape job. Prometheus-operator itself does not run here: ``scrape_job``
does by hand what it does for a ServiceMonitor (the target labels it adds, ``honor_labels``
from ``honorLabels``, the interval), for a target on loopback instead of a pod IP.
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from .cluster import CACHE_BIN, REPO, Cluster, tool
from .processes import terminate
from .processes import free_port
from .wait import until

CHART = REPO / "charts/gateway-operator"
DASHBOARD = CHART / "dashboards/gateway-operator.json"
PROMETHEUS_OPERATOR_KINDS = ("servicemonitors", "podmonitors", "prometheusrules")


def _versions() -> dict[str, str]:
    pairs = (line.split("#")[0].strip().split("=", 1) for line in (REPO / "hack/versions.env").read_text().splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def prometheus_operator_crds() -> list[Path]:
    """The ServiceMonitor, PodMonitor and PrometheusRule CRDs of the pinned prometheus-operator module."""
    directory = CACHE_BIN.parent / "crds" / f"prometheus-operator-{_versions()['PROMETHEUS_OPERATOR_VERSION']}"
    paths = [directory / f"monitoring.coreos.com_{kind}.yaml" for kind in PROMETHEUS_OPERATOR_KINDS]
    if not all(p.exists() for p in paths):
        subprocess.run([str(REPO / "hack/build-binaries.sh"), "--monitoring"], check=True, stdout=subprocess.DEVNULL)
    return paths


def install_prometheus_operator_crds(cluster: Cluster) -> None:
    for path in prometheus_operator_crds():
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for kind in PROMETHEUS_OPERATOR_KINDS:
        until(lambda: cluster.kubectl("wait", "--for=condition=Established", f"crd/{kind}.monitoring.coreos.com",
                                      check=False).returncode == 0, timeout=60, what=f"the {kind} CRD")


def render_monitoring(release: str, namespace: str, *values: str) -> dict[str, dict[str, Any]]:
    """The chart's metrics Service, ServiceMonitor and PrometheusRule, by kind."""
    out = subprocess.run(
        [tool("helm"), "template", release, str(CHART), "-n", namespace, "--show-only", "templates/metrics.yaml",
         "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true", *values],
        check=True, capture_output=True, text=True).stdout
    return {d["kind"]: d for d in yaml.safe_load_all(out) if d}


def write_rules(rule: Mapping[str, Any], path: Path) -> Path:
    """A PrometheusRule's spec.groups as a Prometheus rule file."""
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def alert_names(rule: Mapping[str, Any]) -> list[str]:
    return [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def scrape_job(service_monitor: Mapping[str, Any], service: Mapping[str, Any], target: str,
               pod: str) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for the ServiceMonitor's first endpoint,
    pointed at ``target``: job and service are the Service's name, namespace its namespace."""
    endpoint = service_monitor["spec"]["endpoints"][0]
    meta = service_monitor["metadata"]
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "scrape_interval": endpoint["interval"],
        "scrape_timeout": endpoint["interval"],
        "metrics_path": endpoint.get("path", "/metrics"),
        "static_configs": [{"targets": [target], "labels": {
            "job": service["metadata"]["name"], "service": service["metadata"]["name"],
            "namespace": service["metadata"]["namespace"], "endpoint": endpoint["port"], "pod": pod,
            "container": "operator"}}],
    }


class Prometheus:
    """One prometheus server; ``interval`` is both its scrape and its rule evaluation interval."""

    def __init__(self, jobs: Sequence[Mapping[str, Any]], rule_files: Sequence[Path] = (),
                 interval: str = "1s") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-prometheus-"))
        self.port = free_port()
        self.config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
                       "rule_files": [str(p) for p in rule_files], "scrape_configs": list(jobs)}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Prometheus":
        config = self.dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=self.log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        until(ready, timeout=60, interval=0.2, what="prometheus /-/ready")
        return self

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join((self.dir / "prometheus.log").read_text(errors="replace").splitlines()[-lines:])

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the ``data`` of a successful answer."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400 and 422 carry the error
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def alerts(self, **labels: str) -> dict[str, str]:
        """Active alerts whose labels include ``labels``: alertname -> pending/firing."""
        return {a["labels"]["alertname"]: a["state"] for a in self.api("alerts")["alerts"]
                if labels.items() <= a["labels"].items()}

    def stop(self) -> None:
        terminate(self.proc, grace=10)
        self.proc = None


# -- the Grafana dashboard -------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def rate_interval(scrape_interval_s: float, interval_s: float) -> str:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 * scrape interval)."""
    return f"{int(max(interval_s + scrape_interval_s, 4 * scrape_interval_s))}s"


def variable_values(prometheus: Prometheus, board: Mapping[str, Any]) -> dict[str, str]:
    """Each query variable's values as Grafana would offer them (label_values(metric, label)),
    substituted as a multi-value, include-all variable is: a (a|b|c) regex."""
    values: dict[str, str] = {}
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["query"]).groups()
        found = sorted(prometheus.api(f"label/{label}/values", **{"match[]": metric}))
        if not found:
            raise AssertionError(f"variable ${var['name']}: {var['query']} has no values")
        # Grafana's escaping of a value in a PromQL regex: \\ before each regex metacharacter
        escaped = [re.sub(r"[\\^$*+?.()|{}\[\]]", lambda m: "\\\\" + m.group(0), v) for v in found]
        values[var["name"]] = "(" + "|".join(escaped) + ")"
    return values


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    if "$" in expr:
        raise AssertionError(f"an unsubstituted variable in {expr}")
    return expr


def panel_targets(board: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query of every panel, rows included."""
    out = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            out += [(inner, t) for t in inner.get("targets", [])]
    return out


def wait_for_alert(prometheus: Prometheus, alert: str, state: str | None, timeout: float = 60,
                   **labels: str) -> float:
    """Wait until ``alert`` (with ``labels``) is ``state`` (firing/pending), or gone for None;
    returns the seconds it took."""
    started = time.monotonic()
    until(lambda: prometheus.alerts(**labels).get(alert) == state, timeout=timeout, interval=0.25,
          what=f"{alert} {state or 'resolved'} {labels}")
    return time.monotonic() - started
