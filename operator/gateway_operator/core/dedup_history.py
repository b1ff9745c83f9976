"""Did the shared Redis forget the dedup records? (pure; issue 18)

The gateway keeps every admitted webhook's record in Redis for ``RECORD_TTL_SECONDS``. Redis
answering proves nothing about those records: a restart without persistence, ``FLUSHALL``, a
failover to a replica that lagged, or eviction drop them, and a redelivery then runs the agent
again while every other condition says exactly-once holds.

So the operator's probe keeps a **canary** under the GatewayDeployment's prefix (a key without a
TTL, whose value status remembers), and where ``INFO`` and ``CONFIG GET`` are allowed it reads
the server's ``run_id``, whether it persists, and its ``maxmemory-policy``. ``assess`` turns what
the probe saw and what status remembered into the next ``History``: a canary that vanished, a
new ``run_id`` on a Redis that does not persist, or a **failover** (the server now answering was
promoted from a replica of the one last seen: its ``master_replid2`` is the replication id status
remembers; asynchronous replication loses what the replica had not yet received, and a replicated
canary survives that) starts a **lost window** that lasts one record TTL (after it, every record
written before the loss would have expired anyway). A restart with persistence starts a new
replication id with no second one (Redis 7.0), so it is not read as a failover. ``durability``
says whether the store can keep its records at all (the ``RedisDurable`` condition), memory
close to ``maxmemory`` included: under ``noeviction`` a full Redis refuses every new record.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Mapping

from gateway_operator.pod import gwop_contract as contract

# praisonai-bot 0.1.16 keeps a recorded webhook for gw._hook_idempotency_ttl = 86400 s and its YAML cannot
# change that; the launcher sets it from spec.redis.recordTTLSeconds (gwop_upstream.set_record_ttl), so this is
# only the window of a GatewayDeployment whose spec cannot be read (facts.gather passes the spec's)
RECORD_TTL_SECONDS = contract.GATEWAY_RECORD_TTL_SECONDS
CANARY_KEY = "operator-canary"   # under the GatewayDeployment's prefix (the launcher's keys: pod/gwop_contract.py)
NO_EVICTION = "noeviction"
# RedisDurable warns from this share of maxmemory on, and stops warning below the second (so a
# Redis that hovers about the first does not flip the condition at every probe)
MEMORY_WARN_AT, MEMORY_CLEAR_BELOW = 0.85, 0.80


@dataclass(frozen=True)
class StoreFacts:
    """What one probe saw of the Redis behind the store."""

    canary: str                         # the canary's value after the probe
    canary_created: bool                # it was absent, and the probe wrote it
    run_id: str | None = None           # None: INFO refused
    persistent: bool | None = None      # AOF on, or RDB saves configured; None: not readable
    maxmemory_policy: str | None = None  # None: CONFIG GET refused
    refused: tuple[str, ...] = ()       # the commands the server refused ("INFO", "CONFIG GET")
    migrated: str | None = None         # the SQLite migration marker's value, when present
    replid: str | None = None           # INFO replication's master_replid (None: INFO refused)
    replid2: str | None = None          # ... its master_replid2; None when it was never promoted
    used_memory: int | None = None      # INFO memory's used_memory (None: INFO refused)
    maxmemory: int | None = None        # ... its maxmemory (0: no limit)

    def memory_share(self) -> float | None:
        """used_memory / maxmemory, None when there is no limit or it is not readable."""
        if self.used_memory is None or not self.maxmemory:
            return None
        return self.used_memory / self.maxmemory


@dataclass(frozen=True)
class History:
    """What status.redis remembers between probes (and across an operator failover)."""

    canary: str | None = None
    run_id: str | None = None
    repl_id: str | None = None          # the primary's master_replid last seen
    lost_at: float | None = None       # unix seconds
    lost_until: float | None = None
    lost_why: str = ""

    def lost(self, now: float) -> bool:
        return self.lost_until is not None and now < self.lost_until

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.canary:
            out["canary"] = self.canary
        if self.run_id:
            out["runId"] = self.run_id
        if self.repl_id:
            out["replId"] = self.repl_id
        if self.lost_at is not None and self.lost_until is not None:
            out["dedupHistoryLost"] = {"at": iso(self.lost_at), "until": iso(self.lost_until), "why": self.lost_why}
        return out

    @classmethod
    def from_status(cls, redis_status: Mapping[str, Any] | None) -> "History":
        raw = redis_status or {}
        lost = raw.get("dedupHistoryLost") or {}
        return cls(canary=raw.get("canary") or None, run_id=raw.get("runId") or None,
                   repl_id=raw.get("replId") or None,
                   lost_at=unix(lost.get("at")), lost_until=unix(lost.get("until")),
                   lost_why=str(lost.get("why") or ""))


def assess(previous: History, store: StoreFacts | None, now: float, ttl: float = RECORD_TTL_SECONDS) -> History:
    """The history after one probe (``store`` None: the probe did not get that far)."""
    if store is None:
        return previous
    why = ""
    if previous.canary and (store.canary_created or store.canary != previous.canary):
        why = "the operator's canary key vanished"
    elif previous.run_id and store.run_id and store.run_id != previous.run_id and store.persistent is False:
        why = "Redis restarted (a new run_id) without persistence"
    elif failed_over(previous, store):
        why = ("Redis failed over to a replica (the new primary's second replication id is the former "
               "primary's): the records the replica had not received are gone")
    history = replace(previous, canary=store.canary, run_id=store.run_id or previous.run_id,
                      repl_id=store.replid or previous.repl_id)
    if why:
        history = replace(history, lost_at=now, lost_until=now + ttl, lost_why=why)
    elif history.lost_until is not None and now >= history.lost_until:
        history = replace(history, lost_at=None, lost_until=None, lost_why="")
    return history


def failed_over(previous: History, store: StoreFacts) -> bool:
    """The server now answering was a replica of the primary status remembers, and was promoted."""
    return bool(previous.repl_id and store.replid and store.replid != previous.repl_id
                and store.replid2 == previous.repl_id)


def lost_message(history: History, ttl: float = RECORD_TTL_SECONDS) -> str:
    return (f"the Redis idempotency store lost its dedup records at {iso(history.lost_at or 0)} "
            f"({history.lost_why}): a webhook admitted before then and redelivered until "
            f"{iso(history.lost_until or 0)} (the records' TTL, {ttl:g}s) can run the agent again")


def durability(store: StoreFacts | None, was_full: bool = False) -> tuple[str, str] | None:
    """(problem kind, detail) for RedisDurable, or None when the store keeps its records:
    kinds "evicting", "nearly-full", "not-persistent", "unreadable". ``was_full``: the last
    condition said "nearly-full" (it then holds until the share falls below MEMORY_CLEAR_BELOW)."""
    if store is None:
        return None
    if store.maxmemory_policy is not None and store.maxmemory_policy != NO_EVICTION:
        return "evicting", store.maxmemory_policy
    share = store.memory_share()
    if share is not None and share >= (MEMORY_CLEAR_BELOW if was_full else MEMORY_WARN_AT):
        return "nearly-full", f"{(store.maxmemory or 0) / 2**20:.0f} MiB"
    if store.persistent is False:
        return "not-persistent", ""
    if store.persistent is None or store.maxmemory_policy is None:
        return "unreadable", " and ".join(store.refused) or "INFO or CONFIG GET"
    return None


def iso(at: float) -> str:
    """Unix seconds as status writes them (RFC 3339, UTC, whole seconds)."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix(text: Any) -> float | None:
    """What ``iso`` wrote, back in unix seconds (None for anything else)."""
    if not text:
        return None
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
