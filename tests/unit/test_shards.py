"""Shards (core/shards.py): the API server's hash and ranges, and the Lease protocol that keeps one
replica on each shard, explored through interleavings Hypothesis generates.

The sharded list and watch's hash is checked against values computed independently (Go's
hash/fnv New64a gives the same for these inputs: the FNV-1a test vectors). The protocol runs
against an in-memory Lease store (a STAND-IN for the API server: conditional writes on a
resourceVersion, as the real one) with requests that are sent, applied and answered at separate
steps, lost, or answered late; replicas crash, restart under a new identity, stop gracefully and
join. At every step no shard has two replicas that may act on it; at the end, once every live
replica has ticked undisturbed, every shard is held by one, none above its fair share.
"""
from __future__ import annotations

import dataclasses
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gateway_operator.core import shards as S
from gateway_operator.core.shards import LeaseView, Observed, Timing


def test_the_hash_is_64_bit_fnv_1a() -> None:
    # the FNV-1a test vectors (Fowler, Noll, Vo): "", "a", "foobar"
    assert S.fnv1a64("") == 0xCBF29CE484222325
    assert S.fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert S.fnv1a64("foobar") == 0x85944171F73967E8


def test_the_ranges_cover_the_hash_space_once_and_shard_of_agrees_with_them() -> None:
    for shards in (1, 2, 3, 7, 16, S.MAX_SHARDS):
        spans = [S.bounds(i, shards) for i in range(shards)]
        assert spans[0][0] == 0 and spans[-1][1] == 1 << 64
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for uid in (f"8c1f0e3a-{i:04d}-4b7e-9a51-0f6c2d3e4a5b" for i in range(500)):
        h = S.fnv1a64(uid)
        for shards in (2, 3, 7):
            start, end = S.bounds(S.shard_of(uid, shards), shards)
            assert start <= h < end
    with pytest.raises(ValueError):
        S.bounds(3, 3)


def test_the_selector_is_the_api_server_s_shard_range_syntax_with_adjacent_ranges_merged() -> None:
    assert S.selector([0], 2) == "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    assert S.selector([1], 2) == "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
    assert S.selector([0, 1, 3], 4) == ("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
                                        " || shardRange(object.metadata.uid, '0xc000000000000000', "
                                        "'0x10000000000000000')")
    assert S.selector([], 4) == ""


def test_uids_spread_evenly_over_the_shards() -> None:
    """Over uids as the API server draws them (random version-4 UUIDs). The hash's top bits pick
    the range, and FNV-1a mixes a string's last bytes poorly into them: 4,000 names "team-<i>" put
    500 on one shard and 1,300 on another, which is why the uid is hashed, not the name."""
    rng = random.Random(5866)
    counts = [0] * 4
    for _ in range(4000):
        counts[S.shard_of(str(uuid.UUID(int=rng.getrandbits(128), version=4)), 4)] += 1
    assert min(counts) > 900, counts
    by_name = [0] * 4
    for i in range(4000):
        by_name[S.shard_of(f"team-{i}", 4)] += 1
    assert max(by_name) > 2 * min(by_name), by_name


def test_the_timing_must_leave_the_holder_time_to_stop() -> None:
    with pytest.raises(ValueError):
        Timing(lease_duration=10, renew_deadline=10)


# -- the protocol, explored --------------------------------------------------------------------

SHARDS = 4
TIMING = Timing()


@dataclass
class Stored:
    holder: str
    renewed: str
    version: int


@dataclass
class Request:
    """A conditional write: sent at ``sent`` (the replica's clock), applied by the store later."""
    name: str
    shard: int | None
    holder: str
    version: int | None      # None: create
    sent: float
    applied: bool | None = None   # None: not yet; True/False: the store's answer
    abandoned: bool = False       # the client's timeout gave up on it; the store may still apply it
    result: int | None = None     # the version the store gave the Lease, when applied


@dataclass
class Replica:
    me: str
    observed: Observed = field(default_factory=Observed)
    queue: list[Request] = field(default_factory=list)
    alive: bool = True
    writes: int = 0
    known: dict[str, int] = field(default_factory=dict)   # each Lease's version as last read or written
    giving: set[int] = field(default_factory=set)         # given up, the holder not yet cleared

    def acting(self, shard: int, now: float, timing: Timing) -> bool:
        return self.alive and S.holds(self.observed, shard, now, timing)


@dataclass
class World:
    timing: Timing = TIMING
    now: float = 1000.0
    store: dict[str, Stored] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)
    version: int = 0
    born: int = 0
    # a planted defect for the search to find: the renewal's time taken at its answer, not its start
    renewed_at_answer: bool = False
    # a GatewayDeployment write's (connect, read) bound when sent at ``now`` on a renewal sent at
    # ``at`` (clients/kube.py asks loop/shard_holder.write_bound): the operator's, or a planted defect
    write_bound: Callable[[Timing, float, float], "tuple[float, float] | None"] = Timing.write_bound
    # (replica, shard): the latest instant a write it sent while acting on the shard may land; a
    # crashed replica's writes in flight land all the same
    landing: dict[tuple[str, int], float] = field(default_factory=dict)

    def join(self) -> None:
        self.replicas.append(Replica(f"r{self.born}"))
        self.born += 1

    def views(self) -> list[LeaseView]:
        return [LeaseView(name, s.holder, s.renewed, str(s.version),
                          None if name.startswith("m-") else int(name[6:])) for name, s in self.store.items()]

    def tick(self, r: Replica) -> None:
        """As loop/shard_holder.py's round: renew what is held from the versions last seen, then
        read every Lease, plan, and send the other writes (applied and answered at later steps)."""
        renewed = set()
        for shard in range(SHARDS):
            if S.holds(r.observed, shard, self.now, self.timing) and shard not in r.giving:
                name = f"shard-{shard}"
                r.queue.append(Request(name, shard, r.me, r.known.get(name), self.now))
                renewed.add(shard)
        leases = self.views()
        r.known = {lease.name: int(lease.version) for lease in leases}
        r.observed.note(leases, self.now)
        by_name = {lease.name: lease for lease in leases}
        # a shard given up at an earlier tick has drained (at once, here): its holder is cleared now,
        # and again at each tick until a read shows it cleared
        r.giving = {s for s in r.giving if (lease := by_name.get(f"shard-{s}")) is not None and lease.holder == r.me}
        drained = tuple(sorted(r.giving))
        plan = S.plan(r.me, SHARDS, leases, r.observed, self.now, self.timing, frozenset(r.giving))
        for shard in plan.give:   # stop acting at once; the cleared holder is sent after the drain
            r.observed.renewed_at.pop(shard, None)
            r.giving.add(shard)
            self.drain(r, shard)
        for shard in (*[s for s in plan.renew if s not in renewed], *plan.take, *drained):
            name = f"shard-{shard}"
            held = by_name.get(name)
            holder = "" if shard in drained else r.me
            r.queue.append(Request(name, shard, holder, int(held.version) if held else None, self.now))
        member = by_name.get(f"m-{r.me}")
        r.queue.append(Request(f"m-{r.me}", None, r.me, int(member.version) if member else None, self.now))

    def stop(self, r: Replica) -> None:
        """As ShardHolder.stop: stop acting on everything (its loops drained at once, here), then
        clear every shard Lease that names this replica, and the member Lease."""
        r.observed.renewed_at.clear()
        leases = self.views()
        for shard in range(SHARDS):
            self.drain(r, shard)
        for lease in leases:
            if lease.holder == r.me:
                r.queue.append(Request(lease.name, lease.shard, "", int(lease.version), self.now))

    def drain(self, r: Replica, shard: int) -> None:
        """A shard given up: its loops stopped and their writes already sent ended (loop/handlers.py's
        ``lost``: clients/kube.wait_for_writes) before the holder is cleared, at once here."""
        self.landing.pop((r.me, shard), None)

    def apply(self, r: Replica) -> None:
        pending = [q for q in r.queue if q.applied is None]
        if not pending:
            return
        q = pending[0]
        current = self.store.get(q.name)
        ok = (current is None and q.version is None) or (current is not None and current.version == q.version)
        if ok:
            self.version += 1
            self.store[q.name] = Stored(q.holder, f"{r.me}@{self.now}:{self.version}", self.version)
            q.result = self.version
        q.applied = ok

    def answer(self, r: Replica) -> None:
        done = [q for q in r.queue if q.applied is not None]
        if not done:
            return
        q = done[0]
        r.queue.remove(q)
        if q.applied and not q.abandoned and q.result is not None:
            r.known[q.name] = q.result
        # a renewal answered after the shard was given up (loop/shard_holder.py records its
        # renewals before it plans, so the give-up always comes after) holds nothing
        if q.shard is not None and q.applied and q.holder == r.me and not q.abandoned and q.shard not in r.giving:
            r.observed.renewed_at[q.shard] = self.now if self.renewed_at_answer else q.sent

    def lose(self, r: Replica) -> None:
        """The client's timeout gives up on its oldest request: its answer, if any, is ignored,
        while the store may still apply it (a request stuck on the way)."""
        waiting = [q for q in r.queue if not q.abandoned]
        if waiting:
            waiting[0].abandoned = True

    def check(self) -> None:
        for shard in range(SHARDS):
            acting = [r for r in self.replicas if r.acting(shard, self.now, self.timing)]
            assert len(acting) <= 1, f"t={self.now - 1000:.1f}: shard {shard} acted on by {[r.me for r in acting]}"
            for r in acting:   # a write sent now lands within its bound
                bound = self.write_bound(self.timing, r.observed.renewed_at[shard], self.now)
                assert bound is not None, f"t={self.now - 1000:.1f}: {r.me} acts on shard {shard} but may not write"
                key = (r.me, shard)
                self.landing[key] = max(self.landing.get(key, 0.0), self.now + sum(bound))
            late = {me: at - 1000 for (me, s), at in self.landing.items()
                    if s == shard and at > self.now and acting and me != acting[0].me}
            assert not late, (f"t={self.now - 1000:.1f}: shard {shard}: a write of {late} may land "
                              f"while {acting[0].me} acts on it")


OPS = ("round", "tick", "apply", "answer", "lose", "advance", "crash", "join", "stop")
STEP = st.tuples(st.sampled_from(OPS), st.integers(0, 3),
                 st.one_of(st.floats(0.05, 20.0), st.sampled_from((1.0, 2.0, 5.0, 9.9, 10.1, 15.0, 16.0))))
# prompt ticks (a round: read, write, answered at once) and time are most of what happens
COMMON = st.tuples(st.sampled_from(("round", "round", "tick", "apply", "answer", "advance", "advance")),
                   st.integers(0, 3), st.floats(0.05, 4.0))
INTERLEAVINGS = st.lists(st.one_of(COMMON, STEP), max_size=80)
# the derandomized searches draw the same interleavings whatever else the process imported
pytestmark = pytest.mark.usefixtures("pinned_draws")
EXPLORED = settings(max_examples=int(os.environ.get("SHARD_EXAMPLES", "1500")), deadline=None,
                    derandomize=os.environ.get("PROTOCOL_RANDOM") != "1", database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def play(world: World, ops: list[tuple[str, int, float]]) -> World:
    world.join()
    world.join()
    for op, who, dt in ops:
        live = [r for r in world.replicas if r.alive]
        r = live[who % len(live)] if live else None
        if op == "advance":
            world.now += dt
        elif op == "join" and len(live) < 4:
            world.join()
        elif r is None:
            world.join()
        elif op == "round":
            world.tick(r)
            while any(q.applied is None for q in r.queue):
                world.apply(r)
            while any(q.applied is not None for q in r.queue):
                world.answer(r)
        elif op == "tick":
            world.tick(r)
        elif op == "apply":
            world.apply(r)
        elif op == "answer":
            world.answer(r)
        elif op == "lose":
            world.lose(r)
        elif op == "crash":   # SIGKILL: stops acting at once; what it sent may still be applied
            r.alive = False
            r.observed.renewed_at.clear()
        elif op == "stop":    # graceful: give everything up, then exit
            world.stop(r)
            while any(q.applied is None for q in r.queue):
                world.apply(r)
            r.alive = False
        world.check()
    return world


def settle(world: World) -> None:
    """Every live replica ticks, its writes applied and answered at once, for long enough (one
    joins if every replica is gone, as the Deployment would start one)."""
    if not any(r.alive for r in world.replicas):
        world.join()
    for _ in range(int(3 * world.timing.lease_duration / world.timing.retry_period) + 4):
        for r in [r for r in world.replicas if r.alive]:
            for q in r.queue:   # what was in flight timed out (and may still be applied)
                q.abandoned = True
            world.tick(r)
            while r.queue:
                world.apply(r)
                world.answer(r)
            world.check()
        world.now += world.timing.retry_period
        world.check()


@EXPLORED
@given(INTERLEAVINGS)
def test_no_shard_is_ever_acted_on_by_two_replicas_and_every_shard_is_held_once_things_settle(
        ops: list[tuple[str, int, float]]) -> None:
    world = play(World(), ops)
    settle(world)
    live = [r for r in world.replicas if r.alive]
    held = {shard: [r.me for r in live if r.acting(shard, world.now - world.timing.retry_period, world.timing)]
            for shard in range(SHARDS)}
    assert all(len(h) == 1 for h in held.values()), held
    fair = S.fair_share(SHARDS, len(live))
    counts = {r.me: sum(1 for h in held.values() if h == [r.me]) for r in live}
    assert max(counts.values()) <= fair and min(counts.values()) >= SHARDS // len(live), (counts, fair)


def _found(make: Callable[[], World], examples: int = 3000) -> str:
    found: list[str] = []

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None,
              derandomize=True, report_multiple_bugs=False, phases=(Phase.generate,))
    @given(INTERLEAVINGS)
    def search(ops: list[tuple[str, int, float]]) -> None:
        try:
            play(make(), ops)
        except AssertionError as e:
            found.append(str(e))
            raise

    with pytest.raises(AssertionError):
        search()
    return found[0]


def test_the_exploration_finds_a_planted_defect() -> None:
    """A lease duration no longer than the renew deadline (the validation refuses it; forced here):
    a taker starts while the holder may still act, and the search above finds it."""
    short = Timing()
    object.__setattr__(short, "lease_duration", 6.0)
    assert "acted on by" in _found(lambda: World(timing=short))


def test_the_exploration_finds_a_write_bound_that_outlasts_the_lease() -> None:
    """Planted: the holder's writes bounded as an unsharded operator's are (5 + 30 s). A write sent
    while the holder acts may then land after a taker has started to act, and the search finds it."""
    def unsharded(timing: Timing, at: float, now: float) -> tuple[float, float] | None:
        return None if now >= at + timing.renew_deadline else (5.0, 30.0)
    assert "may land while" in _found(lambda: World(write_bound=unsharded))


@pytest.mark.parametrize("lease,renew", [(15, 10), (6, 3), (12, 10), (60, 40), (100, 10)])
def test_a_write_has_what_is_left_of_the_renewal_and_lands_before_a_taker_may_act(lease: float, renew: float) -> None:
    """Sent early in a renewal a write may take the rest of the renew deadline on top of the
    margin's bound (a slow API server's Service create is waited for, not applied twice); sent at
    any moment the holder acts, it lands before ``lease_duration`` after that renewal; past the
    deadline it is not sent."""
    timing = Timing(lease_duration=lease, renew_deadline=renew, retry_period=1)
    at = 500.0
    for used in (0.0, 0.5, renew / 2, renew - 0.01):
        bound = timing.write_bound(at, at + used)
        assert bound is not None
        assert bound[0] == timing.write_timeout[0] and sum(bound) >= sum(timing.write_timeout)
        assert at + used + sum(bound) < at + lease, (used, bound)
    assert sum(timing.write_bound(at, at) or ()) == pytest.approx(renew + sum(timing.write_timeout))
    assert timing.write_bound(at, at + renew) is None and timing.write_bound(at, at + lease) is None


@pytest.mark.parametrize("at_answer", [False, True], ids=["deadline from the send", "planted: from the answer"])
def test_a_renewal_answered_late_never_extends_the_holder_past_a_taker(at_answer: bool) -> None:
    """The holder's renewal is applied at once but answered 16 s later (a slow network back). The
    taker first saw the renewed Lease when it was applied and takes it 15 s later; a holder that
    counted its deadline from the answer would act beside it; from the send, it stopped at 10 s."""
    world = World(renewed_at_answer=at_answer)
    world.join()
    world.join()
    settle(world)
    holder = next(r for r in world.replicas if r.acting(0, world.now - 2, world.timing))
    taker = next(r for r in world.replicas if r is not holder)
    world.tick(holder)
    while any(q.applied is None for q in holder.queue):
        world.apply(holder)
    for _ in range(9):   # the taker ticks on; the holder's answers are on their way
        world.now += 2.0
        world.tick(taker)
        while taker.queue:
            world.apply(taker)
            world.answer(taker)
    assert taker.acting(0, world.now, world.timing)
    if at_answer:
        with pytest.raises(AssertionError, match="acted on by"):
            while holder.queue:
                world.answer(holder)
                world.check()
    else:
        while holder.queue:
            world.answer(holder)
            world.check()
        assert not holder.acting(0, world.now, world.timing)


def test_a_replica_that_joins_gets_its_share_and_the_others_give_theirs_up() -> None:
    world = World()
    world.join()
    settle(world)
    assert sum(world.replicas[0].acting(s, world.now - 2, world.timing) for s in range(SHARDS)) == SHARDS
    world.join()
    world.join()
    settle(world)
    counts = [sum(r.acting(s, world.now - 2, world.timing) for s in range(SHARDS)) for r in world.replicas]
    assert sorted(counts) == [1, 1, 2], counts


def test_a_killed_holder_s_shards_move_within_the_lease_duration() -> None:
    world = World()
    world.join()
    world.join()
    settle(world)
    dead = world.replicas[0]
    theirs = [s for s in range(SHARDS) if dead.acting(s, world.now - 2, world.timing)]
    assert theirs
    dead.alive = False
    killed_at = world.now
    moved: dict[int, float] = {}
    while len(moved) < len(theirs) and world.now < killed_at + 60:
        r = world.replicas[1]
        world.tick(r)
        while r.queue:
            world.apply(r)
            world.answer(r)
        for s in theirs:
            if s not in moved and r.acting(s, world.now, world.timing):
                moved[s] = world.now - killed_at
        world.now += world.timing.retry_period
    assert set(moved) == set(theirs)
    assert max(moved.values()) <= world.timing.lease_duration + world.timing.retry_period, moved


def test_a_graceful_stop_hands_over_at_the_next_tick() -> None:
    world = World()
    world.join()
    world.join()
    settle(world)
    leaving, staying = world.replicas
    world.stop(leaving)
    assert not any(leaving.acting(s, world.now, world.timing) for s in range(SHARDS))
    while leaving.queue:
        world.apply(leaving)
        world.answer(leaving)
    leaving.alive = False
    for _ in range(2):   # the member Lease is cleared: the next tick counts one member, takes all
        world.tick(staying)
        while staying.queue:
            world.apply(staying)
            world.answer(staying)
    assert all(staying.acting(s, world.now, world.timing) for s in range(SHARDS))


def test_plan_gives_up_the_highest_shards_above_the_fair_share() -> None:
    observed = Observed()
    leases = [LeaseView(f"shard-{s}", "a", "t0", "1", s) for s in range(4)] + [LeaseView("m-b", "b", "t0", "1")]
    observed.note(leases, 0.0)
    for s in range(4):
        observed.renewed_at[s] = 0.0
    plan = S.plan("a", 4, leases, observed, 1.0, TIMING)
    assert (plan.members, plan.fair, plan.renew, plan.give, plan.take) == (2, 2, (0, 1), (3, 2), ())
    assert dataclasses.replace(plan, give=()) != plan
