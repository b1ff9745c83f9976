"""A busy event loop is not a silent far end (clients/fair_timeout.py): a real redis-server and a
/health endpoint that answer at once are reported reachable while the operator's loop is blocked
past the probe's timeout, and a far end that stays silent still times out, within bounds. The
lag itself shows in the metrics (loop/loop_lag.py)."""
from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY, generate_latest

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.fair_timeout import LATE, fair_timeout
from gateway_operator.clients.health_poll import Poller
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core.health import Idempotency, Target
from gateway_operator.loop import loop_lag
from harness.operator import late_ticks
from harness.redis_server import RedisServer

TIMEOUT = 0.5
BLOCKED = 1.5   # the event loop held by other work for three timeouts


def block_the_loop_soon(seconds: float = BLOCKED) -> None:
    """Another callback of the same loop runs for ``seconds`` (a burst of passes, a slow decode)
    as soon as the caller first waits: while its connection is being opened."""
    asyncio.get_running_loop().call_soon(time.sleep, seconds)


def test_a_redis_that_answers_is_reachable_while_the_event_loop_is_busy_past_the_timeout(
        redis_server: RedisServer) -> None:
    target = RedisTarget("127.0.0.1", redis_server.port, 0, False, "gwop:ns:bot:", None)

    async def run() -> object:
        block_the_loop_soon()
        return await Prober().probe("ns", target, redis_server.password, TIMEOUT)

    result = asyncio.run(run())
    assert result is not None and result.ok, result


async def answering_health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """/health answered at once; then the loop (the operator's, which this server shares) is held
    past the poller's timeout before the poller can read the answer."""
    await reader.readuntil(b"\r\n\r\n")
    body = b'{"status": "healthy", "degraded_owners": []}'
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    time.sleep(BLOCKED)
    writer.close()


def test_a_replica_that_answers_its_health_is_not_unknown_while_the_event_loop_is_busy() -> None:
    async def run() -> Idempotency:
        server = await asyncio.start_server(answering_health, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        poller = Poller()
        try:
            [answer] = await poller.poll([Target("p-0", "127.0.0.1", port)], TIMEOUT, 4)
        finally:
            poller.close()
            server.close()
        return answer.state

    assert asyncio.run(run()) is Idempotency.HEALTHY


def test_a_silent_far_end_times_out_after_the_timeout_when_the_loop_is_free() -> None:
    async def run() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with fair_timeout(TIMEOUT):
                await asyncio.Event().wait()
        return time.monotonic() - started

    took = asyncio.run(run())
    assert TIMEOUT <= took < TIMEOUT + 0.2, took


def test_a_loop_that_stays_busy_adds_at_most_the_credit() -> None:
    """Every turn holds the loop longer than LATE: each fire is late, and the wait still ends
    ``seconds + credit`` after it began (plus a turn or two)."""
    credit = 1.0

    async def hog() -> None:
        while True:
            time.sleep(LATE * 3)
            await asyncio.sleep(0)

    async def run() -> float:
        hogging = asyncio.ensure_future(hog())
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):
                async with fair_timeout(TIMEOUT, credit=credit):
                    await asyncio.Event().wait()
            return time.monotonic() - started
        finally:
            hogging.cancel()

    took = asyncio.run(run())
    assert TIMEOUT + credit <= took < TIMEOUT + credit + 4 * LATE * 3, took  # the last turns


def test_a_redis_that_is_silent_is_unreachable_within_its_bound_while_the_loop_is_free(
        redis_server: RedisServer) -> None:
    """A paused (SIGSTOP) redis-server: ConnectionFailed after the timeout, not later."""
    target = RedisTarget("127.0.0.1", redis_server.port, 0, False, "gwop:ns:bot:", None)

    async def run() -> tuple[object, float]:
        redis_server.pause()
        try:
            started = time.monotonic()
            result = await Prober().probe("ns", target, redis_server.password, TIMEOUT)
            return result, time.monotonic() - started
        finally:
            redis_server.resume()

    result, took = asyncio.run(run())
    assert result is not None and not result.ok and result.reason == reasons.CONNECTION_FAILED, result
    assert took < 3 * TIMEOUT + 1, took


def lag_ticks_over(seconds: float) -> float:
    """Ticks of gateway_operator_event_loop_lag_seconds later than ``seconds`` (a bucket bound)."""
    return late_ticks(generate_latest(REGISTRY).decode(), seconds)[1]


def test_an_event_loop_held_past_a_second_shows_in_the_lag_histogram() -> None:
    before = lag_ticks_over(1.0)

    async def run() -> None:
        ticking = asyncio.ensure_future(loop_lag.measure_forever(0.05))
        await asyncio.sleep(0.2)
        time.sleep(BLOCKED)
        await asyncio.sleep(0.2)
        ticking.cancel()

    asyncio.run(run())
    assert lag_ticks_over(1.0) == before + 1
