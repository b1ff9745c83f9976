"""A minimal Redis connection for the operator's probes (redis_connection.py opens it,
redis_protocol.py speaks over it): RESP2 over one asyncio stream, signed in with ``AUTH`` and
``SELECT`` when it opens, then commands sent as one pipeline and their replies read in order.

Why not redis-py's client: the operator keeps one connection per GatewayDeployment for its
observation probes and asks it a handful of commands every interval, and opens a new one for
each full probe (every resync). redis-py's client cost about 27 KiB per kept connection (its
response-callback table, pool and event dispatcher), 0.34 ms of CPU per observation probe and
about 1.8 ms per full probe (its per-command machinery, its pool, a full parse of every INFO
section); the benchmark's profiles put the two probes at a third of the idle operator's CPU.

The server is the tenant's: every reply is bounded (``MAX_REPLY`` bytes a string, ``MAX_ITEMS``
elements an array, ``MAX_DEPTH`` levels), and anything else is refused as an invalid answer. A
connection whose exchange failed or was cancelled mid-way is closed: its replies would be out of
step. Errors are redis-py's exception classes, so that the probe maps them as it maps the full
probe's.
"""
from __future__ import annotations

import asyncio
import ssl
from typing import Any, Sequence

import redis
from redis.exceptions import InvalidResponse

from gateway_operator.clients.fair_timeout import fair_timeout

MAX_REPLY = 256 * 1024   # bytes of one string reply (an INFO section is 1-2 KiB)
MAX_ITEMS = 1024         # elements of one array reply
MAX_DEPTH = 4            # nested arrays
LINE_LIMIT = 64 * 1024   # the stream's buffer for one line (a status, an error, a length)

Reply = bytes | int | None | list[Any] | redis.RedisError


def pack(command: Sequence[str | bytes | int]) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


#: error codes redis-py raises as an exception class of their own (its parsers' table, the codes the
#: probe may meet): so that a refused write says ReadOnlyError or OutOfMemoryError as a full probe does
ERROR_CLASSES: dict[str, type[redis.RedisError]] = {
    "WRONGPASS": redis.AuthenticationError, "NOAUTH": redis.AuthenticationError,
    "NOPERM": redis.exceptions.NoPermissionError, "OOM": redis.exceptions.OutOfMemoryError,
    "READONLY": redis.ReadOnlyError, "LOADING": redis.BusyLoadingError, "EXECABORT": redis.exceptions.ExecAbortError,
    "NOSCRIPT": redis.exceptions.NoScriptError, "MASTERDOWN": redis.exceptions.MasterDownError,
}


def error_of(message: str) -> redis.RedisError:
    """An error reply as redis-py's exception for it (the message kept whole)."""
    code = message.split(" ", 1)[0]
    if code == "ERR" and message[4:] in ("invalid password", "max number of clients reached"):
        return (redis.AuthenticationError if "password" in message else redis.ConnectionError)(message)
    return ERROR_CLASSES.get(code, redis.ResponseError)(message)


def tls_context(insecure_skip_verify: bool, ca: str | None) -> ssl.SSLContext:
    """As redis-py's SSLConnection builds it for the full probe: the system's CAs, plus the given
    bundle; no verification at all when the spec says insecureSkipVerify."""
    context = ssl.create_default_context()
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if ca:
        context.load_verify_locations(cadata=ca)
    return context


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._broken = False

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float, *, tls: ssl.SSLContext | None = None,
                   server_name: str | None = None, username: str | None = None, password: str | None = None,
                   db: int = 0) -> "Connection":
        """Connected (TLS verifying ``server_name``, sent as SNI), signed in and on ``db``. Raises
        redis.AuthenticationError for a refused password, OSError or TimeoutError when nothing answers."""
        async with fair_timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=server_name if tls is not None else None, limit=LINE_LIMIT)
        connection = cls(reader, writer)
        try:
            hello: list[tuple[str, ...]] = []
            if password:
                hello.append(("AUTH", username, password) if username else ("AUTH", password))
            if db:
                hello.append(("SELECT", str(db)))
            replies: list[Reply] = []
            if hello:
                async with fair_timeout(timeout):
                    replies = await connection.execute(hello)
            if password and isinstance(replies[0], redis.RedisError):  # whatever the words: not signed in
                raise redis.AuthenticationError(str(replies[0]))
            for reply in replies:
                if isinstance(reply, redis.RedisError):
                    raise reply
        except BaseException:
            connection.close()
            raise
        return connection

    @property
    def open(self) -> bool:
        return not (self._broken or self._writer.is_closing() or self._reader.at_eof())

    async def execute(self, commands: Sequence[Sequence[str | bytes | int]]) -> list[Reply]:
        """Every command's reply, in order; an error reply is returned (not raised) as redis-py's
        exception for it. Raises redis.ConnectionError when the server closes the connection,
        InvalidResponse for an answer that is not RESP within the bounds."""
        if not self.open:
            raise redis.ConnectionError("the connection is closed")
        try:
            self._writer.write(b"".join(pack(c) for c in commands))
            await self._writer.drain()
            return [await self._reply(0) for _ in commands]
        except BaseException:
            self.close()   # a reply half read: whatever comes next is out of step
            raise

    async def _line(self) -> bytes:
        try:
            return (await self._reader.readuntil(b"\r\n"))[:-2]
        except asyncio.IncompleteReadError:
            raise redis.ConnectionError("the server closed the connection") from None
        except asyncio.LimitOverrunError:
            raise InvalidResponse("a reply line over the limit") from None

    async def _reply(self, depth: int) -> Reply:
        line = await self._line()
        kind, rest = line[:1], line[1:]
        try:
            if kind == b"+":
                return rest
            if kind == b"-":
                return error_of(rest.decode(errors="replace"))
            if kind == b":":
                return int(rest)
            if kind == b"$":
                size = int(rest)
                if size < 0:
                    return None
                if size > MAX_REPLY:
                    raise InvalidResponse("a string reply over the limit")
                return (await self._reader.readexactly(size + 2))[:-2]
            if kind == b"*":
                count = int(rest)
                if count < 0:
                    return None
                if count > MAX_ITEMS or depth >= MAX_DEPTH:
                    raise InvalidResponse("an array reply over the limit")
                return [await self._reply(depth + 1) for _ in range(count)]
        except asyncio.IncompleteReadError:
            raise redis.ConnectionError("the server closed the connection") from None
        except ValueError:
            raise InvalidResponse("a reply length that is not a number") from None
        raise InvalidResponse("not a RESP2 reply")

    def close(self) -> None:
        self._broken = True
        self._writer.close()


INFO_VALUES = ("run_id", "role", "master_replid", "master_replid2", "used_memory", "maxmemory")


def info(reply: Reply, keys: Sequence[str] = INFO_VALUES) -> dict[str, Any] | redis.RedisError | None:
    """The ``keys`` of an INFO reply, valued as redis-py's parse_info values them (a number when it
    reads as one); the error when INFO was refused; None for anything else."""
    if isinstance(reply, redis.RedisError):
        return reply
    if not isinstance(reply, bytes):
        return None
    out: dict[str, Any] = {}
    for line in reply.decode(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key in keys:
            out[key] = _value(value.strip())
    return out


def pairs(reply: Reply) -> dict[str, str]:
    """A ``CONFIG GET`` reply (name, value, name, value, ...) as text, as redis-py gives it."""
    items = [v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in reply] \
        if isinstance(reply, list) else []
    return dict(zip(items[::2], items[1::2]))


def _value(value: str) -> Any:
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return value
