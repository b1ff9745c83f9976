"""What the operator's Redis probe (redis_probe.py) found, and how long it may take: pure, so
that the modules that decide from it (conditions, outcome) import no I/O."""
from __future__ import annotations

from dataclasses import dataclass

from gateway_operator.core.dedup_history import StoreFacts


def bound(timeout: float) -> float:
    """The most one probe takes, whatever the Redis does: its connect, TLS and round trips (and an
    observation probe's one retry afresh) each within ``timeout``. Time the operator's own event
    loop was too busy to read an answer is not counted (clients/fair_timeout.py), up to its
    ceiling."""
    return 3 * timeout + 1


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str   # a reasons.* RedisReachable reason
    message: str  # never holds the password
    store: StoreFacts | None = None  # the canary and what INFO/CONFIG GET said (a passed probe only)
    reused: bool = False  # an earlier pass's result, kept (no probe was sent): says nothing new of the store
