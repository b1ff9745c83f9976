"""Plots of bench/operator_bench.py results (its --json files), as docs/development.md shows them.

    .venv/bin/python bench/plot.py docs/img/bench.png results/n50.json results/n200.json ...

Panels: time to Ready (floor and operator) against N; how long a degraded replica takes
to reach the resource (p50, max, and the bound interval + timeout + 1 s); operator RSS
against N; RSS over the soak of any run that had one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.plots import Chart, write_figure


def main(out: Path, files: list[Path]) -> None:
    runs = sorted((json.loads(f.read_text()) for f in files), key=lambda r: r["gateways"])
    by_n = lambda key, among=runs: [(r["gateways"], r[key]) for r in among if key in r]  # noqa: E731
    with_floor = [r for r in runs if "floor_s" in r]  # the operator beside the floor of the same run
    charts = [
        Chart("Time until every pod is Ready", {"floor (direct writes)": by_n("floor_s", with_floor),
                                                "operator": by_n("operator_s", with_floor),
                                                "operator: every resource Ready": by_n("operator_ready_s", with_floor)},
              xlabel="GatewayDeployments (runs with a floor)", ylabel="seconds"),
        Chart("Degraded replica -> condition on the resource", {"p50": by_n("degraded_p50_s"),
                                                               "max": by_n("degraded_max_s"),
                                                               "bound": by_n("bound_s")},
              xlabel="GatewayDeployments", ylabel="seconds"),
        Chart("Operator memory", {"RSS, all Ready": by_n("rss_mib"), "RSS at the end": by_n("rss_end_mib")},
              xlabel="GatewayDeployments", ylabel="MiB"),
    ]
    soaks = {f"{r['gateways']} x {r['replicas']}": [(t / 60, rss) for t, rss in r["soak_rss_mib"]]
             for r in runs if "soak_rss_mib" in r}
    if soaks:
        top = max(rss for points in soaks.values() for _, rss in points)
        charts.append(Chart("Operator RSS while idling (soak)", soaks, xlabel="minutes", ylabel="MiB",
                            ylim=(0, top * 1.25)))  # from zero: growth shows as what it is
    replicas = sorted({(r["gateways"], r["replicas"]) for r in runs})
    for chart in charts[1:3]:  # the runs without a floor are on these too
        chart.xlabel = "GatewayDeployments (" + ", ".join(f"{n} x {k}" for n, k in replicas) + " replicas)"
    write_figure(out, charts)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
