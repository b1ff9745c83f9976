"""Health as a watch: a long-poll ``GET /health?wait=S&since=TAG`` on a port of the launcher's own
(``--watch-port``), beside the gateway's ``GET /health``. It answers the same body at once when its
tag differs from ``since``, else as soon as it changes, else after ``wait`` seconds; the ``ETag``
header carries the tag. The operator holds one such request per replica, on a connection kept
alive across answers, so that a change reaches status within a tick and the poll interval is only
the longest silence; an operator or image without it polls ``/health`` as before.

The tag covers what a change means (the gateway's ``status`` and ``degraded_owners``, and the
launcher's section without its clocks), not ``uptime`` or traffic counters. A change is seen by
computing the body every ``TICK_S`` (the gateway says nothing when its store degrades); a source
that knows when it changes (the benchmark's stand-ins) calls ``Watched.refresh`` instead.

Standard library only: the benchmark's stand-ins import it too. Every read is bounded (the head's
size, an idle connection's life, the clients at once, ``wait``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple, TypeVar
from urllib.parse import parse_qs, urlsplit

T = TypeVar("T")

TICK_S = 0.2
WAIT_MAX_S = 60.0
HEAD_MAX_BYTES = 4096
# a kept connection that asks nothing this long is closed (a watcher asks again at once)
IDLE_S = WAIT_MAX_S + 30.0
MAX_CLIENTS = 32   # the operator holds one (two across its handover); the rest are refused
# what the tag leaves out: these change without anything having happened
CLOCKS = frozenset({"uptime", "answers_for_s", "unusable_for_s", "claims_expire_in_s", "renew_failing_for_s"})
TAGGED = ("status", "degraded_owners")
SECTION = "gateway_operator"


def tag_of(body: Any) -> str:
    """The tag of a /health body: a hash of what a change in it means."""
    if not isinstance(body, dict):
        return hashlib.sha256(repr(body).encode()).hexdigest()[:16]
    tagged = {k: body.get(k) for k in TAGGED}
    section = body.get(SECTION)
    if isinstance(section, dict):
        tagged[SECTION] = _without_clocks(section)
    return hashlib.sha256(json.dumps(tagged, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _without_clocks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clocks(v) for k, v in value.items() if k not in CLOCKS}
    return value


class Watched:
    """The current /health answer (its tag and encoded body), and an event per change."""

    def __init__(self, body: Callable[[], Any]) -> None:
        self._body = body
        self._changed = asyncio.Event()
        self.tag, self.encoded = self._read()

    def _read(self) -> Tuple[str, bytes]:
        body = self._body()
        return tag_of(body), json.dumps(body, default=str).encode()

    def refresh(self) -> None:
        """Read the body again; wake the waiters when its tag changed."""
        tag, self.encoded = self._read()
        if tag != self.tag:
            self.tag = tag
            self._changed.set()
            self._changed = asyncio.Event()

    async def tick(self) -> None:
        """Read the body every TICK_S, for a source that does not say when it changes."""
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the gateway's own health call failed once: next tick
                pass

    async def answer(self, since: str, wait: float) -> Tuple[str, bytes]:
        """The answer to ``since`` and ``wait``: at once when the tag differs, else at the change
        or after ``wait`` (then with the body read afresh: its clocks moved)."""
        if since != self.tag or wait <= 0:
            return self.tag, self.encoded
        try:
            await within(self._changed.wait(), wait)
        except asyncio.TimeoutError:
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the last body read stands
                pass
        return self.tag, self.encoded


async def within(awaitable: Awaitable[T], timeout: float) -> T:
    """``awaitable``'s result, or ``asyncio.TimeoutError`` after ``timeout`` seconds (it is then
    cancelled). Not ``asyncio.wait_for``: up to Python 3.11 that returns the result, swallowing
    the caller's cancel, when both come in the same turn, and a connection then lived on after
    the server stopped. ``asyncio.timeout`` is 3.11's; this runs on the image's Python, whatever it is."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError
    return task.result()


def _reply(status: str, body: bytes, tag: str = "", close: bool = False) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    if tag:
        head.append(f'ETag: "{tag}"')
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def parse_request(head: bytes) -> Tuple[Optional[str], str, float, bool]:
    """(error status or None, since, wait, keep alive) of one request head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return "400 Bad Request", "", 0.0, False
    keep = parts[2] != "HTTP/1.0" and not any(
        line.lower().replace(" ", "") == "connection:close" for line in lines[1:])
    if parts[0] != "GET":
        return "405 Method Not Allowed", "", 0.0, keep
    url = urlsplit(parts[1])
    if url.path != "/health":
        return "404 Not Found", "", 0.0, keep
    query = parse_qs(url.query)
    since = (query.get("since") or [""])[0][:64]
    try:
        wait = float((query.get("wait") or ["0"])[0])
    except ValueError:
        return "400 Bad Request", "", 0.0, keep
    if not 0 <= wait <= WAIT_MAX_S:  # also NaN
        return "400 Bad Request", "", 0.0, keep
    return None, since, wait, keep


class WatchServer:
    """Serves ``Watched`` answers on one listening socket per address, MAX_CLIENTS at once."""

    def __init__(self) -> None:
        self.clients = 0
        self._servers: list[asyncio.AbstractServer] = []

    async def listen(self, host: Optional[str], port: int, watched: Watched) -> None:
        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._client(reader, writer, watched)
        self._servers.append(await asyncio.start_server(client, host, port, limit=HEAD_MAX_BYTES))

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watched: Watched) -> None:
        if self.clients >= MAX_CLIENTS:
            writer.close()
            return
        self.clients += 1
        try:
            while True:
                head = await within(reader.readuntil(b"\r\n\r\n"), IDLE_S)
                error, since, wait, keep = parse_request(head[:-4])
                if error:
                    writer.write(_reply(error, b"{}", close=True))
                    await writer.drain()
                    return
                tag, body = await watched.answer(since, wait)
                writer.write(_reply("200 OK", body, tag, close=not keep))
                await writer.drain()
                if not keep:
                    return
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        except asyncio.CancelledError:  # the server stops: this connection ends with it (3.11's
            return                      # streams log a cancelled handler as an error)
        finally:
            self.clients -= 1
            writer.close()

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()


async def serve_watch(port: int, body: Callable[[], Dict[str, Any]]) -> None:
    """The launcher's watch: ``body`` (the gateway's /health with the launcher's section) on
    ``port``, on every address, until cancelled."""
    watched = Watched(body)
    server = WatchServer()
    await server.listen(None, port, watched)
    try:
        await watched.tick()
    finally:
        server.close()
