"""Claims held for exactly as long as their turn runs, and fenced when they cannot be.

Every webhook claim this process writes in the gateway's Redis store (at admission, or by the
outage journal for a turn admitted while Redis could not be asked) carries a token of its own
(``<pod>:<process>:<claim>``) and a short lease (``claim_lease_seconds``, 60 s by default, not
0.1.16's 900 s), and is held here until its turn records or releases it. So:

- a claim names its holder, and the holder's release, record and renewal touch only that claim:
  releasing what an earlier, held delivery may have left in Redis can never delete the claim of a
  turn that runs now (one token per process did exactly that after an outage);
- a holder that dies (killed, force-deleted, cut off) stops renewing, and its claims go within one
  lease, so the provider's retry runs the message elsewhere instead of hearing "in progress";
- renewals run on a thread of their own with their own Redis connection and socket timeout, never
  behind the agent's work in the event loop's default executor (a busy pool once let a claim
  expire under a running turn);
- a lease is not a lock: a holder can be cut off from Redis or starved past its lease while its
  turn still runs. Each claim has a deadline on the monotonic clock (the start of its last
  renewal that went through, plus the lease, less ``margin``); a turn whose claim reaches it is
  stopped (its request task cancelled: the provider is answered 503 and no reply is sent), so it
  cannot go on after another replica may have admitted the same message. What the stopped turn
  had already done (a tool call, a model call) stays done: the trade-off is a retried turn, never
  two replies. While a renewal fails, ``/health`` says so at once (``claims_unrenewed``,
  ``renew_failing_for_s``): the operator announces that exactly-once is not held before the claim
  can expire (gateway_operator.core.conditions).
- a claim found gone while its turn runs is counted (``lost``) and dated from when it expired in
  Redis (the last renewal that went through plus the lease), not from when that was noticed.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import gwop_contract as contract
import gwop_upstream as upstream
from gwop_claims import build_store
from gwop_log import say
from gwop_redis import redis_client

# extend KEYS[1]'s expiry only while it still holds ARGV[1] (this claim's token)
RENEW_LUA = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
             "else return 0 end")
# set KEYS[1] to ARGV[1] (PX ARGV[4]) where nothing is, or where a claim ARGV[2] or ARGV[3] names is
TAKE_LUA = ("local v = redis.call('get', KEYS[1]); if v == false or v == ARGV[2] or v == ARGV[3] then "
            "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[4]); return 1 else return 0 end")
RENEW_EVERY = 1 / 3      # of the lease, while renewals go through
RETRY_S = 1.0            # between renewal rounds while they fail
FENCE_TICK_S = 0.5       # how often the fence looks at the deadlines (on the event loop)
NO_CLAIM = "-"           # the token suffix of calls made for a key this process holds no claim of


def _current_task() -> Optional[Any]:
    """The request task a claim call runs in (None off the event loop: the journal's flush
    thread, the protocol model)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def fence_margin(lease_s: float) -> float:
    """How long before a claim can expire its turn is stopped: room for the fence's tick, a late
    event loop and the clocks of Redis and this host running at slightly different rates."""
    return max(3.0, 0.15 * lease_s)


def renew_timeout(lease_s: float) -> float:
    """The renewal connection's socket timeout: a round that hangs on a partition must end well
    within the time the fence leaves."""
    return min(2.0, lease_s / 10)


@dataclass
class Claim:
    """One claim this process holds: its token, and (monotonic) when Redis last confirmed it, at
    the start of the call that did (the claim's write, or a renewal that went through)."""

    token: str
    confirmed: float
    unrenewed: bool = False          # the last renewal round did not reach it
    task: Optional[Any] = None       # the request task running its turn (None: not known here)
    fenced: bool = False
    lost: bool = False               # a renewal found it gone while its turn runs: fenced at the next tick


class Leases:
    def __init__(self, gateway: Any, lease_seconds: float, pod: str,
                 redis: Optional[Mapping[str, Any]] = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        # redis: the push.redis settings when the store is the Redis one (store_backend: redis);
        # its renewals use a connection of their own, bounded by renew_timeout
        self.gateway, self.redis, self.clock, self.wall = gateway, redis, clock, wall
        self.lease_s = float(lease_seconds)
        self.lease_ms = int(self.lease_s * 1000)
        self.margin_s = fence_margin(self.lease_s)
        self.process = f"{pod or 'gateway'}:{secrets.token_hex(6)}:"   # every claim's token starts so
        self.held: Dict[str, Claim] = {}
        self.lost = 0
        self.lost_at: Optional[float] = None          # unix: when the last claim lost under its turn expired
        self.fenced = 0
        self.failing_since: Optional[float] = None    # monotonic: renewal rounds fail since
        self.owner_key: Optional[str] = None          # <prefix>hookidem-owner:<pod>, refreshed each round
        self.on_failure: Optional[Callable[[], object]] = None  # told (from the renewal thread) a round failed
        self._lock = threading.Lock()
        # turns admitted without a claim (best-effort, while Redis could not be asked): their request
        # task, so that the claim the journal adopts for one later is fenced like any other, and the
        # token their reserve was sent under (its SET may still reach Redis, as a paused one runs
        # what it had queued when it resumes), which their record and release then act as
        self._unclaimed: Dict[str, Tuple[Optional[Any], str]] = {}
        self._client: Optional[Any] = None
        self._leased_store: Optional[Any] = None
        self._stop = threading.Event()

    # -- tokens and the store ------------------------------------------------------------------

    def new_token(self) -> str:
        return f"{self.process}{secrets.token_hex(8)}"

    def _store(self) -> Optional[upstream.RedisStore]:
        """The Redis store, given this process's lease before its first claim."""
        store = upstream.redis_store(self.gateway)
        if store is not None and store.store is not self._leased_store:
            store.lease(self.lease_ms)
            self._leased_store = store.store
        return store

    def _redis(self, store: upstream.RedisStore) -> Any:
        """The renewals' own connection (the store's client has no socket timeout of its own)."""
        if self.redis is None:
            return store.client
        if self._client is None:
            self._client = redis_client(self.redis, timeout=renew_timeout(self.lease_s))
        return self._client

    def hold(self, key: str, token: str, since: float) -> None:
        """``key`` is claimed under ``token`` (its write began at ``since``): held until its turn ends."""
        with self._lock:
            self.held[key] = Claim(token, since, task=_current_task())

    def drop(self, key: str) -> Optional[Claim]:
        with self._lock:
            return self.held.pop(key, None)

    def adopt(self, key: str, since_unix: float, replaces: Optional[str] = None) -> bool:
        """The outage journal writes the claim of a turn admitted while Redis could not be asked
        (this lease, where nothing is, or over a claim this process may have left for the key: the
        one ``replaces`` names (a held delivery's), or the one the turn's own reserve was sent
        under): held and renewed like any other until the turn ends. False when the key holds
        something else (another replica's claim, a record): nothing is written."""
        store = self._store()
        if store is None:
            return False
        token, since = self.new_token(), self.clock()
        with self._lock:
            task, sent = self._unclaimed.get(key, (None, token))
        if not int(self._redis(store).eval(TAKE_LUA, 1, store.key(key), token, replaces or token, sent,
                                           self.lease_ms) or 0):
            return False
        with self._lock:
            self._unclaimed.pop(key, None)
            self.held[key] = Claim(token, since, task=task)
        return True

    def disown(self, key: str) -> Optional[str]:
        """The token of ``key``'s claim, no longer held here (not renewed, not fenced): the journal's
        adoption wrote it for a turn that ended meanwhile, on the event loop, before the journal's
        thread could note it running. None when nothing is held (the turn's end took it)."""
        with self._lock:
            claim = self.held.pop(key, None)
        return claim.token if claim is not None else None

    # -- the claim calls -------------------------------------------------------------------------

    def wrap(self) -> None:
        calls = upstream.claim_calls(self.gateway)

        def reserve_leased(key: str) -> bool:
            if upstream.idempotency_store(self.gateway) is None:
                build_store(self.gateway, self.redis)  # built here, so its first claim is leased too
            store = self._store()
            if store is None:
                return calls.reserve(key)
            token, since = self.new_token(), self.clock()
            with store.acting_as(token):
                admitted = calls.reserve(key)
            if admitted and not store.degraded():
                self.hold(key, token, since)
            elif admitted:  # admitted best-effort (the journal's): no claim it knows of
                with self._lock:
                    self._unclaimed[key] = (_current_task(), token)
            return admitted

        def record_leased(key: str) -> None:
            store = self._store()
            if store is None:
                return calls.record(key)
            with store.acting_as(self._ended(key)):
                calls.record(key)

        def release_leased(key: str) -> None:
            store = self._store()
            if store is None:
                return calls.release(key)
            with store.acting_as(self._ended(key)):
                calls.release(key)

        upstream.set_claim_calls(self.gateway, upstream.ClaimCalls(reserve_leased, record_leased, release_leased))

    def _ended(self, key: str) -> str:
        """``key``'s turn ends: no longer held; the token its record or release acts as (its claim's,
        or the one its best-effort reserve was sent under)."""
        with self._lock:
            claim = self.held.pop(key, None)
            _, sent = self._unclaimed.pop(key, (None, self.process + NO_CLAIM))
        return claim.token if claim is not None else sent

    # -- renewal (its own thread) ------------------------------------------------------------------

    def renew(self) -> int:
        """One round: extend every claim still held, owner-checked, each from the moment the call
        began. A claim no longer ours (expired while Redis was unusable, flushed) is marked lost
        (the fence stops its turn at its next tick), counted and dated from its expiry. Stops at the first failure (Redis unusable: every claim
        not yet renewed this round is marked unrenewed). Returns the claims renewed."""
        store = self._store()
        if store is None:
            return 0
        client, renewed = self._redis(store), 0
        with self._lock:
            round_ = [(key, claim) for key, claim in self.held.items() if not claim.lost]
        done: set = set()
        try:
            if self.owner_key:
                client.set(self.owner_key, self.process, px=2 * self.lease_ms)
            for key, claim in round_:
                began = self.clock()
                ours = int(client.eval(RENEW_LUA, 1, store.key(key), claim.token, self.lease_ms) or 0)
                done.add(key)
                if ours:
                    with self._lock:
                        claim.confirmed, claim.unrenewed = began, False
                    renewed += 1
                    continue
                with self._lock:
                    gone = self.held.get(key) is claim and not claim.lost  # not finished meanwhile
                    if gone:   # kept, so that the fence stops its turn (another replica may run it now)
                        claim.lost = claim.unrenewed = True
                        self.lost += 1
                        expired = min(began, claim.confirmed + self.lease_s)
                        self.lost_at = self.wall() - (self.clock() - expired)
                if gone:
                    say(f"a webhook claim's lease was lost while its turn ran ({self.lost} so far): the turn is "
                        "stopped; another replica may run it again")
        except Exception:  # noqa: BLE001 - Redis unusable now: said at once, tried again in RETRY_S
            with self._lock:
                for key, claim in round_:
                    if key not in done:
                        claim.unrenewed = True
                if self.failing_since is None:
                    self.failing_since = self.clock()
            if self.on_failure is not None:
                self.on_failure()
            raise
        self.failing_since = None
        return renewed

    def run_thread(self) -> threading.Thread:
        """Renew on a daemon thread of its own until ``stop``: every third of the lease, every
        RETRY_S while rounds fail."""
        def loop() -> None:
            wait = self.lease_s * RENEW_EVERY
            while not self._stop.wait(wait):
                try:
                    self.renew()
                    wait = self.lease_s * RENEW_EVERY
                except Exception:  # noqa: BLE001 - told in renew; the next round soon
                    wait = RETRY_S
        thread = threading.Thread(target=loop, name="gwop-claim-renewal", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    # -- the fence (on the event loop) -------------------------------------------------------------

    def deadline(self, claim: Claim) -> float:
        return claim.confirmed + self.lease_s - self.margin_s

    def due(self) -> List[str]:
        """The claims whose deadline has passed, or that a renewal found gone, while their turn runs:
        fenced now (their turn's task, when known, is cancelled: the endpoint answers 503 and nothing
        else of the turn runs). A holder resumed after a pause (SIGSTOP) past its lease meets both:
        whichever of the fence's tick and its renewal comes first, its turn stops."""
        now, due = self.clock(), []
        with self._lock:
            for key, claim in self.held.items():
                if not claim.fenced and (claim.lost or now >= self.deadline(claim)):
                    claim.fenced = True
                    self.fenced += 1
                    due.append(key)
                    if claim.task is not None and not claim.task.done():
                        claim.task.cancel()
        for key in due:
            say(f"a webhook turn was stopped before its claim could expire (no renewal reached Redis for "
                f"{self.lease_s - self.margin_s:g}s): the provider is answered 503 and its retry runs it once")
        return due

    def fenced_of(self, keys: List[str]) -> bool:
        with self._lock:
            return any(self.held.get(k) is not None and self.held[k].fenced for k in keys)

    async def fence(self) -> None:
        while True:
            await asyncio.sleep(FENCE_TICK_S)
            self.due()

    # -- what /health says -----------------------------------------------------------------------

    def view(self) -> Dict[str, Any]:
        now = self.clock()
        with self._lock:
            claims = list(self.held.values())
        expiry = min((c.confirmed + self.lease_s for c in claims), default=None)
        return {contract.CLAIMS_HELD: len(claims), contract.CLAIMS_UNRENEWED: sum(c.unrenewed for c in claims),
                contract.CLAIMS_EXPIRE_IN_S: None if expiry is None else round(max(0.0, expiry - now), 1),
                contract.RENEW_FAILING_FOR_S:
                    round(now - self.failing_since, 1) if self.failing_since is not None else 0.0,
                contract.FENCED: self.fenced, contract.CLAIM_LEASE_S: self.lease_s, contract.LEASES_LOST: self.lost}

    # -- at the stop -------------------------------------------------------------------------------

    def release_all(self) -> int:
        """Release (owner-checked, each by its token) every claim still held; what a held delivery
        may have left under this process's tokens is left to its lease. Returns those released."""
        store = self._store()
        if store is None:
            return 0
        released = 0
        with self._lock:
            held, self.held = dict(self.held), {}
        for key, claim in held.items():
            try:
                released += int(store.release(key, claim.token))
            except Exception:  # noqa: BLE001 - Redis unusable: the lease ends them
                break
        return released
