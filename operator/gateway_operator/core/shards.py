"""Shards: which operator replica reconciles which GatewayDeployment (pure; the clock is an input).

The assignment. ``shards`` equal ranges split the 64-bit FNV-1a hash of a GatewayDeployment's
``metadata.uid``: the hash and the ranges of the API server's sharded list and watch (KEP-5866,
Kubernetes 1.36+, gate ``ShardedListAndWatch``), whose ``shardRange(object.metadata.uid, start, end)``
keeps the objects with ``start <= fnv1a64(uid) < end``. A replica can therefore ask the server for its
shards' objects (``selector``) and, where the gate is off, filter the same objects itself
(``shard_of``). The uid, not the name: a re-created object may land elsewhere, and its old loop is
stopped by its deletion anyway.

The holding. Each shard is one ``coordination.k8s.io`` Lease; each replica also renews a member
Lease of its own, so that one that holds nothing yet is counted. ``plan`` is one tick of a
replica: from the Leases as read (``LeaseView``) and what it has observed of them (``Observed``),
it says which shards to take, renew and give up. Expiry is judged as client-go's leader election
does, never by comparing another host's clock: a Lease is expired when its (holder, renewTime) has
not changed for its whole duration by this replica's clock, since this replica first saw that pair.

Why two holders never act at once (tests/unit/test_shards.py explores the interleavings):

- a take is a write conditioned on the resourceVersion read, so of two takers one fails;
- a holder acts only while ``holds``: within ``renew_deadline`` of the *start* of its last renewal
  that succeeded; the write of that renewal happened after that start, and a taker waits
  ``lease_duration`` (> ``renew_deadline``) after first seeing it, so the holder has stopped first;
  the difference is the margin for a pass in flight to end (bounded by the API timeouts);
- a holder that gives a shard up (over its fair share, or at shutdown) first stops every loop of
  that shard, then clears the holder: drain, then hand over.

The fair share is ``ceil(shards / live members)``: a replica takes free or expired shards up to
it, and gives up what it holds above it, the highest-numbered first, and one more when it holds
the whole share while another member holds less than ``shards // members`` (a member that joined
last); with every member at or below its share and the shares summing to at least ``shards``,
every shard is held once the replicas have each ticked.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
SPACE = 1 << 64
MAX_SHARDS = 256


def fnv1a64(value: str) -> int:
    """The 64-bit FNV-1a hash of ``value``'s UTF-8 bytes (Go's hash/fnv New64a, as the API server's)."""
    h = FNV_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * FNV_PRIME) % SPACE
    return h


def bounds(shard: int, shards: int) -> tuple[int, int]:
    """Shard ``shard``'s hash range [start, end) of ``shards`` equal ones."""
    if not 0 <= shard < shards <= MAX_SHARDS:
        raise ValueError(f"shard {shard} of {shards} (1..{MAX_SHARDS} shards)")
    return shard * SPACE // shards, (shard + 1) * SPACE // shards


def shard_of(uid: str, shards: int) -> int:
    """The shard whose range holds ``fnv1a64(uid)``."""
    starts = [bounds(i, shards)[0] for i in range(shards)]
    return bisect_right(starts, fnv1a64(uid)) - 1


def _hex(n: int) -> str:
    return "0x10000000000000000" if n == SPACE else f"0x{n:016x}"


def selector(held: Iterable[int], shards: int) -> str:
    """The ``shardSelector`` for the objects of ``held`` (adjacent ranges merged); '' for none."""
    ranges: list[list[int]] = []
    for shard in sorted(set(held)):
        start, end = bounds(shard, shards)
        if ranges and ranges[-1][1] == start:
            ranges[-1][1] = end
        else:
            ranges.append([start, end])
    return " || ".join(f"shardRange(object.metadata.uid, '{_hex(s)}', '{_hex(e)}')" for s, e in ranges)


@dataclass(frozen=True)
class LeaseView:
    """One Lease as read: a shard's (``shard`` >= 0) or a member's (``shard`` is None)."""
    name: str
    holder: str              # spec.holderIdentity; '' when free
    renewed: str             # what each write changes (renewTime, resourceVersion): compared, never a clock
    version: str             # metadata.resourceVersion: the precondition of a write
    shard: int | None = None


@dataclass(frozen=True)
class Seen:
    """The (holder, renewed) pair a Lease showed, and when (this replica's clock) it first did."""
    holder: str
    renewed: str
    since: float


@dataclass
class Observed:
    """What one replica remembers of the Leases between ticks (its own state, not shared)."""
    seen: dict[str, Seen] = field(default_factory=dict)
    renewed_at: dict[int, float] = field(default_factory=dict)  # shard -> start of our last renewal that succeeded

    def note(self, leases: Sequence[LeaseView], now: float) -> None:
        for lease in leases:
            before = self.seen.get(lease.name)
            if before is None or (before.holder, before.renewed) != (lease.holder, lease.renewed):
                self.seen[lease.name] = Seen(lease.holder, lease.renewed, now)
        names = {lease.name for lease in leases}
        for gone in set(self.seen) - names:
            del self.seen[gone]

    def expired(self, lease: LeaseView, now: float, duration: float) -> bool:
        seen = self.seen.get(lease.name)
        return seen is not None and now - seen.since >= duration


#: the least margin (lease_duration - renew_deadline) --shards accepts: its writes get 1.6 s (0.5 s to
#: connect), and a shorter bound would fail ordinary writes on a busy API server
MIN_MARGIN = 2.0


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 15.0   # a Lease unchanged this long (by the reader's clock) is free to take
    renew_deadline: float = 10.0   # a holder acts this long after the start of its last renewal, no longer
    retry_period: float = 2.0      # a tick: read the Leases, renew, take, give up

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("shard leases need 0 < retry_period < renew_deadline < lease_duration")

    @property
    def write_timeout(self) -> tuple[float, float]:
        """(connect, read) seconds for the operator's writes while it holds shards. A holder acts
        until ``renew_deadline`` after the send of its last renewal; another replica takes the
        shard no earlier than ``lease_duration`` after it saw that renewal, which is after the
        send. A write in flight at the deadline therefore lands, or is given up, within the
        margin between the two (four fifths of it: the last fifth for an etcd commit already on its
        way when the client gave up, which the API server does not stop)."""
        margin = self.lease_duration - self.renew_deadline
        connect = min(2.0, margin / 4)
        return connect, margin * 0.8 - connect

    def write_bound(self, renewed_at: float, now: float) -> tuple[float, float] | None:
        """(connect, read) seconds for a write sent at ``now`` on a shard whose last renewal was
        sent at ``renewed_at``; None at or past its renew deadline (the write is not sent). The
        write lands, or is given up, by the instant ``write_timeout`` bounds a write sent at the
        deadline itself: ``renew_deadline`` plus four fifths of the margin after the renewal. A
        write sent early in a renewal has the rest of the deadline on top, so that an API server
        slow to commit (a Service create allocating its ClusterIP on a saturated machine) is
        waited for instead of given up and applied again."""
        left = renewed_at + self.renew_deadline - now
        if left <= 0:
            return None
        connect, read = self.write_timeout
        return connect, read + left


def holds(observed: Observed, shard: int, now: float, timing: Timing) -> bool:
    """Whether this replica may act on ``shard``'s GatewayDeployments at ``now``."""
    at = observed.renewed_at.get(shard)
    return at is not None and now < at + timing.renew_deadline


@dataclass(frozen=True)
class Plan:
    renew: tuple[int, ...] = ()     # held: write renewTime (conditioned on the version read)
    take: tuple[int, ...] = ()      # free or expired: write holder and renewTime (conditioned)
    give: tuple[int, ...] = ()      # over the fair share: stop its loops, then clear the holder
    members: int = 1                # live members counted, this one included
    fair: int = 0                   # ceil(shards / members)


def fair_share(shards: int, members: int) -> int:
    return -(-shards // max(members, 1))


def plan(me: str, shards: int, leases: Sequence[LeaseView], observed: Observed, now: float,
         timing: Timing, giving: frozenset[int] = frozenset()) -> Plan:
    """One tick of replica ``me``: ``leases`` are every shard and member Lease just read, and
    ``observed`` has noted them (``Observed.note``). ``giving``: shards given up whose loops are
    still ending; never taken back meanwhile. (At shutdown the holder gives up every shard whose
    Lease names it, without a plan.)"""
    duration = timing.lease_duration
    members = {lease.holder for lease in leases if lease.shard is None and lease.holder
               and not observed.expired(lease, now, duration)} | {me}
    by_shard: Mapping[int, LeaseView] = {lease.shard: lease for lease in leases if lease.shard is not None}
    mine = sorted(s for s, lease in by_shard.items() if lease.holder == me and holds(observed, s, now, timing))
    fair = fair_share(shards, len(members))
    keep_at_most = fair
    if fair > shards // len(members):   # some members hold one less: one below that is starved
        held_by = {m: 0 for m in members}
        for lease in by_shard.values():
            if lease.holder in held_by and not observed.expired(lease, now, duration):
                held_by[lease.holder] += 1
        if len(mine) == fair and min(held_by.values()) < shards // len(members):
            keep_at_most = fair - 1
    give = tuple(mine[keep_at_most:][::-1])
    keep = [s for s in mine if s not in give]
    free = [s for s in range(shards) if s not in keep and s not in give and s not in giving
            and (s not in by_shard or not by_shard[s].holder
                 or (by_shard[s].holder != me and observed.expired(by_shard[s], now, duration))
                 or (by_shard[s].holder == me and s not in mine))]
    take = tuple(free[:max(fair - len(keep), 0)])
    return Plan(renew=tuple(keep), take=take, give=give, members=len(members), fair=fair)
