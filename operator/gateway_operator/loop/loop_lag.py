"""How late the operator's event loop runs what is due: a tick every ``PERIOD`` seconds, and the
histogram ``gateway_operator_event_loop_lag_seconds`` of how late each tick woke.

Every GatewayDeployment's loop, its /health watches and its Redis probes share one event loop
per operator process. A lag that stays above a second says the process has more than it can
keep up with: give the operator more CPU, or more replicas with more shards (docs/operations.md).
The waits on Redis and on replicas do not count such lag against them (clients/fair_timeout.py),
so it shows here rather than as outages nobody had.
"""
from __future__ import annotations

import asyncio

from gateway_operator.loop import metrics

PERIOD = 0.5  # s between ticks: two wake-ups a second, whatever the number of GatewayDeployments


async def measure_forever(period: float = PERIOD) -> None:
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        metrics.loop_lagged(max(0.0, loop.time() - due))
