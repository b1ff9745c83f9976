"""CPU per Redis probe: a full probe (fresh connection, every check) against an observation probe
over the kept connection (redis_probe.KeptConnection), on a local redis-server.

    .venv/bin/python bench/probe_cost.py [--probes 400] [--json F]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_probe import KeptConnection, Prober
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=400)
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()
    server = RedisServer(password="bench-password").start()
    try:
        out = {"probes": args.probes, **asyncio.run(measure(server, args.probes))}
    finally:
        server.stop()
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
