"""The operator's own CLI under ``tracemalloc``, for the benchmark's memory attribution
(``operator_bench.py --tracemalloc``): on SIGUSR2 it writes its live Python allocations, grouped
by the source line that made them, to the JSON file ``$GWOP_TRACEMALLOC_OUT`` names. The
benchmark asks once before any GatewayDeployment exists and once when every one has settled, and
divides the difference by the GatewayDeployments: what each KiB per GatewayDeployment is.

Tracing costs CPU (every allocation is recorded), so a traced run measures memory, not speed.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tracemalloc
from types import FrameType


def _dump(_signum: int, _frame: FrameType | None) -> None:
    stats = tracemalloc.take_snapshot().filter_traces([
        tracemalloc.Filter(False, tracemalloc.__file__)]).statistics("lineno")
    lines = [{"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}", "bytes": s.size, "count": s.count}
             for s in stats]
    path = os.environ["GWOP_TRACEMALLOC_OUT"]
    with open(path + ".tmp", "w") as f:
        json.dump(lines, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    tracemalloc.start(1)
    signal.signal(signal.SIGUSR2, _dump)
    from gateway_operator.cli import main
    sys.exit(main(sys.argv[1:]))
