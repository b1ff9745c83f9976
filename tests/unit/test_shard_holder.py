"""The shard holder (loop/shard_holder.py) against an in-memory Lease store (a STAND-IN for the
API server's Leases: conditional writes on a resourceVersion, and an outage switch): what it
starts and stops, and when. The real Leases, two real operator processes and a SIGKILL are
tests/sim/test_shard_replicas.py."""
from __future__ import annotations

import asyncio
import time

from gateway_operator.core.shards import LeaseView, Timing
from gateway_operator.loop.shard_holder import ShardHolder

FAST = Timing(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)


class LeasesStandIn:
    def __init__(self) -> None:
        self.store: dict[str, tuple[str, int]] = {}
        self.version = 0
        self.down = False

    def shard_name(self, shard: int) -> str:
        return f"g-shard-{shard}"

    def member_name(self, identity: str) -> str:
        return f"g-member-{identity}"

    def _up(self) -> None:
        if self.down:
            raise ConnectionError("the API server does not answer")

    def read(self) -> list[LeaseView]:
        self._up()
        return [LeaseView(name, holder, str(v), str(v), int(name.rsplit("-", 1)[1]) if "-shard-" in name else None)
                for name, (holder, v) in self.store.items()]

    def write(self, name: str, read: LeaseView | None, holder: str, duration: float) -> bool:
        self._up()
        current = self.store.get(name)
        if (read is None) != (current is None) or (current and read and str(current[1]) != read.version):
            return False
        self.version += 1
        self.store[name] = (holder, self.version)
        return True

    def delete(self, name: str, read: LeaseView) -> None:
        self._up()
        self.store.pop(name, None)


async def _holding(leases: LeasesStandIn, events: list[tuple[str, frozenset[int], float]]) -> ShardHolder:
    async def gained(shards: frozenset[int]) -> None:
        events.append(("gained", shards, time.monotonic()))

    async def lost(shards: frozenset[int]) -> None:
        events.append(("lost", shards, time.monotonic()))

    holder = ShardHolder(leases, 4, "a", FAST, gained, lost)  # type: ignore[arg-type]
    await holder.tick()
    return holder


def test_a_holder_cut_off_from_the_api_server_stops_its_loops_at_the_renew_deadline() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder = await _holding(leases, events)
        assert events[0][:2] == ("gained", frozenset(range(4))) and holder.owns("any-uid")
        task = asyncio.create_task(holder.run())
        await asyncio.sleep(0.5)
        leases.down = True
        cut = time.monotonic()
        last_renewal = max(holder.observed.renewed_at.values())
        await asyncio.sleep(FAST.renew_deadline + 0.3)
        lost = [e for e in events if e[0] == "lost"]
        assert lost and frozenset().union(*(e[1] for e in lost)) == frozenset(range(4)), events
        assert all(at <= last_renewal + FAST.renew_deadline + 0.1 for _, _, at in lost), (lost, last_renewal)
        assert lost[0][2] > cut and not holder.owns("any-uid") and not holder.held
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(scenario())


def test_a_stopping_holder_drains_before_it_clears_the_leases_and_deletes_its_member_lease() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder = await _holding(leases, events)
        cleared_before_drain = []

        async def lost(shards: frozenset[int]) -> None:
            cleared_before_drain.append(any(leases.store[f"g-shard-{s}"][0] == "" for s in shards))
            events.append(("lost", shards, time.monotonic()))
        holder.on_lose = lost
        await holder.stop()
        assert cleared_before_drain == [False]
        assert {name: h for name, (h, _) in leases.store.items()} == {f"g-shard-{s}": "" for s in range(4)}
        assert not holder.held
    asyncio.run(scenario())
