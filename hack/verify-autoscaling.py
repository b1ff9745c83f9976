#!/usr/bin/env python3
"""`make verify-autoscaling`: the autoscaling proof on the REAL node (issue 34).

Starts (or reuses) the `make demo` sandbox, builds prometheus-adapter when missing
(hack/build-binaries.sh --autoscaling), and runs harness.autoscaling_run: a real Prometheus and
prometheus-adapter, the HPA controller of kube-controller-manager and the exactly-once checker's
deliveries, a burst of slow model turns then a trickle of quick ones. Prints the timeline (load,
metric, HPA, replicas, conditions) and the checker's figures. Settings from the environment:

    AUTOSCALING_SEED (1)    the seed of the deliveries
    AUTOSCALING_JSON        write the report there as JSON

Exit status 1 when it did not scale out and back in, or a target of the checker is missed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness import autoscaling_run
from harness.cluster import REPO, Cluster, tool


def main() -> int:
    directory = Path(os.environ.get("GWOP_CLUSTER_DIR") or REPO / ".cluster/sandbox")
    kubeconfig = directory / "kubeconfig"
    subprocess.run([str(REPO / "hack/build-binaries.sh"), "--autoscaling"], check=True, stdout=subprocess.DEVNULL)
    if not kubeconfig.exists() or subprocess.run([tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw",
                                                  "/readyz"], capture_output=True).returncode != 0:
        subprocess.run([str(REPO / "hack/demo.sh")], env=dict(os.environ, GWOP_CLUSTER_DIR=str(directory)), check=True,
                       stdout=subprocess.DEVNULL)
    settings = autoscaling_run.Settings(seed=int(os.environ.get("AUTOSCALING_SEED", "1")))
    report = autoscaling_run.run(Cluster(kubeconfig, owned=False, real_node=True), settings)
    print(autoscaling_run.table(report))
    if os.environ.get("AUTOSCALING_JSON"):
        Path(os.environ["AUTOSCALING_JSON"]).write_text(json.dumps(report, indent=1))
    return 0 if autoscaling_run.targets_met(report) else 1


if __name__ == "__main__":
    sys.exit(main())
