"""How long one scrape of the operator's metrics takes to render: ``--gateways`` GatewayDeployments'
series as a settled loop leaves them (every condition observed, two replicas' polls counted,
reconciles timed), rendered ``--scrapes`` times as the operator serves them (``served``:
prometheus_client's families, then loop/metrics.per_object_text) and as prometheus_client wrote
all of them from metric families before (``families``: tests/unit/test_metrics.py's reference).

A render runs on the scrape's thread while the event loop waits for the GIL: at 1,500
GatewayDeployments a process, a benchmark scrape took over 5 s on a saturated machine, and the
idle window it began saw 89 GatewayDeployments' replicas unverified at one instant.

    .venv/bin/python bench/metrics_render.py [--gateways 1500] [--scrapes 5] [--json F]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from gateway_operator.core import conditions as C
from gateway_operator.loop import metrics

TYPES = C.ORDER   # every condition a GatewayDeployment's status can carry


def populate(gateways: int) -> None:
    rng = random.Random(1)
    for i in range(gateways):
        namespace, name = f"bench-{i % 20:02d}", f"gw{i:04d}"
        metrics.observe_conditions(namespace, name, [{"type": t, "status": "True"} for t in TYPES])
        metrics.polled(namespace, name, ["healthy", "healthy"])
        for _ in range(3):
            metrics.reconcile_took(namespace, name, rng.uniform(0.01, 2.0))
        metrics.reconciled(namespace, name, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateways", type=int, default=1500)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    populate(args.gateways)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/unit"))
    from test_metrics import _Reference   # the former collector, kept by its test as the reference
    reference = CollectorRegistry()
    reference.register(_Reference())
    out: dict[str, object] = {"gateways": args.gateways, "scrapes": args.scrapes}
    for name, render in (("families", lambda: generate_latest(REGISTRY) + generate_latest(reference)),
                         ("served", lambda: generate_latest(REGISTRY) + metrics.per_object_text().encode())):
        walls, cpus, text = [], [], b""
        for _ in range(args.scrapes):
            wall, cpu = time.monotonic(), time.process_time()
            text = render()
            walls.append(time.monotonic() - wall)
            cpus.append(time.process_time() - cpu)
        out.update({f"{name}_lines": text.count(b"\n"), f"{name}_kib": round(len(text) / 1024, 1),
                    f"{name}_cpu_s_median": round(statistics.median(cpus), 3),
                    f"{name}_cpu_s_max": round(max(cpus), 3),
                    f"{name}_wall_s_median": round(statistics.median(walls), 3),
                    f"{name}_cpu_us_per_gateway": round(1e6 * statistics.median(cpus) / args.gateways, 1)})
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
