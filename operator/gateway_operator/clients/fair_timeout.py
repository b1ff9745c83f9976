"""A timeout that measures the far end's silence, not the operator's own event loop.

``asyncio.timeout`` counts loop time. When the operator's one event loop is busy (a shard's
thousand first passes on a small machine), an answer that arrived in time waits in the
socket while the loop runs other work; the timer and the answer then come due in the same
turn, the timer's cancel wins, and a Redis probe reports ``ConnectionFailed`` (or a /health
poll an unreachable replica) for a far end that answered within a millisecond. At 3,000
GatewayDeployments of two replicas on two cores that was thousands of RedisReachable flips an
hour, each one a false outage announced and a scale-out held.

``fair_timeout(seconds)`` is ``asyncio.timeout`` with two differences:

- when its timer fires late (the loop was busy past the deadline, by more than ``LATE``),
  it waits as long again before it decides, until ``seconds + credit`` after it began: time
  the loop could not look is not the far end's silence;
- when it does expire, it expires one loop turn later, so that an answer read in the same
  turn wakes its waiter first.

A far end that stays silent while the loop is responsive still times out after ``seconds``
(plus one turn); whatever the loop does, the wait ends within ``seconds + credit`` (plus the
last turn), so every wait stays bounded.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

LATE = 0.05          # s: a timer this much past its time found the loop busy
CREDIT_CEILING = 10.0  # s: the most a busy loop adds to one wait


@contextlib.asynccontextmanager
async def fair_timeout(seconds: float, credit: float = CREDIT_CEILING) -> AsyncIterator[None]:
    """Raise TimeoutError out of the block once it has waited ``seconds`` of responsive loop
    (at most ``seconds + credit`` in all)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as timeout:
        due = loop.time() + seconds
        last = due + credit   # the latest any wait of this block ends, busy loop or not
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            nonlocal due, handle
            now = loop.time()
            late = now - due
            if late > LATE and now < last:  # as long again as the loop could not look
                due = min(now + late, last)
                handle = loop.call_at(due, fire)
            else:  # a call_soon: waiters woken in this turn run before the cancel
                timeout.reschedule(now)

        handle = loop.call_at(due, fire)
        try:
            yield
        finally:
            handle.cancel()
