"""Benchmark: the operator with many GatewayDeployments on the local control plane.

Prints: time until N gateways are Ready, how long a replica's durability:idempotency fact
takes to reach the resource (and to clear), the operator's resident memory, and the API
writes it sends while idle. Uses its own control plane (.cluster/bench), real redis-server,
the real operator CLI and HEALTH ENDPOINT STAND-INS at the pod IPs.

    .venv/bin/python bench/operator_bench.py [--gateways 20] [--replicas 2] [--idle 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support import audit  # noqa: E402
from support.cluster import Cluster  # noqa: E402
from support.gateways import apply_gateway, conditions, create_password_secret, ready_pods, wait_condition  # noqa: E402
from support.operator import IDENTITY, OperatorProcess, gateway_deployment, redis_store  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402
from support.standins import RUNTIME, HealthStandIns, idempotency_owner  # noqa: E402
from support.wait import until  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gateways", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--idle", type=float, default=30)
    parser.add_argument("--flips", type=int, default=5)
    args = parser.parse_args()

    started = time.monotonic()
    cluster = Cluster.from_environment(".cluster/bench")
    print(f"control plane up: {time.monotonic() - started:.1f}s")
    redis = RedisServer(password="bench-password").start()
    operator = OperatorProcess(cluster, resync_seconds=30).start()
    standins = HealthStandIns()
    try:
        ns = cluster.new_namespace()
        create_password_secret(cluster, ns, "redis-auth", redis.password or "")
        names = [f"gw{i:03d}" for i in range(args.gateways)]
        t0 = time.monotonic()
        for name in names:
            apply_gateway(cluster, ns, gateway_deployment(
                name, replicas=args.replicas, config=redis_store(),
                redis={"url": redis.url, "passwordSecretRef": {"name": "redis-auth"}},
                health={"intervalSeconds": 2, "timeoutSeconds": 1}))
        until(lambda: all(len(ready_pods(cluster, ns, n)) == args.replicas for n in names), timeout=600,
              interval=1, what="all pods ready")
        for name in names:
            for pod in ready_pods(cluster, ns, name):
                standins.at(pod["status"]["podIP"])
        for name in names:
            wait_condition(cluster, ns, name, "ExactlyOnceAdmission", "True", timeout=300)
        print(f"{args.gateways} gateways x {args.replicas} replicas Ready with exactly-once: "
              f"{time.monotonic() - t0:.1f}s")

        show, clear = [], []
        for flip in range(args.flips):
            name = names[flip % len(names)]
            standin = standins.at(ready_pods(cluster, ns, name)[0]["status"]["podIP"])
            t = time.monotonic()
            standin.degraded_owners = [idempotency_owner(RUNTIME)]
            until(lambda: conditions(cluster, ns, name)["IdempotencyDegraded"]["status"] == "True",
                  timeout=60, interval=0.1)
            show.append(time.monotonic() - t)
            t = time.monotonic()
            standin.degraded_owners = []
            until(lambda: conditions(cluster, ns, name)["IdempotencyDegraded"]["status"] == "False",
                  timeout=60, interval=0.1)
            clear.append(time.monotonic() - t)
        print(f"degradation shown (interval 2 s + timeout 1 s): median {statistics.median(show):.2f}s, "
              f"max {max(show):.2f}s; cleared: median {statistics.median(clear):.2f}s, max {max(clear):.2f}s")

        time.sleep(3)
        since = audit.now()
        polls_before = sum(s.requests for s in standins.by_ip.values())
        time.sleep(args.idle)
        polls = sum(s.requests for s in standins.by_ip.values()) - polls_before
        print(f"idle {args.idle:.0f}s: API writes by the operator: {len(audit.writes(cluster, IDENTITY, since))}; "
              f"health polls answered: {polls}")
        assert operator.proc is not None
        print(f"operator RSS with {args.gateways} gateways: {rss_mib(operator.proc.pid):.0f} MiB")
    finally:
        standins.close()
        operator.stop()
        redis.close()
        cluster.stop()


if __name__ == "__main__":
    main()
