"""The contract between the operator and the code in its gateway pods: every name both sides spell,
declared once. The Redis keys the launcher writes and the operator's probe reads, the env vars the
operator sets and the launcher reads, the ports, the config sections the operator writes for the
launcher, the launcher's exit codes and last words, and the launcher's section of ``GET /health``
(``IDEMPOTENCY_FIELDS``: each field's name, JSON types and meaning).

It ships in the ConfigMap beside ``launch.py`` (gateway_operator.pod.pod_code), where the pod modules import it
by its flat name (``import gwop_contract``); the operator imports it as
``gateway_operator.pod.gwop_contract``, below its every layer. So: standard library only, constants
and small pure functions, no I/O. tests/unit/test_contract.py checks that what the pod writes is
what the operator reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

# -- Redis keys, each under the GatewayDeployment's push.redis.prefix -------------------------------

#: the gateway's idempotency store: ``<prefix>hookidem:<key>`` (a record, or a claim's token)
STORE_KEY = "hookidem:"
#: ``<prefix>hookidem-owner:<pod>``: the token prefix of the pod's running gateway process (gwop_claims)
OWNER_KEY = "hookidem-owner:"
#: ``<prefix>gwop-carried:<pod>``: a stopping launcher carried its whole outage journal to Redis
#: (gwop_serve writes it; the operator's probe reads it, and opens no AdmissionsNotRecorded window)
CARRIED_KEY = "gwop-carried:"
#: ``<prefix>sqlite-migrated``: a single SQLite replica's records are in Redis (gwop_migration writes
#: it; its value is the operator's token, SQLITE_MIGRATION_ENV)
MIGRATED_KEY = "sqlite-migrated"


#: praisonai-bot 0.1.16's own record TTL (``gw._hook_idempotency_ttl``): how long a record lives when
#: nothing says otherwise (the launcher sets the spec's, gwop_upstream.set_record_ttl)
GATEWAY_RECORD_TTL_SECONDS = 86400


def store_key(prefix: str, key: str = "") -> str:
    """``<prefix>hookidem:<key>``; without ``key``, the store's own prefix."""
    return f"{prefix}{STORE_KEY}{key}"


def owner_key(prefix: str, pod: str) -> str:
    """``<prefix>hookidem-owner:<pod>``."""
    return f"{prefix}{OWNER_KEY}{pod}"


def carried_key(prefix: str, pod: str) -> str:
    """``<prefix>gwop-carried:<pod>``."""
    return f"{prefix}{CARRIED_KEY}{pod}"


def migrated_key(prefix: str) -> str:
    """``<prefix>sqlite-migrated``."""
    return f"{prefix}{MIGRATED_KEY}"


# -- env vars the operator sets in the gateway container and the launcher reads ---------------------

AUTH_TOKEN_ENV = "GATEWAY_AUTH_TOKEN"
REDIS_PASSWORD_ENV = "GATEWAY_REDIS_PASSWORD"
REDIS_USERNAME_ENV = "GATEWAY_REDIS_USERNAME"   # spec.redis.usernameSecretRef: an ACL user
SESSION_KEY_ENV = "GATEWAY_SESSION_KEY"         # a Fernet key from a Secret: session history encrypted at rest
SQLITE_MIGRATION_ENV = "GWOP_SQLITE_MIGRATION"  # the operator's token for one SQLite -> Redis migration

# -- ports ----------------------------------------------------------------------------------------

GATEWAY_PORT = 8765   # the gateway's HTTP port (webhooks, GET /health)
WATCH_PORT = 8766     # the launcher's long-poll GET /health (gwop_watch): only the operator asks it

# -- the launcher's own sections of gateway.yaml, written by the operator ----------------------------

SESSION_HISTORY_KEY = "session_history"  # {store, max_messages, ttl_seconds, max_sessions}
# {fail_closed_seconds, claim_lease_seconds, record_ttl_seconds, max_body_bytes}
GUARD_KEY = "idempotency_guard"

# -- how the launcher stops ------------------------------------------------------------------------

EXIT_OK = 0             # a clean stop (SIGTERM included)
EXIT_RESTART = 75       # a failure a restart may cure
EXIT_FATAL_CONFIG = 78  # a config the gateway cannot use, or a gateway release without what the launcher needs
LINE_PREFIX = "gateway-launcher: "   # every line it logs, and its last words (the kubelet's termination message)
UNSUPPORTED_GATEWAY = "unsupported gateway"  # the last words' kind when it refuses the release (exit 78)
#: after its drain, how long a stopping launcher tries to carry its journal to Redis before it writes
#: carried_key (the operator waits that long for the word)
CARRY_BUDGET_SECONDS = 8.0

# -- its section of the gateway's GET /health ------------------------------------------------------

SECTION = "gateway_operator"       # the launcher's own key in the body (the gateway's keys are left as they are)
VERSIONS = "versions"              # {package: version} of the gateway's packages
VERSIONED = ("praisonai-bot", "praisonaiagents")   # ... the packages named there, in this order
IDEMPOTENCY = "idempotency"        # this replica's own view of its idempotency store: IDEMPOTENCY_FIELDS

# the values of REDIS: what this replica makes of Redis
ANSWERS, UNREACHABLE, REFUSING = "answers", "unreachable", "refusing"
REDIS_VIEWS = (ANSWERS, UNREACHABLE, REFUSING)

# the names of IDEMPOTENCY's fields
STORE = "store"
REDIS = "redis"
REFUSAL = "refusal"
HOLDING = "holding"
UNUSABLE_FOR_S = "unusable_for_s"
ANSWERS_FOR_S = "answers_for_s"
ADMITTED_BEST_EFFORT = "admitted_best_effort"
JOURNALLED = "journalled"
JOURNAL_DROPPED = "journal_dropped"
CLAIMS_HELD = "claims_held"
CLAIMS_UNRENEWED = "claims_unrenewed"
CLAIMS_EXPIRE_IN_S = "claims_expire_in_s"
RENEW_FAILING_FOR_S = "renew_failing_for_s"
FENCED = "fenced"
CLAIM_LEASE_S = "claim_lease_s"
LEASES_LOST = "leases_lost"
LAST_UNRECORDED_AT = "last_unrecorded_at"


@dataclass(frozen=True)
class Field:
    """One field of the launcher's idempotency section: its name, the JSON types its value takes,
    what it means, whether the operator reads it (core/health.py), and whether it is only there at
    times (ANSWERS_FOR_S: while Redis answers and the probe has asked)."""

    name: str
    types: Tuple[type, ...]
    meaning: str
    read: bool = True
    optional: bool = False


_NUMBER = (int, float)
_NONE = type(None)

IDEMPOTENCY_FIELDS: Tuple[Field, ...] = (
    Field(STORE, (str,), "the store the gateway built: redis, other, or not built", read=False),
    Field(REDIS, (str,), "one of REDIS_VIEWS: whether this replica can use Redis"),
    Field(REFUSAL, (str, _NONE), "what Redis said when it refused a write", read=False),
    Field(HOLDING, (bool,), "within the fail-closed window: deliveries answered 503", read=False),
    Field(UNUSABLE_FOR_S, _NUMBER, "while Redis is unreachable or refusing: for how long, seconds"),
    Field(ANSWERS_FOR_S, _NUMBER, "while Redis answers: for how long without a break, seconds", optional=True),
    Field(ADMITTED_BEST_EFFORT, (int,), "webhooks admitted past the window without Redis", read=False),
    Field(JOURNALLED, (int,), "admitted while Redis could not be used, not yet written there"),
    Field(JOURNAL_DROPPED, (int,), "webhooks the journal dropped (past its bound or the record TTL)"),
    Field(CLAIMS_HELD, (int,), "claims held: turns admitted, not yet recorded or released"),
    Field(CLAIMS_UNRENEWED, (int,), "held claims the last renewal round did not reach"),
    Field(CLAIMS_EXPIRE_IN_S, _NUMBER + (_NONE,), "the claim closest to expiry: seconds left (None: none held)"),
    Field(RENEW_FAILING_FOR_S, _NUMBER, "how long renewal rounds have failed, seconds (0: they go through)"),
    Field(FENCED, (int,), "turns stopped before their claim could expire"),
    Field(CLAIM_LEASE_S, _NUMBER, "the claims' lease in force, seconds"),
    Field(LEASES_LOST, (int,), "claims lost while their turn ran (left unrecorded)"),
    Field(LAST_UNRECORDED_AT, _NUMBER + (_NONE,), "unix time a webhook was last left without a record"),
)
