"""Holds this replica's shards (``--shards``): core/shards.py's protocol run on real Leases.

Two sides, so that a busy event loop never costs a shard:

- **The Lease side runs on a thread of its own** (``_work``): every ``retry_period`` it renews the
  shards it holds (all at once), reads the Leases, plans, takes, marks the shards it gives up and,
  once their loops have ended, clears their holder, and renews its member Lease; every write is
  conditioned on a resourceVersion. It needs nothing from the event loop: starting a shard's
  thousand loops or a resync wave holds the event loop for seconds, and a renewal that waited
  behind them would miss its deadline, lose the shard and restart its loops, which adds the load
  that makes the next renewal late.
- **The loop side runs on the event loop** (``_settle``): after each tick, and at the earliest
  renew deadline of what it holds, it starts the loops of shards newly held and stops (and
  awaits) those no longer held. Drain, then hand over: a shard given up keeps its Lease's holder
  until its loops have ended.

A shard counts as held from the *start* of the write that renewed or took it until
``renew_deadline`` later (``holds``). The loop side may notice that late on a busy event loop,
but nothing is written on a shard past it: every API write of a GatewayDeployment's loop asks
``write_bound`` just before it is sent (clients/kube.py, ``ACTING_FOR``), and is bounded so that
it lands before another replica may take the shard (``Timing.write_bound``: what is left of the
renewal it is sent under, plus the margin's share). A shard given up is handed over once the
writes already sent for it have ended (loop/handlers.py's ``lost``).

On shutdown the thread ends, every loop is stopped, then each shard's holder is cleared and the
member Lease deleted, so another replica takes over at its next tick instead of after the Lease
duration.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, Sequence

from gateway_operator.clients.shard_leases import ShardLeases
from gateway_operator.core import shards as S
from gateway_operator.core.shards import Observed
from gateway_operator.loop import metrics

log = logging.getLogger(__name__)
Change = Callable[[frozenset[int]], Awaitable[None]]


class ShardHolder:
    def __init__(self, leases: ShardLeases, shards: int, identity: str, timing: S.Timing,
                 on_gain: Change, on_lose: Change, clock: Callable[[], float] = time.monotonic) -> None:
        self.leases, self.shards, self.me, self.timing = leases, shards, identity, timing
        self.on_gain, self.on_lose, self.clock = on_gain, on_lose, clock
        self.observed = Observed()
        self.members = 1
        # the loop side's: the shards whose loops run here, and those lost whose loops are ending
        self.held: frozenset[int] = frozenset()
        self._draining: frozenset[int] = frozenset()
        # the Lease side's: given up, their holder cleared once they are neither held nor draining
        self._giving: set[int] = set()
        self._lock = threading.Lock()   # a settle's view of what is held, against a tick's give-up
        self._changing = asyncio.Lock()   # gains and losses in order: a drain ends before a later start
        self._settling: set[asyncio.Future[None]] = set()
        self._lapse: asyncio.TimerHandle | None = None
        self._stopping = threading.Event()
        self._worker: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-leases-stop")
        self._writers = ThreadPoolExecutor(max_workers=min(shards, 8), thread_name_prefix="shard-leases-write")
        self._known: dict[str, S.LeaseView] = {}   # each Lease as last read or written here

    def holds(self, shard: int) -> bool:
        return S.holds(self.observed, shard, self.clock(), self.timing)

    def owns(self, uid: str) -> bool:
        """Whether this replica may act on the GatewayDeployment with ``uid`` now (any thread)."""
        return self.write_bound(uid) is not None

    def write_bound(self, uid: str) -> tuple[float, float] | None:
        """(connect, read) seconds for a write sent now for the GatewayDeployment with ``uid``
        (``Timing.write_bound`` from its shard's last renewal); None when this replica may not
        act on it (any thread: asked just before each write is sent)."""
        shard = S.shard_of(uid, self.shards)
        at = self.observed.renewed_at.get(shard)
        if shard not in self.held or at is None:
            return None
        return self.timing.write_bound(at, self.clock())

    # -- the Lease side (its own thread) ---------------------------------------------------------

    async def run(self) -> None:
        """Starts the Lease side; returns when cancelled (``stop`` then hands the shards over)."""
        self._loop = asyncio.get_running_loop()
        self._worker = threading.Thread(target=self._work, name="shard-leases", daemon=True)
        self._worker.start()
        try:
            await asyncio.Event().wait()
        finally:
            self._stopping.set()

    def _work(self) -> None:
        while not self._stopping.is_set():
            started = self.clock()
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - the API server away: the deadlines stop the loops
                log.warning("shard leases: %s: %s", type(e).__name__, str(e)[:200])
            if not self._post(self._after_tick):
                return
            self._stopping.wait(max(self.timing.retry_period - (self.clock() - started), 0.1))

    def tick(self) -> None:
        """One round of the Lease side (blocking: its thread, or a test's). The shards held are
        renewed first, all at once and from the version this replica last saw of each Lease, so
        that neither the list nor another shard's write delays a renewal (on an API server that
        takes seconds a call, a list and four sequential renewals exceed the renew deadline); a
        renewal from a version someone else has since written is refused, as any. Then the list,
        the plan, the takes and give-ups, the member Lease."""
        started = self.clock()
        self._write_shards([s for s in range(self.shards) if self.holds(s) and s not in self._giving])
        renewed = self.clock()
        leases = self.leases.read()
        read = self.clock()
        by_name = {lease.name: lease for lease in leases}
        self._known = dict(by_name)
        with self._lock:
            # seen at the answer, not the ask: a renewal the server applied while the list was on
            # its way must count from no earlier than its write
            self.observed.note(leases, self.clock())
            plan = S.plan(self.me, self.shards, leases, self.observed, self.clock(), self.timing,
                          giving=frozenset(self._giving))
            for shard in plan.give:   # its loops stop at the next settle; the holder is cleared after
                self.observed.renewed_at.pop(shard, None)
                self._giving.add(shard)
            drained = sorted(self._giving - self.held - self._draining)
        self.members = plan.members
        if plan.give:
            log.info("giving up shards %s (fair share %d of %d shards, %d members)", sorted(plan.give), plan.fair,
                     self.shards, plan.members)
        for shard in drained:
            name = self.leases.shard_name(shard)
            lease = by_name.get(name)
            if lease is None or lease.holder != self.me or self.leases.write(name, lease, "", self.timing.lease_duration):
                self._giving.discard(shard)
                log.info("gave up shard %d", shard)
        self._write_shards(plan.take)
        member = self.leases.member_name(self.me)
        self.leases.write(member, by_name.get(member), self.me, self.timing.lease_duration)
        took = self.clock() - started
        if took > self.timing.renew_deadline / 2:   # the next renewal is that much nearer its deadline
            log.warning("shard leases: a round took %.1f s (renewals %.1f s, list %.1f s), %.0f s of renew deadline",
                        took, renewed - started, read - renewed, self.timing.renew_deadline)

    def _write_shards(self, shards: Sequence[int]) -> None:
        """Names this replica the holder of ``shards`` (renewed or taken), one write each at once,
        conditioned on the version last seen; each that lands counts from its send."""
        def one(shard: int) -> None:
            name = self.leases.shard_name(shard)
            sent = self.clock()
            try:
                written = self.leases.write(name, self._known.get(name), self.me, self.timing.lease_duration)
            except Exception as e:  # noqa: BLE001 - the API server away: its deadline stops the shard
                log.warning("shard lease %d: %s: %s", shard, type(e).__name__, str(e)[:200])
                return
            if written is not None:
                self._known[name] = written
                # never again once given up or stopping, whatever the order
                if shard not in self._giving and not self._stopping.is_set():
                    self.observed.renewed_at[shard] = sent
        list(self._writers.map(one, shards))

    def _post(self, callback: Callable[[], None]) -> bool:
        """``callback`` on the event loop; False once that loop is closed."""
        loop = self._loop
        try:
            if loop is not None:
                loop.call_soon_threadsafe(callback)
            return True
        except RuntimeError:
            return False

    # -- the loop side (the event loop) ----------------------------------------------------------

    def _after_tick(self) -> None:
        """A settle now, and another at the earliest renew deadline of what is held then."""
        if self._lapse is not None:
            self._lapse.cancel()
        now = self.clock()
        due = [d for at in list(self.observed.renewed_at.values()) if (d := at + self.timing.renew_deadline) > now]
        if due:
            # a little after the deadline: the event loop's timers may round it down by a millisecond
            self._lapse = asyncio.get_running_loop().call_later(min(due) - now + 0.05,
                                                                self._after_tick)
        task = asyncio.ensure_future(self._settle())
        self._settling.add(task)   # a reference until it ends (the loop keeps only weak ones)
        task.add_done_callback(self._settling.discard)

    async def _settle(self) -> None:
        """Starts the loops of shards newly held and stops (and awaits) those no longer held."""
        async with self._changing:
            with self._lock:
                now_held = frozenset(s for s in range(self.shards) if self.holds(s))
                lost, gained = self.held - now_held, now_held - self.held
                self.held, self._draining = now_held, self._draining | lost
            if lost:
                log.info("no longer holds shards %s: stopping their GatewayDeployments", sorted(lost))
                try:
                    await self.on_lose(lost)
                finally:
                    with self._lock:
                        self._draining = self._draining - lost
            if gained:
                log.info("holds shards %s", sorted(gained))
                await self.on_gain(gained)
            metrics.shards_held(self.shards, self.held, self.members)

    async def stop(self) -> None:
        """Ends the Lease side, stops every loop, then clears each shard's holder and deletes the
        member Lease (bounded by the renew deadline: else they expire on their own)."""
        self._stopping.set()
        if self._lapse is not None:
            self._lapse.cancel()
        loop = asyncio.get_running_loop()
        if self._worker is not None:   # its Lease calls are bounded by their timeout
            await loop.run_in_executor(self._calls, self._worker.join, self.timing.renew_deadline)
        with self._lock:
            self.observed.renewed_at.clear()
        await self._settle()
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                await loop.run_in_executor(self._calls, self._hand_over)
        except Exception as e:  # noqa: BLE001 - the Leases then expire on their own
            log.warning("could not give up the shards: %s", type(e).__name__)
        self._calls.shutdown(wait=False, cancel_futures=True)
        self._writers.shutdown(wait=False, cancel_futures=True)

    def _hand_over(self) -> None:
        leases = self.leases.read()
        mine = [lease for lease in leases if lease.shard is not None and lease.holder == self.me]
        for lease in mine:
            self.leases.write(lease.name, lease, "", self.timing.lease_duration)
        log.info("gave up shards %s", sorted(lease.shard for lease in mine if lease.shard is not None))
        member = next((lease for lease in leases if lease.name == self.leases.member_name(self.me)), None)
        if member is not None:
            self.leases.delete(member.name, member)
