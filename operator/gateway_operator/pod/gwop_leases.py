"""Claims that free themselves: the gateway's in-flight claims get a short lease (``claim_lease_seconds``,
60 s by default, instead of 0.1.16's 900 s) that this process renews while the turn runs, every
third of the lease, owner-checked. A holder that is killed, force-deleted, or cut off from Redis
stops renewing, and its claims go within one lease, so the provider's retry runs the message on
another replica instead of being told "in progress" for 15 minutes. The claim's token names the
pod (``<pod>:<random>``), so a claim found in Redis says who holds it.

A turn that outlives its lost lease records nothing (0.1.16's record is owner-checked: it writes
only over its own claim, a record, or nothing); the renewal counts and logs each lease it found
gone (``lost``)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Mapping, Optional, Set

import gwop_upstream as upstream
from gwop_claims import build_store
from gwop_log import say

# extend KEYS[1]'s expiry only while it still holds ARGV[1] (this process's claim)
RENEW_LUA = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
             "else return 0 end")


class Leases:
    def __init__(self, gateway: Any, lease_seconds: float, pod: str,
                 redis: Optional[Mapping[str, Any]] = None) -> None:
        # redis: the push.redis settings when the store is the Redis one (store_backend: redis)
        self.gateway, self.lease_ms, self.redis = gateway, int(lease_seconds * 1000), redis
        self.token = f"{pod or 'gateway'}:{secrets.token_hex(12)}"
        self.held: Set[str] = set()
        self.lost = 0
        self.lost_at: Optional[float] = None  # unix: the last lease lost while its turn ran
        self._leased_store: Optional[Any] = None

    def _store(self) -> Optional[upstream.RedisStore]:
        """The Redis store, given this process's token and lease before its first claim."""
        store = upstream.redis_store(self.gateway)
        if store is not None and store.store is not self._leased_store:
            store.lease(self.token, self.lease_ms)
            self._leased_store = store.store
        return store

    def wrap(self) -> None:
        calls = upstream.claim_calls(self.gateway)

        def reserve_leased(key: str) -> bool:
            if upstream.idempotency_store(self.gateway) is None:
                build_store(self.gateway, self.redis)  # built here, so its first claim is leased too
            store = self._store()
            admitted = calls.reserve(key)
            if admitted and store is not None and not store.degraded():
                self.held.add(key)
            return admitted

        def record_leased(key: str) -> None:
            self.held.discard(key)
            calls.record(key)

        def release_leased(key: str) -> None:
            self.held.discard(key)
            calls.release(key)

        upstream.set_claim_calls(self.gateway, upstream.ClaimCalls(reserve_leased, record_leased, release_leased))

    def renew(self) -> int:
        """Extend every claim this process still holds; a claim no longer ours (expired while Redis
        was unusable, taken by another replica, flushed) is dropped and counted. Stops at the first
        failure (Redis unusable: the next round tries again). Returns the claims renewed."""
        store = self._store()
        if store is None:
            return 0
        renewed = 0
        for key in list(self.held):
            if int(store.client.eval(RENEW_LUA, 1, store.key(key), store.token, self.lease_ms) or 0):
                renewed += 1
            elif key in self.held:  # not finished meanwhile: the claim went while the turn runs
                self.held.discard(key)
                self.lost += 1
                self.lost_at = time.time()
                say(f"a webhook claim's lease was lost while its turn ran ({self.lost} so far): another replica "
                    "may run it again")
        return renewed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            if self.held:
                try:
                    await asyncio.to_thread(self.renew)
                except Exception:  # noqa: BLE001 - Redis unusable now: the next round, within the lease
                    pass
