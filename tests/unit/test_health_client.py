"""The /health client (health_poll.Poller) against a real HTTP server on loopback that answers as
each case says: the framings a server may use, the answers a hostile image may give, keep-alive
and its one retry, and the connections it keeps. What a user would notice is the state each
replica is reported in (IdempotencyDegraded's message counts them), so that is what is asserted."""
from __future__ import annotations

import asyncio
import json
from typing import Awaitable, Callable

import pytest

from gateway_operator.clients import health_poll
from gateway_operator.clients.health_poll import Poller
from gateway_operator.core.health import Idempotency, Target

HEALTHY = json.dumps({"status": "healthy", "degraded_owners": []}).encode()
DEGRADED = json.dumps({"status": "degraded", "degraded_owners": [
    {"owner_id": "durability:idempotency", "reason": "Redis idempotency store unreachable at runtime"}]}).encode()

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


def answer(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


class Server:
    """Reads each request head and lets ``handler`` answer it (with the request's number on its
    connection); True keeps the connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler, self.connections, self.requests = handler, 0, 0
        self.heads: list[bytes] = []

    async def __aenter__(self) -> "Server":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        on_this = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests, on_this = self.requests + 1, on_this + 1
                self.heads.append(head)
                if not await self.handler(reader, writer, on_this):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def target(self, pod: str = "p-0") -> Target:
        return Target(pod, "127.0.0.1", self.port)


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def state_of(handler: Handler, timeout: float = 1.0) -> Idempotency:
    async with Server(handler) as server:
        poller = Poller()
        [result] = await poller.poll([server.target()], timeout, 4)
        poller.close()
        return result.state


def writes(data: bytes, keep: bool = False) -> Handler:
    async def handler(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> bool:
        w.write(data)
        return keep
    return handler


def chunked(body: bytes, pieces: int = 3) -> bytes:
    step = max(1, len(body) // pieces)
    parts = [body[i:i + step] for i in range(0, len(body), step)]
    return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n")


@pytest.mark.parametrize("data, state", [
    (answer(HEALTHY), Idempotency.HEALTHY),
    (answer(DEGRADED), Idempotency.RUNTIME_OUTAGE),
    (chunked(DEGRADED), Idempotency.RUNTIME_OUTAGE),
    (chunked(HEALTHY, 1), Idempotency.HEALTHY),
    (b"HTTP/1.0 200 OK\r\n\r\n" + DEGRADED, Idempotency.RUNTIME_OUTAGE),  # the body ends with the connection
    (answer(DEGRADED, "503 Service Unavailable"), Idempotency.UNKNOWN),   # only a 200 is an answer
    (answer(b"not json"), Idempotency.UNKNOWN),
    (answer(b"[1, 2]"), Idempotency.UNKNOWN),                              # JSON, not an object
    (answer(b"[" * 50_000 + b"]" * 50_000), Idempotency.UNKNOWN),           # deep: under the cap, too nested
    (b"SSH-2.0-OpenSSH\r\n\r\n", Idempotency.UNKNOWN),                     # not HTTP
    (answer(HEALTHY)[:60], Idempotency.UNKNOWN),                           # closed mid-answer
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n{", Idempotency.UNKNOWN),  # huge, by its length
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", Idempotency.UNKNOWN),
], ids=["length", "degraded", "chunked", "one-chunk", "until-close", "503", "not-json", "array", "deep",
        "not-http", "cut", "huge-length", "bad-chunk"])
def test_each_answer_is_read_as_the_gateway_means_it(data: bytes, state: Idempotency) -> None:
    assert run(state_of(writes(data))) == state


def test_a_huge_or_endless_body_is_cut_at_the_cap_and_a_silent_one_times_out() -> None:
    read: list[int] = []

    async def endless(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        sent = 0
        try:
            while sent < 1 << 30:
                w.write(b"10000\r\n" + b" " * 65536 + b"\r\n")
                await w.drain()
                sent += 65536
        except ConnectionError:
            pass
        read.append(sent)
        return False

    async def silent(_r: asyncio.StreamReader, _w: asyncio.StreamWriter, _n: int) -> bool:
        await asyncio.sleep(5)
        return False

    huge = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\": \"" + b"x" * (2 * health_poll.MAX_BODY_BYTES)
    assert run(state_of(endless)) == Idempotency.UNKNOWN
    assert read and read[0] < 1 << 30  # it stopped reading: the sender met a closed socket
    assert run(state_of(writes(huge))) == Idempotency.UNKNOWN

    async def timed() -> tuple[Idempotency, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        return await state_of(silent, timeout=0.3), loop.time() - started
    state, took = run(timed())  # type: ignore[misc]
    assert state == Idempotency.UNKNOWN and took < 2


def test_without_keep_alive_each_poll_asks_for_a_close() -> None:
    async def go() -> Server:
        async with Server(writes(answer(HEALTHY), keep=True)) as server:
            poller = Poller()
            for _ in range(3):
                [r] = await poller.poll([server.target()], 1.0, 4)
                assert r.state == Idempotency.HEALTHY
            poller.close()
            return server
    server = run(go())
    assert isinstance(server, Server) and server.connections == 3
    assert all(b"connection: close" in h.lower() for h in server.heads)


def test_kept_alive_connections_are_reused_and_one_closed_as_it_is_reused_is_retried_afresh() -> None:
    """The reason polls used fresh connections: a kept-alive one the replica closes just as it is
    reused. The second server keeps each connection after its first answer, then closes it at
    the next request without answering (the race, at every other poll): each poll must still
    read the answer, on a fresh connection, once."""
    async def close_at_second(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            w.write(answer(HEALTHY))
        return n == 1

    async def go() -> tuple[Server, Server, list[Idempotency]]:
        async with Server(writes(answer(DEGRADED), keep=True)) as steady, Server(close_at_second) as closing:
            poller, states = Poller(), []
            for _ in range(4):
                results = await poller.poll([steady.target("a"), closing.target("b")], 1.0, 4, keep_alive=True)
                states += [r.state for r in results]
            poller.close()
            return steady, closing, states
    steady, closing, states = run(go())  # type: ignore[misc]
    assert states == [Idempotency.RUNTIME_OUTAGE, Idempotency.HEALTHY] * 4
    assert steady.connections == 1 and steady.requests == 4  # one connection for every poll
    assert closing.connections == 4 and closing.requests == 7  # 3 reuses met the close, each retried once


def test_a_reused_connection_that_answers_wrongly_is_not_retried() -> None:
    """The retry is for a connection closed before any answer; a wrong answer is the replica's."""
    async def second_answer_bad(_r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> bool:
        w.write(answer(HEALTHY) if n == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab")
        return n == 1

    async def go() -> tuple[list[Idempotency], int]:
        async with Server(second_answer_bad) as server:
            poller, states = Poller(), []
            for _ in range(2):
                [r] = await poller.poll([server.target()], 1.0, 4, keep_alive=True)
                states.append(r.state)
            poller.close()
            return states, server.requests
    states, requests = run(go())  # type: ignore[misc]
    assert states == [Idempotency.HEALTHY, Idempotency.UNKNOWN] and requests == 2


def test_connections_to_replicas_no_longer_polled_are_closed() -> None:
    async def go() -> tuple[int, int]:
        async with Server(writes(answer(HEALTHY), keep=True)) as server:
            poller = Poller()
            await poller.poll([server.target("a")], 1.0, 4, keep_alive=True)
            kept_before = len(poller._connections)
            await poller.poll([], 1.0, 4, keep_alive=True)  # the pod is gone
            kept_after = len(poller._connections)
            poller.close()
            return kept_before, kept_after
    assert run(go()) == (1, 0)


def test_max_concurrency_bounds_the_replicas_polled_at_once() -> None:
    at_once, peak = 0, 0

    async def slow(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _n: int) -> bool:
        nonlocal at_once, peak
        at_once += 1
        peak = max(peak, at_once)
        await asyncio.sleep(0.05)
        at_once -= 1
        w.write(answer(HEALTHY))
        return False

    async def go() -> list[Idempotency]:
        async with Server(slow) as server:
            poller = Poller()
            results = await poller.poll([server.target(f"p-{i}") for i in range(9)], 2.0, 3)
            poller.close()
            return [r.state for r in results]
    assert run(go()) == [Idempotency.HEALTHY] * 9
    assert peak == 3
