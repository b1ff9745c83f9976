"""What the chart's linters (tests/unit/test_chart_lint.py's kube-score and chart-testing's steps,
tests/sim/test_chart_schemas.py's kubeconform) check: the real ``helm template`` of the chart for
each of its CI value sets (``charts/gateway-operator/ci``)."""
from __future__ import annotations

import subprocess

from .cluster import REPO, tool

CHART = REPO / "charts/gateway-operator"

#: the chart's CI value sets (chart-testing's convention, ``ci/<name>-values.yaml``): the defaults and
#: those that render other objects or another shape (name -> helm flags)
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VALUE_SETS: dict[str, list[str]] = {p.name.removesuffix("-values.yaml"): ["--values", str(p)] for p in CI_VALUES}


def rendered(flags: list[str]) -> str:
    return subprocess.run([tool("helm"), "template", "gateway-operator", str(CHART), "-n", "gateway-operator",
                           *flags], check=True, capture_output=True, text=True, timeout=120).stdout
