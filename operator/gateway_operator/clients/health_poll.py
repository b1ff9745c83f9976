"""The HTTP of a replica's ``GET /health``: a minimal HTTP/1.1 client with a timeout per replica,
a cap on the bytes read, and a bound on how many replicas are polled at once (the image behind a
replica is the tenant's, so its answer may be huge, endless, deeply nested or not JSON); the
``Poller`` of one GatewayDeployment, and the long-poll request of its health watch
(health_watch.py). What an answer means is health.py's.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Iterable, Mapping

from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.core.health import Idempotency, ReplicaHealth, Target, parse_answer

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024  # a real /health body is well under 4 KiB
MAX_HEAD_BYTES = 16 * 1024  # status line and headers
#: a kept-alive connection is reused only this soon after its last answer: uvicorn (the gateway's
#: server) closes an idle one after 5 s, and a request sent as that close is under way would
#: read as a replica that did not answer. Older ones are closed and a fresh one opened.
REUSE_WITHIN_S = 4.0


class _Failed(Exception):
    """The answer was not a usable /health answer (closed early, too big, not HTTP)."""


class _Exchange(asyncio.Protocol):
    """A minimal HTTP/1.1 client for one replica's ``GET /health``, reused while kept alive.

    It reads only what a /health answer needs: the status code, Content-Length or chunked
    framing, and the body up to ``MAX_BODY_BYTES`` (the rest is never read: the connection is
    dropped). aiohttp did the same with about twice the CPU per poll (0.83 ms against about 0.35 ms, each
    with a fresh connection, measured on the stand-ins of bench/health_farm.py)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.open = False
        self.last_answer = 0.0
        self._reset()

    def _reset(self) -> None:
        self.buf = bytearray()
        self.status = 0
        self.length: int | None = None   # Content-Length; None with chunked or read-until-close
        self.chunked = False
        self.body = bytearray()
        self.keep = True
        self.got_bytes = False
        self.etag = ""   # the answer's ETag, unquoted (the launcher's long-poll /health sets it)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.open = True

    def data_received(self, data: bytes) -> None:
        if self.answer is None or self.answer.done():
            self._drop()  # bytes nobody asked for: never reuse this connection
            return
        self.got_bytes = True
        self.buf += data
        try:
            self._advance()
        except _Failed as e:
            self._fail(e)

    def eof_received(self) -> bool:
        if self.answer is not None and not self.answer.done():
            if self.status and self.length is None and not self.chunked:
                self._finish(bytes(self.body + self.buf))  # the body ends with the connection
            else:
                self._fail(_Failed("closed before the answer ended"))
        self.open = False
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self.answer is not None and not self.answer.done():
            self._fail(_Failed("connection lost"))

    # parsing
    def _advance(self) -> None:
        if not self.status:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD_BYTES:
                    raise _Failed("head too long")
                return
            self._head(bytes(self.buf[:end]))
            del self.buf[:end + 4]
        if self.chunked:
            self._chunks()
        elif self.length is not None:
            if len(self.buf) >= self.length:
                self.keep = self.keep and len(self.buf) == self.length  # more than it said: not reused
                self._finish(bytes(self.buf[:self.length]))
        elif len(self.buf) > MAX_BODY_BYTES:
            raise _Failed("body too big")

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _Failed("not an HTTP/1 answer")
        self.status = int(parts[1]) or 1
        self.keep = parts[0] != b"HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                if not value.isdigit():
                    raise _Failed("bad Content-Length")
                self.length = int(value)
                if self.length > MAX_BODY_BYTES:
                    raise _Failed("body too big")
            elif name == b"transfer-encoding":
                self.chunked = value.endswith(b"chunked")
            elif name == b"connection":
                self.keep = self.keep and value != b"close"
            elif name == b"etag":
                self.etag = value.strip(b'"')[:64].decode("ascii", "replace")
        if self.chunked:
            self.length = None
        elif self.length is None:
            self.keep = False  # read until the server closes

    def _chunks(self) -> None:
        while True:
            line_end = self.buf.find(b"\r\n")
            if line_end < 0:
                if len(self.buf) > 1024:
                    raise _Failed("bad chunk size")
                return
            size_text = bytes(self.buf[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Failed("bad chunk size") from None
            if size == 0:  # the last chunk; trailers are not expected from /health
                if self.buf.find(b"\r\n\r\n", line_end) < 0:  # "0\r\n" [trailers] "\r\n"
                    return
                self._finish(bytes(self.body))
                return
            if len(self.body) + size > MAX_BODY_BYTES:
                raise _Failed("body too big")
            if len(self.buf) < line_end + 2 + size + 2:
                return
            self.body += self.buf[line_end + 2:line_end + 2 + size]
            del self.buf[:line_end + 2 + size + 2]

    def _finish(self, body: bytes) -> None:
        assert self.answer is not None
        if not self.keep:
            self._drop()
        self.last_answer = time.monotonic()
        self.answer.set_result((self.status, body))
        self.answer = None

    def _fail(self, e: Exception) -> None:
        self._drop()
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(e)
        self.answer = None

    def _drop(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.abort()

    # the request
    def reusable(self, now: float) -> bool:
        return self.open and self.answer is None and now - self.last_answer < REUSE_WITHIN_S

    def ask(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None
        self._reset()
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.answer

    def close(self) -> None:
        self._drop()


def _request(target: Target, keep_alive: bool, query: str = "") -> bytes:
    host = f"[{target.ip}]" if ":" in target.ip else target.ip
    return (f"GET /health{query} HTTP/1.1\r\nHost: {host}:{target.port}\r\nAccept: application/json\r\n"
            f"User-Agent: gateway-operator\r\n{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}\r\n"
            ).encode()


def watch_request(target: Target, wait: float, since: str) -> bytes:
    """The launcher's long-poll ``GET /health?wait=S&since=TAG`` (pod/gwop_watch.py), kept alive."""
    tag = "".join(c for c in since if c.isalnum())  # a tag is hex: anything else is the tenant's
    return _request(target, True, f"?wait={wait:.1f}&since={tag}")


class Poller:
    """One GatewayDeployment's /health client: a connection per replica, kept alive between
    polls only when they come sooner than ``REUSE_WITHIN_S`` (the gateway's server closes an idle
    connection after 5 s), with one retry on a fresh connection when a reused one was closed
    before it answered. Connections to replicas no longer polled are closed at the next poll."""

    def __init__(self) -> None:
        self._connections: dict[tuple[str, int], _Exchange] = {}

    async def poll(self, targets: Iterable[Target], timeout: float, max_concurrency: int,
                   keep_alive: bool = False, timeouts: Mapping[str, float] | None = None) -> list[ReplicaHealth]:
        """Each target's answer; ``timeouts``: a shorter timeout for some pods (a holder of claims:
        schedule.answer_timeout)."""
        targets, timeouts = list(targets), timeouts or {}
        polled = {(t.ip, t.port) for t in targets}
        for key in [k for k in self._connections if k not in polled]:
            self._connections.pop(key).close()
        if not targets:
            return []
        gate = asyncio.Semaphore(max_concurrency) if len(targets) > max_concurrency else None
        return list(await asyncio.gather(*(self._poll_one(t, timeouts.get(t.pod, timeout), gate, keep_alive)
                                             for t in targets)))

    async def _poll_one(self, target: Target, timeout: float, gate: asyncio.Semaphore | None,
                        keep_alive: bool) -> ReplicaHealth:
        if gate is None:
            return await self._ask(target, timeout, keep_alive)
        async with gate:
            return await self._ask(target, timeout, keep_alive)

    async def _ask(self, target: Target, timeout: float, keep_alive: bool) -> ReplicaHealth:
        key, request = (target.ip, target.port), _request(target, keep_alive)
        exchange = self._connections.pop(key, None)
        try:
            async with fair_timeout(timeout):
                if exchange is not None and exchange.reusable(time.monotonic()):
                    try:
                        return self._answered(target, exchange, keep_alive, *await exchange.ask(request))
                    except _Failed:
                        if exchange.got_bytes:
                            raise
                        # closed before it answered (a race with the replica closing it): once more, afresh
                if exchange is not None:
                    exchange.close()
                _, exchange = await asyncio.get_running_loop().create_connection(_Exchange, target.ip, target.port)
                return self._answered(target, exchange, keep_alive, *await exchange.ask(request))
        except BaseException as e:
            if exchange is not None:
                exchange.close()
            if isinstance(e, (OSError, TimeoutError, _Failed)):
                return ReplicaHealth(target.pod, Idempotency.UNKNOWN)
            if not isinstance(e, Exception):
                raise  # cancelled: the loop is stopping
            log.warning("health poll of pod %s failed: %s", target.pod, type(e).__name__)  # never fails the poll
            return ReplicaHealth(target.pod, Idempotency.UNKNOWN)

    def _answered(self, target: Target, exchange: _Exchange, keep_alive: bool, status: int,
                  body: bytes) -> ReplicaHealth:
        if keep_alive and exchange.open and exchange.keep:
            self._connections[(target.ip, target.port)] = exchange
        else:
            exchange.close()
        return parse_answer(target.pod, status, body)

    def close(self) -> None:
        for exchange in self._connections.values():
            exchange.close()
        self._connections.clear()
