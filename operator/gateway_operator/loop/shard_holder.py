"""Holds this replica's shards (``--shards``): core/shards.py's protocol run on real Leases.

Every ``retry_period`` a tick reads the Leases, plans, gives up (drain first: ``on_lose`` returns
once every loop of those shards has ended, and only then is the holder cleared), renews and
takes, one conditioned write at a time, and renews its member Lease. A shard counts as held from
the *start* of the write that renewed or took it until ``renew_deadline`` later; a timer at that
instant stops its loops if no later renewal succeeded, whatever the tick is doing (a slow API
server holds the tick, not the deadline). The Lease calls run on a thread of their own: in the
shared executor they queued behind a thousand GatewayDeployments' API calls at creation and the
renewals missed their deadline (the benchmark, 1,000 x 2 on two replicas). On shutdown every
shard is given up the same way and
the member Lease deleted, so another replica takes over at its next tick instead of after the
Lease duration.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

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
        self.held: frozenset[int] = frozenset()   # the shards whose loops run here
        self._lapses: dict[int, asyncio.TimerHandle] = {}
        self._settling: set[asyncio.Future[None]] = set()
        self._changing = asyncio.Lock()   # gains and losses in order: a drain ends before a later start
        self.members = 1
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-leases")

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args))

    def holds(self, shard: int) -> bool:
        return S.holds(self.observed, shard, self.clock(), self.timing)

    def owns(self, uid: str) -> bool:
        """Whether this replica may act on the GatewayDeployment with ``uid`` now."""
        shard = S.shard_of(uid, self.shards)
        return shard in self.held and self.holds(shard)

    async def run(self) -> None:
        while True:
            started = self.clock()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the API server away: the deadlines stop the loops
                log.warning("shard leases: %s: %s", type(e).__name__, str(e)[:200])
            await asyncio.sleep(max(self.timing.retry_period - (self.clock() - started), 0.1))

    async def tick(self, stopping: bool = False) -> None:
        leases = await self._call(self.leases.read)
        # seen at the answer, not the ask: a renewal the server applied while the list was on its
        # way must count from no earlier than its write
        self.observed.note(leases, self.clock())
        plan = S.plan(self.me, self.shards, leases, self.observed, self.clock(), self.timing, stopping)
        self.members = plan.members
        by_name = {lease.name: lease for lease in leases}
        if plan.give:
            for shard in plan.give:
                self.observed.renewed_at.pop(shard, None)
            await self._settle()   # their loops end here, before another replica may take them
            for shard in plan.give:
                name = self.leases.shard_name(shard)
                await self._call(self.leases.write, name, by_name.get(name), "", self.timing.lease_duration)
            log.info("gave up shards %s (fair share %d of %d shards, %d members)", sorted(plan.give), plan.fair,
                     self.shards, plan.members)
        for shard in (*plan.renew, *plan.take):
            name = self.leases.shard_name(shard)
            sent = self.clock()
            if await self._call(self.leases.write, name, by_name.get(name), self.me,
                                       self.timing.lease_duration):
                self._renewed(shard, sent)
        member = self.leases.member_name(self.me)
        if stopping:
            if member in by_name:
                await self._call(self.leases.delete, member, by_name[member])
        else:
            await self._call(self.leases.write, member, by_name.get(member), self.me,
                                    self.timing.lease_duration)
        await self._settle()

    def _renewed(self, shard: int, sent: float) -> None:
        self.observed.renewed_at[shard] = sent
        handle = self._lapses.pop(shard, None)
        if handle is not None:
            handle.cancel()
        # a little after the deadline: the event loop's timers may round it down by a millisecond
        delay = sent + self.timing.renew_deadline - self.clock() + 0.05
        self._lapses[shard] = asyncio.get_running_loop().call_later(max(delay, 0.0), self._lapse)

    def _lapse(self) -> None:
        task = asyncio.ensure_future(self._settle())
        self._settling.add(task)   # a reference until it ends (the loop keeps only weak ones)
        task.add_done_callback(self._settling.discard)

    async def _settle(self) -> None:
        """Starts the loops of shards newly held and stops (and awaits) those no longer held."""
        async with self._changing:
            now_held = frozenset(s for s in range(self.shards) if self.holds(s))
            lost, gained = self.held - now_held, now_held - self.held
            if lost:
                self.held = self.held - lost
                log.info("no longer holds shards %s: stopping their GatewayDeployments", sorted(lost))
                await self.on_lose(lost)
            if gained:
                self.held = self.held | gained
                log.info("holds shards %s", sorted(gained))
                await self.on_gain(gained)
            metrics.shards_held(self.shards, self.held, self.members)

    async def stop(self) -> None:
        """Gives every shard up (its loops stopped first) and deletes the member Lease."""
        for handle in self._lapses.values():
            handle.cancel()
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                await self.tick(stopping=True)
        except Exception as e:  # noqa: BLE001 - the Leases then expire on their own
            log.warning("could not give up the shards: %s", type(e).__name__)
        for shard in range(self.shards):
            self.observed.renewed_at.pop(shard, None)
        await self._settle()
        self._thread.shutdown(wait=False, cancel_futures=True)
