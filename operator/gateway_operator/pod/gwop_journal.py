"""While this replica cannot ask Redis: first a fail-closed window (each new delivery is answered 503
with Retry-After, so a blip, a pause or a partition shorter than the window costs the provider a
retry, never a second run), then fail open as 0.1.16 does, with the outage journal: what this
replica admitted while Redis could not be used, written to Redis once it answers, so that a
redelivery after the outage is not run again."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import threading
import time
from typing import Any, Callable, Dict, Optional, Set

import gwop_contract as contract
import gwop_upstream as upstream
from gwop_log import say


NO_CLAIM = "-"  # the token a record is written under for a turn that held no claim (matches none)

# the journal's and the reach probe's Redis calls, off the event loop on a thread of their own: the
# default executor is the agent's (model calls, tools, guardrails), and behind a busy one the
# breaker would stay open after Redis answered again, and the replica admit best-effort what Redis
# had recorded
_OWN = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gwop-journal")


async def off_loop(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` on the journal's own thread."""
    return await asyncio.get_running_loop().run_in_executor(_OWN, function, *args)

# A Redis that answers but refuses writes (redis-py's exception for each refusal) and what /health
# then says after 0.1.16's own text, so that the operator can name it (health.py maps the text)
RUNTIME_TEXT = "redis idempotency backend unreachable at runtime (dedup best-effort until it recovers)"
REFUSALS = (("OutOfMemoryError", "Redis refuses writes: out of memory (maxmemory under noeviction)"),
            ("ReadOnlyError", "Redis refuses writes: a read-only replica (READONLY)"),
            ("NoPermissionError", "Redis refuses a command or the key prefix to its ACL user (NOPERM)"),
            ("BusyLoadingError", "Redis is loading its dataset (LOADING)"))


def refusal_of(error: BaseException) -> Optional[str]:
    """What a refusal says (REFUSALS), None for anything else (a timeout, a closed connection)."""
    names = {klass.__name__ for klass in type(error).__mro__}
    return next((text for name, text in REFUSALS if name in names), None)


class OutageJournal:
    """What this replica admitted while Redis could not be used, written to Redis once it answers.

    0.1.16's Redis store fails open: while Redis is down every delivery is admitted and nothing is
    recorded, so a redelivery after Redis is back runs the agent again while every condition says
    exactly-once holds. The journal wraps the gateway's
    ``_hook_reserve``/``_hook_record``/``_hook_release``: a key admitted or finished while the
    store is degraded is kept here (bounded: ``MAX_KEYS``, and no longer than the record TTL), a
    redelivery of it to this replica meanwhile is not run again, and as soon as Redis answers (an
    attempt every second, and before the next reservation) each key is written as the store
    writes it: ``recorded`` with the TTL left (the store's own owner-checked record: over nothing,
    this replica's claim or a record; a paused Redis runs the commands it had queued when it
    resumes, so a claim that timed out can appear then), or, for a turn still running, a claim of
    its own that the leases then hold and renew until the turn ends (``adopt``: where nothing is, or
    over what this replica's held delivery of the key may have left), so what another replica wrote
    is kept. A redelivery to *another* replica during the outage still runs (announced:
    RedisReachable=False)."""

    MAX_KEYS = 100_000
    # past the window, a delivery is admitted best-effort only while a failed call is this fresh: the
    # tick asks every second (and each flush that fails says so too)
    EVIDENCE_S = 3.0

    def __init__(self, gateway: Any, fail_closed_seconds: float = 0.0,
                 adopt: Optional[Callable[[str, float, Optional[str]], bool]] = None,
                 disown: Optional[Callable[[str], Optional[str]]] = None) -> None:
        self.gateway = gateway
        # writes, holds and renews the claim of a turn admitted while Redis could not be asked, once
        # it answers (gwop_leases.Leases.adopt: key, unix time admitted, the token of a claim this
        # replica's held delivery of it may have left -> written)
        self.adopt = adopt
        # a claim adopted for a turn that ended while the flush wrote it: no longer held, its token
        # (gwop_leases.Leases.disown), so that the turn's record is written over it
        self.disown = disown
        # the fail-closed window: from the first failed call, new deliveries are held (503) this long
        self.fail_closed = float(fail_closed_seconds)
        self.broken_since: Optional[float] = None   # monotonic, while broken: the fail-closed window's start
        # monotonic, while broken: when this replica stopped being able to use Redis. /health's
        # unusable_for_s counts from it, and the operator takes a replica cut off that long out of
        # the traffic; unlike the window's start it never restarts before Redis answers again
        self.unusable_since: Optional[float] = None
        self.answers_since = time.monotonic()        # monotonic: the start, or when Redis last answered again
        self.holding: "contextvars.ContextVar[bool]" = contextvars.ContextVar("gwop_holding", default=False)
        # keys whose reserve failed and was held, with the token that reserve was made under: its SET
        # may still have reached Redis (a stall that outlasted the client's timeout), so that claim,
        # and only that one, is released once Redis answers (a later turn of the same key, admitted
        # meanwhile, holds a claim of its own token)
        self.maybe_claimed: Dict[str, str] = {}
        # turns admitted while Redis could not be asked whose claim the flush then wrote (adopt): no
        # longer journalled, still running; a redelivery of them to this replica is not run again
        self.running: Set[str] = set()
        # the claim token of each journalled record's turn: its record is written over that claim
        self.tokens: Dict[str, str] = {}
        self.admitted: "collections.OrderedDict[str, float]" = collections.OrderedDict()  # in flight
        self.done: "collections.OrderedDict[str, float]" = collections.OrderedDict()      # ran, not recorded
        # ran, and its record met another replica's claim (this one's had expired: a lease lost while
        # Redis was unusable, or a held delivery's claim that a paused Redis ran on resuming): written
        # once that claim goes (released, expired) or becomes a record; until then a redelivery to a
        # replica that asks Redis could run it again once the claim is released
        self.contested: "collections.OrderedDict[str, float]" = collections.OrderedDict()
        self.dropped = 0
        self.dropped_at: Optional[float] = None  # unix: the last key dropped (never to reach Redis)
        self._told_dropped = 0                   # ... of which the log has said
        self.best_effort = 0  # deliveries admitted without asking Redis (past the window), since the start
        self._lock = threading.Lock()
        # after a failed call the request path stops calling Redis (each call would hold the event
        # loop for the client's socket timeout, and liveness probes then fail) until the journal's
        # own attempt, off the loop, finds Redis answering again
        self.broken = False
        self.failed_at: Optional[float] = None  # monotonic: the last failed Redis call this journal heard of
        self.refusal: Optional[str] = None  # what the last failed call said, when Redis refused it
        self._told: Optional[str] = None    # the refusal /health carries
        self._hooked: Optional[Any] = None  # the store whose failures this journal hears (on_runtime_degraded)

    def _store(self) -> Optional[upstream.RedisStore]:
        store = upstream.redis_store(self.gateway)
        if store is not None and store.store is not self._hooked:  # built since: hear its failures
            upstream.on_runtime_degraded(store, self._failed)
            self._hooked = store.store
        return store

    def _failed(self, error: BaseException) -> None:
        """A call of the store failed: a refusal is named in /health at once (the operator reads it
        at its next poll), not at the journal's next probe."""
        self._saw_failure()
        refusal = refusal_of(error)
        if refusal:
            self.refusal = refusal
            self._break()
            self._tell_refusal()

    def _keep(self, table: "collections.OrderedDict[str, float]", key: str) -> None:
        with self._lock:
            self._keep_locked(table, key)

    def _keep_locked(self, table: "collections.OrderedDict[str, float]", key: str) -> None:
        table[key] = time.time()
        table.move_to_end(key)
        while len(self.admitted) + len(self.done) + len(self.contested) > self.MAX_KEYS:
            (self.done if self.done else self.contested if self.contested else self.admitted).popitem(last=False)
            self.dropped += 1
            self.dropped_at = time.time()

    def wrap(self) -> None:
        calls = upstream.claim_calls(self.gateway)
        reserve, record, release = calls.reserve, calls.record, calls.release

        def reserve_journalled(key: str) -> bool:
            store = self._store()
            if store is None:
                return reserve(key)
            if key in self.admitted or key in self.done or key in self.contested or key in self.running:
                return False  # this replica runs or ran it and Redis has no record of it yet: not again
            # known unusable before this call (built while Redis did not answer; or the breaker is open,
            # and /health says so again should a call of 0.1.16's have cleared it meanwhile)
            if store.degraded() or self.broken:
                self._break()
            if self.broken:
                if self._closed():
                    return self._hold()
                # past the window: fail open at once, as 0.1.16 would after its timeout, journalled
                self._keep(self.admitted, key)
                self.best_effort += 1
                return True
            admitted = reserve(key)
            if store.degraded():  # the call failed (0.1.16 then admits without a claim)
                self._break()
                if self._closed():
                    if admitted:
                        self.maybe_claimed[key] = store.token
                    return self._hold()
                if admitted:
                    self._keep(self.admitted, key)
                    self.best_effort += 1
            return admitted

        def record_journalled(key: str) -> None:
            store = self._store()
            if store is None or not self.broken:
                record(key)
            journalled = store is not None and (self.broken or store.degraded())
            if journalled:
                self._break()
            # one step, as the flush's thread sees it: running, or ended and journalled
            with self._lock:
                self.admitted.pop(key, None)
                self.running.discard(key)
                if store is not None and journalled:
                    self.tokens[key] = store.token  # the turn's claim, if it had one (gwop_leases)
                    self._keep_locked(self.done, key)
            if store is not None and not journalled:
                self._verify(store, key)

        def release_journalled(key: str) -> None:
            journalled = key in self.admitted
            with self._lock:
                self.admitted.pop(key, None)
                self.running.discard(key)
            if not (self.broken and journalled):
                release(key)

        upstream.set_claim_calls(self.gateway, upstream.ClaimCalls(reserve_journalled, record_journalled,
                                                                  release_journalled))

    def _verify(self, store: upstream.RedisStore, key: str) -> None:
        """0.1.16's record writes nothing, silently, over another replica's claim: one read says
        whether it took; when not, the key is kept (``contested``) and written later."""
        try:
            if not store.is_recorded(key):
                self.tokens[key] = store.token
                self._keep(self.contested, key)
        except Exception:  # noqa: BLE001 - Redis went meanwhile: kept, as a record that failed
            self._break()
            self.tokens[key] = store.token
            self._keep(self.done, key)

    def settle_contested(self) -> int:
        """Write each contested record once nothing but a record or nothing holds its key; returns
        those written (or expired)."""
        store = self._store()
        if store is None:
            return 0
        with self._lock:
            pending = list(self.contested.items())
        settled, now = 0, time.time()
        for key, at in pending:
            left = store.ttl_ms - int((now - at) * 1000)
            if left > 0 and not store.record(key, left, self.tokens.get(key, NO_CLAIM)):
                continue  # still another replica's claim: the next round
            with self._lock:
                self.contested.pop(key, None)
                self.tokens.pop(key, None)
            settled += 1
        return settled

    def runs(self, key: str) -> bool:
        """This replica admitted ``key`` while it could not ask Redis and its turn still runs: a
        redelivery is told "in progress" (503), not "deduplicated" (a 2xx ends the provider's
        retries, and the turn may yet fail or its replica stop)."""
        return key in self.admitted or key in self.running

    def note_unusable(self) -> None:
        """Something other than a webhook's call found Redis unusable (a claim renewal round): the
        breaker opens as for a failed call, and the next tick asks Redis whether it answers."""
        self._saw_failure()
        self._break()

    def _break(self) -> None:
        """Open the breaker. Whatever opened it (the store's failing call, a renewal round, a read
        after a record), /health lists ``durability:idempotency`` from now until the tick finds
        Redis answering (``mark_recovered``): IdempotencyDegraded counts this replica for as long as
        it holds deliveries or admits them best-effort without asking the store."""
        if not self.broken:
            self.broken, self.broken_since = True, time.monotonic()
            self.unusable_since = self.broken_since
            say(f"Redis cannot be asked: new webhooks are answered 503 for up to {self.fail_closed:g}s, then admitted "
                "and journalled" if self.fail_closed else "Redis cannot be asked: webhooks are admitted and journalled")
        store = upstream.redis_store(self.gateway)
        if store is None:
            return
        if not store.degraded():  # the store's fact first: what clears /health's entry once Redis answers
            store.mark_degraded("launcher", ConnectionError("a call of the launcher's own did not reach Redis"))
        # and /health's entry itself, whatever the store's fact says (0.1.16 writes it only when its
        # fact flips; a fact already set would leave an entry cleared meanwhile unwritten)
        upstream.record_idempotency_degraded(f"{RUNTIME_TEXT}: {self.refusal}" if self.refusal else RUNTIME_TEXT)

    def _saw_failure(self) -> None:
        """A Redis call failed. After a stretch with no word at all (longer than EVIDENCE_S: this
        process was stopped or starved, or its calls queued behind each other on its thread, and
        Redis may have answered meanwhile), the window starts again: what it holds back is this
        outage's, not one the replica never saw end. What /health says of the outage's length
        (``unusable_since``) does not start again: the replica could not use Redis all along."""
        now = time.monotonic()
        if self.broken and (self.failed_at is None or now - self.failed_at > self.EVIDENCE_S):
            self.broken_since = now
        self.failed_at = now

    def _closed(self) -> bool:
        """Within the fail-closed window (from the first failed call), or past it without fresh word
        that Redis is still unusable: this replica fails open only on a failure seen within
        EVIDENCE_S. A replica paused (SIGSTOP, a stalled VM) with its breaker open resumes with a
        window long past and no idea whether Redis answers again; it holds what comes until its
        tick has asked (else it would run again a redelivery that Redis recorded while it was
        stopped)."""
        if self.broken_since is None:
            return False
        now = time.monotonic()
        return now - self.broken_since < self.fail_closed or now - (self.failed_at or 0.0) > self.EVIDENCE_S

    def view(self) -> Dict[str, Any]:
        """This replica's own view of Redis, for /health (gwop_health)."""
        return {contract.REDIS: contract.ANSWERS if not self.broken else
                contract.REFUSING if self.refusal else contract.UNREACHABLE,
                contract.REFUSAL: self.refusal if self.broken else None,
                contract.HOLDING: self.broken and self._closed(),
                contract.UNUSABLE_FOR_S:
                    round(time.monotonic() - self.unusable_since, 1) if self.unusable_since is not None else 0.0,
                contract.ADMITTED_BEST_EFFORT: self.best_effort,
                contract.JOURNALLED: len(self.admitted) + len(self.done) + len(self.contested),
                contract.JOURNAL_DROPPED: self.dropped}

    def _hold(self) -> bool:
        """This delivery is answered 503 with Retry-After (by the route's endpoint): not run, not
        deduplicated."""
        self.holding.set(True)
        return False

    def release_maybe_claimed(self) -> None:
        """Release (owner-checked) the claims a held delivery's reserve may have left in Redis."""
        store = self._store()
        if store is None:
            return
        for key, token in list(self.maybe_claimed.items()):
            store.release(key, token)
            self.maybe_claimed.pop(key, None)

    def flush(self, limit: Optional[int] = None) -> int:
        """Write what is journalled to Redis (SET NX); stop at the first failure. Returns the
        keys written or found there."""
        store = self._store()
        if store is None:
            return 0
        with self._lock:
            pending = [(k, at, True) for k, at in self.done.items()] + [(k, at, False) for k, at in self.admitted.items()]
        written, now = 0, time.time()
        for key, at, ran in pending[:limit]:
            left = store.ttl_ms - int((now - at) * 1000)
            try:
                # a finished turn: the store's own owner-checked record (over nothing, its claim or a
                # record); a running one: its claim, held and renewed from now until the turn ends
                contested = ran and left > 0 and not store.record(key, left, self.tokens.get(key, NO_CLAIM))
                adopted = not ran and self.adopt is not None and self.adopt(key, at, self.maybe_claimed.get(key))
                if adopted:
                    self.maybe_claimed.pop(key, None)  # its held delivery's claim, if any, is the turn's now
            except Exception as exc:  # noqa: BLE001 - still down: the next attempt
                self._saw_failure()
                self.refusal = refusal_of(exc)
                break
            with self._lock:
                if not ran and key not in self.admitted:
                    # its turn ended on the event loop while this thread wrote its claim: journalled
                    # as done (record_journalled), its record is written over that claim at the next
                    # flush; the claim is no longer held, or it would be renewed for ever and block
                    # the key
                    disowned = self.disown(key) if adopted and self.disown is not None else None
                    if disowned is not None:
                        self.tokens[key] = disowned
                    continue
                (self.done if ran else self.admitted).pop(key, None)
                if not ran:
                    self.running.add(key)
                if contested:  # another replica's claim holds it: written once that goes
                    self.contested[key] = at
                else:
                    self.tokens.pop(key, None)
            written += 1
        return written

    PROBE_KEY = "gwop-write-probe"

    def _answers(self) -> bool:
        """Redis takes a write under the store's prefix (a PING answers from a Redis that refuses
        writes: out of memory, a read-only replica, a missing ACL grant)."""
        store = self._store()
        try:
            return store is not None and bool(store.client.set(store.key(self.PROBE_KEY), "probe", px=1000))
        except Exception as exc:  # noqa: BLE001 - still down, or refusing
            self._saw_failure()
            self.refusal = refusal_of(exc)
            return False

    def _tell_refusal(self) -> None:
        """/health names a refusal (0.1.16's text says only "unreachable"), once per change."""
        if self.broken and self.refusal and self.refusal != self._told:
            upstream.record_idempotency_degraded(f"{RUNTIME_TEXT}: {self.refusal}")
            self._told = self.refusal
            say(f"{self.refusal}: webhooks are held, then admitted best-effort, until it takes writes again")

    async def run(self) -> None:
        """Every second: ``tick``."""
        while True:
            await asyncio.sleep(1.0)
            await self.tick()

    async def tick(self) -> None:
        """While Redis is taken as down or something is journalled: see whether Redis answers (off
        the event loop), write what is journalled, and close the breaker. (The protocol's
        exploration drives it on a simulated clock: tests/harness/protocol_sim.py.)"""
        was = self.broken
        if self.broken and not (self.admitted or self.done):
            self.broken = not await off_loop(self._answers)
        if self.maybe_claimed and not self.broken:
            try:
                await off_loop(self.release_maybe_claimed)
            except Exception:  # noqa: BLE001 - not yet: the next round (their lease ends them anyway)
                pass
        if self.contested and not self.broken:
            try:
                await off_loop(self.settle_contested)
            except Exception:  # noqa: BLE001 - Redis unusable again: the next round
                pass
        if self.admitted or self.done:
            written = await off_loop(self.flush)
            if not (self.admitted or self.done):
                self.broken = False
                if written:
                    say(f"wrote {written} webhook record(s) admitted while Redis was unusable to Redis")
        self._tell_refusal()
        if was and not self.broken:
            self.broken_since, self.unusable_since, self.refusal, self._told = None, None, None, None
            self.answers_since = time.monotonic()
            say("Redis answers again: webhooks are asked of it again")
            # Redis answers again: what 0.1.16's next successful call would do (it clears the
            # store's degraded fact, so /health and the conditions recover without a webhook)
            store = self._store()
            try:
                if store is not None:
                    store.mark_recovered()
            except Exception:  # noqa: BLE001 - the next successful call clears it anyway
                pass
        if self.dropped > self._told_dropped:
            say(f"the outage journal is full: {self.dropped - self._told_dropped} admitted webhook(s) dropped "
                "from it (a redelivery of them may run again)")
            self._told_dropped = self.dropped
