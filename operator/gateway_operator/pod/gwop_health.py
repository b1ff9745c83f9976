"""What the launcher adds to the gateway's own ``GET /health``: a ``gateway_operator`` section with the
gateway's versions and this replica's own view of its idempotency store: whether it can ask Redis,
what Redis refused, whether it holds deliveries (the fail-closed window), and what it admitted
without Redis since it started, and the claims it holds: how many, how many its last renewal
round did not reach, when the first could expire, how long renewals have failed, how many turns
the fence stopped (gwop_leases). 0.1.16's keys are left as they are; the operator reads what it
knows of the section and ignores the rest."""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

import gwop_contract as contract
import gwop_upstream as upstream
from gwop_contract import SECTION
from gwop_journal import OutageJournal
from gwop_leases import Leases
from gwop_reach import Reach, view


def section(gateway: Any, journal: OutageJournal, leases: Leases, versions: Mapping[str, str],
            reach: Optional[Reach] = None) -> Dict[str, Any]:
    built = upstream.idempotency_store(gateway)
    store = "not built" if built is None else "redis" if upstream.redis_store(gateway) is not None else "other"
    # the last time a webhook this replica admitted was left without a record Redis would keep (its
    # journal dropped it, or its lease was lost while the turn ran): the operator keeps the window
    last = max((t for t in (journal.dropped_at, leases.lost_at) if t is not None), default=None)
    return {contract.VERSIONS: dict(versions),
            contract.IDEMPOTENCY: {contract.STORE: store, **view(journal, reach, time.monotonic()), **leases.view(),
                                   contract.LAST_UNRECORDED_AT: None if last is None else round(last, 1)}}


def extend(gateway: Any, journal: OutageJournal, leases: Leases, versions: Mapping[str, str],
           reach: Optional[Reach] = None) -> None:
    """/health answers the gateway's own body with the section added."""
    own = upstream.health_call(gateway)

    def health() -> Any:
        body = own()
        return ({**body, SECTION: section(gateway, journal, leases, versions, reach)} if isinstance(body, dict)
                else body)

    upstream.set_health_call(gateway, health)
