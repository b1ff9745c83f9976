"""Health as a watch: the launcher's long-poll ``GET /health?wait=S&since=TAG`` (pod/gwop_watch.py,
the code the pods run) and the operator's watch of it (health_watch.Watch), over real loopback
connections. The body behind the launcher's watch is a HEALTH BODY STAND-IN (the gateway's
documented /health shape, changed by the test); the launcher's own part, its server, tag, tick
and bounds, is the real one.

What a user would notice: a replica's degradation reaches the operator within the launcher's
tick, not the poll interval; a silent replica is still heard once an interval; a replica that
does not serve the watch (another image) is polled instead; nothing a tenant's port answers
makes the watch spin or stick."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from gateway_operator.api import IDEMPOTENCY_OWNER
from gateway_operator.clients.health_watch import Watch
from gateway_operator.core import schedule
from gateway_operator.core.health import Idempotency, ReplicaHealth, Target
from harness.pod_code import importable
from harness.wait import until_async as until

importable()
import gwop_watch  # noqa: E402 - the pod code, as the pod imports it

RUNTIME = "redis idempotency backend unreachable at runtime (dedup best-effort until it recovers)"
DEGRADED = [{"owner_kind": "gateway", "owner_id": IDEMPOTENCY_OWNER, "state": "cold", "reason": RUNTIME}]


class Replica:
    """The launcher's watch (real) over a stand-in body the test changes."""

    def __init__(self) -> None:
        self.owners: list[dict[str, Any]] = []
        self.section: dict[str, Any] = {"idempotency": {"redis": "answers", "answers_for_s": 60.0}}
        self.started = time.monotonic()

    def body(self) -> dict[str, Any]:
        return {"status": "degraded" if self.owners else "healthy", "uptime": time.monotonic() - self.started,
                "last_inbound_at": time.time(), "degraded_owners": list(self.owners),
                "gateway_operator": json.loads(json.dumps(self.section))}

    async def __aenter__(self) -> "Replica":
        self.server = gwop_watch.WatchServer()
        self.watched = gwop_watch.Watched(self.body)
        await self.server.listen("127.0.0.1", 0, self.watched)
        self.port = self.server._servers[0].sockets[0].getsockname()[1]
        self.ticking = asyncio.ensure_future(self.watched.tick())
        return self

    async def __aexit__(self, *_: object) -> None:
        self.ticking.cancel()
        self.server.close()


async def ask(port: int, query: str, keep: bool = True) -> tuple[int, dict[str, str], bytes, float]:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /health{query} HTTP/1.1\r\nHost: x\r\n{'' if keep else 'Connection: close' + chr(13) + chr(10)}"
                     "\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers["content-length"]))
        return int(lines[0].split()[1]), headers, body, time.monotonic() - started
    finally:
        writer.close()


def test_the_launcher_answers_at_once_on_a_change_else_after_the_wait() -> None:
    async def main() -> None:
        async with Replica() as replica:
            status, headers, body, took = await ask(replica.port, "?wait=0")
            tag = headers["etag"].strip('"')
            assert status == 200 and json.loads(body)["status"] == "healthy" and took < 0.5
            # the same tag: held for the wait, though uptime and last_inbound_at moved meanwhile
            status, headers, _, took = await ask(replica.port, f"?wait=1.0&since={tag}")
            assert 0.9 <= took < 1.6 and headers["etag"].strip('"') == tag
            # a change while it waits: answered within a tick or two, with the new tag
            asyncio.get_running_loop().call_later(0.5, lambda: replica.owners.extend(DEGRADED))
            status, headers, body, took = await ask(replica.port, f"?wait=10&since={tag}")
            assert took < 0.5 + 3 * gwop_watch.TICK_S, took
            assert headers["etag"].strip('"') != tag and json.loads(body)["degraded_owners"] == DEGRADED
            # an old tag is answered at once
            _, _, _, took = await ask(replica.port, f"?wait=10&since={tag}")
            assert took < 0.5

    asyncio.run(main())


@pytest.mark.parametrize("waiting_for", ["a change", "a request"])
def test_a_wait_cancelled_in_the_turn_it_ends_ends_with_the_cancel(waiting_for: str) -> None:
    """The launcher's server stops (its connections' handlers are cancelled) in the very turn a
    held answer's change comes, or a kept connection's next request: the handler ends with the
    cancel. Over ``asyncio.wait_for`` on Python 3.11 it went on to answer and to serve the
    connection until its client left."""
    async def main() -> None:
        replica = Replica()
        watched = gwop_watch.Watched(replica.body)
        if waiting_for == "a change":
            task = asyncio.ensure_future(watched.answer(watched.tag, 10.0))
        else:
            reader = asyncio.StreamReader()
            task = asyncio.ensure_future(gwop_watch.within(reader.readuntil(b"\r\n\r\n"), 10.0))
        await asyncio.sleep(0.1)
        if waiting_for == "a change":
            replica.owners.extend(DEGRADED)
            watched.refresh()
        else:
            reader.feed_data(b"GET /health HTTP/1.1\r\n\r\n")
        task.cancel()
        await asyncio.wait({task}, timeout=2.0)
        assert task.cancelled(), "the wait swallowed the cancel"

    asyncio.run(main())


def test_the_tag_leaves_out_the_clocks_but_not_the_launchers_view() -> None:
    base = {"status": "healthy", "uptime": 1, "gateway_operator": {"idempotency": {
        "redis": "answers", "answers_for_s": 3.0, "journalled": 0}}}
    later = {**base, "uptime": 9, "gateway_operator": {"idempotency": {
        "redis": "answers", "answers_for_s": 11.0, "journalled": 0}}}
    journalled = {**base, "gateway_operator": {"idempotency": {"redis": "answers", "journalled": 2}}}
    assert gwop_watch.tag_of(base) == gwop_watch.tag_of(later)
    assert gwop_watch.tag_of(base) != gwop_watch.tag_of(journalled)
    assert gwop_watch.tag_of(base) != gwop_watch.tag_of({**base, "degraded_owners": DEGRADED})


@pytest.mark.parametrize("request_line, status", [
    ("POST /health HTTP/1.1", 405), ("GET /metrics HTTP/1.1", 404), ("GET /health?wait=61 HTTP/1.1", 400),
    ("GET /health?wait=nan HTTP/1.1", 400), ("GET /health?wait=-1 HTTP/1.1", 400), ("junk", 400)])
def test_the_launcher_refuses_what_is_not_a_watch(request_line: str, status: int) -> None:
    async def main() -> None:
        async with Replica() as replica:
            reader, writer = await asyncio.open_connection("127.0.0.1", replica.port)
            writer.write(f"{request_line}\r\nHost: x\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.read(), 2)  # answered, then closed
            writer.close()
            assert head.split(b" ")[1] == str(status).encode(), head

    asyncio.run(main())


def test_the_launcher_bounds_its_clients_and_their_heads() -> None:
    async def main() -> None:
        async with Replica() as replica:
            held = [await asyncio.open_connection("127.0.0.1", replica.port) for _ in range(gwop_watch.MAX_CLIENTS)]
            await asyncio.sleep(0.2)
            reader, writer = await asyncio.open_connection("127.0.0.1", replica.port)
            assert await asyncio.wait_for(reader.read(), 2) == b"", "the client past the bound is closed"
            writer.close()
            for _, w in held:
                w.close()
            await asyncio.sleep(0.2)
            reader, writer = await asyncio.open_connection("127.0.0.1", replica.port)
            writer.write(b"GET /health?" + b"x" * (2 * gwop_watch.HEAD_MAX_BYTES))
            assert await asyncio.wait_for(reader.read(), 2) == b"", "a head past the bound is dropped"
            writer.close()
            assert replica.server.clients == 0

    asyncio.run(main())


class Heard:
    def __init__(self) -> None:
        self.news: list[float] = []
        self.answers: list[ReplicaHealth] = []


def watch_of(heard: Heard) -> Watch:
    return Watch(news=lambda: heard.news.append(time.monotonic()), answered=heard.answers.append)


def test_the_watch_hears_a_change_within_a_tick_and_a_silent_replica_once_an_interval() -> None:
    async def main() -> None:
        heard = Heard()
        async with Replica() as replica:
            watch = watch_of(heard)
            watch.follow([Target("bot-0", "127.0.0.1", replica.port)], interval=1.5, timeout=1.0)
            try:
                await until(lambda: watch.answer("bot-0", time.monotonic()) is not None, 2, "the first answer")
                assert len(heard.news) == 1  # the first answer is news
                await asyncio.sleep(3.2)  # silence: answered once an interval (at 1.3, 2.6), no news
                assert len(heard.news) == 1 and len(heard.answers) == 3, (heard.news, len(heard.answers))
                changed = time.monotonic()
                replica.owners.extend(DEGRADED)
                await until(lambda: len(heard.news) == 2, 1.0, "the change heard")
                assert heard.news[1] - changed < 3 * gwop_watch.TICK_S + 0.2
                last = watch.answer("bot-0", time.monotonic())
                assert last is not None and last.state is Idempotency.RUNTIME_OUTAGE
            finally:
                watch.close()

    asyncio.run(main())


def test_the_watch_asks_again_when_a_duration_crosses_the_cut_off_bound() -> None:
    """answers_for_s is no part of the tag: the watch asks for its crossing of CUT_OFF_AFTER_S."""
    async def main() -> None:
        heard = Heard()
        async with Replica() as replica:
            replica.section["idempotency"] = {"redis": "unreachable", "unusable_for_s": 0.0}
            since = time.monotonic()

            def body() -> dict[str, Any]:
                b = Replica.body(replica)
                b["gateway_operator"]["idempotency"]["unusable_for_s"] = round(time.monotonic() - since, 1)
                return b
            replica.watched._body = body
            watch = watch_of(heard)
            watch.follow([Target("bot-0", "127.0.0.1", replica.port)], interval=20.0, timeout=1.0)
            try:
                from gateway_operator.core.replicas import CUT_OFF_AFTER_S
                await until(lambda: any((h.unusable_for_s or 0) >= CUT_OFF_AFTER_S for h in heard.answers),
                            CUT_OFF_AFTER_S + 1.5, "the crossing asked for")
                assert len(heard.news) >= 2, "the crossing is news"
            finally:
                watch.close()

    asyncio.run(main())


async def plain_health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Another image's server on the watch port: a /health without a tag, answered at once."""
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps({"status": "healthy"}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass


@pytest.mark.parametrize("case", ["refused", "no tag", "not json"])
def test_a_replica_without_the_watch_is_polled_instead_and_never_asked_in_a_spin(case: str) -> None:
    async def main() -> None:
        heard = Heard()
        requests = 0

        async def not_json(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal requests
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    requests += 1
                    writer.write(b'HTTP/1.1 200 OK\r\nETag: "abc"\r\nContent-Length: 3\r\n\r\nabc')
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass

        async def no_tag(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal requests
            requests += 1
            await plain_health(reader, writer)

        server = None
        if case == "refused":
            probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            port = probe.sockets[0].getsockname()[1]
            probe.close()
            await probe.wait_closed()
        else:
            server = await asyncio.start_server(no_tag if case == "no tag" else not_json, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
        watch = watch_of(heard)
        watch.follow([Target("bot-0", "127.0.0.1", port)], interval=1.0, timeout=0.5)
        try:
            await asyncio.sleep(3.5)
            assert watch.answer("bot-0", time.monotonic()) is None, "the loop polls it"
            assert heard.news == [] and heard.answers == []
            # retried on the backoff (1, 2, 4 ...): a few asks in 3.5 s, not a spin
            assert requests <= 3, requests
        finally:
            watch.close()
            if server is not None:
                server.close()

    asyncio.run(main())


def test_the_watch_follows_only_the_replicas_it_is_told() -> None:
    async def main() -> None:
        heard = Heard()
        async with Replica() as a, Replica() as b:
            watch = watch_of(heard)
            watch.follow([Target("bot-0", "127.0.0.1", a.port), Target("bot-1", "127.0.0.1", b.port)], 5.0, 1.0)
            try:
                await until(lambda: watch.watching == 2, 2, "both answering")
                watch.follow([Target("bot-1", "127.0.0.1", b.port)], 5.0, 1.0)
                assert watch.answer("bot-0", time.monotonic()) is None and watch.watching == 1
                await asyncio.sleep(0.3)
                assert a.server.clients == 0, "the gone replica's connection closed"
            finally:
                watch.close()

    asyncio.run(main())


@pytest.mark.parametrize("round_trip", [0.0, 0.05, 0.4])
def test_a_silent_replica_is_heard_once_an_interval_whatever_the_round_trip(round_trip: float) -> None:
    """What the benchmark counts as checks achieved against those demanded: the watch's silent
    answers keep the interval's cadence, neither a little more often (a fixed lead) nor less (the
    round trip added to each wait)."""
    now, due, answers = 0.0, None, 0
    while now < 1000.0:
        due = schedule.watch_due(due, now, 10.0)
        now += schedule.watch_wait(due - now, None) + round_trip  # the launcher answers when the wait ends
        due, answers = due + 10.0, answers + 1
    assert answers == 100
    # a cadence far behind (a replica that failed meanwhile) starts again; a shorter interval at once
    assert schedule.watch_due(10.0, 35.0, 10.0) == 45.0 and schedule.watch_due(30.0, 1.0, 5.0) == 6.0


def test_when_a_watch_waits_is_the_schedules() -> None:
    cut_off = ReplicaHealth("p", Idempotency.HEALTHY, redis="unreachable", unusable_for_s=1.0)
    assert schedule.watch_wait(10.0, None) == 10.0
    assert schedule.watch_wait(10.0, cut_off) == pytest.approx(4.0 + schedule.CROSSING_SLACK_S)
    assert schedule.watch_wait(10.0, ReplicaHealth("p", Idempotency.HEALTHY, redis="answers",
                                                   answers_for_s=60.0)) == 10.0
    assert schedule.watch_wait(0.1, None) == schedule.WATCH_MIN_GAP_S
    assert [schedule.watch_retry(n) for n in (0, 1, 9)] == [1.0, 2.0, 60.0]
    assert schedule.watch_stands(0.0, 14.0, 10.0, 3.0) and not schedule.watch_stands(0.0, 14.1, 10.0, 3.0)
    s = schedule.Schedule(next_full=200.0, next_poll=200.0)
    assert s.health_news(100.0) == 0.0 and s.health_news(100.1) is None
    assert s.take_news(100.0) and not s.take_news(100.2)
    assert s.health_news(100.3) == pytest.approx(schedule.NEWS_GAP_S - 0.3)
    assert s.sleep_for(100.3) == pytest.approx(schedule.NEWS_GAP_S - 0.3)


def test_a_holders_clocks_do_not_move_the_tag_but_an_unrenewed_claim_does() -> None:
    """A replica holding a claim counts down to its expiry every tick: the watch must not answer
    each tick (one answer every 0.2 s per replica), but must at once when a renewal fails."""
    def holding(expire_in: float, unrenewed: int = 0, failing_for: float = 0.0) -> dict:
        return {"status": "healthy", "gateway_operator": {"idempotency": {
            "redis": "answers", "claims_held": 1, "claims_unrenewed": unrenewed, "claims_expire_in_s": expire_in,
            "renew_failing_for_s": failing_for}}}
    assert gwop_watch.tag_of(holding(55.0)) == gwop_watch.tag_of(holding(41.3))
    assert gwop_watch.tag_of(holding(41.3)) != gwop_watch.tag_of(holding(41.3, unrenewed=1, failing_for=0.4))
    assert gwop_watch.tag_of(holding(30.0, 1, 0.4)) == gwop_watch.tag_of(holding(29.0, 1, 1.4))
