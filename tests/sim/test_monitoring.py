"""The chart's alerts and Grafana dashboard, proven on a real Prometheus (issue 10).

Offline: ``promtool test rules`` on the PrometheusRule rendered from the chart
(tests/promtool/), the dashboard JSON against Grafana's dashboard schema as the
grafana-foundation-sdk models it (harness/dashboard_schema.py says exactly what is checked),
and the ServiceMonitor's scrape job keeping the series' namespace (real Prometheus).

Live, on a control plane of its own: the real operator CLI, a real redis-server, and a real
Prometheus 3.16 scraping the operator's /metrics every second through the scrape job the
chart's ServiceMonitor describes (its honorLabels, its interval set to 1s by value), with the
chart's rules loaded (``for:`` shortened by values). Stand-ins: the kubelet (no container runs)
and HEALTH ENDPOINT STAND-INS answering /health at the pod IPs; prometheus-operator's
ServiceMonitor-to-scrape-job translation, done by hand (harness/monitoring.py). The scenario:
a replica stuck on the build-time fallback is restarted, a replica degrades and recovers,
Redis stops and returns, a spec is refused at reconcile and fixed, an admission policy
refuses the operator's status writes and is removed, the operator is starved of CPU (stopped
in bursts) and fed again, the operator stops and comes back.
Every alert must fire and resolve in its phase; every panel query of the dashboard, with its
variables substituted as Grafana would, must return series for the scenario.
``GWOP_DASHBOARD_PNG=<path>`` (``make dashboard-png``) writes the picture of the panels there.
"""
from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from harness.cluster import REPO, Cluster, tool
from harness.dashboard_schema import dashboard_problems
from harness.gateways import (apply_gateway, conditions, create_password_secret, ready_pods, redis_gateway,
                              serve_health, wait_condition, wait_event)
from harness.monitoring import (Prometheus, alert_names, dashboard, panel_targets, rate_interval, render_monitoring,
                                scrape_job, substitute, variable_values, wait_for_alert, write_rules)
from harness.operator import RELEASE, SYSTEM_NAMESPACE, OperatorProcess
from harness.plots import Chart, write_figure
from harness.processes import free_port
from harness.redis_server import RedisServer
from harness.standins import BUILD_TIME, RUNTIME, HealthStandIn, HealthStandIns, idempotency_owner
from harness.wait import WaitTimeout, until

RULE_TESTS = REPO / "tests/promtool/gateway-operator.rules.test.yaml"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def seconds(duration: str) -> float:
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u]
               for n, u in re.findall(r"(\d+)(ms|s|m|h)", duration))


# -- promtool unit tests ----------------------------------------------------------------------

def rendered_rule(*values: str) -> dict[str, Any]:
    """The PrometheusRule as the promtool cases expect it: release gateway-operator in
    namespace monitoring."""
    return render_monitoring("gateway-operator", "monitoring", *values)["PrometheusRule"]


def run_rule_tests(rule: dict[str, Any], directory: Path) -> subprocess.CompletedProcess[str]:
    write_rules(rule, directory / "rules.yaml")
    shutil.copy(RULE_TESTS, directory)
    return promtool("test", "rules", RULE_TESTS.name, cwd=directory)


def test_promtool_rule_unit_tests_pass_on_the_chart_rules(tmp_path: Path) -> None:
    rule = rendered_rule()
    write_rules(rule, tmp_path / "rules.yaml")
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = run_rule_tests(rule, tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_alert_has_a_case_that_fires_and_a_later_one_where_it_resolved() -> None:
    groups = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    for alert in alert_names(rendered_rule()):
        covered = False
        for group in groups:
            cases = [c for c in group["alert_rule_test"] if c["alertname"] == alert]
            fired = [seconds(c["eval_time"]) for c in cases if c["exp_alerts"]]
            quiet = [seconds(c["eval_time"]) for c in cases if not c["exp_alerts"]]
            covered |= bool(fired) and any(t > min(fired) for t in quiet)
        assert covered, f"{alert}: no promtool case where it fires and then resolves"


def test_promtool_cases_fail_on_rules_that_ignore_for(tmp_path: Path) -> None:
    """The unit tests can fail: with every `for:` at 0s the pending cases see firing alerts."""
    rule = copy.deepcopy(rendered_rule())
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            r["for"] = "0s"
    result = run_rule_tests(rule, tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr, result.stdout


# -- the dashboard against Grafana's schema ------------------------------------------------------

def test_dashboard_conforms_to_the_grafana_dashboard_schema() -> None:
    assert dashboard_problems(dashboard()) == []


def test_the_chart_ships_this_dashboard_to_the_grafana_sidecar() -> None:
    out = subprocess.run([tool("helm"), "template", "r", str(REPO / "charts/gateway-operator"), "--show-only",
                          "templates/dashboard.yaml", "--set", "metrics.grafanaDashboard.enabled=true"],
                         check=True, capture_output=True, text=True).stdout
    config_map = yaml.safe_load(out)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["gateway-operator.json"]) == dashboard()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(board: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = board
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return mutate


@pytest.mark.parametrize("mutate, problem", [
    (_set("panels.0.datsource", {"uid": "x"}), "panels[0].datsource: not in the schema"),
    (_set("panels.0.targets.0.legendFormt", "x"), "targets[0].legendFormt: not in the schema"),
    (_set("panels.0.gridPos.w", "6"), "grid_pos.w: '6' is not a int"),
    (_set("panels.5.gridPos.w", 30), "outside the 24-column grid"),
    (_set("panels.0.type", "stats"), "panel type 'stats' is not a Grafana panel plugin"),
    (_set("panels.0.targets.0.expr", 3), "targets[0].expr: 3 is not a str"),
    (_set("panels.1.id", 1), "id used twice"),
    (_set("templating.list.1.type", "qurey"), "'qurey' is not a VariableType"),
    (_set("graphTooltip", 7), "7 is none of ['DashboardCursorSync'"),
    (_set("schemaVersion", "39"), "schema_version: '39' is not a int"),
    (_set("panels.0.fieldConfig.defaults.mappings.0.type", "valu"), "does not decode: KeyError 'valu'"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_schema_check_names_what_is_wrong(mutate: Callable[[dict[str, Any]], None], problem: str) -> None:
    board = dashboard()
    mutate(board)
    problems = dashboard_problems(board)
    assert any(problem in p for p in problems), problems


# -- the ServiceMonitor's scrape job keeps the GatewayDeployment's namespace ---------------------

def test_the_service_monitor_keeps_the_gateway_namespace_on_the_series() -> None:
    """The operator's series name the GatewayDeployment's namespace, and the scrape target's own
    namespace label (the operator's) collides with it. Through the chart's ServiceMonitor
    (honorLabels) Prometheus keeps the series' one; without it, the panels' and the alerts'
    namespace would be the operator's, the gateway's moved to exported_namespace."""
    from gateway_operator.loop import metrics
    metrics.observe_conditions("shop", "support-bot", [{"type": "Ready", "status": "True"}])
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")  # the operator's metrics, as it serves them
    monitoring = render_monitoring(RELEASE, SYSTEM_NAMESPACE, "--set", "metrics.serviceMonitor.interval=1s")
    chart = scrape_job(monitoring["ServiceMonitor"], monitoring["Service"], f"127.0.0.1:{port}", pod="chart")
    plain = copy.deepcopy(chart)
    plain.update(job_name=chart["job_name"] + "-without-honorLabels", honor_labels=False)
    plain["static_configs"][0]["labels"]["pod"] = "without-honorLabels"
    prometheus = Prometheus([chart, plain]).start()
    try:
        series = until(lambda: (lambda found: found if len(found) == 2 else None)(prometheus.query(
            'gateway_operator_condition{name="support-bot",type="Ready",status="True"}')), timeout=30,
            what="the series through both jobs")
        by_job = {s["metric"]["pod"]: s["metric"] for s in series}
        assert chart["honor_labels"] is True
        assert by_job["chart"]["namespace"] == "shop" and "exported_namespace" not in by_job["chart"]
        assert (by_job["without-honorLabels"]["namespace"], by_job["without-honorLabels"]["exported_namespace"]) \
            == (SYSTEM_NAMESPACE, "shop")
    finally:
        prometheus.stop()
        server.shutdown()
        metrics.forget("shop", "support-bot")


# -- live: a real Prometheus scraping the operator through a scenario ----------------------------

ALERTS = ("GatewayIdempotencyDegraded", "GatewayExactlyOnceAdmissionLost", "GatewayRedisUnreachable",
          "GatewayStalled", "GatewayOperatorReconcileErrors", "GatewayOperatorSaturated", "GatewayOperatorDown")
LIVE_VALUES = ("--set", "metrics.serviceMonitor.interval=1s", "--set", "metrics.prometheusRule.for=2s",
               "--set", "metrics.prometheusRule.reconcileErrors.window=10s",
               "--set", "metrics.prometheusRule.reconcileErrors.for=2s",
               "--set", "metrics.prometheusRule.saturation.window=10s",
               "--set", "metrics.prometheusRule.saturation.for=2s")
SCRAPE_S = 1.0
GATEWAY = "shop"


@dataclass
class Outcome:
    phase: str
    fired_s: float | None = None      # from the cause to the alert firing
    resolved_s: float | None = None   # from the fix to the alert gone
    error: str | None = None


@dataclass
class Live:
    prometheus: Prometheus
    namespace: str
    rules: dict[str, str] = field(default_factory=dict)  # alert -> expr, the chart's rules as loaded
    start: float = 0.0
    end: float = 0.0
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    phases: list[tuple[float, float, str]] = field(default_factory=list)

    def scraped_since(self, t: float) -> bool:
        """Prometheus holds a scrape of the (up) operator taken after ``t``: what the operator
        exported at ``t`` (it sets its metrics before it writes the status a test waits for)."""
        return bool(self.prometheus.query("up == 1")) and bool(self.prometheus.query(f"timestamp(up) > {t:.3f}"))

    def causes(self) -> list[str]:
        """The alerts whose expression holds for the namespace on the latest scrape."""
        return [alert for alert, expr in self.rules.items()
                if any(s["metric"].get("namespace") == self.namespace for s in self.prometheus.query(expr))]

    def quiet(self) -> None:
        """No alert of the scenario pending or firing, and none about to be (a phase starts from a
        clean slate): not only what the rules last evaluated, but the state scraped after this
        call (an alert whose cause was scraped a moment ago is not pending yet)."""
        since = time.time()
        until(lambda: self.scraped_since(since) and not self.prometheus.alerts(namespace=self.namespace)
              and not self.causes(), timeout=60, interval=0.5,
              what=f"no alert for {self.namespace}; now {self.prometheus.alerts(namespace=self.namespace)}, "
                   f"causes {self.causes()}")

    def phase(self, label: str, alerts: tuple[str, ...], cause: Callable[[], None], fix: Callable[[], None],
              namespace: str | None = None) -> None:
        labels = {"namespace": namespace or self.namespace}
        if namespace is None:
            labels["name"] = GATEWAY
        started = time.time()
        outcomes = {a: self.outcomes.setdefault(a, Outcome(label)) for a in alerts}
        try:
            cause()
            for alert, o in outcomes.items():
                wait_for_alert(self.prometheus, alert, "firing", timeout=60, **labels)
                o.fired_s = round(time.time() - started, 1)
        except WaitTimeout as e:
            for o in outcomes.values():
                o.error = o.error or f"did not fire: {e}"
        fixed = time.time()
        fix()
        try:
            for alert, o in outcomes.items():
                wait_for_alert(self.prometheus, alert, None, timeout=60, **labels)
                o.resolved_s = round(time.time() - fixed, 1)
        except WaitTimeout as e:
            for o in outcomes.values():
                o.error = o.error or f"did not resolve: {e}"
        self.phases.append((started, time.time(), label))


DENY_STATUS_WRITES = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: gwop-monitoring-deny-status}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [gateway-operator.dev], apiVersions: ["*"], operations: [UPDATE], resources: [gatewaydeployments/status]}
  validations:
  - {expression: "false", message: "status writes refused by the monitoring test's policy"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: gwop-monitoring-deny-status}
spec:
  policyName: gwop-monitoring-deny-status
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: NAMESPACE}}
"""


# A finalizer of the test's: a deleted pod that holds it stays Terminating, keeping its IP
HOLD_POD_IP = "test.gateway-operator.dev/hold-pod-ip"


def hold_pod_ip(cluster: Cluster, ns: str, pod: str) -> None:
    """Once deleted, the pod keeps its IP until ``release_pod_ip``, as a real pod does for its
    termination grace period. kwok deletes a pod at once and hands its IP to the next pod it
    starts, the replacement: which would then meet the HEALTH ENDPOINT STAND-IN (one per IP)
    still answering as the pod it replaces."""
    cluster.kubectl("-n", ns, "patch", "pod", pod, "-p", json.dumps({"metadata": {"finalizers": [HOLD_POD_IP]}}))


def release_pod_ip(cluster: Cluster, ns: str, pod: str) -> None:
    cluster.kubectl("-n", ns, "patch", "pod", pod, "-p",
                    json.dumps({"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD_POD_IP]}}))
    until(lambda: "NotFound" in cluster.kubectl("-n", ns, "get", "pod", pod, check=False).stderr, timeout=30,
          what=f"pod {pod} gone")


def wait_polled(cluster: Cluster, ns: str, count: int, replicas: dict[str, HealthStandIn] | None = None) -> None:
    """The operator has polled the stand-in of each of ``count`` ready replicas, and every one
    answered and dedups through Redis (IdempotencyDegraded False is also what a replica that
    does not answer yet gives). With ``replicas``: the stand-ins the next phase steers are the
    ones it polls (each answered a poll from now on), not only some ``count`` replicas: right after
    a replacement the operator may still poll the pods it knew before."""
    if replicas is not None:
        before = {name: s.requests for name, s in replicas.items()}
        until(lambda: all(s.requests > before[name] for name, s in replicas.items()), timeout=30,
              what=f"a poll of each of {sorted(replicas)} (polls so far: "
                   f"{ {name: s.requests for name, s in replicas.items()} })")

    def held() -> dict[str, Any] | None:
        c = conditions(cluster, ns, GATEWAY).get("ExactlyOnceAdmission")
        ok = c and (c["status"], c["reason"]) == ("True", "SharedRedisStore") \
            and f"every polled replica ({count})" in c["message"]
        return c if ok else None
    until(held, timeout=30, what=f"ExactlyOnceAdmission True (SharedRedisStore) over {count} polled replicas; now "
          f"{conditions(cluster, ns, GATEWAY).get('ExactlyOnceAdmission')}")


def run_scenario(cluster: Cluster, live: Live, redis: RedisServer, standins: HealthStandIns,
                 operator: list[OperatorProcess]) -> None:
    ns = live.namespace
    create_password_secret(cluster, ns, "redis-auth", redis.password or "")
    manifest = redis_gateway(GATEWAY, redis, replicas=2)
    apply_gateway(cluster, ns, manifest)
    replicas = serve_health(cluster, standins, ns, GATEWAY, 2)
    wait_condition(cluster, ns, GATEWAY, "ExactlyOnceAdmission", "True", "SharedRedisStore")
    wait_polled(cluster, ns, 2)
    live.quiet()

    # a replica stuck on the build-time SQLite fallback: restarted once Redis answers (the
    # "Stale replica restarts" panel); its replacement answers healthy at its new IP
    started = time.time()
    stale = sorted(replicas)[0]
    hold_pod_ip(cluster, ns, stale)
    replicas[stale].degraded_owners = [idempotency_owner(BUILD_TIME)]
    wait_event(cluster, ns, GATEWAY, "RestartedStaleReplica", "Normal")
    pods = until(lambda: (lambda pods: pods if len(pods) == 2 and stale not in {p["metadata"]["name"] for p in pods}
                          else None)(ready_pods(cluster, ns, GATEWAY)), timeout=60,
                 what="the stale replica's replacement ready")
    assert replicas[stale].ip not in {p["status"]["podIP"] for p in pods}, "the replacement took the stale pod's IP"
    # the stale pod's process is gone: its IP answers afresh from now on, then it is let go
    replicas[stale].degraded_owners = []
    release_pod_ip(cluster, ns, stale)
    replicas = serve_health(cluster, standins, ns, GATEWAY, 2)
    assert stale not in replicas and set(replicas) == {p["metadata"]["name"] for p in pods}, sorted(replicas)
    wait_condition(cluster, ns, GATEWAY, "IdempotencyDegraded", "False", timeout=30)
    wait_polled(cluster, ns, 2, replicas)  # the phases below steer these two stand-ins
    live.phases.append((started, time.time(), "stale replica restarted"))
    live.quiet()

    first = sorted(replicas)[0]

    def degrade() -> None:
        replicas[first].degraded_owners = [idempotency_owner(RUNTIME)]

    def recover() -> None:
        replicas[first].degraded_owners = []
    live.phase("replica degraded", ("GatewayIdempotencyDegraded", "GatewayExactlyOnceAdmissionLost"), degrade, recover)
    live.quiet()

    live.phase("Redis stopped", ("GatewayRedisUnreachable",), redis.stop, redis.start)
    live.quiet()

    refused = redis_gateway(GATEWAY, redis, replicas=2)
    refused["spec"]["redis"]["passwordSecretRef"] = {"name": "no-such-secret"}
    live.phase("spec refused", ("GatewayStalled",), lambda: apply_gateway(cluster, ns, refused),
               lambda: apply_gateway(cluster, ns, manifest))
    live.quiet()

    policy = DENY_STATUS_WRITES.replace("NAMESPACE", ns)

    def refuse_status_writes() -> None:
        cluster.apply(policy)
        until(lambda: "refused by the monitoring test's policy" in cluster.kubectl(
            "-n", ns, "patch", "gatewaydeployment", GATEWAY, "--subresource=status", "--type=merge",
            "--dry-run=server", "-p", '{"status": {"observedGeneration": 0}}', check=False).stderr,
            timeout=30, what="the policy in force")
        degrade()  # a status change the operator must write

    def allow_status_writes() -> None:
        cluster.kubectl("delete", "-f", "-", input=policy)
        recover()
    live.phase("status writes refused", ("GatewayOperatorReconcileErrors",), refuse_status_writes, allow_status_writes)
    live.quiet()

    starving = threading.Event()
    starver: list[threading.Thread] = []

    def starve_operator() -> None:
        """The operator process stopped for 1.6 s in every 3.5 (SIGSTOP, SIGCONT), as a CPU
        limit's throttling stops it: a tick of its event loop wakes over a second late in each
        cycle, while most scrapes (1 s timeout) still answer."""
        pid = operator[0].proc.pid

        def cycle() -> None:
            while not starving.is_set():
                os.kill(pid, signal.SIGSTOP)
                time.sleep(1.6)
                os.kill(pid, signal.SIGCONT)
                starving.wait(1.9)
        starver.append(threading.Thread(target=cycle, daemon=True))
        starver[0].start()

    def feed_operator() -> None:
        starving.set()
        starver[0].join(timeout=10)
        os.kill(operator[0].proc.pid, signal.SIGCONT)
    live.phase("operator starved of CPU", ("GatewayOperatorSaturated",), starve_operator, feed_operator,
               namespace=SYSTEM_NAMESPACE)
    live.quiet()

    def stop_operator() -> None:
        operator[0].stop()

    def restart_operator() -> None:
        successor = OperatorProcess(cluster, resync_seconds=2)
        successor.metrics_port = operator[0].metrics_port  # the scrape target stays where it was
        operator[0] = successor.start()
    live.phase("operator down", ("GatewayOperatorDown",), stop_operator, restart_operator, namespace=SYSTEM_NAMESPACE)
    live.quiet()
    series = f'gateway_operator_condition{{namespace="{ns}",type="Ready"}}'
    found = until(lambda: live.prometheus.query(f"timestamp({series})"), timeout=30,
                  what="the restarted operator's series")
    seen = min(float(s["value"][1]) for s in found)  # a scrape of the restarted operator
    # a rate window of the restarted operator's samples: scrapes 4 intervals after that one
    until(lambda: (lambda found: found and min(float(s["value"][1]) for s in found) >= seen + 4 * SCRAPE_S)(
        live.prometheus.query(f"timestamp({series})")), timeout=30,
        what=f"{4 * SCRAPE_S:g} s of the restarted operator's samples")


@pytest.fixture(scope="module")
def live(own_cluster: Cluster) -> Iterator[Live]:
    cluster = own_cluster
    monitoring = render_monitoring(RELEASE, SYSTEM_NAMESPACE, *LIVE_VALUES)
    # persistent: the "Redis stopped" phase is an outage, not a lost dedup history (DedupHistoryLost
    # would hold ExactlyOnceAdmission False, and its alert, for a record TTL)
    redis = RedisServer(password="monitoring-redis-password", persistent=True).start()
    standins = HealthStandIns()
    operator = [OperatorProcess(cluster, resync_seconds=2).start()]  # reconcile durations in each 4 s window
    prometheus: Prometheus | None = None
    try:
        job = scrape_job(monitoring["ServiceMonitor"], monitoring["Service"],
                         f"127.0.0.1:{operator[0].metrics_port}", pod=operator[0].leader_identity)
        prometheus = Prometheus([job], [], interval=f"{SCRAPE_S:g}s")
        prometheus.config["rule_files"] = [str(write_rules(monitoring["PrometheusRule"], prometheus.dir / "rules.yaml"))]
        prometheus.start()
        # Prometheus applies its first targets a few seconds after it starts, and meanwhile
        # rightly finds no operator to scrape: the scenario starts once it scrapes one
        until(lambda: prometheus.query("up == 1") and not prometheus.alerts(), timeout=60,
              what="the operator scraped and no alert pending")
        live = Live(prometheus, cluster.new_namespace(),
                    {r["alert"]: r["expr"] for g in monitoring["PrometheusRule"]["spec"]["groups"] for r in g["rules"]
                     if "alert" in r})
        live.start = time.time()
        run_scenario(cluster, live, redis, standins, operator)
        live.end = time.time()
        yield live
    finally:
        if prometheus:
            prometheus.stop()
        operator[0].stop()
        standins.close()
        redis.close()


def test_the_live_scenario_covers_every_alert_of_the_chart() -> None:
    assert sorted(alert_names(render_monitoring(RELEASE, SYSTEM_NAMESPACE, *LIVE_VALUES)["PrometheusRule"])) \
        == sorted(ALERTS)


@pytest.mark.parametrize("alert", ALERTS)
def test_alert_fires_and_resolves_on_the_live_scenario(live: Live, alert: str) -> None:
    o = live.outcomes.get(alert)
    assert o is not None, f"{alert} was never caused"
    print(f"\n{alert}: {o.phase}: fired after {o.fired_s} s, resolved {o.resolved_s} s after the fix")
    assert o.error is None, o.error
    assert o.fired_s is not None and o.resolved_s is not None


def evaluate_panels(live: Live) -> list[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """(panel, target, series over the scenario) for every query of the dashboard, evaluated
    as Grafana would: a range query over the dashboard's time range, variables substituted."""
    board = dashboard()
    step = SCRAPE_S
    variables = {**variable_values(live.prometheus, board), "__interval": f"{step:g}s",
                 "__rate_interval": rate_interval(SCRAPE_S, step), "__range": f"{int(live.end - live.start)}s"}
    return [(panel, target, live.prometheus.query_range(substitute(target["expr"], variables), live.start,
                                                         live.end, step))
            for panel, target in panel_targets(board)]


def test_every_dashboard_query_returns_series_for_the_scenario(live: Live) -> None:
    empty = []
    for panel, target, series in evaluate_panels(live):
        with_values = [s for s in series if any(not math.isnan(float(v)) for _, v in s["values"])]
        print(f"{panel['title']} [{target['refId']}]: {len(with_values)} series")
        if not with_values:
            empty.append(f"{panel['title']} [{target['refId']}]: {target['expr']}")
    assert not empty, "panels whose query returned no series:\n" + "\n".join(empty)


def legend(target: dict[str, Any], labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), target.get("legendFormat") or "")
    return text or ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")


# the status of each condition a healthy gateway shows (the picture colours by it)
HEALTHY = {"Ready": "True", "RedisReachable": "True", "ExactlyOnceAdmission": "True", "Reconciling": "False",
           "Stalled": "False", "IdempotencyDegraded": "False"}


def health_state(condition: str, status: str) -> str:
    if status == "Unknown" or condition not in HEALTHY:
        return "Unknown"
    if status == HEALTHY[condition]:
        return "ok"
    return "progressing" if condition == "Reconciling" else "problem"


def dashboard_figure(live: Live, path: Path) -> Path:
    """The dashboard's panels as they looked over the scenario, plus the alerts Prometheus fired."""
    t0 = live.start
    spans = [(a - t0, b - t0, str(i)) for i, (a, b, _) in enumerate(live.phases, 1)]
    charts: dict[int, Chart] = {}
    for panel, target, series in evaluate_panels(live):
        kind = {"stat": "step", "table": "states"}.get(panel["type"], "line")
        title = panel["title"] + (": the status a healthy gateway shows is green" if kind == "states" else "")
        chart = charts.setdefault(panel["id"], Chart(title, {}, "seconds", kind=kind, spans=spans, step=SCRAPE_S,
                                                     xlim=(0, live.end - t0)))
        for s in series:
            name = (f"{s['metric']['type']}={health_state(s['metric']['type'], s['metric']['status'])}"
                    if kind == "states" else legend(target, s["metric"]))
            chart.series[name] = [(float(t) - t0, float(v)) for t, v in s["values"]]  # type: ignore[index]
    alerts = live.prometheus.query_range("ALERTS", live.start, live.end, SCRAPE_S)
    charts[0] = Chart("Alerts (Prometheus ALERTS, from the chart's rules)", {
        f"{s['metric']['alertname']}={s['metric']['alertstate']}": [(float(t) - t0, float(v)) for t, v in s["values"]]
        for s in alerts}, "seconds", kind="states", spans=spans, step=SCRAPE_S, xlim=(0, live.end - t0))
    ordered = [charts[k] for k in sorted(charts) if k] + [charts[0]]
    phases = ", ".join(f"{i} {label}" for i, (_, _, label) in enumerate(live.phases, 1))
    return write_figure(path, ordered, columns=2, title="gateway-operator dashboard, evaluated by a real Prometheus "
                        f"(1 s scrape) over tests/sim/test_monitoring.py's scenario\nphases: {phases}")


def test_dashboard_picture_of_the_scenario(live: Live, tmp_path: Path) -> None:
    path = Path(os.environ.get("GWOP_DASHBOARD_PNG") or tmp_path / "dashboard.png")
    if not path.is_absolute():
        path = REPO / path
    written = dashboard_figure(live, path)
    data = written.read_bytes()
    # the picture is committed (make dashboard-png); its size follows the scenario's timing
    # (145-151 KB seen on this machine), so the bound leaves it room and still catches a blow-up
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000, len(data)
    print(f"\nwrote {written} ({len(data) // 1024} KiB); phases: "
          + json.dumps([(round(a - live.start), round(b - live.start), label) for a, b, label in live.phases]))
