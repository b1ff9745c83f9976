"""Webhooks the replicas admitted that Redis may never have recorded (pure; issue 35).

A replica that cannot use Redis holds webhooks for the fail-closed window, then admits them
best-effort and keeps each in its outage journal until Redis takes it. Some never get there: the
journal overflowed (``journal_dropped``), a turn outlived its claim's lease while Redis was
unusable (``leases_lost``: its record is then a no-op), or the replica stopped while its journal
still held them. A redelivery of any of those to another replica runs the agent again, for as long
as the provider redelivers: the gateway's records live one TTL, so that is the window announced,
as for a lost dedup history (dedup_history.py). Each replica says in its ``/health`` how many it
left unrecorded since its process started and when the last one was; a replica that goes away
with a journal that Redis never took is counted from its last answer, unless its launcher says at
its stop that it carried everything there (``settle``). The window is kept in
``status.redis.unrecordedAdmissions`` (it outlives the replica and the operator's process) and
shown as ``IdempotencyDegraded=True AdmissionsNotRecorded``, ``ExactlyOnceAdmission=False``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping, Sequence

from gateway_operator.core.dedup_history import RECORD_TTL_SECONDS, iso, unix
from gateway_operator.core.health import UNUSABLE, ReplicaHealth
from gateway_operator.pod import gwop_contract as contract


@dataclass(frozen=True)
class Unrecorded:
    """The open window, as status remembers it: since when (the first such admission seen), until
    when (the last one plus one record TTL), how many at least."""

    at: float | None = None       # unix seconds
    until: float | None = None
    admissions: int = 0
    why: str = ""

    def open(self, now: float) -> bool:
        return self.until is not None and now < self.until

    def status(self) -> dict[str, Any]:
        if self.at is None or self.until is None:
            return {}
        return {"unrecordedAdmissions": {"at": iso(self.at), "until": iso(self.until), "admissions": self.admissions,
                                         "why": self.why}}

    @classmethod
    def from_status(cls, redis_status: Mapping[str, Any] | None) -> "Unrecorded":
        raw = (redis_status or {}).get("unrecordedAdmissions") or {}
        count = raw.get("admissions")
        return cls(at=unix(raw.get("at")), until=unix(raw.get("until")),
                   admissions=count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0,
                   why=str(raw.get("why") or "")[:200])


# a stopping replica carries its journal to Redis within its carry budget (the launcher's 8 s) after
# its drain, then says so under <prefix>gwop-carried:<pod> (gwop_contract.carried_key); the operator
# waits for that word this long after the pod is gone from the API (two probes), and at most its
# drain and carry and this long after it began to leave
MARK_GRACE_S = 5.0
CARRY_BUDGET_S = contract.CARRY_BUDGET_SECONDS


@dataclass(frozen=True)
class Leaving:
    """A replica that went away while its last answer said Redis unusable with webhooks journalled:
    its stop may still carry them to Redis, so the window waits for its word (monotonic times)."""

    last: ReplicaHealth
    since: float
    vanished: float | None = None   # when its pod was gone from the API (None: still terminating)


def leaves_a_journal(last: ReplicaHealth) -> bool:
    return bool(last.journalled and last.redis in UNUSABLE)


def settle(waiting: Mapping[str, Leaving], present: Collection[str], carried: Collection[str], now: float,
           drain_s: float) -> tuple[dict[str, Leaving], list[ReplicaHealth]]:
    """(still waiting, gone with their journal): a replica whose word was read carried everything; one
    whose pod is gone without it for MARK_GRACE_S (killed, force-deleted, or Redis never took it), or
    that has been leaving longer than its drain and carry allow, left its journal behind."""
    still: dict[str, Leaving] = {}
    left: list[ReplicaHealth] = []
    for pod, leaving in waiting.items():
        if pod in carried:
            continue
        if pod not in present and leaving.vanished is None:
            leaving = replace(leaving, vanished=now)
        overdue = now - leaving.since > drain_s + CARRY_BUDGET_S + MARK_GRACE_S
        if overdue or (leaving.vanished is not None and now - leaving.vanished > MARK_GRACE_S):
            left.append(leaving.last)
        else:
            still[pod] = leaving
    return still, left


JOURNAL_OR_LEASE = "a replica's outage journal dropped them, or a claim's lease ran out while its turn ran"
STOPPED = "a replica stopped while its outage journal still held them (Redis could not take them)"


def assess(previous: Unrecorded, polled: Sequence[ReplicaHealth], gone: Sequence[ReplicaHealth], now: float,
           ttl: float = RECORD_TTL_SECONDS) -> Unrecorded:
    """The window after one poll. ``polled``: the replicas' latest answers; ``gone``: the last answers
    of replicas that went away since the last publish (their journal, if Redis could not take it,
    went with them)."""
    told = [h for h in polled if h.unrecorded and h.last_unrecorded_at is not None]
    stopped = [h for h in gone if leaves_a_journal(h)]
    current = previous if previous.open(now) else Unrecorded()
    if not told and not stopped:
        return current
    times = [h.last_unrecorded_at for h in told if h.last_unrecorded_at is not None] + ([now] if stopped else [])
    first, last = min(times), max(times)
    if current.until is not None and last + ttl <= current.until and not stopped:
        # nothing newer than what the window already covers; its count may have grown
        return Unrecorded(current.at, current.until, max(current.admissions, sum(h.unrecorded for h in told)),
                          current.why)
    why = "; ".join(w for w, found in ((JOURNAL_OR_LEASE, told), (STOPPED, stopped)) if found)
    return Unrecorded(current.at if current.at is not None else first, max(current.until or 0.0, last + ttl),
                      max(current.admissions, sum(h.unrecorded for h in told)) + sum(h.journalled for h in stopped),
                      why if not current.why or current.why == why else f"{current.why}; {why}"[:200])


def leaving_message(leaving: Sequence[ReplicaHealth]) -> str:
    """What ExactlyOnceAdmission says while replicas that went away with a journal have not said they
    carried it (``settle`` waits for their word): their admissions may already be runnable again."""
    pods = ", ".join(sorted(h.pod for h in leaving))
    return (f"at least {sum(max(1, h.journalled) for h in leaving)} webhook(s) admitted while Redis was unusable "
            f"to them were in the outage journal of replicas that went away (pods: {pods}); until their stop "
            "says it carried them to Redis, a redelivery to another replica can run them again")


def message(window: Unrecorded) -> str:
    return (f"at least {window.admissions} webhook(s) admitted since {iso(window.at or 0)} may never have been "
            f"recorded in Redis ({window.why}): redelivered until {iso(window.until or 0)} (one record TTL) they "
            "can run the agent again")
