#!/usr/bin/env python3
"""`make verify-exactly-once`: the exactly-once checker on the REAL node (issue 18).

Starts (or reuses) the `make demo` sandbox, runs harness.exactly_once_run against a 3-replica
GatewayDeployment of the real gateway image on a managed Redis, with a seeded nemesis, and
prints the table (harness.exactly_once.table). Settings come from the environment:

    VERIFY_SEED (1)       the seed of the deliveries and of the fault schedule
    VERIFY_JSON           write the report there as JSON
    VERIFY_PNG            write the timeline picture there (faults, conditions, duplicates)
    VERIFY_MESSAGES (1250), VERIFY_COPIES (4), VERIFY_SPREAD_S (400), VERIFY_FAULTS (all kinds,
    exactly_once_run.FAULT_KINDS, issue 56's long_partition, holder_pause and coalesced_stop
    included; comma-separated; "none" for none), VERIFY_FAULT_GAP_S (25)
    VERIFY_OPERATOR_SHARDS (0)  the operator's replicas share the work in this many shards for the
                        run (chart sharding.shards; operator_kill SIGKILLs the holder of the
                        GatewayDeployment's shard), then the chart's default is installed again

Exit status 1 when a target is missed: a silent duplicate (one whose announcement was not in
force at its second admission), an avoidable one, a lost message, a split, a fault not announced
within its bound, or a coalesced hook on more than one replica not refused (coalesce_refused). Run with the dev venv's python (`make verify-exactly-once`): it
imports the harness (tests/harness) installed there by hack/venv.sh.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness import exactly_once, exactly_once_run, node
from harness.cluster import REPO, Cluster, tool


def settings() -> exactly_once_run.Settings:
    env = os.environ
    faults = env.get("VERIFY_FAULTS")
    return exactly_once_run.Settings(
        seed=int(env.get("VERIFY_SEED", "1")), messages=int(env.get("VERIFY_MESSAGES", "1250")),
        copies=int(env.get("VERIFY_COPIES", "4")), spread_s=float(env.get("VERIFY_SPREAD_S", "400")),
        fault_gap_s=float(env.get("VERIFY_FAULT_GAP_S", "25")),
        faults=exactly_once_run.FAULT_KINDS if faults is None else tuple(f for f in faults.split(",") if f and f != "none"))


def main() -> int:
    directory = Path(os.environ.get("GWOP_CLUSTER_DIR") or REPO / ".cluster/sandbox")
    kubeconfig = directory / "kubeconfig"
    if not kubeconfig.exists() or subprocess.run([tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw",
                                                  "/readyz"], capture_output=True).returncode != 0:
        subprocess.run([str(REPO / "hack/demo.sh")], env=dict(os.environ, GWOP_CLUSTER_DIR=str(directory)), check=True,
                       stdout=subprocess.DEVNULL)
    cluster = Cluster(kubeconfig, owned=False, real_node=True)
    shards = int(os.environ.get("VERIFY_OPERATOR_SHARDS", "0"))
    if shards:
        node.install_operator(cluster, "--set", f"sharding.shards={shards}")
    try:
        report = exactly_once_run.run(cluster, settings())
    finally:
        if shards:
            node.install_operator(cluster)   # leader election, as `make demo` installs it
    report["operator_shards"] = shards
    print(exactly_once.table(report))
    if os.environ.get("VERIFY_JSON"):
        Path(os.environ["VERIFY_JSON"]).write_text(json.dumps(report, indent=1))
    if os.environ.get("VERIFY_PNG"):
        exactly_once_run.picture(report, os.environ["VERIFY_PNG"])
    return 0 if exactly_once.targets_met(report) else 1


if __name__ == "__main__":
    sys.exit(main())
