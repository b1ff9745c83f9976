"""mypy over the operator ([tool.mypy] in pyproject.toml): the decision code (core/, loop/) with
mypy's strict checks, the rest of gateway_operator with its default ones; and over the pod code
(gateway_operator/pod), by the flat names its modules import each other by.

Why: the operator passes the same values through many layers (a spec, a probe's result, a pass's
outcome, kopf's bodies and indices); a None where a value was assumed, a field renamed on one side
or an ``Any`` that hides a wrong shape is found here, before a cluster is. The test fails with
mypy's own report. mypy keeps its cache in .cache/mypy: a run after a small change takes a second
or two, the first (no cache) about twelve.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def mypy(*args: str, mypypath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": mypypath} if mypypath else {k: v for k, v in os.environ.items()
                                                                  if k != "MYPYPATH"}
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_the_operator_type_checks() -> None:
    """The package as [tool.mypy] names it."""
    run = mypy()
    assert run.returncode == 0, f"mypy found errors:\n{run.stdout}{run.stderr}"
    assert "Success: no issues found" in run.stdout, run.stdout + run.stderr


def test_the_pod_code_type_checks() -> None:
    """launch.py and gwop_*.py as the pod runs them (one directory on sys.path: ``import gwop_log``)."""
    pod = REPO / "operator/gateway_operator/pod"
    modules = sorted(p.stem for p in pod.glob("*.py") if p.stem != "__init__")
    assert "launch" in modules and len(modules) > 10
    run = mypy(*(arg for m in modules for arg in ("-m", m)), mypypath=str(pod))
    assert run.returncode == 0, f"mypy found errors:\n{run.stdout}{run.stderr}"
    assert "Success: no issues found" in run.stdout, run.stdout + run.stderr
