"""The chart through the policy linter a platform team's chart pipeline runs (issue 55, item 3):
kube-score (hack/versions.env, built by hack/build-binaries.sh from hack/kube-score) over what
the real ``helm template`` renders, for the defaults and for the value sets that render other
objects or another shape (every optional object on, one replica without leader election,
sharded). kube-score must find nothing: each of its checks the chart answers otherwise is named
on the object it concerns (a ``kube-score/ignore`` annotation, rendered only while it applies)
with the reason beside it in the template, so the exception travels with the chart and shows
to anyone who runs kube-score on it."""
from __future__ import annotations

import subprocess

import pytest

from harness.cluster import REPO, tool

CHART = REPO / "charts/gateway-operator"

#: value sets whose rendering differs in what kube-score checks (name -> helm flags)
VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "every optional object": ["--set", "networkPolicy.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
                              "--set", "metrics.prometheusRule.enabled=true",
                              "--set", "metrics.grafanaDashboard.enabled=true"],
    "one replica, no leader election": ["--set", "leaderElection.enabled=false"],
    "sharded": ["--set", "sharding.shards=4", "--set", "replicaCount=3"],
}


def rendered(flags: list[str]) -> str:
    return subprocess.run([tool("helm"), "template", "gateway-operator", str(CHART), "-n", "gateway-operator",
                           *flags], check=True, capture_output=True, text=True, timeout=120).stdout


def findings(manifests: str) -> list[str]:
    """kube-score's findings on ``manifests``: each line of its CI output that is neither OK nor
    skipped (it exits 1 when it finds something, 0 when not)."""
    scored = subprocess.run([tool("kube-score"), "score", "-", "--output-format", "ci"], input=manifests,
                            capture_output=True, text=True, timeout=120)
    assert scored.returncode in (0, 1), f"kube-score failed (exit {scored.returncode}):\n{scored.stderr}"
    lines = [line for line in scored.stdout.splitlines() if line.strip()]
    assert lines, f"kube-score printed nothing:\n{scored.stderr}"
    return [line for line in lines if not line.startswith(("[OK]", "[SKIPPED]"))]


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_kube_score_finds_nothing_in_the_rendered_chart(values: str) -> None:
    assert findings(rendered(VALUE_SETS[values])) == []


def test_kube_score_finds_what_the_chart_leaves_out() -> None:
    """The lint is live: the operator container without resources, or its anti-affinity and
    ignore annotation stripped, are found and named."""
    found = findings(rendered(["--set", "resources=null"]))
    assert any("(operator) CPU limit is not set" in line for line in found), found
    assert any("(operator) Ephemeral Storage limit is not set" in line for line in found), found
    stripped = "\n".join(line for line in rendered([]).splitlines() if "kube-score/ignore" not in line)
    found = findings(stripped)
    assert any("ImagePullPolicy is not set to Always" in line for line in found), found
