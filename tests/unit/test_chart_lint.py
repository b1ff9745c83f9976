"""The chart through the linters a platform team's chart pipeline runs (issue 55, item 3).

kube-score (hack/versions.env, built by hack/build-binaries.sh from hack/kube-score) over what the
real ``helm template`` renders for each of the chart's CI value sets (``ci/*-values.yaml``: the
defaults, every optional object on, one replica without leader election, sharded). kube-score must
find nothing: each of its checks the chart answers otherwise is named on the object it concerns (a
``kube-score/ignore`` annotation, rendered only while it applies) with the reason beside it in the
template, so the exception travels with the chart and shows to anyone who runs kube-score on it.

chart-testing's ``ct lint`` steps, with its own configuration files (below: ct itself is not
served here): they must find nothing either. Each linter is shown to find a planted defect."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.chart_lint import CHART, VALUE_SETS, rendered
from harness.cluster import REPO, tool


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


# chart-testing's `ct lint` (helm/chart-testing, pkg/chart.LintChart) is not served by the Go module
# proxy here, so its steps run one by one with the same tools and its own configuration files
# (hack/chart-testing, copied unchanged): Chart.yaml against its yamale schema; yamllint over
# Chart.yaml, values.yaml and each ci/*-values.yaml; `helm lint` with each ci/*-values.yaml. Its
# version-increment check needs the target branch of a hosted CI, and its maintainer check GitHub
# accounts: neither applies to a local clone.
CT = REPO / "hack/chart-testing"


def ct_lint_findings(chart: Path) -> list[str]:
    """What ct lint's steps find in ``chart`` (empty: it would pass)."""
    found: list[str] = []
    ci_values = sorted((chart / "ci").glob("*-values.yaml"))
    schema = subprocess.run([tool_in_venv("yamale"), "--schema", str(CT / "chart_schema.yaml"), str(chart / "Chart.yaml")],
                            capture_output=True, text=True, timeout=120)
    if schema.returncode != 0:
        found.append(f"yamale: {schema.stdout}{schema.stderr}")
    for path in [chart / "Chart.yaml", chart / "values.yaml", *ci_values]:
        linted = subprocess.run([tool_in_venv("yamllint"), "-f", "parsable", "--config-file", str(CT / "lintconf.yaml"),
                                 str(path)], capture_output=True, text=True, timeout=120)
        found += [line for line in linted.stdout.splitlines() if line.strip()]
        if linted.returncode not in (0, 1) or linted.stderr:  # 1: errors found (listed above)
            found.append(f"yamllint {path.name} (exit {linted.returncode}): {linted.stderr}")
    for values in ci_values:
        helm = subprocess.run([tool("helm"), "lint", "--strict", str(chart), "--values", str(values)],
                              capture_output=True, text=True, timeout=120)
        found += [f"helm lint {values.name}: {line}" for line in helm.stdout.splitlines()
                  if line.startswith(("[WARNING]", "[ERROR]"))]
        if helm.returncode != 0:
            found.append(f"helm lint {values.name} (exit {helm.returncode}): {helm.stderr}")
    return found


def tool_in_venv(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_chart_testing_lint_steps_find_nothing() -> None:
    assert ct_lint_findings(CHART) == []


def test_chart_testing_lint_steps_find_what_a_careless_edit_leaves(tmp_path: Path) -> None:
    """The steps are live: a Chart.yaml without its version, a values file with trailing spaces and
    a duplicated key, and a ci values file the schema refuses are each found."""
    chart = tmp_path / "gateway-operator"
    shutil.copytree(CHART, chart)
    meta = chart / "Chart.yaml"
    meta.write_text("\n".join(line for line in meta.read_text().splitlines() if not line.startswith("version:")) + "\n")
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("replicaCount: 2\n", "replicaCount: 2   \nreplicaCount: 2\n", 1))
    (chart / "ci/wrong-values.yaml").write_text("replicaCount: many\n")
    found = "\n".join(ct_lint_findings(chart))
    assert "yamale:" in found and "version" in found, found
    assert "values.yaml" in found and "trailing-spaces" in found and "key-duplicates" in found, found
    assert "helm lint wrong-values.yaml" in found, found
