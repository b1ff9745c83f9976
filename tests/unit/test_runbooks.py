"""Every alert of the chart's PrometheusRule links its runbook (issue 22): a `runbook_url`
annotation `<metrics.prometheusRule.runbookBaseURL>/<alert>.md`, and docs/runbooks/<alert>.md
exists; every runbook there belongs to an alert. The rule is rendered by the real ``helm``.

The runbooks also name every reason the operator can give for what fired: the reasons are read
from the code (reasons.py, the probe, the conditions), so a new reason without a runbook line
fails here."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator.api import reasons
from gateway_operator.core import conditions, health, problems
from harness.cluster import REPO, tool

CHART = REPO / "charts/gateway-operator"
RUNBOOKS = REPO / "docs/runbooks"
DEFAULT_BASE = "docs/runbooks"


def rendered_alerts(*values: str) -> dict[str, dict[str, Any]]:
    """The PrometheusRule's alerting rules by alert name (every alert on: the metrics Service too)."""
    out = subprocess.run(
        [tool("helm"), "template", "gateway-operator", str(CHART), "-n", "monitoring",
         "--show-only", "templates/metrics.yaml", "--set", "metrics.prometheusRule.enabled=true",
         "--set", "metrics.service.enabled=true", *values],
        check=True, capture_output=True, text=True, timeout=120).stdout
    [rule] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PrometheusRule"]
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


@pytest.fixture(scope="module")
def alerts() -> dict[str, dict[str, Any]]:
    return rendered_alerts()


def runbook_files() -> set[str]:
    return {p.stem for p in RUNBOOKS.glob("*.md") if p.name != "README.md"}


def test_the_chart_has_the_seven_alerts(alerts: dict[str, dict[str, Any]]) -> None:
    assert set(alerts) == {"GatewayIdempotencyDegraded", "GatewayExactlyOnceAdmissionLost", "GatewayRedisUnreachable",
                           "GatewayStalled", "GatewayOperatorReconcileErrors", "GatewayOperatorSaturated",
                           "GatewayOperatorDown"}


def test_every_alert_links_its_runbook_and_the_runbook_exists(alerts: dict[str, dict[str, Any]]) -> None:
    for alert, rule in alerts.items():
        url = rule["annotations"].get("runbook_url")
        assert url, f"{alert}: no runbook_url annotation"
        assert url == f"{DEFAULT_BASE}/{alert}.md" and url.endswith(f"/{alert}.md"), (alert, url)
        assert (REPO / url).is_file(), f"{alert}: {url} does not exist"  # the default is a path in this repository


def test_every_runbook_has_an_alert(alerts: dict[str, dict[str, Any]]) -> None:
    orphans = runbook_files() - set(alerts)
    assert not orphans, f"runbooks without an alert in the chart: {sorted(orphans)}"


def test_the_index_lists_every_runbook() -> None:
    index = (RUNBOOKS / "README.md").read_text()
    for name in runbook_files():
        assert f"]({name}.md)" in index, f"docs/runbooks/README.md does not list {name}"


def test_runbook_base_url_is_a_value() -> None:
    """Where the user hosts the docs; a trailing slash does not double."""
    for base in ("https://github.com/example/gateway-operator/blob/main/docs/runbooks",
                 "https://github.com/example/gateway-operator/blob/main/docs/runbooks/"):
        urls = {a: r["annotations"]["runbook_url"]
                for a, r in rendered_alerts("--set", f"metrics.prometheusRule.runbookBaseURL={base}").items()}
        assert urls == {a: f"{base.rstrip('/')}/{a}.md" for a in urls}, urls


def test_an_empty_runbook_base_url_is_refused_by_the_schema() -> None:
    result = subprocess.run([tool("helm"), "template", "x", str(CHART), "--set", "metrics.prometheusRule.enabled=true",
                             "--set", "metrics.prometheusRule.runbookBaseURL="], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "runbookBaseURL" in result.stderr, result.stderr


@pytest.mark.parametrize("alert", sorted(runbook_files()))
def test_each_runbook_has_the_parts_an_on_call_engineer_needs(alert: str) -> None:
    text = (RUNBOOKS / f"{alert}.md").read_text()
    assert text.startswith(f"# {alert}\n"), f"{alert}.md: the title is not the alert's name"
    headings = re.findall(r"^## (.+)$", text, re.M)
    for part in ("Meaning", "Impact", "Diagnose", "Mitigate"):
        assert any(h.startswith(part) for h in headings), f"{alert}.md has no '## {part}' section"
    assert "kubectl " in text, f"{alert}.md names no kubectl command"


def _source(module: Any) -> str:
    return Path(module.__file__).read_text()


# what the condition behind each alert can say when it fires, read from the code
FIRING_REASONS: dict[str, list[str]] = {
    "GatewayIdempotencyDegraded": [s.value for s in conditions._SEVERITY] + [reasons.DEDUP_HISTORY_LOST],
    "GatewayExactlyOnceAdmissionLost": [getattr(reasons, n) for n in re.findall(r"\bno\(R\.(\w+)",
                                                                                _source(conditions))],
    "GatewayRedisUnreachable": [getattr(reasons, n) for n in re.findall(
        r"ProbeResult\(\s*False,\s*reasons\.(\w+)", (REPO / "operator/gateway_operator/core/probe_wording.py").read_text())
        if getattr(reasons, n) != reasons.MANAGED_REDIS_STARTING],  # that one is Unknown
    "GatewayStalled": [r for r in problems.PRECEDENCE if r not in reasons.RETRIED],  # those show as Reconciling
}


@pytest.mark.parametrize("alert", sorted(FIRING_REASONS))
def test_each_runbook_names_every_reason_of_its_condition(alert: str) -> None:
    wanted = FIRING_REASONS[alert]
    assert len(wanted) >= 4, (alert, wanted)  # the code was read
    assert set(wanted) <= set(reasons.ALL)
    text = (RUNBOOKS / f"{alert}.md").read_text()
    missing = [r for r in dict.fromkeys(wanted) if f"`{r}`" not in text]
    assert not missing, f"{alert}.md does not say what to do about {missing}"


def test_health_states_are_what_the_idempotency_runbook_lists() -> None:
    """The poll results the runbook names for gateway_operator_health_polls_total."""
    text = (RUNBOOKS / "GatewayIdempotencyDegraded.md").read_text()
    for state in health.Idempotency:
        assert f"`{state.value}`" in text, state
