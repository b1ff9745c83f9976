#!/usr/bin/env python3
"""The full fuzz run of issue 7 (``make fuzz``): seeded adversarial GatewayDeployments through
the real API server and the real operator, with a bystander, on a control plane of its own.

    .venv/bin/python hack/fuzz.py [--seed 1] [--cases 500] [--batch-size 25] [--json out.json]

Environment (what ``make fuzz`` passes): FUZZ_SEED, FUZZ_CASES, FUZZ_BATCH, FUZZ_JSON.
The control plane lives in .cluster/fuzz (GWOP_FUZZ_CLUSTER_DIR) with pod IPs from
127.5.0.0/16 (GWOP_POD_NETWORK), so it never meets the test or demo clusters; it is stopped
at the end unless --keep-cluster. GWOP_TEST_KUBECONFIG runs against an existing cluster.
The operator is the real CLI under the chart's RBAC; when it dies the run records it,
restarts it and goes on. Prints a summary table, exits 1 when the run found a failure.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path

from harness import fuzz
from harness.cluster import Cluster
from harness.operator import OperatorProcess
from harness.redis_server import RedisServer


def main() -> int:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=int(env("FUZZ_SEED") or 1))
    p.add_argument("--cases", type=int, default=int(env("FUZZ_CASES") or 500))
    p.add_argument("--batch-size", type=int, default=int(env("FUZZ_BATCH") or 25))
    p.add_argument("--settle-timeout", type=float, default=45.0, help="seconds per batch after its last create")
    p.add_argument("--json", default=env("FUZZ_JSON") or None, help="write the summary as JSON here")
    p.add_argument("--rss-bound", type=float, default=fuzz.Bounds.peak_rss_mib, help="MiB")
    p.add_argument("--latency-bound", type=float, default=fuzz.Bounds.bystander_max_seconds, help="seconds")
    p.add_argument("--exclude", metavar="REGEX", help="skip cases whose kind matches (e.g. 'deep:.*-3000')")
    p.add_argument("--only", metavar="REGEX", help="run only cases whose kind matches")
    p.add_argument("--keep-cluster", action="store_true", help="leave the control plane running")
    p.add_argument("--no-restart", action="store_true", help="stop at the first operator death")
    args = p.parse_args()

    def say(msg: str) -> None:
        print(f"[fuzz {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    os.environ.setdefault("GWOP_POD_NETWORK", "127.5.0.0/16")
    say(f"seed {args.seed}, {args.cases} cases in batches of {args.batch_size}, operator from "
        f"{__import__('gateway_operator').__path__[0]}")
    cluster = Cluster.from_environment(env("GWOP_FUZZ_CLUSTER_DIR") or ".cluster/fuzz")
    redis = RedisServer(password=secrets.token_hex(12)).start()
    operator = None
    try:
        cases = fuzz.cases(args.seed, args.cases, redis_url=redis.url)
        if args.exclude:
            cases = [c for c in cases if not re.search(args.exclude, c.kind)]
        if args.only:
            cases = [c for c in cases if re.search(args.only, c.kind)]
        say(f"{len(cases)} cases after --exclude/--only")
        operator = OperatorProcess(cluster).start()
        say(f"operator pid {operator.proc.pid}, log {operator.log_path}")

        def restart(old: OperatorProcess) -> OperatorProcess:
            old.stop()
            new = OperatorProcess(cluster).start()
            say(f"operator restarted: pid {new.proc.pid}, log {new.log_path}")
            return new

        watch = fuzz.OperatorWatch(operator, None if args.no_restart else restart)
        summary = fuzz.run_cases(cluster, watch, redis.password or "", cases, seed=args.seed,
                                 batch_size=args.batch_size, settle_timeout=args.settle_timeout, progress=say)
        operator = watch.operator
        bounds = fuzz.Bounds(peak_rss_mib=args.rss_bound, bystander_max_seconds=args.latency_bound)
        summary["failures"] = fuzz.failures(summary, bounds)
        summary["operator_log"] = str(operator.log_path)
        print(fuzz.table(summary))
        print("failures:" if summary["failures"] else "no failures")
        for line in summary["failures"]:
            print(f"  - {line}")
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
            say(f"summary written to {args.json}")
        return 1 if summary["failures"] else 0
    finally:
        if operator is not None:
            operator.stop()
        redis.close()
        if not args.keep_cluster:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
