"""Whether this replica can use Redis, asked every two seconds whether webhooks come or not.

The outage journal learns that Redis cannot be used only from a webhook's failed call: a replica
cut off from Redis before its first webhook, or while none comes, would say it answers. The answer
goes to ``/health`` (gwop_health), where the operator reads it to take a replica that cannot reach
Redis, while another can, out of the traffic (its readiness gate); it never changes what this
replica admits: the journal alone decides that. The probe is a write (a PING answers from a Redis
that refuses writes) under the gateway's Redis prefix, beside the store's keys, not among them."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping, Optional

import gwop_contract as contract
from gwop_journal import OutageJournal, off_loop, refusal_of
from gwop_redis import redis_client

PROBE_KEY = "gwop-reach-probe"


class Reach:
    PERIOD_S = 2.0
    TIMEOUT_S = 1.0   # a partition that drops packets: the connect times out after this

    def __init__(self, redis: Mapping[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.redis, self.clock = redis, clock
        self.key = f"{redis.get('prefix') or 'praison:push:'}{PROBE_KEY}"
        self._client: Optional[Any] = None
        self.ok: Optional[bool] = None       # None until the first probe ends
        self.refusal: Optional[str] = None   # what Redis said when it refused the write
        self.since = clock()                 # when ``ok`` last changed (or the start)

    def probe(self) -> bool:
        """One write, bounded by TIMEOUT_S (blocking: run it off the event loop)."""
        try:
            if self._client is None:
                self._client = redis_client(self.redis, timeout=self.TIMEOUT_S)
            self._client.set(self.key, "1", px=int(self.PERIOD_S * 2000))
            ok, refusal = True, None
        except Exception as exc:  # noqa: BLE001 - cannot reach it, or it refuses
            ok, refusal = False, refusal_of(exc)
        if ok is not self.ok:
            self.since = self.clock()
        self.ok, self.refusal = ok, refusal
        return ok

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.PERIOD_S)
            await off_loop(self.probe)  # never behind the agent's work in the default executor


def view(journal: OutageJournal, reach: Optional[Reach], now: float) -> dict:
    """This replica's own view of Redis for /health: the journal's (a webhook's failed call) when
    it cannot ask Redis, else the probe's; while both say Redis answers, ``answers_for_s``: how
    long without a break (the operator takes a cut-off replica out only when another one has
    reached Redis that long)."""
    seen = journal.view()
    if seen[contract.REDIS] != contract.ANSWERS or reach is None:
        return seen
    if reach.ok is False:
        return {**seen, contract.REDIS: contract.REFUSING if reach.refusal else contract.UNREACHABLE,
                contract.REFUSAL: reach.refusal, contract.UNUSABLE_FOR_S: round(now - reach.since, 1)}
    if reach.ok is None:
        return seen  # not asked yet: no duration to vouch for
    return {**seen, contract.ANSWERS_FOR_S: round(now - max(reach.since, journal.answers_since), 1)}
