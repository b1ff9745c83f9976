"""The shared session history's own decisions (pod/gwop_sessions.py), driven turn by turn against a
real redis-server: when a turn runs on the replica's own copy of a session's history, and when it
must ask Redis. The gateway itself is not needed for these (tests/unit/test_launcher_real_gateway.py
runs the same code inside the real gateway); the agent is praisonaiagents' real ``Agent``, and its
"model" is a dispatch function that records the history each turn saw (no LLM is called)."""
from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

from harness.pod_code import importable
from harness.redis_server import RedisServer

importable()

import gwop_sessions  # noqa: E402  (the pod code's flat module names)
from gwop_redis import redis_client  # noqa: E402

PREFIX = "gwop:ns:bot:"


class Replica:
    """One replica's SharedSessions over its own client, and the turns its dispatch saw."""

    def __init__(self, redis: RedisServer, timeout: float = 0.5) -> None:
        client = redis_client({"host": redis.host, "port": redis.port, "password": redis.password}, timeout=timeout)
        self.sessions = gwop_sessions.SharedSessions(client, PREFIX, 50, 3600)
        self.sessions.fail_closed = 30.0
        self.seen: Dict[str, List[str]] = {}
        self.gates: Dict[str, asyncio.Event] = {}

    async def turn(self, session: str, msg: str) -> Any:
        from praisonaiagents import Agent
        agent = Agent(instructions="Reply in one short sentence.", model="gpt-4o-mini")

        async def dispatch(turn_agent: Any, content: str) -> str:
            self.seen[msg] = [m["content"] for m in turn_agent.chat_history if m.get("role") == "user"]
            gate = self.gates.get(msg)
            if gate is not None:
                await gate.wait()
            turn_agent.chat_history.append({"role": "user", "content": msg})
            turn_agent.chat_history.append({"role": "assistant", "content": f"answer to {msg}"})
            return "ok"
        return await self.sessions.run(session, agent, dispatch, msg)


def test_a_replica_that_saw_redis_answer_again_reads_the_shared_history_not_its_own_copy(
        redis_server: RedisServer) -> None:
    """A replica whose last history call failed, and whose next call succeeded, asks Redis for the
    session's history at its next turn: it never runs that turn on its own copy, which lacks what
    other replicas added (the checker's seed-97 split: a turn 1 s after a 0.5 s stall ran on a copy
    55 s old, because a turn of another session had ended the outage and nothing was refused)."""
    async def go() -> None:
        a, b = Replica(redis_server), Replica(redis_server)
        await a.turn("s", "s-0")
        await a.turn("s", "s-1")      # a's own copy of s: s-0, s-1
        await b.turn("s", "s-2")
        await b.turn("s", "s-3")      # Redis: s-0 .. s-3
        # two turns of other sessions in flight on a; Redis stalls while the first appends
        a.gates["t-0"], a.gates["u-0"] = asyncio.Event(), asyncio.Event()
        t0 = asyncio.ensure_future(a.turn("t", "t-0"))
        u0 = asyncio.ensure_future(a.turn("u", "u-0"))
        while not ("t-0" in a.seen and "u-0" in a.seen):
            await asyncio.sleep(0.01)
        redis_server.pause()
        try:
            a.gates["t-0"].set()
            while "t" not in a.sessions.unsaved:  # its append failed: kept to write back later
                await asyncio.sleep(0.01)
        finally:
            redis_server.resume()
        a.gates["u-0"].set()
        await u0                       # its append went through: Redis answers again
        await a.turn("s", "s-4")       # within the 2 s after t-0's failure
        assert a.seen["s-4"] == ["s-0", "s-1", "s-2", "s-3"], a.seen["s-4"]
        await t0
    asyncio.run(go())


def test_within_the_window_a_turn_whose_history_cannot_be_read_is_refused_not_run_on_the_copy(
        redis_server: RedisServer) -> None:
    """Redis stopped: the turn is refused (HistoryUnavailable, so the gateway answers 500 and the
    provider retries), never run on the replica's copy, while the fail-closed window lasts."""
    async def go() -> None:
        a, b = Replica(redis_server), Replica(redis_server)
        await a.turn("s", "s-0")
        await b.turn("s", "s-1")
        redis_server.stop()
        try:
            with pytest.raises(gwop_sessions.HistoryUnavailable):
                await a.turn("s", "s-2")
            with pytest.raises(gwop_sessions.HistoryUnavailable):  # and again, 0 s into the skip
                await a.turn("s", "s-3")
        finally:
            redis_server.start()
        assert "s-2" not in a.seen and "s-3" not in a.seen
    asyncio.run(go())


def test_a_turn_that_cannot_take_its_sessions_lock_is_refused_not_run_beside_the_earlier_one(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's turn waits for the turn before it (the lock); one that waited its whole bound
    once ran anyway, on a history the earlier, still running turn had not written yet (a split).
    Now it fails (the gateway answers 500 and releases the claim; the provider retries later), and
    the earlier turn's messages are all there when the retry runs."""
    monkeypatch.setattr(gwop_sessions, "SESSION_LOCK_WAIT_SECONDS", 1.0)

    async def go() -> None:
        a, b = Replica(redis_server), Replica(redis_server)
        a.gates["s-0"] = asyncio.Event()
        first = asyncio.ensure_future(a.turn("s", "s-0"))
        while "s-0" not in a.seen:
            await asyncio.sleep(0.05)
        with pytest.raises(gwop_sessions.SessionBusy):
            await b.turn("s", "s-1")
        assert "s-1" not in b.seen  # never dispatched
        a.gates["s-0"].set()
        await first
        await b.turn("s", "s-1")     # the provider's retry
        assert b.seen["s-1"] == ["s-0"]
    asyncio.run(go())


def test_a_session_lock_lost_while_its_turn_runs_is_said(redis_server: RedisServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock's renewal used to stop without a word when it found the lock gone (expired under a
    busy pool, flushed): a turn of the same session elsewhere could then read the history without
    this one's messages. It is counted and said now."""
    monkeypatch.setattr(gwop_sessions, "SESSION_LOCK_LEASE_MS", 600)   # renewed every 0.2 s

    async def go() -> None:
        a = Replica(redis_server)
        a.gates["s-0"] = asyncio.Event()
        first = asyncio.ensure_future(a.turn("s", "s-0"))
        while "s-0" not in a.seen:
            await asyncio.sleep(0.05)
        admin = redis_server.client()
        admin.delete(*admin.keys(f"{PREFIX}*lock*"))
        await asyncio.sleep(0.6)
        a.gates["s-0"].set()
        await first
        assert a.sessions.locks_lost == 1
    asyncio.run(go())
