"""`make demo` end to end: ``hack/demo.sh`` in its own cluster directory, run twice, then
``hack/demo.sh down``, which must leave no process of the demo behind.

Nothing is stood in here beyond what the demo itself stands in (and says so in its
output): the kubelet, cluster DNS and the LLM. Its control plane lives in
``.cluster/demo-test`` with pod IPs from 127.3.0.0/16, so it never touches the test
session's cluster (``.cluster/test``, 127.1.0.0/16) or a running sandbox (127.2.0.0/16).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.cluster import REPO

pytest.importorskip("praisonai_bot", reason="the real gateway (praisonai-bot) is not installed in this interpreter")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed", allow_module_level=True)

pytestmark = pytest.mark.cluster

DIR = REPO / ".cluster/demo-test"
DEMO = str(REPO / "hack/demo.sh")


def demo_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return {**env, "GWOP_CLUSTER_DIR": str(DIR), "GWOP_POD_NETWORK": "127.3.0.0/16", "DEMO_EXIT_AFTER_SETUP": "1"}


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DEMO, *args], env=demo_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def recorded_processes() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (DIR / "run/demo").glob("*.json")}


def processes_of_the_demo_dir() -> list[str]:
    out = subprocess.run(["pgrep", "-af", str(DIR)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def block(output: str, heading: str) -> str:
    """The paragraph of ``output`` that starts with ``heading`` (e.g. a conditions table)."""
    for paragraph in output.split("\n\n"):
        if paragraph.lstrip().startswith(heading):
            return paragraph
    raise AssertionError(f"no paragraph starting with {heading!r} in:\n{output}")


def alive(pid: int) -> bool:
    try:
        return str(DIR) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_make_demo_runs_the_sandbox_twice_harmlessly_and_demo_down_leaves_nothing() -> None:
    run("down", timeout=120)  # a clean start, whatever an earlier run left
    procs: dict[str, dict] = {}
    try:
        first = run(timeout=300)
        out = first.stdout
        assert first.returncode == 0, out

        # the examples, as kubectl showed them
        assert "gatewaydeployment.gateway-operator.dev/ops-bot created" in out, out
        refused = block(out, "# examples/gateway-refused.yaml")
        assert 'The GatewayDeployment "risky-bot" is invalid' in refused and "can run the agent twice" in refused, out
        warned = block(out, "# examples/gateway-warned.yaml")
        assert "gatewaydeployment.gateway-operator.dev/canary-bot created" in warned, out
        assert re.search(r"^\s*Warning: .*exactly-once admission is NOT held", warned, re.M), out

        # the conditions
        ops = block(out, "ops-bot:")
        assert re.search(r"ExactlyOnceAdmission\s+True\s+SharedRedisStore\s+every polled replica \(2\)", ops), out
        assert re.search(r"RedisReachable\s+True\s+ProbeSucceeded", ops), out
        assert re.search(r"Ready\s+True\s+Available", ops), out
        canary = block(out, "canary-bot:")
        assert re.search(r"ExactlyOnceAdmission\s+False\s+PerReplicaStores", canary), out
        assert re.search(r"^\s*ops-bot\s+True\s+Available\s+2/2\s+redis\s+True\b", out, re.M), out  # kubectl get printer columns

        # what the user is told to use
        kubeconfig = DIR / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in out and kubeconfig.exists(), out
        assert "make demo-down" in out and "Timings:" in out

        # real processes: a gateway per ready pod (2 ops-bot, 2 canary-bot, 1 solo-bot), one
        # redis-server, the operator, the LLM stand-in
        procs = recorded_processes()
        kinds = sorted(p["kind"] for p in procs.values())
        assert kinds == ["gateway"] * 5 + ["llm", "operator", "redis"], procs
        assert all(alive(p["pid"]) for p in procs.values()), procs
        assert all(p["ip"].startswith("127.3.") for p in procs.values() if "ip" in p), procs

        # a second `make demo` reuses all of it
        second = run(timeout=300)
        assert second.returncode == 0, second.stdout
        assert "[cluster] already up" in second.stdout, second.stdout
        assert f"operator already running (pid {procs['operator']['pid']})" in second.stdout, second.stdout
        ops = block(second.stdout, "ops-bot:")
        assert re.search(r"ExactlyOnceAdmission\s+True\s+SharedRedisStore", ops), second.stdout
        assert {k: p["pid"] for k, p in recorded_processes().items()} == {k: p["pid"] for k, p in procs.items()}
    finally:
        down = run("down", timeout=180)
    assert down.returncode == 0, down.stdout
    assert "[cluster] down" in down.stdout, down.stdout
    assert processes_of_the_demo_dir() == [], down.stdout
    assert not any(alive(p["pid"]) for p in procs.values()), procs
    assert not (DIR / "demo").exists() and not (DIR / "run/demo").exists()
