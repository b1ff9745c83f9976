"""Status conditions: computed from observed facts by pure functions.

Types: Ready, Reconciling, Stalled (kstatus reads these three), RedisReachable,
IdempotencyDegraded, ExactlyOnceAdmission, RedisDurable, SessionsShared, RedisTLSVerified,
GatewayCompatible, ReplicaSafeChannels. ``merge`` keeps ``lastTransitionTime`` unless the status
flips, so an unchanged world yields an identical status and no write.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gateway_operator.api import reasons as R
from gateway_operator.api import IDEMPOTENCY_OWNER
from gateway_operator.api.objects import StatusView
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.replica_state import channel_warning
from gateway_operator.core import claim_risk, compat
from gateway_operator.core.dedup_history import (MEMORY_CLEAR_BELOW, MEMORY_WARN_AT, RECORD_TTL_SECONDS, History,
                                                 durability, lost_message)
from gateway_operator.core.health import DESCRIPTIONS, UNUSABLE, Idempotency, ReplicaHealth
from gateway_operator.core.pods import Observed
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.replicas import CUT_OFF_AFTER_S, gate_holds
from gateway_operator.core.rollouts import RolloutState
from gateway_operator.core.unrecorded import Unrecorded
from gateway_operator.core.unrecorded import leaving_message
from gateway_operator.core.unrecorded import message as unrecorded_message

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
REDIS_REACHABLE, IDEMPOTENCY_DEGRADED, EXACTLY_ONCE = "RedisReachable", "IdempotencyDegraded", "ExactlyOnceAdmission"
REDIS_DURABLE, SESSIONS_SHARED, REDIS_TLS_VERIFIED = "RedisDurable", "SessionsShared", "RedisTLSVerified"
GATEWAY_COMPATIBLE, REPLICA_SAFE_CHANNELS = "GatewayCompatible", "ReplicaSafeChannels"
ORDER = (READY, RECONCILING, STALLED, REDIS_REACHABLE, IDEMPOTENCY_DEGRADED, EXACTLY_ONCE, REDIS_DURABLE,
         SESSIONS_SHARED, REDIS_TLS_VERIFIED, GATEWAY_COMPATIBLE, REPLICA_SAFE_CHANNELS)


def settled_at(status: StatusView | Mapping[str, Any] | None, generation: object) -> bool:
    """Does ``status`` say that a pass reconciled ``generation`` and left nothing to do: observed at
    that generation, neither Stalled (a problem: its retries back off from a full pass) nor
    Reconciling (a rollout under way, or waiting for its slot, which only a full pass takes)?"""
    view = status if isinstance(status, StatusView) else StatusView(status or {})
    if generation is None or view.observed_generation != generation:
        return False
    return view.says(STALLED, "False") and view.says(RECONCILING, "False")


# a replica state worse than another decides the IdempotencyDegraded reason
_SEVERITY = (Idempotency.BUILD_TIME_FALLBACK, Idempotency.REDIS_OUT_OF_MEMORY, Idempotency.REDIS_READ_ONLY,
             Idempotency.REDIS_COMMAND_NOT_PERMITTED, Idempotency.REDIS_LOADING, Idempotency.RUNTIME_OUTAGE,
             Idempotency.OTHER)


@dataclass(frozen=True)
class Problem:
    """Why the operator cannot bring the gateway to its spec (Stalled=True)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Facts:
    generation: int
    desired_replicas: int
    store_backend: str
    policy: str
    persistence: bool
    redis_configured: bool
    running_replicas: int = 0   # replicas the operator set on the Deployment
    ready_replicas: int = 0
    updated_replicas: int = 0
    rollout_observed: bool = False  # the Deployment controller has seen our latest template
    current_replicas: int = 0       # the Deployment's status.replicas (old pods too, mid-rollout)
    problem: Problem | None = None
    probe: ProbeResult | None = None
    health: Sequence[ReplicaHealth] = field(default_factory=tuple)
    dedup: History = History()   # the canary's history (dedup_history.assess)
    unrecorded: Unrecorded = Unrecorded()  # admissions Redis may never have recorded (unrecorded.assess)
    now: float = 0.0             # unix seconds, for the lost window
    migrating: bool = False      # one replica copies the single SQLite replica's records to Redis
    sessions_store: str = "replica"  # where webhook session history lives (spec.sessions)
    target: RedisTarget | None = None  # the Redis spec.redis resolves to (its TLS settings)
    rollout: RolloutState = RolloutState.NONE  # a rollout the operator causes itself (rollouts.py)
    memory_warned: bool = False  # RedisDurable said RedisNearlyFull last time (it holds down to 80%)
    refused: Sequence[tuple[str, str]] = ()  # (pod, the launcher's line): pods that refused the gateway (exit 78)
    channels: Sequence[tuple[str, str]] = ()  # (channel, how): bots every replica would run (replica_state)
    # replicas that held claims at their last answer and do not answer now (claim_risk.remember, silent)
    silent_holders: Sequence[claim_risk.Holder] = ()
    coalesced: Sequence[str] = ()  # paths of the hooks that set coalesce (api.coalesced_hooks)
    record_ttl: float = RECORD_TTL_SECONDS  # how long the store keeps a record (spec.redis.recordTTLSeconds)
    # the last answers of replicas gone (or going) with an outage journal Redis never took, their
    # stop's word not read yet (unrecorded.settle's waiting list): the risk is already there
    leaving: Sequence[ReplicaHealth] = ()

    @property
    def dedup_lost(self) -> bool:
        return self.store_backend == "redis" and self.dedup.lost(self.now)

    @property
    def unrecorded_open(self) -> bool:
        return self.store_backend == "redis" and self.unrecorded.open(self.now)

    @property
    def gated(self) -> bool:
        """Held below the desired replicas until the operator's Redis probe passes."""
        return gate_holds(self.store_backend, bool(self.probe and self.probe.ok), self.running_replicas,
                          self.desired_replicas)

    @property
    def degraded(self) -> list[ReplicaHealth]:
        return [h for h in self.health if h.state in _SEVERITY]

    @property
    def claims_at_risk(self) -> list[str]:
        """Why claims may expire while their turns run, by pod (claim_risk.risks); [] without Redis."""
        return claim_risk.risks(self.health, self.silent_holders) if self.store_backend == "redis" else []

    @property
    def cut_off(self) -> list[str]:
        """Replicas that say they have not been able to use Redis for CUT_OFF_AFTER_S (the bound
        the readiness gate uses): each holds webhooks for its fail-closed window, then admits them
        best-effort, and whatever reaches another replica runs again."""
        return sorted(h.pod for h in self.health if h.redis in UNUSABLE
                      and (h.unusable_for_s or 0.0) >= CUT_OFF_AFTER_S)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


def compute(f: Facts) -> list[Condition]:
    return [_ready(f), _reconciling(f), _stalled(f), _redis(f), _degraded(f), _exactly_once(f), _durable(f),
            _sessions(f), _tls_verified(f), _compatible(f), _channels(f)]


def _channels(f: Facts) -> Condition:
    if f.channels:
        return Condition(REPLICA_SAFE_CHANNELS, "False", R.CHANNEL_ON_EVERY_REPLICA,
                         channel_warning(f.desired_replicas, f.channels))
    return Condition(REPLICA_SAFE_CHANNELS, "True", R.NO_CHANNEL_ON_EVERY_REPLICA,
                     "no channel bot that polls or holds a connection runs on more than one replica")


def _compatible(f: Facts) -> Condition:
    c = compat.assess(compat.running(f.health), f.refused)
    return Condition(GATEWAY_COMPATIBLE, c.status, c.reason, c.message)


def _stalled(f: Facts) -> Condition:
    if f.problem and f.problem.reason not in R.RETRIED:
        return Condition(STALLED, "True", f.problem.reason, f.problem.message)
    return Condition(STALLED, "False", R.NO_PROBLEMS, "the operator can act on the spec")


def _rolling(f: Facts) -> bool:
    return not Observed(running=f.running_replicas, ready=f.ready_replicas, updated=f.updated_replicas,
                        rollout_observed=f.rollout_observed, current=f.current_replicas).rolled_out


def _reconciling(f: Facts) -> Condition:
    if f.problem and f.problem.reason in R.RETRIED:   # working on it: the retry clears it
        return Condition(RECONCILING, "True", f.problem.reason, f.problem.message)
    if f.problem:
        return Condition(RECONCILING, "False", R.RECONCILE_STALLED, "reconciliation is blocked; see Stalled")
    if f.migrating:
        return Condition(RECONCILING, "True", R.MIGRATING_DEDUP_RECORDS,
                         "holding one replica, with the single SQLite replica's state volume mounted, until it has "
                         "copied the webhooks that replica admitted into Redis; then scaling to "
                         f"{f.desired_replicas}")
    if f.gated:
        return Condition(RECONCILING, "True", R.WAITING_FOR_REDIS,
                         f"holding {f.running_replicas} of {f.desired_replicas} replicas until the "
                         "operator's Redis probe passes")
    if f.rollout is RolloutState.QUEUED:
        return Condition(RECONCILING, "True", R.OPERATOR_UPGRADE_QUEUED,
                         "the operator's new release changes these pods (not the spec): waiting for a rollout slot "
                         "(--max-concurrent-rollouts roll at a time); the current replicas keep serving")
    if _rolling(f):
        why = "; the operator's new release changed the pods, not the spec" if f.rollout is RolloutState.OPERATOR else ""
        return Condition(RECONCILING, "True", R.ROLLING_OUT,
                         f"{f.updated_replicas} of {f.running_replicas} replicas updated, "
                         f"{f.ready_replicas} ready{why}")
    return Condition(RECONCILING, "False", R.RECONCILE_COMPLETE, "all objects match the spec")


def _ready(f: Facts) -> Condition:
    if f.problem:
        return Condition(READY, "False", f.problem.reason, f.problem.message)
    if f.gated:
        return Condition(READY, "False", R.WAITING_FOR_REDIS,
                         f"scale-out to {f.desired_replicas} replicas waits for Redis")
    if _rolling(f) or f.ready_replicas < f.desired_replicas:
        return Condition(READY, "False", R.REPLICAS_NOT_READY,
                         f"{f.ready_replicas} of {f.desired_replicas} replicas ready")
    message = f"{f.ready_replicas} of {f.desired_replicas} replicas ready"
    if f.store_backend != "redis" and f.desired_replicas > 1:
        message += "; exactly-once webhook admission is NOT held (replicaPolicy Warn)"
    return Condition(READY, "True", R.AVAILABLE, message)


def _redis(f: Facts) -> Condition:
    if not f.redis_configured:
        return Condition(REDIS_REACHABLE, "Unknown", R.REDIS_NOT_CONFIGURED, "spec.redis names no Redis")
    if f.probe is None:
        return Condition(REDIS_REACHABLE, "Unknown", R.PROBE_NOT_RUN,
                         "the Redis probe could not run; see Stalled")
    if f.probe.reason == R.MANAGED_REDIS_STARTING:
        return Condition(REDIS_REACHABLE, "Unknown", f.probe.reason, f.probe.message)
    return Condition(REDIS_REACHABLE, "True" if f.probe.ok else "False", f.probe.reason, f.probe.message)


def _degraded(f: Facts) -> Condition:
    """A replica degraded now names the reason (the worst, _SEVERITY): it is what to act on; a
    window that outlives its cause (a lost dedup history, admissions never recorded) follows in the
    message, or is the reason when no replica is degraded."""
    degraded = f.degraded
    windows: list[tuple[str, str]] = []
    if f.dedup_lost:
        windows.append((R.DEDUP_HISTORY_LOST, lost_message(f.dedup, f.record_ttl)))
    if f.unrecorded_open:
        windows.append((R.ADMISSIONS_NOT_RECORDED, unrecorded_message(f.unrecorded)))
    also = "".join(f"; also {message}" for _, message in windows[1:])
    if not degraded and windows:
        return Condition(IDEMPOTENCY_DEGRADED, "True", windows[0][0], windows[0][1] + also)
    if not degraded:
        answered = sum(h.state is not Idempotency.UNKNOWN for h in f.health)
        return Condition(IDEMPOTENCY_DEGRADED, "False", R.NO_DEGRADED_REPLICAS,
                         f"no replica reports {_owner()} ({answered} of {len(f.health)} polled replicas answered)")
    counts = Counter(h.state for h in degraded)
    worst = next(s for s in _SEVERITY if counts[s])
    parts = [f"{counts[s]} {DESCRIPTIONS[s]}" for s in _SEVERITY if counts[s]]
    pods = ", ".join(sorted(h.pod for h in degraded))
    return Condition(IDEMPOTENCY_DEGRADED, "True", worst.value,
                     f"{len(degraded)} of {len(f.health)} replicas report {_owner()}: "
                     f"{'; '.join(parts)} (pods: {pods})" + "".join(f"; also {m}" for _, m in windows))


def _owner() -> str:
    return IDEMPOTENCY_OWNER


def _exactly_once(f: Facts) -> Condition:
    def no(reason: str, message: str) -> Condition:
        return Condition(EXACTLY_ONCE, "False", reason, message)

    if f.store_backend != "redis":
        if f.running_replicas > 1:
            return no(R.PER_REPLICA_STORES, f"{f.running_replicas} replicas each dedup in their own SQLite "
                      "store: a webhook fanned to two replicas can run the agent twice")
        if f.running_replicas == 0:
            return no(R.NO_REPLICAS, "no replica is running")
        if not f.persistence:
            return no(R.STORE_NOT_PERSISTENT, "one replica on SQLite in an emptyDir: a replaced pod forgets "
                      "admitted webhooks; enable spec.persistence")
        return Condition(EXACTLY_ONCE, "True", R.SINGLE_REPLICA_DURABLE_STORE,
                         "one replica on a SQLite store kept on a PersistentVolumeClaim")
    # Precedence, the first that holds names the reason (each of these makes the condition False):
    # 1. RedisUnreachable: the operator itself cannot reach the store; it is the cause the others
    #    usually follow from (every replica's claims are then at risk too: said in its message);
    # 2. ClaimsAtRisk: a live risk on named pods that becomes a second run once a claim expires
    #    (within the lease): the announcement issue 56 asks for, shown before the other replica could
    #    admit, and what to act on first (a paused or cut-off pod);
    # 3. ReplicaCannotReachRedis: a live risk on named pods too, one step further off (the replica
    #    admits best-effort only after its fail-closed window);
    # 4. DedupHistoryLost, AdmissionsNotRecorded: windows that outlive their cause by one record TTL
    #    (nothing left to act on); AdmissionsNotRecorded too while a replica that went away with a
    #    journal has not said it carried it (the window's risk is there from its stop, not after the
    #    wait for its word), before
    # 5. IdempotencyDegraded (a replica's gateway admits best-effort now), as before;
    # then ReplicasUnverified (Unknown: nothing is known to be wrong).
    at_risk, cut_off = f.claims_at_risk, f.cut_off
    if f.probe is None or not f.probe.ok:
        also = f"; also claims at risk: {'; '.join(at_risk)}" if at_risk else ""
        return no(R.REDIS_UNREACHABLE, "the shared Redis idempotency store is not reachable" + also)
    if at_risk:
        return no(R.CLAIMS_AT_RISK, "a turn may run on after its claim expires in Redis, and the webhook's "
                  f"redelivery to another replica then runs it again: {'; '.join(at_risk)}")
    if cut_off:
        return no(R.REPLICA_CANNOT_REACH_REDIS,
                  f"{len(cut_off)} replicas cannot use Redis for {CUT_OFF_AFTER_S:.0f} s or more (pods: "
                  f"{', '.join(cut_off)}): each holds webhooks for its fail-closed window, then admits them "
                  "best-effort, and a redelivery to another replica runs them again")
    if f.dedup_lost:
        return no(R.DEDUP_HISTORY_LOST, lost_message(f.dedup, f.record_ttl))
    if f.unrecorded_open:
        return no(R.ADMISSIONS_NOT_RECORDED, unrecorded_message(f.unrecorded))
    if f.leaving and f.running_replicas > 0:
        return no(R.ADMISSIONS_NOT_RECORDED, leaving_message(f.leaving))
    if f.degraded:
        return no(R.IDEMPOTENCY_DEGRADED, f"{len(f.degraded)} replicas are not deduplicating through Redis")
    if f.coalesced and f.running_replicas > 1:  # admitted only under replicaPolicy Warn (validation.py)
        return no(R.COALESCED_HOOKS, f"{f.running_replicas} replicas run hooks with coalesce "
                  f"({', '.join(sorted(f.coalesced))}): a coalesced delivery is recorded and answered 202 before its "
                  "group runs, so a replica that stops with a group pending loses it (the provider's retry to "
                  "another replica is answered deduplicated)")
    if not f.health:  # nothing polled yet: a clean answer from nobody proves nothing
        return Condition(EXACTLY_ONCE, "Unknown", R.REPLICAS_UNVERIFIED, "no ready replica has answered GET /health yet")
    unknown = [h.pod for h in f.health if h.state is Idempotency.UNKNOWN]
    if unknown:
        return Condition(EXACTLY_ONCE, "Unknown", R.REPLICAS_UNVERIFIED,
                         f"{len(unknown)} replicas did not answer GET /health (pods: {', '.join(sorted(unknown))})")
    return Condition(EXACTLY_ONCE, "True", R.SHARED_REDIS_STORE,
                     f"every polled replica ({len(f.health)}) dedups through the shared Redis store")


def _sessions(f: Facts) -> Condition:
    def c(status: str, reason: str, message: str) -> Condition:
        return Condition(SESSIONS_SHARED, status, reason, message)

    if f.sessions_store == "redis":
        if f.probe is None or not f.probe.ok:
            return c("False", R.REDIS_UNREACHABLE, "session history lives in Redis, which is not reachable: each "
                     "replica runs webhook turns on its own history until it is")
        return c("True", R.SHARED_SESSION_HISTORY, "every replica runs a webhook session's turns on one history in "
                 "Redis, one turn of a session at a time")
    if f.desired_replicas > 1:
        return c("False", R.PER_REPLICA_HISTORY, f"each of {f.desired_replicas} replicas keeps its own session "
                 "history: a conversation whose turns reach two replicas splits (spec.sessions.store: redis shares it)")
    return c("True", R.SINGLE_REPLICA_HISTORY, "one replica keeps each session's history")


def _durable(f: Facts) -> Condition:
    def c(status: str, reason: str, message: str) -> Condition:
        return Condition(REDIS_DURABLE, status, reason, message)

    if not f.redis_configured:
        return c("Unknown", R.REDIS_NOT_CONFIGURED, "spec.redis names no Redis")
    store = f.probe.store if f.probe else None
    if store is None:
        return c("Unknown", R.PROBE_NOT_RUN, "the Redis probe has not passed yet")
    problem = durability(store, was_full=f.memory_warned)
    if problem is None:
        return c("True", R.DURABLE_STORE, "Redis persists its data and evicts nothing (maxmemory-policy noeviction)")
    kind, detail = problem
    if kind == "evicting":
        return c("False", R.EVICTING_MAXMEMORY_POLICY,
                 f"maxmemory-policy {detail} evicts keys under memory pressure, and every dedup record has a TTL, "
                 "so evicted records let a redelivered webhook run again; set maxmemory-policy noeviction")
    if kind == "nearly-full":
        return c("False", R.REDIS_NEARLY_FULL,
                 f"Redis reached {MEMORY_WARN_AT:.0%} of its maxmemory ({detail}; said until it is below "
                 f"{MEMORY_CLEAR_BELOW:.0%}); under noeviction a full Redis "
                 "refuses every new dedup record and session turn (the replicas hold deliveries 503, then admit "
                 "them unrecorded): raise maxmemory, or lower spec.sessions.ttlSeconds / maxMessages (session "
                 "history shares this memory)")
    if kind == "not-persistent":
        return c("False", R.PERSISTENCE_OFF, "Redis persists nothing (no AOF, no RDB saves): a restart loses every "
                 "dedup record; the operator then reports DedupHistoryLost for one record TTL")
    return c("Unknown", R.REDIS_CONFIG_NOT_READABLE,
             f"the server refused {detail} (as managed services often do): persistence and maxmemory-policy are "
             "not checked; the operator's canary key still catches a store that forgot its records")


def _tls_verified(f: Facts) -> Condition:
    def c(status: str, reason: str, message: str) -> Condition:
        return Condition(REDIS_TLS_VERIFIED, status, reason, message)

    t = f.target
    if not f.redis_configured or t is None:
        return c("Unknown", R.REDIS_NOT_CONFIGURED, "spec.redis names no Redis")
    if not t.tls:
        return c("Unknown", R.TLS_NOT_USED, "the connection to Redis does not use TLS" +
                 (" (the managed Redis is reached inside the namespace)" if t.managed else ""))
    if t.tls_options.insecure_skip_verify:
        return c("False", R.TLS_VERIFICATION_DISABLED, "spec.redis.tls.insecureSkipVerify: the gateway and the "
                 "operator accept any certificate from Redis, so whoever can intercept the connection can read "
                 "and change the dedup records; set tls.caSecretRef instead")
    ca = (f"the CA bundle of Secret {t.ca_ref.name!r}" if t.ca_ref
          else "the system's CAs")
    return c("True", R.SERVER_CERTIFICATE_VERIFIED,
             f"the Redis server's certificate is checked against {ca} for the name {t.server_name}")


def merge(previous: Iterable[Mapping[str, Any]], computed: Iterable[Condition], generation: int,
          now: str) -> list[dict[str, Any]]:
    """Conditions as written to status: lastTransitionTime moves only when status flips."""
    before = {c.get("type"): c for c in previous}
    merged = []
    for c in computed:
        old = before.get(c.type)
        since = old["lastTransitionTime"] if old and old.get("status") == c.status and \
            old.get("lastTransitionTime") else now
        merged.append({"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                       "lastTransitionTime": since, "observedGeneration": generation})
    return merged


@dataclass(frozen=True)
class Transition:
    type: str
    old: str | None
    new: Mapping[str, Any]


def transitions(previous: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]) -> list[Transition]:
    """Conditions whose status changed (the operator posts an Event for the ones that matter)."""
    before = {c.get("type"): c.get("status") for c in previous}
    return [Transition(c["type"], before.get(c["type"]), c) for c in current
            if before.get(c["type"]) != c["status"]]
