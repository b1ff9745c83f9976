"""Condition reasons: every ``reason`` the operator writes, named once.

The code, the CRD's description of ``status.conditions`` and the tests use these names;
docs/concepts.md's table lists them. A reason is CamelCase and stable: dashboards and alerts
match on it.
"""
from __future__ import annotations

# -- Ready ---------------------------------------------------------------------------------
AVAILABLE = "Available"                    #: every desired replica is ready and nothing blocks
WAITING_FOR_REDIS = "WaitingForRedis"      #: scale-out held until the operator's Redis probe passes
REPLICAS_NOT_READY = "ReplicasNotReady"    #: fewer ready replicas than desired (starting, rolling)

# -- Reconciling ---------------------------------------------------------------------------
ROLLING_OUT = "RollingOut"                 #: the Deployment is rolling out the latest template
#: one replica copies the single SQLite replica's dedup records into Redis before others start
MIGRATING_DEDUP_RECORDS = "MigratingDedupRecords"
RECONCILE_COMPLETE = "ReconcileComplete"   #: every object matches the spec
RECONCILE_STALLED = "Stalled"              #: blocked; the Stalled condition says why
#: the operator's new release would roll these pods; it waits for a slot (--max-concurrent-rollouts)
OPERATOR_UPGRADE_QUEUED = "OperatorUpgradeQueued"
#: the API server did not answer a request of the pass in time (or refused the connection): retried
#: with backoff; Reconciling=True, not Stalled, since nothing needs the user
API_SERVER_UNAVAILABLE = "APIServerUnavailable"
#: problems a retry clears by itself: shown as Reconciling=True (and Ready=False), never as Stalled
RETRIED = (API_SERVER_UNAVAILABLE,)

# -- Stalled (False) -----------------------------------------------------------------------
NO_PROBLEMS = "NoProblems"                 #: the operator can act on the spec

# -- Stalled (True): the operator cannot act until the user changes something ---------------
INVALID_SPEC = "InvalidSpec"               #: a rule of the CRD is broken (its CEL rule was bypassed)
CONFIG_OVER_LIMITS = "ConfigOverLimits"    #: spec.config nests too deep or is too large
INVALID_REDIS_URL = "InvalidRedisURL"      #: spec.redis names no Redis the grammar accepts
REDIS_TARGET_NOT_ALLOWED = "RedisTargetNotAllowed"  #: the Redis is outside the operator's allowlist
SECRET_NOT_FOUND = "SecretNotFound"        #: a Secret named by the spec does not exist
SECRET_KEY_MISSING = "SecretKeyMissing"    #: the Secret lacks the named key
SECRET_VALUE_INVALID = "SecretValueInvalid"  #: the Secret's value is not UTF-8 text
REPLICA_POLICY_VIOLATION = "ReplicaPolicyViolation"  #: replicas > 1 without Redis under Refuse
OBJECT_NOT_OWNED = "ObjectNotOwned"        #: an object the operator would write belongs to someone else
APPLY_FAILED = "ApplyFailed"               #: the API server refused a rendered object
EXPOSE_NOT_SERVED = "ExposeNotServed"      #: spec.expose asks for a kind the cluster does not serve (HTTPRoute)
TENANCY_POLICY_VIOLATION = "TenancyPolicyViolation"  #: the spec asks for what the administrator's policy forbids
HOST_CLAIMED = "HostClaimed"               #: a host of spec.expose is claimed by an older GatewayDeployment or route
FAILED_CREATE = "FailedCreate"             #: the API server refused to create a gateway pod (e.g. Pod Security)
RECONCILE_ERROR = "ReconcileError"         #: an unexpected error; retried with backoff
GATEWAY_CONFIG_REJECTED = "GatewayConfigRejected"  #: a replica exited 78 on its gateway.yaml
#: a replica exited 78: the image's gateway release lacks what the launcher relies on (it names what)
GATEWAY_INCOMPATIBLE = "GatewayIncompatible"  #: also GatewayCompatible=False: a pod refused the gateway (exit 78)
CRASH_LOOP = "CrashLoop"                   #: a replica is in CrashLoopBackOff
#: pod waiting reasons reported as they are
POD_WAITING = ("ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "CreateContainerConfigError",
               "InvalidImageName")

# -- RedisReachable ------------------------------------------------------------------------
PROBE_SUCCEEDED = "ProbeSucceeded"         #: connect, auth and a SET NX PX round trip worked
CONNECTION_FAILED = "ConnectionFailed"     #: no connection within the probe timeout
AUTHENTICATION_FAILED = "AuthenticationFailed"  #: Redis refused the password
PROBE_FAILED = "ProbeFailed"               #: something answered, but not like Redis
TARGET_NOT_ALLOWED = "TargetNotAllowed"    #: the probe did not connect: outside the allowlist
REDIS_NOT_CONFIGURED = "RedisNotConfigured"  #: spec.redis names no Redis
PROBE_NOT_RUN = "ProbeNotRun"              #: the probe could not run (see Stalled)
MANAGED_REDIS_STARTING = "ManagedRedisStarting"  #: the managed Redis pod is not ready yet (no probe sent)
TLS_CERTIFICATE_UNTRUSTED = "TLSCertificateUntrusted"  #: the server's certificate is not signed by a trusted CA
TLS_NAME_MISMATCH = "TLSNameMismatch"      #: the server's certificate does not carry the host (or tls.serverName)
TLS_CERTIFICATE_EXPIRED = "TLSCertificateExpired"  #: the server's certificate is expired (or not yet valid)
TLS_HANDSHAKE_FAILED = "TLSHandshakeFailed"  #: no TLS session (e.g. the server speaks plain TCP)
COMMAND_NOT_PERMITTED = "CommandNotPermitted"  #: the ACL user may not run a command the gateway needs (NOPERM)

# -- RedisTLSVerified: is the Redis server's identity checked? -----------------------------------
SERVER_CERTIFICATE_VERIFIED = "ServerCertificateVerified"  #: TLS, the certificate checked (CA and name)
TLS_VERIFICATION_DISABLED = "TLSVerificationDisabled"  #: spec.redis.tls.insecureSkipVerify: nothing checked
TLS_NOT_USED = "TLSNotUsed"                #: plain TCP to Redis (e.g. the managed Redis inside the namespace)

# -- IdempotencyDegraded (True reasons are health.Idempotency values) ------------------------
NO_DEGRADED_REPLICAS = "NoDegradedReplicas"  #: no polled replica reports durability:idempotency
#: the store forgot its records (canary gone, or a restart without persistence); one record TTL
DEDUP_HISTORY_LOST = "DedupHistoryLost"
#: webhooks a replica admitted that Redis may never have recorded (a journal dropped or not carried at
#: a stop, a lease lost mid-turn); one record TTL after the last one (unrecorded.py)
ADMISSIONS_NOT_RECORDED = "AdmissionsNotRecorded"

# -- SessionsShared: does every replica run a webhook session on one history? -------------------
SHARED_SESSION_HISTORY = "SharedSessionHistory"  #: one history per session in Redis, for every replica
PER_REPLICA_HISTORY = "PerReplicaHistory"  #: several replicas, each with its own history (conversations split)
SINGLE_REPLICA_HISTORY = "SingleReplicaHistory"  #: one replica keeps every history

# -- RedisDurable: can the shared store keep its records? -------------------------------------
DURABLE_STORE = "DurableStore"             #: persistence on and maxmemory-policy noeviction
EVICTING_MAXMEMORY_POLICY = "EvictingMaxmemoryPolicy"  #: an evicting policy drops dedup records (all have a TTL)
REDIS_NEARLY_FULL = "RedisNearlyFull"     #: used_memory at 85% of maxmemory or more: soon it refuses records
PERSISTENCE_OFF = "PersistenceOff"         #: a restart of this Redis loses every record
REDIS_CONFIG_NOT_READABLE = "RedisConfigNotReadable"  #: INFO / CONFIG GET refused: not checked (the canary still is)

# -- GatewayCompatible: does the gateway the replicas run keep the guarantees? (compat.py) ------
TESTED_GATEWAY_RELEASE = "TestedGatewayRelease"  #: every replica that told its versions runs a tested release
UNTESTED_GATEWAY_RELEASE = "UntestedGatewayRelease"  #: a replica runs praisonai-bot outside the tested releases
GATEWAY_VERSIONS_UNKNOWN = "GatewayVersionsUnknown"  #: no replica has told its versions yet

# -- ReplicaSafeChannels: does any channel bot run on every replica? (replica_state.py) -----------
NO_CHANNEL_ON_EVERY_REPLICA = "NoChannelOnEveryReplica"  #: one replica, or no bot that polls or holds a connection
CHANNEL_ON_EVERY_REPLICA = "ChannelOnEveryReplica"  #: several replicas each run a polling / connected channel bot

# -- ExactlyOnceAdmission ------------------------------------------------------------------
SINGLE_REPLICA_DURABLE_STORE = "SingleReplicaDurableStore"  #: one replica, SQLite on a PVC
SHARED_REDIS_STORE = "SharedRedisStore"    #: every polled replica dedups through the shared Redis
PER_REPLICA_STORES = "PerReplicaStores"    #: several replicas, each with its own SQLite store
STORE_NOT_PERSISTENT = "StoreNotPersistent"  #: one replica, SQLite in an emptyDir
NO_REPLICAS = "NoReplicas"                 #: nothing runs
REDIS_UNREACHABLE = "RedisUnreachable"     #: the shared store is not reachable
#: a replica holds claims it cannot renew (it says so, or it holds claims while it cannot use Redis), or
#: one that held claims at its last answer does not answer: a claim may expire while its turn runs
CLAIMS_AT_RISK = "ClaimsAtRisk"
#: a replica says it has not been able to use Redis for CUT_OFF_AFTER_S: it admits best-effort after its
#: fail-closed window
REPLICA_CANNOT_REACH_REDIS = "ReplicaCannotReachRedis"
IDEMPOTENCY_DEGRADED = "IdempotencyDegraded"  #: some replica is not deduplicating through Redis
REPLICAS_UNVERIFIED = "ReplicasUnverified"  #: some replica did not answer GET /health
COALESCED_HOOKS = "CoalescedHooks"  #: under Warn, several replicas run hooks with coalesce (a stop loses their groups)

#: every reason above, for the CRD's description of status.conditions (and the tests)
ALL: tuple[str, ...] = tuple(dict.fromkeys(
    [v for k, v in list(globals().items()) if k.isupper() and isinstance(v, str)]
    + [*POD_WAITING, "BuildTimeFallback", "RedisOutOfMemory", "RedisReadOnly", "RedisCommandNotPermitted",
       "RedisLoading", "RuntimeOutage", "OtherDegradation"]))
