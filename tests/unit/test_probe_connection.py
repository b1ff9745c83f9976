"""The observation probe over a kept connection (redis_probe.KeptConnection), against a real
redis-server: one connection between full probes, the same verdicts and facts as a full probe,
a flush and a restart still seen, and a connection the server closed retried once afresh."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_probe import KeptConnection, Prober
from gateway_operator.core.dedup_history import History, assess
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
        ids = [c["id"] for c in connections(redis_server)]
        results += await rounds(redis_server, kept, ["observe"] * 5)
        seen = {c["id"] for c in connections(redis_server)}
        await kept.aclose()
        return results, sorted(seen), len(ids)

    results, seen, after_full = asyncio.run(run())
    assert all(r.ok and r.reason == reasons.PROBE_SUCCEEDED for r in results), results
    assert after_full == 1 and len(seen) == 1  # the full probe's connection, kept for the five
    full, observed = results[0].store, [r.store for r in results[1:]]
    assert full is not None and full.canary_created
    for store in observed:  # the canary, run_id and the facts read whole by the full probe
        assert store is not None and not store.canary_created and store.canary == full.canary
        assert (store.run_id, store.persistent, store.maxmemory_policy) == (full.run_id, False, "noeviction")
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
        left = connections(redis_server)
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
