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
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import aiohttp

from .api import IDEMPOTENCY_OWNER

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024  # a real /health body is well under 4 KiB


class Idempotency(enum.Enum):
    HEALTHY = "Healthy"                      # no durability:idempotency owner
    BUILD_TIME_FALLBACK = "BuildTimeFallback"  # store built while Redis was missing: sticky
    RUNTIME_OUTAGE = "RuntimeOutage"          # Redis lost later: admits best-effort
    OTHER = "OtherDegradation"               # an entry whose reason we do not know
    UNKNOWN = "Unreachable"                  # /health did not answer


# The gateway's documented reason texts (gateway contract). Matched by fragment so a
# rewording of the tail does not break the mapping; anything else is OTHER and its text is
# never copied into status.
_FRAGMENTS = (
    ("not available (running per-replica)", Idempotency.BUILD_TIME_FALLBACK),
    ("unreachable at runtime", Idempotency.RUNTIME_OUTAGE),
)

DESCRIPTIONS = {
    Idempotency.BUILD_TIME_FALLBACK: "fell back to a per-replica SQLite store at build time (Redis was "
                                     "unavailable); sticky until the replica restarts",
    Idempotency.RUNTIME_OUTAGE: "lost Redis at runtime; admitting webhooks best-effort until it recovers",
    Idempotency.OTHER: "reports durability:idempotency degraded for an unrecognised reason",
    Idempotency.UNKNOWN: "did not answer GET /health",
}


@dataclass(frozen=True)
class ReplicaHealth:
    pod: str
    state: Idempotency


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


@dataclass(frozen=True)
class Target:
    pod: str
    ip: str
    port: int


async def _read_capped(stream: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it grows past ``limit`` (the rest is never read)."""
    raw = bytearray()
    while chunk := await stream.read(limit + 1 - len(raw)):
        raw += chunk
        if len(raw) > limit:
            return None
    return bytes(raw)


async def _poll_one(session: aiohttp.ClientSession, target: Target, timeout: float,
                    gate: asyncio.Semaphore) -> ReplicaHealth:
    host = f"[{target.ip}]" if ":" in target.ip else target.ip
    async with gate:
        try:
            async with session.get(f"http://{host}:{target.port}/health", allow_redirects=False,
                                   timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                if response.status != 200:
                    return ReplicaHealth(target.pod, Idempotency.UNKNOWN)
                raw = await _read_capped(response.content, MAX_BODY_BYTES)
                if raw is None:
                    return ReplicaHealth(target.pod, Idempotency.UNKNOWN)
                body = json.loads(raw)
                if not isinstance(body, Mapping):
                    return ReplicaHealth(target.pod, Idempotency.UNKNOWN)
                return ReplicaHealth(target.pod, classify(body))
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, RecursionError):
            return ReplicaHealth(target.pod, Idempotency.UNKNOWN)
        except Exception as e:  # noqa: BLE001 - one replica's answer never fails the poll
            log.warning("health poll of pod %s failed: %s", target.pod, type(e).__name__)
            return ReplicaHealth(target.pod, Idempotency.UNKNOWN)


class Poller:
    """One HTTP client for every poll of the process (a session per poll costs more CPU
    than the poll). Each request uses a fresh connection: a kept-alive one could meet a
    replica that closed it just then, and read as a replica that did not answer."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def poll(self, targets: Iterable[Target], timeout: float, max_concurrency: int) -> list[ReplicaHealth]:
        targets = list(targets)
        if not targets:
            return []
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
        gate = asyncio.Semaphore(max(1, max_concurrency))
        return list(await asyncio.gather(*(_poll_one(self._session, t, timeout, gate) for t in targets)))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
