"""What one replica says about its idempotency store in its ``GET /health``: pure (the HTTP is
health_poll.py's and health_watch.py's). The body is the tenant's image's: ``classify``,
``own_view`` and ``parse_answer`` read what they know of it and leave the rest.
"""
from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from gateway_operator.api import IDEMPOTENCY_OWNER
from gateway_operator.pod import gwop_contract as contract



class Idempotency(enum.Enum):
    HEALTHY = "Healthy"                      # no durability:idempotency owner
    BUILD_TIME_FALLBACK = "BuildTimeFallback"  # store built while Redis was missing: sticky
    RUNTIME_OUTAGE = "RuntimeOutage"          # Redis lost later: admits best-effort
    # Redis answers but refuses (the launcher names it after the runtime text): held, then best-effort
    REDIS_OUT_OF_MEMORY = "RedisOutOfMemory"
    REDIS_READ_ONLY = "RedisReadOnly"
    REDIS_COMMAND_NOT_PERMITTED = "RedisCommandNotPermitted"
    REDIS_LOADING = "RedisLoading"
    OTHER = "OtherDegradation"               # an entry whose reason we do not know
    UNKNOWN = "Unreachable"                  # /health did not answer


# The gateway's documented reason texts (gateway contract). Matched by fragment so a
# rewording of the tail does not break the mapping; anything else is OTHER and its text is
# never copied into status.
_FRAGMENTS = (
    ("not available (running per-replica)", Idempotency.BUILD_TIME_FALLBACK),
    # the launcher's refusals (pod/gwop_journal.REFUSALS), before the runtime text they follow
    ("refuses writes: out of memory", Idempotency.REDIS_OUT_OF_MEMORY),
    ("refuses writes: a read-only replica", Idempotency.REDIS_READ_ONLY),
    ("to its ACL user (NOPERM)", Idempotency.REDIS_COMMAND_NOT_PERMITTED),
    ("is loading its dataset", Idempotency.REDIS_LOADING),
    ("unreachable at runtime", Idempotency.RUNTIME_OUTAGE),
)

DESCRIPTIONS = {
    Idempotency.BUILD_TIME_FALLBACK: "fell back to a per-replica SQLite store at build time (Redis was "
                                     "unavailable); sticky until the replica restarts",
    Idempotency.RUNTIME_OUTAGE: "lost Redis at runtime; admitting webhooks best-effort until it recovers",
    Idempotency.REDIS_OUT_OF_MEMORY: "cannot write to Redis: it is out of memory (maxmemory under noeviction); "
                                     "raise maxmemory, or bound what else it keeps (spec.sessions)",
    Idempotency.REDIS_READ_ONLY: "cannot write to Redis: it is a read-only replica (after a failover?); point "
                                 "spec.redis at the primary",
    Idempotency.REDIS_COMMAND_NOT_PERMITTED: "Redis refuses its ACL user a command or the key prefix; grant "
                                             "what docs/redis.md lists",
    Idempotency.REDIS_LOADING: "Redis is loading its dataset; it is used again once loaded",
    Idempotency.OTHER: "reports durability:idempotency degraded for an unrecognised reason",
    Idempotency.UNKNOWN: "did not answer GET /health",
}


# what the launcher says of itself in /health (pod/gwop_health.py; its fields: pod/gwop_contract.py), as far
# as the operator reads it
OWN_SECTION = contract.SECTION
OWN_REDIS = contract.REDIS_VIEWS                     # the replica's own view of Redis
UNUSABLE = OWN_REDIS[1:]                             # ... when it cannot use Redis
VERSIONED = contract.VERSIONED                       # the packages whose versions status shows
_VERSION = re.compile(r"[0-9A-Za-z.+!_-]{1,64}")     # a version as PEP 440 spells one (or a local build)


class Claims(NamedTuple):
    """What a launcher says of the claims it holds (its turns admitted and not yet recorded or
    released), as the operator reads them; an image that says none of it reads as all zeros and
    None ("not said"). A claim renewed on time is no risk; one whose renewal failed may expire in
    Redis while its turn still runs, and another replica may then admit the same webhook."""

    held: int = 0                          # claims_held
    unrenewed: int = 0                     # claims_unrenewed: held, and the last renewal round did not go through
    expire_in_s: float | None = None       # claims_expire_in_s: the closest to expiry, seconds left (>= 0)
    renew_failing_for_s: float | None = None  # renew_failing_for_s: how long renewal rounds have failed
    fenced: int = 0                        # fenced: turns it stopped before their claim could expire
    lease_s: float | None = None           # claim_lease_s: the lease in force (None: an older launcher)


@dataclass(frozen=True)
class ReplicaHealth:
    pod: str
    state: Idempotency
    # the replica's own view of Redis (its launcher's section), None when it gives none (another image)
    redis: str | None = None
    versions: tuple[str, ...] = ()   # the VERSIONED packages' versions, in that order; () when not given
    # while its own view is "answers": how long it has reached Redis without a break (None: not given)
    answers_for_s: float | None = None
    # webhooks it admitted that may never reach Redis (its journal dropped them, or a lease was lost
    # while the turn ran), since its process started, and the last time (unix) that happened
    unrecorded: int = 0
    last_unrecorded_at: float | None = None
    journalled: int = 0   # admitted while it could not use Redis, not yet written there
    # while its own view is "unreachable" or "refusing": for how long (None: not given)
    unusable_for_s: float | None = None
    claims: Claims = Claims()   # the claims it holds, as far as it says


def classify(health: Mapping[str, Any]) -> Idempotency:
    """Map a /health body to the idempotency state of that replica."""
    owners = health.get("degraded_owners") or []
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("owner_id") == IDEMPOTENCY_OWNER:
            reason = str(owner.get("reason") or "")
            for fragment, state in _FRAGMENTS:
                if fragment in reason:
                    return state
            return Idempotency.OTHER
    return Idempotency.HEALTHY


MAX_SECONDS = 1e9  # a duration the launcher reports, as far as it is believed


class OwnView(NamedTuple):
    """The launcher's section of /health as the operator reads it (ReplicaHealth's fields after
    ``state``, in order)."""

    redis: str | None = None
    versions: tuple[str, ...] = ()
    answers_for_s: float | None = None
    unrecorded: int = 0
    last_unrecorded_at: float | None = None
    journalled: int = 0
    unusable_for_s: float | None = None
    claims: Claims = Claims()


MAX_COUNT = 10**9
#: a claim lease the operator believes a launcher states (the CRD bounds claimLeaseSeconds far below)
MAX_LEASE_S = 3600.0


def _claims(store: Mapping[str, Any]) -> Claims:
    """The claim keys of the launcher's idempotency section, each checked as the others are: a
    count within MAX_COUNT, a duration within its bound, anything else not said. A claim past its
    expiry may be reported with seconds below zero: that is 0 left."""
    def count(key: str) -> int:
        return int(_number(store.get(key), MAX_COUNT) or 0)

    left = store.get(contract.CLAIMS_EXPIRE_IN_S)
    if isinstance(left, (int, float)) and not isinstance(left, bool) and -MAX_SECONDS <= left < 0:
        left = 0.0
    lease = _number(store.get(contract.CLAIM_LEASE_S), MAX_LEASE_S)
    return Claims(count(contract.CLAIMS_HELD), count(contract.CLAIMS_UNRENEWED), _number(left, MAX_SECONDS),
                  _number(store.get(contract.RENEW_FAILING_FOR_S), MAX_SECONDS), count(contract.FENCED),
                  lease or None)


def _number(value: Any, top: float) -> float | None:
    """A finite number within [0, top], else None (the body is the tenant's)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top
    return float(value) if ok else None


def own_view(health: Mapping[str, Any]) -> OwnView:
    """What the replica's launcher says of itself: its view of Redis (one of OWN_REDIS), the
    versions it runs, while it reaches Redis for how long without a break, what it admitted
    that may never reach Redis, and the claims it holds (``Claims``). The body is the tenant's:
    anything unexpected is left out, never copied."""
    section = health.get(OWN_SECTION)
    if not isinstance(section, Mapping):
        return OwnView()
    store, versions = section.get(contract.IDEMPOTENCY), section.get(contract.VERSIONS)
    store = store if isinstance(store, Mapping) else {}
    redis = store.get(contract.REDIS)
    found = tuple(versions.get(p) for p in VERSIONED) if isinstance(versions, Mapping) else ()
    good = tuple(v for v in found if isinstance(v, str) and _VERSION.fullmatch(v))
    ok = len(good) == len(found)
    redis = redis if redis in OWN_REDIS else None
    since = _number(store.get(contract.ANSWERS_FOR_S), MAX_SECONDS) if redis == contract.ANSWERS else None
    lost = sum(int(_number(store.get(k), MAX_COUNT) or 0) for k in (contract.JOURNAL_DROPPED, contract.LEASES_LOST))
    return OwnView(redis, good if good and ok else (), since, lost,
                   _number(store.get(contract.LAST_UNRECORDED_AT), 1e11) if lost else None,
                   int(_number(store.get(contract.JOURNALLED), MAX_COUNT) or 0),
                   _number(store.get(contract.UNUSABLE_FOR_S), MAX_SECONDS) if redis in UNUSABLE else None,
                   _claims(store))


@dataclass(frozen=True)
class Target:
    pod: str
    ip: str
    port: int


def parse_answer(pod: str, status: int, body: bytes) -> ReplicaHealth:
    """A replica's state from its /health answer: anything but a 200 with a JSON object is Unreachable."""
    if status != 200:
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    if not isinstance(parsed, Mapping):
        return ReplicaHealth(pod, Idempotency.UNKNOWN)
    return ReplicaHealth(pod, classify(parsed), *own_view(parsed))
