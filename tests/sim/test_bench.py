"""The scale benchmark still runs (bench/operator_bench.py, kwok-simulated pods, health
stand-ins in a process of their own): a small run on a control plane of its own writes every
figure of its --json contract, with no idle API write, a degraded replica shown on the
resource, a floor that creates the same objects the operator does, and the traced operator's
memory said by source. Its speed and memory targets are the benchmark's to print, not this test's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster import REPO

KEYS = {"gateways", "replicas", "floor_s", "operator_s", "ratio", "polls_demanded_per_s", "polls_achieved_per_s",
        "degraded_p50_s", "degraded_max_s", "interval_s", "timeout_s", "idle_writes", "rss_mib", "cpu_ms_per_poll",
        "kib_per_gateway", "shards", "floor_objects_per_gateway", "operator_objects_per_gateway",
        "traced_kib_per_gateway", "kib_per_gateway_by_source", "operator_requests_per_gateway_creating"}


def test_the_benchmark_runs_and_reports_its_figures(tmp_path: Path) -> None:
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        pytest.skip("the benchmark needs a control plane of its own")
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, str(REPO / "bench/operator_bench.py"), "--gateways", "3", "--replicas", "2",
                          "--interval", "2", "--resync", "3", "--idle", "8", "--flips", "3", "--json", str(out),
                          "--cluster-dir", ".cluster/bench-smoke", "--pod-cidr", "127.41.0.0/16", "--tracemalloc"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert KEYS <= set(figures), KEYS - set(figures)
    assert figures["gateways"] == 3 and figures["replicas"] == 2
    assert figures["floor_s"] > 0 and figures["operator_s"] > 0
    # the ratio compares like with like: the floor creates what the operator creates, Secrets included
    assert figures["floor_objects_per_gateway"] == figures["operator_objects_per_gateway"], figures
    assert figures["operator_objects_per_gateway"].get("Secret", 0) >= 1
    # what the ratio is made of: each Secret the operator generates was created once
    made = figures["operator_requests_per_gateway_creating"]
    assert made.get("create secrets") == figures["operator_objects_per_gateway"]["Secret"], made
    # what each KiB is: the operator's own modules among the sources of what 3 GatewayDeployments hold
    assert any(source.startswith("gateway_operator.") for source in figures["kib_per_gateway_by_source"])
    assert figures["idle_writes"] == 0, "an idle operator wrote to the API server"
    # full passes (resync 3 s) read back nothing a watch covers: the gateway's Deployment, ConfigMap,
    # Service and PodDisruptionBudget, nor a Secret the Secret watch shows unchanged since it was read
    # (before the watch: two Secret reads per GatewayDeployment and full pass)
    reads = figures["idle_reads_by_resource"]
    assert not {"get secrets", "get deployments", "get configmaps", "get services",
                "get poddisruptionbudgets"} & set(reads), reads
    assert figures["polls_achieved_per_s"] > 0
    # the operator checks the replicas through their health watch (the stand-ins serve it), not polls
    assert figures["health"] == "watch" and figures["watch_answers_per_s"] > 0, figures
    assert figures["degraded_max_s"] < 30  # shown by the health checks, not by a resync (60 s)
    assert "operator: pods Ready" in run.stdout  # the table for people


def test_the_benchmark_runs_sharded_operators_and_times_a_killed_one(tmp_path: Path) -> None:
    """--operators 2 --shards 4 --kill: both processes work (each holds two shards and has CPU of its
    own), the figures are summed over them, and the first's SIGKILL is timed: its shards held by
    the other within the chart's lease (15 s) and a few ticks, and a spec change of one of its
    GatewayDeployments reconciled by the other at once."""
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        pytest.skip("the benchmark needs a control plane of its own")
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, str(REPO / "bench/operator_bench.py"), "--gateways", "6", "--replicas", "1",
                          "--interval", "2", "--idle", "6", "--flips", "2", "--no-floor", "--json", str(out),
                          "--operators", "2", "--shards", "4", "--kill",
                          "--cluster-dir", ".cluster/bench-smoke", "--pod-cidr", "127.41.0.0/16"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert (figures["operators"], figures["shards"]) == (2, 4)
    assert sorted(len(held) for held in figures["shards_by_operator"]) == [2, 2], figures["shards_by_operator"]
    assert all(share > 0 for share in figures["cpu_share_idle_by_operator"]), figures
    assert figures["idle_writes"] == 0 and figures["operator_restarts"] == 0, figures
    assert figures["kill_shards"] and figures["kill_shards_moved_s"] < 15 + 10, figures
    # once held, the dead one's GatewayDeployments run on the survivor: a spec change is reconciled at once
    assert figures["kill_reconcile_latency_s"] < 10, figures
    # ... and every one of them is observed by the survivor soon after (their loops start a few at a time)
    assert figures["kill_all_started_s"] < figures["kill_shards_moved_s"] + 10, figures
