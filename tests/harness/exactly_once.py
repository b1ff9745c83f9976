"""The exactly-once checker's pure half: what happened, classified (issue 18).

A run (harness/exactly_once_run.py, on the real node) records three histories and hands them
here:

* **deliveries**: every webhook delivery a provider made (the message, where it went, when, and
  what came back: a status, ``deduplicated``, or a connection error);
* **turns**: every agent turn the LLM STAND-IN saw (``msg=`` names its message; it also kept the
  ``msg=`` ids of the history the gateway sent with it, and whether its answer reached the caller);
* **samples**: the GatewayDeployment's conditions over time, from a watch;

plus the **faults** the nemesis caused, each with a start and an end.

``classify`` then says, per message: a **duplicate** is a message whose turn was answered more
than once; it is **announced** when a condition said exactly-once was not held (``ExactlyOnceAdmission``
not True, or ``IdempotencyDegraded`` True) in the watch's samples at the moment of its second
admission and still in force then: the second in time of the moments its answered turns were
admitted, each when the delivery that ran it was sent (the gateway admitted it then; the turn may
start long after, queued on its session's lock). An
announcement that comes after, however soon, is too late: a user could not have known before the
message ran again (issue 56); such duplicates are **silent** and also counted as
``announced_late_duplicates``. One exception: a fault that makes Redis forget (FORGETTING) cannot
be announced before it happens, so a duplicate admitted from such a fault's start until its
expected condition showed (on time, within ``lag``) is **excused** (``excused_duplicates``, each
naming its fault), neither silent nor announced. A duplicate is also **avoidable** when Redis held the message's record as the
re-run was admitted (an earlier run answered 2xx outside every fault that keeps a replica from
writing to Redis, and no fault that makes Redis forget since): a replica that asked Redis would
have answered ``deduplicated``, so no announcement excuses it. A message is **lost** when no turn of it was answered
although a delivery got a 2xx (the provider stops retrying) or every delivery failed (its retries
ran out), or when its first answered turn started more than the retry horizon (300 s) after its
first delivery. A claim's **orphaned** time is how long a holder that died without its drain kept
the message answered "in progress". A **split** is an answered turn whose history lacks an earlier answered turn of its
session (one that ended ``slack`` seconds before it started, within the last ``window`` turns
of that session when histories are bounded). A **crossed** turn is one whose history holds a
message of another session: two conversations mixed into one (what a session key that renders
empty does: every event of the hook then shares ``hook:<path>``). For each fault with an expected condition the lag
from the fault to that condition, and from the fault's end to its clearing, is measured.

Nothing here does I/O, so the classification is tested on histories with planted defects
(tests/unit/test_exactly_once.py) before any real run is trusted.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

OUTAGES = ("redis_pause", "redis_restart", "redis_persistence_flip")  # faults during which Redis is unusable
# faults during which the shared session history cannot be written: a turn then runs on its replica's
# copy, and what it added reaches Redis only by the replica's write-back after the fault (a turn of the
# same session on another replica in between reads the history without it). Under OOM Redis still
# answers reads, but the session lock (SET NX) and the append are write commands it refuses.
# A holder cut off past its lease (long_partition) or paused past it (holder_pause) cannot write the
# history either: the fence stops its turn (gwop_leases) after the model may have answered, so what
# that turn added never reaches the shared history, and the message's retry runs it again later.
HISTORY_UNWRITABLE = (*OUTAGES, "redis_refuses_writes", "long_partition", "holder_pause")
# faults after which Redis may no longer hold a record it held before: a flush, a restart (with AOF
# the last second may be lost), a recreated Redis, the switch from SQLite (records migrated)
FORGETTING = ("redis_flush", "redis_restart", "redis_persistence_flip", "sqlite_to_redis")
# faults during which some replica may not reach Redis to record what it answered (a replica cut off
# past the lease, or paused past it, may answer 2xx after its claim expired: its record did not take)
UNRECORDED = (*OUTAGES, "redis_latency", "replica_partition", "stop_during_outage", "redis_refuses_writes",
              "long_partition", "holder_pause")
# a holder that cannot renew its claims (cut off, paused) must be announced (ExactlyOnceAdmission not
# True) within this of the fault, well within the claim lease, so before another replica could admit
# its message (the operator's rule, issue 56: target <= 10 s)
CLAIMS_AT_RISK_BOUND_S = 10.0
RECORD_SLACK_S = 2.0  # a 2xx answer reaches the provider just after its record is written
RETRY_HORIZON_S = 300.0  # a provider gives a message up this long after its first delivery
# faults that end a claim's holder without its drain (nothing of it releases what it held)
HOLDER_DEATHS = ("kill_pod", "force_delete")
# a replica cut off from Redis is out of the traffic within: the launcher's probe (every 2 s, 0.3 s
# socket timeout), the 5 s it must have been cut off, the operator's next poll (2 s) and its timeout
# (1 s), then the gate's write and the EndpointSlice (about 1 s): 11.3 s
PARTITION_IN_TRAFFIC_BOUND_S = 12.0
PARTITIONS = ("replica_partition", "long_partition")   # one replica cut off from Redis: measured against it
ORPHANED_CLAIM_BOUND_S = 90.0  # a dead holder's claim is gone within one lease (60 s) and the retry's backoff
# faults after which the shared history starts empty: the switch from one SQLite replica (whose
# session history was in its memory) to Redis
SESSION_RESETS = ("sqlite_to_redis",)
HELD = "held"          # ExactlyOnceAdmission True and IdempotencyDegraded not True
NOT_HELD = "not-held"


@dataclass(frozen=True)
class Delivery:
    msg: str
    attempt: int            # 0 for the first delivery, then redeliveries and retries
    target: str             # "pod:<ip>", "service", "edge"
    sent: float
    done: float
    status: int | None      # None: no HTTP answer (refused, reset, timed out)
    deduplicated: bool = False
    error: str = ""
    # what a 503 said: "retry" (held: the replica could not ask Redis), "in_progress" (another
    # request holds the message's claim), "" otherwise
    said: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class Turn:
    msg: str
    session: str
    started: float
    ended: float | None
    answered: bool
    history: tuple[str, ...] = ()

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> "Turn":
        return cls(str(record["msg"]), str(record.get("session") or ""), float(record["started"]),
                   None if record.get("ended") is None else float(record["ended"]), bool(record.get("answered")),
                   tuple(str(h) for h in record.get("history") or ()))


@dataclass(frozen=True)
class Sample:
    """The conditions at time ``at``: type -> (status, reason)."""

    at: float
    conditions: Mapping[str, tuple[str, str]]

    @property
    def state(self) -> str:
        admission = self.conditions.get("ExactlyOnceAdmission", ("Unknown", ""))[0]
        degraded = self.conditions.get("IdempotencyDegraded", ("Unknown", ""))[0]
        return HELD if admission == "True" and degraded != "True" else NOT_HELD


@dataclass(frozen=True)
class Expectation:
    """What a fault must show: condition ``type`` at ``status`` (with ``reason`` when given);
    ``clears``: it must go back after the fault ends (a lost dedup history stays for its TTL);
    ``since_end``: the fact exists only once the fault is over (a Redis restarted or recreated
    forgot its records when it answers again, not before), so its lag counts from the end;
    ``within``: the fault's own bound on that lag (a holder at risk: CLAIMS_AT_RISK_BOUND_S), else
    the run's lag bound."""

    type: str
    status: str
    reason: str | None = None
    clears: bool = True
    since_end: bool = False
    # the fault's own bound on when it must show (None: the run's lag bound)
    within: float | None = None

    def met(self, sample: Sample) -> bool:
        status, reason = sample.conditions.get(self.type, ("Unknown", ""))
        return status == self.status and (self.reason is None or reason == self.reason)


@dataclass(frozen=True)
class Fault:
    kind: str
    started: float
    ended: float
    detail: str = ""
    expect: Expectation | None = None
    # replica_partition: the cut-off pod's readiness (the operator's readiness gate): seconds from the
    # cut until it took no traffic (0.0: never Ready while cut off; None: it stayed Ready), and from
    # the heal until it was Ready again
    left_traffic_after_s: float | None = None
    back_after_s: float | None = None
    # ... and each change of its Ready, the readiness gate and its containers' readiness seen while
    # cut off: (seconds from the cut, "ready <bool>, gate <status>, containers <ready|not ready>")
    traffic: tuple[tuple[float, str], ...] = ()
    # coalesced_stop: the API server refused a coalesced hook on more than one replica under
    # replicaPolicy Refuse with a message naming coalesce, and accepted it with such a warning under
    # Warn (None: not checked)
    refused: bool | None = None
    warned: bool | None = None


@dataclass
class Timeline:
    """The condition samples in time order, asked "was exactly-once held throughout [a, b]?"."""

    samples: Sequence[Sample]
    _times: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = sorted(self.samples, key=lambda s: s.at)
        self._times = [s.at for s in self.samples]

    def at(self, t: float) -> Sample | None:
        i = bisect.bisect_right(self._times, t) - 1
        return self.samples[i] if i >= 0 else None

    def held_at(self, t: float) -> bool:
        """The state in force at ``t`` (a sample at ``t`` counts) held exactly-once; before the
        watch's first sample nothing was announced."""
        current = self.at(t)
        return current is None or current.state == HELD

    def held_throughout(self, start: float, end: float) -> bool:
        """No sample in force said otherwise (before the watch's first sample nothing was
        announced, so a duplicate there is silent)."""
        first = self.at(start)
        if first is not None and first.state != HELD:
            return False
        lo, hi = bisect.bisect_right(self._times, start), bisect.bisect_right(self._times, end)
        return all(s.state == HELD for s in self.samples[lo:hi])

    def first(self, after: float, check: Any) -> float | None:
        """When ``check(sample)`` first held at or after ``after`` (the state then in force counts)."""
        current = self.at(after)
        if current is not None and check(current):
            return after
        i = bisect.bisect_right(self._times, after)
        return next((s.at for s in self.samples[i:] if check(s)), None)


def classify(deliveries: Iterable[Delivery], turns: Iterable[Turn], samples: Iterable[Sample],
             faults: Iterable[Fault], lag: float, slack: float = 2.0, window: int | None = None,
             horizon: float = RETRY_HORIZON_S) -> dict[str, Any]:
    """The run's report (the JSON the checker writes; ``table`` prints it for people). A message
    whose first answered turn started more than ``horizon`` seconds after its first delivery is
    lost too: the provider had given up on it."""
    deliveries, turns, faults = list(deliveries), list(turns), list(faults)
    timeline = Timeline(list(samples))
    by_msg: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_msg.setdefault(d.msg, []).append(d)
    answered: dict[str, list[Turn]] = {}
    started: dict[str, int] = {}
    every: dict[str, list[Turn]] = {}
    for t in sorted(turns, key=lambda t: t.started):
        started[t.msg] = started.get(t.msg, 0) + 1
        every.setdefault(t.msg, []).append(t)
        if t.answered:
            answered.setdefault(t.msg, []).append(t)

    forgetting = [(f.started - RECORD_SLACK_S, f.ended) for f in faults if f.kind in FORGETTING]
    unrecorded = [(f.started - lag, f.ended + lag) for f in faults if f.kind in UNRECORDED]
    excusing = _excusing(faults, timeline, lag)
    silent, announced, excused, late, lost, avoidable = [], [], [], [], [], []
    for msg, sent in sorted(by_msg.items()):
        ran = answered.get(msg, [])
        if len(ran) > 1:
            at = ran[1].started
            # a turn was admitted when the delivery that ran it arrived: before it started, and a
            # turn may wait (its session's lock) long after that; the second admission is the later
            # of the first two in time (a delivery that waited may carry the turn that started second)
            when = admitted(sent, every[msg])
            first, since = sorted(when.get(id(t), t.started) for t in ran)[:2]
            row = {"msg": msg, "turns": len(ran), "at": at, "admitted_after": round(since, 3)}
            if not timeline.held_at(since):
                announced.append(row)   # the announcement was in force when it was admitted
            else:
                # the first run admitted before the forgetting ended (its claim or record was what
                # Redis forgot), the re-run admitted from the fault's start until its condition showed
                fault = next((f for f, a, b in excusing if a <= since <= b and first <= f.ended), None)
                if fault is not None:
                    excused.append({**row, "fault": fault.kind, "fault_started": fault.started})
                else:
                    silent.append(row)
                    if not timeline.held_throughout(since, since + lag):
                        late.append(row)   # shown within the lag after: announced by the rule before issue 56
            # avoidable: Redis held its record when the re-run was admitted (an earlier run was
            # answered 2xx to the provider before, while every replica could write to Redis, and no
            # fault that makes Redis forget lies between), so a replica that had asked Redis would
            # not have run it, whatever was announced
            recorded = [d.done for d in sent if d.ok and not d.deduplicated and d.done + RECORD_SLACK_S < since
                        and not any(a <= d.done <= b for a, b in unrecorded)]
            # a forgetting fault from the message's first turn on: one while that turn ran took its
            # claim too, so another replica could claim the message, and the record then written over
            # that claim did not take (an owner-checked record is a no-op over another's claim)
            first_turn = every[msg][0].started
            if recorded and not any(first_turn <= end and start <= since for start, end in forgetting):
                avoidable.append({**row, "recorded_at": round(min(recorded), 3)})
        first_sent = min(d.sent for d in sent)
        if not ran or ran[0].started > first_sent + horizon:
            # the run waits for every delivery and retry, so either a 2xx told the provider to
            # stop, or every delivery failed and its retries ran out: nobody will deliver it again;
            # or it ran only after the provider would have given up
            lost.append({"msg": msg, "deliveries": len(sent), "ok": sum(d.ok for d in sent),
                         "deduplicated": sum(d.deduplicated for d in sent), "turns_started": started.get(msg, 0),
                         **({"ran_after_s": round(ran[0].started - first_sent, 1)} if ran else {})})

    # a fault that makes Redis forget (flush, a restart without persistence) takes the session
    # histories with it, and while Redis is unusable (paused, restarting) a turn runs on its
    # replica's own history, which never reaches Redis: a split across either is the fault's, and
    # announced by its condition (DedupHistoryLost, RedisReachable=False); it is counted apart
    # when the history was lost: at a flush's start, or any time during the switch (the SQLite
    # replica serves until the Redis replicas take over)
    forgets = sorted((f.started, f.started if f.kind not in SESSION_RESETS else f.ended) for f in faults
                     if (f.expect and f.expect.reason == "DedupHistoryLost") or f.kind in SESSION_RESETS)
    outages = [(f.started - lag, f.ended + lag) for f in faults if f.kind in HISTORY_UNWRITABLE]
    every_split = _splits([t for ts in answered.values() for t in ts], slack, window)
    # a missing turn in flight at the loss counts as lost with it: the loss took its session lock
    # too, so the next turn of its session could run beside it and read the history before its append
    splits = [x for x in every_split if not any(x["missing_started"] <= end and start <= x["at"]
                                                for start, end in forgets)
              and not any(a <= t <= b for a, b in outages for t in x["times"])]
    session_of = {t.msg: t.session for ts in answered.values() for t in ts if t.session}
    crossed = [{"session": t.session, "msg": t.msg, "at": t.started,
                "foreign": [m for m in t.history if session_of.get(m, t.session) != t.session][:5]}
               for ts in answered.values() for t in ts
               if t.session and any(session_of.get(m, t.session) != t.session for m in t.history)]
    orphaned = _orphaned_claims(by_msg, turns, faults)
    lags = [_fault_lag(f, timeline) for f in faults]
    announce = [x["announced_after_s"] for x in lags if x["announced_after_s"] is not None]
    clear = [x["cleared_after_s"] for x in lags if x["cleared_after_s"] is not None]
    return {
        "deliveries": len(deliveries),
        "unique": len(by_msg),
        "ok_deliveries": sum(d.ok for d in deliveries),
        "deduplicated_deliveries": sum(d.deduplicated for d in deliveries),
        "failed_deliveries": sum(not d.ok for d in deliveries),
        "failures": _count(f"{d.target.split(':')[0]} {d.status or d.error}" for d in deliveries if not d.ok),
        "turns_started": sum(started.values()),
        "turns_answered": sum(len(v) for v in answered.values()),
        "silent_duplicates": len(silent),
        "announced_duplicates": len(announced),
        # the announcement rule: in force at the second admission (issue 56; before it, anywhere
        # from ``lag`` before the admission to ``lag`` after the second turn started)
        "announcement_rule": "at-admission",
        "announced_late_duplicates": len(late),   # silent ones shown within the lag after their admission
        "excused_duplicates": len(excused),       # admitted before a forgetting fault could be shown
        "excused_by_fault": _count(x["fault"] for x in excused),
        "avoidable_duplicates": len(avoidable),
        "lost": len(lost),
        "retry_horizon_s": horizon,
        "fail_closed_503s": sum(d.status == 503 and d.said == "retry" for d in deliveries),
        "in_progress_503s": sum(d.status == 503 and d.said == "in_progress" for d in deliveries),
        "orphaned_claim_max_s": max((x["held_s"] for x in orphaned), default=0.0),
        "splits": len(splits),
        "splits_across_faults": len(every_split) - len(splits),
        "crossed": len(crossed),
        "fault_lag_max_s": max(announce) if announce else None,
        "fault_clear_max_s": max(clear) if clear else None,
        # the longest a replica cut off from Redis took traffic (a partition it never left counts whole)
        "partition_in_traffic_max_s": max((f.ended - f.started if f.left_traffic_after_s is None
                                           else f.left_traffic_after_s for f in faults
                                           if f.kind in PARTITIONS), default=None),
        # coalesced_stop: refused under Refuse, warned under Warn (None when not checked)
        "coalesce_refused": _all(f.refused for f in faults if f.kind == "coalesced_stop"),
        "coalesce_warned": _all(f.warned for f in faults if f.kind == "coalesced_stop"),
        "faults_unannounced": sum(1 for x in lags if x["expected"] and x["announced_after_s"] is None),
        # shown, but later than the fault's bound (its own, else the lag bound)
        "faults_late": sum(1 for x in lags if x["announced_after_s"] is not None
                           and x["announced_after_s"] > (x["bound_s"] or lag)),
        "faults_uncleared": sum(1 for x in lags if x["expected"] and x["clears"] and x["cleared_after_s"] is None),
        "lag_bound_s": lag,
        "faults": lags,
        "duplicates_at": {"silent": [x["at"] for x in silent], "announced": [x["at"] for x in announced],
                          "excused": [x["at"] for x in excused]},
        "examples": {"silent_duplicates": silent[:10], "announced_duplicates": announced[:10],
                     "avoidable_duplicates": avoidable[:10], "excused_duplicates": excused[:10],
                     "announced_late_duplicates": late[:10],
                     "lost": lost[:10], "splits": splits[:10], "crossed": crossed[:10],
                     "orphaned_claims": sorted(orphaned, key=lambda x: -x["held_s"])[:10]},
    }


def reclassify(report: Mapping[str, Any]) -> dict[str, Any]:
    """Classify a saved report's records again (its ``records`` and ``timeline``), as this
    version of the classifier judges them: runs compare across versions of the checker too."""
    records = report["records"]
    deliveries = [Delivery(**d) for d in records["deliveries"]]
    turns = [Turn(**{**t, "history": tuple(t.get("history") or ())}) for t in records["turns"]]
    faults = [Fault(**{**f, "expect": Expectation(**f["expect"]) if f.get("expect") else None}) for f in records["faults"]]
    samples = [Sample(x["at"], {k: tuple(v) for k, v in x["conditions"].items()}) for x in report["timeline"]]
    settings = report.get("settings") or {}
    return classify(deliveries, turns, samples, faults, lag=report["lag_bound_s"], window=settings.get("session_window"),
                    horizon=report.get("retry_horizon_s", RETRY_HORIZON_S))


def admitted(deliveries: Sequence[Delivery], turns: Sequence[Turn]) -> dict[int, float]:
    """When each turn of one message was admitted (by ``id`` of the turn): the ``sent`` of the
    delivery that carried it. The turns, in the order they started, each take a delivery not taken
    yet that was open when the turn started (sent before, answered after: the gateway answers a
    webhook after its turn), the one answered closest to the turn's end (a delivery that waited
    long, for a lock or a switch, carries a later turn than one sent just before this turn; the
    earliest sent when the turn has no end), or, failing that, the earliest one not taken yet that
    got no answer (reset, timed out: it may have been admitted all the same). A turn left without
    one (a history with no such delivery) is not in the answer: its start is the latest it could
    have been admitted. So a turn still running while another replica admits a redelivery keeps
    its own delivery, and the redelivery is the second admission (not the earlier, still open, first one)."""
    taken: set[int] = set()
    found: dict[int, float] = {}
    for t in sorted(turns, key=lambda t: t.started):
        open_ = [i for i, d in enumerate(deliveries) if i not in taken and d.sent <= t.started <= d.done]
        unanswered = [i for i, d in enumerate(deliveries) if i not in taken and d.sent <= t.started and d.status is None]
        end = t.ended
        pick = min(open_, key=lambda i: (0.0 if end is None else abs(deliveries[i].done - end), deliveries[i].sent),
                   default=None)
        if pick is None:
            pick = min(unanswered, key=lambda i: deliveries[i].sent, default=None)
        if pick is not None:
            taken.add(pick)
            found[id(t)] = deliveries[pick].sent
    return found


def _excusing(faults: Iterable[Fault], timeline: Timeline, lag: float) -> list[tuple[Fault, float, float]]:
    """The spans in which a duplicate is excused by a fault that makes Redis forget: from its start
    (less the record's slack: a flush is timed as its command returned) until its expected condition
    showed, when it showed within the lag bound (a fault that is not announced in time, or that
    announces nothing because nothing was forgotten, excuses nothing)."""
    spans = []
    for f in faults:
        if f.kind not in FORGETTING or f.expect is None:
            continue
        shown = timeline.first(f.started, f.expect.met)
        origin = f.ended if f.expect.since_end else f.started
        if shown is not None and shown - origin <= (f.expect.within or lag):
            spans.append((f, f.started - RECORD_SLACK_S, shown))
    return spans


def _all(values: Iterable[bool | None]) -> bool | None:
    """True when every value is True, False when one is not, None when there are none."""
    seen = list(values)
    return None if not seen else all(v is True for v in seen)


def _count(keys: Iterable[str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for key in keys:
        counted[key] = counted.get(key, 0) + 1
    return dict(sorted(counted.items()))


def _splits(answered: list[Turn], slack: float, window: int | None) -> list[dict[str, Any]]:
    by_session: dict[str, list[Turn]] = {}
    for t in answered:
        if t.session:
            by_session.setdefault(t.session, []).append(t)
    found = []
    for session, ts in by_session.items():
        ts.sort(key=lambda t: t.started)
        by_end = sorted((u for u in ts if u.ended is not None), key=lambda u: u.ended or 0.0)
        for t in ts:
            # a history is the session's appends in order, one per answered run (a message that ran
            # twice, a duplicate, takes two places; one that ended within the slack takes one too),
            # and a bounded one keeps the last ``window`` of them
            appended = [u for u in by_end if (u.ended or 0.0) < t.started and u is not t]
            if window is not None:
                appended = appended[-window:]
            last = {u.msg: i for i, u in enumerate(appended)}
            due = {u.msg for u in appended if (u.ended or 0.0) < t.started - slack and u.msg != t.msg}
            earlier = [m for m in sorted(last, key=last.__getitem__) if m in due]
            if window is not None:
                # a full bounded history dropped what is older than its oldest entry: a turn whose
                # caller hung up (never counted here) may still have taken a place
                held = [last[m] for m in t.history if m in last]
                if len(t.history) >= window and held:
                    earlier = [m for m in earlier if last[m] > min(held)]
            missing = [m for m in earlier if m not in t.history]
            if missing:
                # the missing turns as they had ended by then (a duplicate of one may run later)
                before = [u for u in ts if u.msg in missing and u.ended is not None and u.ended < t.started - slack]
                ended = max(u.ended or 0.0 for u in before)
                times = [t.started] + [u.started for u in before]
                found.append({"session": session, "msg": t.msg, "missing": missing[:5], "at": t.started,
                              "missing_started": max(u.started for u in before), "missing_ended": ended,
                              "times": times})
    return found


def _orphaned_claims(by_msg: Mapping[str, list[Delivery]], turns: Iterable[Turn],
                     faults: Sequence[Fault]) -> list[dict[str, Any]]:
    """How long a claim outlived its holder: for a turn that never answered (its holder died, was
    stopped or cut off) and was started before a fault that ends a holder without its drain, from
    that fault until the message's next turn started (a retry took the claim: an upper bound, the
    provider's backoff included), counted when its message got an "in progress" answer meanwhile
    (else the claim went at once); with no next turn, until the last such answer. A turn that
    ended unanswered without such a fault (fenced, cut by a drain) counts from its end: until then
    its holder ran it, and "in progress" was true; from its start when its end is not known."""
    deaths = sorted(f.started for f in faults if f.kind in HOLDER_DEATHS)
    starts: dict[str, list[float]] = {}
    for t in turns:
        starts.setdefault(t.msg, []).append(t.started)
    found = []
    for t in turns:
        if t.answered:
            continue
        died = next((at for at in deaths if at >= t.started and (t.ended is None or at <= t.ended)),
                    t.ended if t.ended is not None else t.started)
        after = min((at for at in starts[t.msg] if at > t.started), default=None)
        told = [d.done for d in by_msg.get(t.msg, []) if d.status == 503 and d.said == "in_progress"
                and died <= d.sent and (after is None or d.sent < after)]
        if told:
            found.append({"msg": t.msg, "turn_started": t.started, "holder_gone": died,
                          "held_s": round((after if after is not None else max(told)) - died, 1)})
    return found


def _fault_lag(fault: Fault, timeline: Timeline) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": fault.kind, "started": fault.started, "ended": fault.ended,
                           "detail": fault.detail, "expected": None, "clears": False,
                           "announced_after_s": None, "cleared_after_s": None}
    row["bound_s"] = None if fault.expect is None else fault.expect.within
    if fault.kind in PARTITIONS:
        row.update(left_traffic_after_s=fault.left_traffic_after_s, back_after_s=fault.back_after_s,
                   traffic=[list(change) for change in fault.traffic])
    if fault.kind == "coalesced_stop":
        row.update(refused=fault.refused, warned=fault.warned)
    if fault.expect is None:
        return row
    e = fault.expect
    row.update(expected=f"{e.type}={e.status}" + (f" {e.reason}" if e.reason else ""), clears=e.clears)
    shown = timeline.first(fault.started, e.met)
    if shown is not None:
        origin = fault.ended if e.since_end else fault.started
        row["announced_after_s"] = round(max(0.0, shown - origin), 2)
        if e.clears:
            gone = timeline.first(max(fault.ended, shown), lambda s: not e.met(s))
            if gone is not None:
                row["cleared_after_s"] = round(gone - fault.ended, 2)
    return row


def targets_met(report: Mapping[str, Any]) -> bool:
    """Issue 18's, 35's and 56's targets: no silent duplicate, no avoidable one, nothing lost, no split, no crossed conversation, every fault announced
    within its bound (its own, else the lag bound) and cleared within the lag bound after it ended, a dead holder's claim freed and a cut-off
    replica out of the traffic within theirs, and a coalesced hook on more than one replica refused
    (warned under Warn) when that was checked."""
    lag = report["lag_bound_s"]
    on_time = all(f["announced_after_s"] is None or f["announced_after_s"] <= (f.get("bound_s") or lag)
                  for f in report["faults"])
    return (report["silent_duplicates"] == 0 and report.get("avoidable_duplicates", 0) == 0 and report["lost"] == 0
            and report.get("orphaned_claim_max_s", 0.0) <= ORPHANED_CLAIM_BOUND_S
            and (report.get("partition_in_traffic_max_s") or 0.0) <= PARTITION_IN_TRAFFIC_BOUND_S
            and report["splits"] == 0
            and report.get("crossed", 0) == 0 and report["faults_unannounced"] == 0 and report["faults_uncleared"] == 0
            and on_time and (report["fault_clear_max_s"] or 0) <= lag
            and report.get("coalesce_refused") is not False and report.get("coalesce_warned") is not False)


KEYS = ("deliveries", "unique", "silent_duplicates", "announced_duplicates", "avoidable_duplicates", "lost", "splits",
        "fault_lag_max_s", "orphaned_claim_max_s", "fail_closed_503s", "in_progress_503s", "partition_in_traffic_max_s")


def table(report: Mapping[str, Any]) -> str:
    """The report for people: the headline figures, then one line per fault."""
    lines = [f"  {k:<24} {report.get(k)}" for k in
             (*KEYS, "excused_duplicates", "announced_late_duplicates", "coalesce_refused", "coalesce_warned",
              "splits_across_faults", "crossed", "unfinished_messages", "fault_clear_max_s", "faults_unannounced",
              "faults_late", "faults_uncleared", "turns_started",
              "turns_answered", "ok_deliveries", "deduplicated_deliveries", "failed_deliveries")]
    if report.get("excused_by_fault"):
        lines.append(f"  {'excused by':<24} {report['excused_by_fault']}")
    lines.append(f"  {'lag bound (s)':<24} {report.get('lag_bound_s')}")
    lines.append("")
    lines.append(f"  {'fault':<26} {'at (s)':>7} {'for (s)':>7}  {'expected':<40} {'shown':>7} {'cleared':>7}")
    t0 = report.get("started", 0.0)
    for f in report.get("faults", []):
        lines.append(f"  {f['kind']:<26} {f['started'] - t0:7.1f} {f['ended'] - f['started']:7.1f}  "
                     f"{f['expected'] or '-':<40} {_s(f['announced_after_s']):>7} {_s(f['cleared_after_s']):>7}")
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
