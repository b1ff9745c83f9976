"""Reading the gateway's ``GET /health``: what one replica says about its idempotency store.

``classify`` is pure. ``Poller`` does the HTTP, with a timeout per replica, a cap
on the bytes read, and a bound on how many replicas are polled at once: the image behind a
replica is the tenant's, so its answer may be huge, endless, deeply nested or not JSON.
"""
from __future__ import annotations

import asyncio
import enum
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple

from .api import IDEMPOTENCY_OWNER

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024  # a real /health body is well under 4 KiB


class Idempotency(enum.Enum):
    HEALTHY = "Healthy"                      # no durability:idempotency owner
    BUILD_TIME_FALLBACK = "BuildTimeFallback"  # store built while Redis was missing: sticky
    RUNTIME_OUTAGE = "RuntimeOutage"          # Redis lost later: admits best-effort
    # Redis answers but refuses (the launcher names it after the runtime text): held, then best-effort
    REDIS_OUT_OF_MEMORY = "RedisOutOfMemory"
    REDIS_READ_ONLY = "RedisReadOnly"
    REDIS_COMMAND_NOT_PERMITTED = "RedisCommandNotPermitted"
    REDIS_LOADING = "RedisLoading"
    OTHER = "OtherDegradation"               # an entry whose reason we do not know
    UNKNOWN = "Unreachable"                  # /health did not answer


# The gateway's documented reason texts (gateway contract). Matched by fragment so a
# rewording of the tail does not break the mapping; anything else is OTHER and its text is
# never copied into status.
_FRAGMENTS = (
    ("not available (running per-replica)", Idempotency.BUILD_TIME_FALLBACK),
    # the launcher's refusals (pod/gwop_journal.REFUSALS), before the runtime text they follow
    ("refuses writes: out of memory", Idempotency.REDIS_OUT_OF_MEMORY),
    ("refuses writes: a read-only replica", Idempotency.REDIS_READ_ONLY),
    ("to its ACL user (NOPERM)", Idempotency.REDIS_COMMAND_NOT_PERMITTED),
    ("is loading its dataset", Idempotency.REDIS_LOADING),
    ("unreachable at runtime", Idempotency.RUNTIME_OUTAGE),
)

DESCRIPTIONS = {
    Idempotency.BUILD_TIME_FALLBACK: "fell back to a per-replica SQLite store at build time (Redis was "
                                     "unavailable); sticky until the replica restarts",
    Idempotency.RUNTIME_OUTAGE: "lost Redis at runtime; admitting webhooks best-effort until it recovers",
    Idempotency.REDIS_OUT_OF_MEMORY: "cannot write to Redis: it is out of memory (maxmemory under noeviction); "
                                     "raise maxmemory, or bound what else it keeps (spec.sessions)",
    Idempotency.REDIS_READ_ONLY: "cannot write to Redis: it is a read-only replica (after a failover?); point "
                                 "spec.redis at the primary",
    Idempotency.REDIS_COMMAND_NOT_PERMITTED: "Redis refuses its ACL user a command or the key prefix; grant "
                                             "what docs/redis.md lists",
    Idempotency.REDIS_LOADING: "Redis is loading its dataset; it is used again once loaded",
    Idempotency.OTHER: "reports durability:idempotency degraded for an unrecognised reason",
    Idempotency.UNKNOWN: "did not answer GET /health",
}


# what the launcher says of itself in /health (pod/gwop_health.py), as far as the operator reads it
OWN_SECTION = "gateway_operator"
OWN_REDIS = ("answers", "unreachable", "refusing")   # the replica's own view of Redis
UNUSABLE = OWN_REDIS[1:]                             # ... when it cannot use Redis
VERSIONED = ("praisonai-bot", "praisonaiagents")     # the packages whose versions status shows
_VERSION = re.compile(r"[0-9A-Za-z.+!_-]{1,64}")     # a version as PEP 440 spells one (or a local build)


@dataclass(frozen=True)
class ReplicaHealth:
    pod: str
    state: Idempotency
    # the replica's own view of Redis (its launcher's section), None when it gives none (another image)
    redis: str | None = None
    versions: tuple[str, ...] = ()   # the VERSIONED packages' versions, in that order; () when not given
    # while its own view is "answers": how long it has reached Redis without a break (None: not given)
    answers_for_s: float | None = None
    # webhooks it admitted that may never reach Redis (its journal dropped them, or a lease was lost
    # while the turn ran), since its process started, and the last time (unix) that happened
    unrecorded: int = 0
    last_unrecorded_at: float | None = None
    journalled: int = 0   # admitted while it could not use Redis, not yet written there
    # while its own view is "unreachable" or "refusing": for how long (None: not given)
    unusable_for_s: float | None = None


def classify(health: Mapping[str, Any]) -> Idempotency:
    """Map a /health body to the idempotency state of that replica."""
    owners = health.get("degraded_owners") or []
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("owner_id") == IDEMPOTENCY_OWNER:
            reason = str(owner.get("reason") or "")
            for fragment, state in _FRAGMENTS:
                if fragment in reason:
                    return state
            return Idempotency.OTHER
    return Idempotency.HEALTHY


MAX_SECONDS = 1e9  # a duration the launcher reports, as far as it is believed


class OwnView(NamedTuple):
    """The launcher's section of /health as the operator reads it (ReplicaHealth's fields after
    ``state``, in order)."""

    redis: str | None = None
    versions: tuple[str, ...] = ()
    answers_for_s: float | None = None
    unrecorded: int = 0
    last_unrecorded_at: float | None = None
    journalled: int = 0
    unusable_for_s: float | None = None


MAX_COUNT = 10**9


def _number(value: Any, top: float) -> float | None:
    """A finite number within [0, top], else None (the body is the tenant's)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top
    return float(value) if ok else None


def own_view(health: Mapping[str, Any]) -> OwnView:
    """What the replica's launcher says of itself: its view of Redis (one of OWN_REDIS), the
    versions it runs, while it reaches Redis for how long without a break, and what it admitted
    that may never reach Redis. The body is the tenant's: anything unexpected is left out, never
    copied."""
    section = health.get(OWN_SECTION)
    if not isinstance(section, Mapping):
        return OwnView()
    store, versions = section.get("idempotency"), section.get("versions")
    store = store if isinstance(store, Mapping) else {}
    redis = store.get("redis")
    found = tuple(versions.get(p) for p in VERSIONED) if isinstance(versions, Mapping) else ()
    ok = all(isinstance(v, str) and _VERSION.fullmatch(v) for v in found)
    redis = redis if redis in OWN_REDIS else None
    since = _number(store.get("answers_for_s"), MAX_SECONDS) if redis == "answers" else None
    lost = sum(int(_number(store.get(k), MAX_COUNT) or 0) for k in ("journal_dropped", "leases_lost"))
    return OwnView(redis, found if found and ok else (), since, lost,
                   _number(store.get("last_unrecorded_at"), 1e11) if lost else None,
                   int(_number(store.get("journalled"), MAX_COUNT) or 0),
                   _number(store.get("unusable_for_s"), MAX_SECONDS) if redis in UNUSABLE else None)


@dataclass(frozen=True)
class Target:
    pod: str
    ip: str
    port: int


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


def _health(pod: str, status: int, body: bytes) -> ReplicaHealth:
    if status != 200:
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    if not isinstance(parsed, Mapping):
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    return ReplicaHealth(pod, classify(parsed), *own_view(parsed))


class Poller:
    """One GatewayDeployment's /health client: a connection per replica, kept alive between
    polls only when they come sooner than ``REUSE_WITHIN_S`` (the gateway's server closes an idle
    connection after 5 s), with one retry on a fresh connection when a reused one was closed
    before it answered. Connections to replicas no longer polled are closed at the next poll."""

    def __init__(self) -> None:
        self._connections: dict[tuple[str, int], _Exchange] = {}

    async def poll(self, targets: Iterable[Target], timeout: float, max_concurrency: int,
                   keep_alive: bool = False) -> list[ReplicaHealth]:
        targets = list(targets)
        polled = {(t.ip, t.port) for t in targets}
        for key in [k for k in self._connections if k not in polled]:
            self._connections.pop(key).close()
        if not targets:
            return []
        gate = asyncio.Semaphore(max_concurrency) if len(targets) > max_concurrency else None
        return list(await asyncio.gather(*(self._poll_one(t, timeout, gate, keep_alive) for t in targets)))

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
            async with asyncio.timeout(timeout):
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
        return _health(target.pod, status, body)

    def close(self) -> None:
        for exchange in self._connections.values():
            exchange.close()
        self._connections.clear()
