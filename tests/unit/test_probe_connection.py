"""The observation probe over a kept connection (redis_connection.KeptConnection), against a real
redis-server: one connection between full probes, the same verdicts and facts as a full probe,
a flush and a restart still seen, a connection the server closed retried once afresh, a Redis
that refuses writes said as the full probe says it, and a hostile server's replies bounded."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_connection import KeptConnection
from gateway_operator.clients.redis_guard import Allowlist
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core.dedup_history import History, StoreFacts, assess
from gateway_operator.core.probe_result import ProbeResult
from harness.redis_server import RedisServer

PREFIX = "gwop:ns:bot:"


def target(server: RedisServer) -> RedisTarget:
    return RedisTarget("127.0.0.1", server.port, 0, False, PREFIX, None)


def connections(server: RedisServer) -> list[dict[str, Any]]:
    """The server's clients other than the admin client asking."""
    admin = server.client()
    mine = admin.client_id()
    return [c for c in admin.client_list() if int(c["id"]) != mine]


async def settled_connections(server: RedisServer, within: float = 2.0) -> list[dict[str, Any]]:
    """The server's connections once those the probe closed are gone (a close takes effect at the
    event loop's next turn, and the server sees it a moment later), or as they are after ``within``."""
    deadline = time.monotonic() + within
    while (left := connections(server)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def rounds(server: RedisServer, kept: KeptConnection, steps: list[str],
                 password: str | None = None) -> list[ProbeResult]:
    """One probe per step: "full" (afresh, whole) or "observe" (the last full facts as base)."""
    prober, results = Prober(), []
    password = server.password if password is None else password
    for step in steps:
        last = results[-1] if results else None
        base = last.store if step == "observe" and last is not None and last.ok else None
        result = await prober.probe("ns", target(server), password, 2, kept=kept, base=base)
        assert result is not None
        results.append(result)
    return results


def test_observation_probes_reuse_one_connection_and_report_as_a_full_probe(redis_server: RedisServer) -> None:
    kept = KeptConnection()

    async def run() -> tuple[list[ProbeResult], list[str], int]:
        results = await rounds(redis_server, kept, ["full"])
        ids = [c["id"] for c in await settled_connections(redis_server)]
        results += await rounds(redis_server, kept, ["observe"] * 5)
        seen = {c["id"] for c in connections(redis_server)}
        await kept.aclose()
        return results, sorted(seen), len(ids)

    results, seen, after_full = asyncio.run(run())
    assert all(r.ok and r.reason == reasons.PROBE_SUCCEEDED for r in results), results
    # the full probe's connection is closed after it; the five share one (resp.py's, kept)
    assert after_full == 0 and len(seen) == 1
    full, observed = results[0].store, [r.store for r in results[1:]]
    assert full is not None and full.canary_created
    for store in observed:  # the canary, run_id and the facts read whole by the full probe
        assert store is not None and not store.canary_created and store.canary == full.canary
        assert (store.run_id, store.persistent, store.maxmemory_policy) == (full.run_id, False, "noeviction")
        assert (store.replid, store.migrated) == (full.replid, full.migrated) and store.used_memory
    assert connections(redis_server) == []  # closed with its loop
    assert not redis_server.client().keys(f"{PREFIX}operator-probe:*")  # each probe's own key deleted


def test_a_flush_and_a_restart_are_seen_over_the_kept_connection(redis_server: RedisServer) -> None:
    kept = KeptConnection()

    async def run() -> tuple[History, History, History]:
        first = await rounds(redis_server, kept, ["full", "observe"])
        history = assess(assess(History(), first[0].store, 0), first[1].store, 1)
        redis_server.client().flushall()
        flushed = await rounds(redis_server, kept, ["full"])
        base = flushed[0]
        # observe from a fresh base: flush once more, then an observation probe alone must see it
        redis_server.client().flushall()
        seen_base = assess(History(), base.store, 2)
        assert not seen_base.lost(2)
        lost_flush = assess(seen_base, (await Prober().probe(
            "ns", target(redis_server), redis_server.password, 2, kept=kept, base=base.store)).store, 3)
        redis_server.restart()  # the server closes the kept connection; no persistence
        after = await Prober().probe("ns", target(redis_server), redis_server.password, 2, kept=kept, base=base.store)
        assert after is not None and after.ok, after  # retried once on a fresh connection
        restarted = assess(History(canary=base.store.canary, run_id=base.store.run_id), after.store, 4)
        await kept.aclose()
        return history, lost_flush, restarted

    history, lost_flush, restarted = asyncio.run(run())
    assert not history.lost(1)
    assert lost_flush.lost(3) and lost_flush.lost_why == "the operator's canary key vanished"
    assert restarted.lost(4), restarted  # a vanished canary (and a new run_id without persistence)


def test_a_kept_connection_the_server_closed_is_retried_once_afresh(redis_server: RedisServer) -> None:
    kept = KeptConnection()

    async def run() -> list[ProbeResult]:
        results = await rounds(redis_server, kept, ["full"])
        admin = redis_server.client()
        for c in connections(redis_server):
            admin.client_kill_filter(_id=int(c["id"]))
        again = await Prober().probe("ns", target(redis_server), redis_server.password, 2, kept=kept,
                                     base=results[0].store)
        assert again is not None
        results.append(again)
        await kept.aclose()
        return results

    results = asyncio.run(run())
    assert results[-1].ok, results[-1]


def test_a_hung_server_shows_within_one_timeout_over_the_kept_connection(redis_server: RedisServer) -> None:
    """Redis paused (SIGSTOP): the observation probe over the kept connection waits out its timeout
    once and says unreachable; it does not wait a second timeout on a fresh connection (as it does
    for a connection the server closed, which fails at once), so an outage shows a timeout sooner."""
    kept = KeptConnection()

    async def run() -> tuple[ProbeResult | None, float]:
        full = await rounds(redis_server, kept, ["full"])
        redis_server.pause()
        try:
            started = time.monotonic()
            hung = await Prober().probe("ns", target(redis_server), redis_server.password, 2, kept=kept,
                                        base=full[0].store)
            took = time.monotonic() - started
        finally:
            redis_server.resume()
            await kept.aclose()
        return hung, took

    hung, took = asyncio.run(run())
    assert hung is not None and hung.reason == reasons.CONNECTION_FAILED, hung
    assert 2.0 <= took < 3.0, took


def test_a_changed_password_is_not_hidden_by_a_kept_connection(redis_server: RedisServer) -> None:
    """A connection opened with other credentials is never reused: the probe signs in again."""
    kept = KeptConnection()

    async def run() -> ProbeResult | None:
        full = await rounds(redis_server, kept, ["full"])
        wrong = await Prober().probe("ns", target(redis_server), "not-the-password", 2, kept=kept,
                                     base=full[0].store)
        left = await settled_connections(redis_server)
        await kept.aclose()
        assert left == [], left  # the failed probe's connection and the kept one are closed
        return wrong

    wrong = asyncio.run(run())
    assert wrong is not None and wrong.reason == reasons.AUTHENTICATION_FAILED, wrong


def test_a_failing_server_closes_the_kept_connection(redis_server: RedisServer) -> None:
    kept = KeptConnection()

    async def run() -> ProbeResult | None:
        full = await rounds(redis_server, kept, ["full"])
        redis_server.stop()
        try:
            down = await Prober().probe("ns", target(redis_server), redis_server.password, 1, kept=kept,
                                        base=full[0].store)
        finally:
            redis_server.start()
        assert kept.client is None
        return down

    down = asyncio.run(run())
    assert down is not None and down.reason == reasons.CONNECTION_FAILED, down


def test_a_redis_that_refuses_writes_is_said_alike_by_the_observation_and_the_full_probe(
        redis_server: RedisServer) -> None:
    """A partial failure: Redis answers but refuses every write (maxmemory reached under
    noeviction). The observation probe, over its own minimal connection (resp.py), says it with the
    full probe's reason and words, and its connection is not kept."""
    kept = KeptConnection()
    admin = redis_server.client()

    async def run() -> tuple[ProbeResult, ProbeResult]:
        full = await rounds(redis_server, kept, ["full", "observe"])
        assert kept.client is not None
        admin.config_set("maxmemory", 1)
        named = Prober(allowlist=Allowlist.parse(["127.0.0.1/32"]))  # a target the allowlist names: in detail
        try:
            observed = await named.probe("ns", target(redis_server), redis_server.password, 2, kept=kept,
                                         base=full[0].store)
            refused_full = await named.probe("ns", target(redis_server), redis_server.password, 2)
        finally:
            admin.config_set("maxmemory", 0)
        assert kept.client is None
        await kept.aclose()
        return observed, refused_full

    observed, full = asyncio.run(run())
    assert observed is not None and full is not None
    assert not observed.ok and (observed.reason, observed.message) == (full.reason, full.message), (observed, full)
    assert "OutOfMemoryError" in observed.message


async def _serve(answer: bytes) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A loopback server that answers every command with ``answer`` and counts what it sent."""
    sent = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(4096):
                writer.write(answer)
                sent[0] += len(answer)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], sent


@pytest.mark.parametrize("answer", [
    b"$" + str(64 * 1024 * 1024).encode() + b"\r\n" + b"x" * (1024 * 1024),   # a 64 MiB string, announced
    b"*100000000\r\n",                                                          # an array of 10^8 elements
    b"*1\r\n" * 50,                                                             # arrays nested 50 deep
    b"+" + b"y" * (1024 * 1024),                                                # a status line without an end
    b"?what\r\n",                                                               # not RESP
])
def test_a_hostile_server_behind_a_kept_connection_is_a_probe_failure_within_bounds(answer: bytes) -> None:
    """What the observation probe reads is the tenant's server's: a reply over its bounds
    (resp.py) fails the probe at once as an answer no Redis gives, without reading it whole, and
    the connection is not kept."""
    async def run() -> tuple[ProbeResult | None, float, KeptConnection]:
        server, port, _ = await _serve(answer)
        kept = KeptConnection()
        async with server:
            started = time.monotonic()
            base = StoreFacts("canary", False)
            result = await Prober().probe("ns", RedisTarget("127.0.0.1", port, 0, False, PREFIX, None), None, 2,
                                          kept=kept, base=base)
            return result, time.monotonic() - started, kept

    result, took, kept = asyncio.run(run())
    assert result is not None and not result.ok and result.reason == reasons.PROBE_FAILED, result
    assert took < 1.0 and kept.client is None
