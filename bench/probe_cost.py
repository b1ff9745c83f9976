"""CPU per Redis probe: a full probe (fresh connection, every check) against an observation probe
over the kept connection (redis_connection.KeptConnection), on a local redis-server; and the Python
heap each kept connection holds (``kept_kib``, tracemalloc over ``--kept`` of them, each after a
full and an observation probe, as a GatewayDeployment's loop leaves it).

    .venv/bin/python bench/probe_cost.py [--probes 400] [--kept 100] [--json F]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
import tracemalloc

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.clients.redis_probe import Prober
from harness.redis_server import RedisServer


async def measure(server: RedisServer, probes: int) -> dict[str, float]:
    target = RedisTarget("127.0.0.1", server.port, 0, False, "gwop:bench:probe:", None)
    prober, kept = Prober(), KeptConnection()
    first = await prober.probe("bench", target, server.password, 2, kept=kept)
    assert first is not None and first.ok and first.store is not None, first
    out: dict[str, float] = {}
    for name, kwargs in (("full", {}), ("observation", {"kept": kept, "base": first.store})):
        cpu, wall = time.process_time(), time.monotonic()
        for _ in range(probes):
            result = await prober.probe("bench", target, server.password, 2, **kwargs)
            assert result is not None and result.ok, result
        out[f"{name}_cpu_ms"] = round(1000 * (time.process_time() - cpu) / probes, 3)
        out[f"{name}_wall_ms"] = round(1000 * (time.monotonic() - wall) / probes, 3)
    await kept.aclose()
    return out


async def kept_kib(server: RedisServer, count: int) -> float:
    target = RedisTarget("127.0.0.1", server.port, 0, False, "gwop:bench:probe:", None)
    prober = Prober()
    first = await prober.probe("bench", target, server.password, 2)   # the import-time and first-use allocations
    assert first is not None and first.ok, first
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [KeptConnection() for _ in range(count)]
    for k in kept:
        full = await prober.probe("bench", target, server.password, 2, kept=k)
        assert full is not None and full.ok, full
        await prober.probe("bench", target, server.password, 2, kept=k, base=full.store)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    for k in kept:
        await k.aclose()
    return round(grown / count / 1024, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=400)
    parser.add_argument("--kept", type=int, default=100, help="kept connections whose heap is measured")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()
    server = RedisServer(password="bench-password").start()
    try:
        out = {"probes": args.probes, **asyncio.run(measure(server, args.probes)),
               "kept": args.kept, "kept_kib": asyncio.run(kept_kib(server, args.kept))}
    finally:
        server.stop()
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
