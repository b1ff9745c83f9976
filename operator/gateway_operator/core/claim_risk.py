"""Claims at risk: a turn whose claim may expire in Redis while the turn still runs (pure; issue 56).

A replica admits a webhook by writing a claim in Redis with a lease and renews it while the turn
runs. When the renewals stop going through (the replica is cut off from Redis, its process is
paused or starved), the claim expires one lease after its last renewal, and the provider's
redelivery to another replica is admitted and runs the agent again. The operator announces that
**before** it can happen, while the claim is still valid: ``ExactlyOnceAdmission`` is False with
reason ``ClaimsAtRisk`` as long as any replica

- says itself that it holds claims it could not renew (``claims_unrenewed``), or holds claims while
  its own view of Redis is unreachable or refusing (``said``), or
- said at its last answer that it holds claims and does not answer now (``Holder``, kept across
  polls by the loop and passed back in: ``remember``). It may be paused mid-turn: nothing tells
  whether its turn runs on after its claim expired.

A silent holder stays at risk until it answers again (its answer then decides), or until its pod
is gone from the API and every claim it held has had time to expire: its last stated claim lease
after its last answer (the lease bounds what any claim had left; ``claims_expire_in_s`` is the
closest one only). An older launcher that states no lease is not remembered: its silence is
``ReplicasUnverified``, as before.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Mapping, Sequence

from gateway_operator.core.health import UNUSABLE, Idempotency, ReplicaHealth
from gateway_operator.pod import gwop_contract as contract


@dataclass(frozen=True)
class Holder:
    """A replica whose last answer said it holds claims (monotonic times)."""

    last: ReplicaHealth          # that answer
    at: float                    # when the operator last saw it (an answer the loop still held)
    gone: float | None = None    # when its pod was first seen gone from the API

    @property
    def horizon(self) -> float:
        """Seconds after ``at`` by which every claim it held can have expired in Redis."""
        claims = self.last.claims
        return max(claims.lease_s or 0.0, claims.expire_in_s or 0.0)


def holds(health: ReplicaHealth) -> bool:
    """An answer that makes its replica a holder to remember: it holds claims, and says its lease
    (a launcher that does not is an older image: its silence stays ReplicasUnverified)."""
    claims = health.claims
    return health.state is not Idempotency.UNKNOWN and claims.held > 0 and \
        (claims.lease_s is not None or claims.expire_in_s is not None)


def remember(previous: Mapping[str, Holder], polled: Sequence[ReplicaHealth], present: Collection[str],
             now: float) -> dict[str, Holder]:
    """The holders after one poll. ``polled``: the answers the loop holds now (a replica that did not
    answer is Unreachable, one no longer polled is absent); ``present``: the pods the API still has.
    A replica that answered is a holder only if that answer says so; one that did not keeps its
    last holder, until its pod is gone and its ``horizon`` has passed since it last answered."""
    answered = {h.pod: h for h in polled if h.state is not Idempotency.UNKNOWN}
    kept = {pod: Holder(h, now) for pod, h in answered.items() if holds(h)}
    for pod, holder in previous.items():
        if pod in answered:
            continue
        if pod not in present and holder.gone is None:
            holder = replace(holder, gone=now)
        if holder.gone is not None and now >= holder.at + holder.horizon:
            continue   # its pod is gone and every claim it held has expired: nothing of it can run again
        kept[pod] = holder
    return kept


def silent(holders: Mapping[str, Holder], polled: Sequence[ReplicaHealth]) -> list[Holder]:
    """The holders that do not answer now (case b)."""
    answered = {h.pod for h in polled if h.state is not Idempotency.UNKNOWN}
    return [holders[pod] for pod in sorted(holders) if pod not in answered]


def left_by(holder: Holder) -> ReplicaHealth:
    """What a holder that went away while silent may have left unrecorded, as the replica would have
    said it (core.unrecorded.Leaving reads it): each claim it held may belong to a turn that ended
    and was answered while it could not be heard, its record never written (Redis unusable to it,
    and its journal gone with it); unless its stop says it carried everything
    (``<prefix>gwop-carried:<pod>``), those open the AdmissionsNotRecorded window."""
    last = holder.last
    return replace(last, redis=contract.UNREACHABLE, journalled=last.journalled + last.claims.held)


def unheard(last: ReplicaHealth) -> ReplicaHealth:
    """What a replica that went away while the operator could not hear it (its last answer
    Unreachable, and no claims known of it) may have left unrecorded: at least one turn it answered
    while Redis was unusable to it, its journal gone with it. Nothing tells the operator otherwise
    but its stop's word that it carried everything (``<prefix>gwop-carried:<pod>``)."""
    return replace(last, redis=contract.UNREACHABLE, journalled=max(1, last.journalled))


def said(health: ReplicaHealth) -> str | None:
    """Why a replica's own answer says its claims are at risk (case a), else None."""
    claims = health.claims
    # no durations in the message: status is written again only when what it says changes
    if claims.unrenewed:
        return f"{health.pod} could not renew {claims.unrenewed} of its {max(claims.held, claims.unrenewed)} claims"
    if claims.held and health.redis in UNUSABLE:
        return f"{health.pod} holds {claims.held} claims while it cannot use Redis ({health.redis})"
    return None


def risks(health: Sequence[ReplicaHealth], holders: Sequence[Holder]) -> list[str]:
    """What ``ClaimsAtRisk`` names, by pod: what a replica says (case a), then the silent holders (b)."""
    told = [why for h in health if (why := said(h))]
    quiet = [f"{h.last.pod} held {h.last.claims.held} claims at its last answer and "
             + ("its pod is gone (its claims expire within its lease)" if h.gone is not None
                else "does not answer GET /health (paused, starved or cut off?)") for h in holders]
    return sorted(told) + quiet
