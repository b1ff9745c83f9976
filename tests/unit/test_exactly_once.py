"""Unit tests of the exactly-once checker's classifier (harness/exactly_once.py) on histories with
planted defects: each defect is caught, a clean history passes. Pure: no cluster, no network."""
from __future__ import annotations

import pytest

from harness.exactly_once import (KEYS, Delivery, Expectation, Fault, Sample, Timeline, Turn, admitted, classify,
                                  reclassify, table, targets_met)

T0 = 1000.0
LAG = 5.0


def held(at: float, **extra: tuple[str, str]) -> Sample:
    conditions = {"ExactlyOnceAdmission": ("True", "Admitted"), "IdempotencyDegraded": ("False", "HistoryIntact")}
    conditions.update(extra)
    return Sample(at, conditions)


def degraded(at: float) -> Sample:
    return held(at, IdempotencyDegraded=("True", "DedupHistoryLost"))


def no_admission(at: float) -> Sample:
    return held(at, ExactlyOnceAdmission=("False", "RedisUnreachable"))


def delivery(msg: str, sent: float, attempt: int = 0, status: int | None = 200, deduplicated: bool = False,
             target: str = "service", error: str = "", said: str = "") -> Delivery:
    return Delivery(msg, attempt, target, sent, sent + 0.1, status, deduplicated, error, said)


def turn(msg: str, started: float, session: str = "", answered: bool = True, history: tuple[str, ...] = (),
         ended: float | None = None) -> Turn:
    return Turn(msg, session, started, started + 1.0 if ended is None and answered else ended, answered, history)


def steady(until: float = T0 + 100.0) -> list[Sample]:
    """Held from before the run until ``until``, sampled every 10 s."""
    return [held(T0 - 10.0 + 10.0 * i) for i in range(int((until - T0 + 10.0) // 10.0) + 1)]


def run(deliveries=(), turns=(), samples=None, faults=(), lag: float = LAG, **kw) -> dict:
    return classify(deliveries, turns, steady() if samples is None else samples, faults, lag, **kw)


# -- clean --------------------------------------------------------------------------------

def clean_history() -> tuple[list[Delivery], list[Turn], list[Sample], list[Fault]]:
    deliveries, turns = [], []
    for i in range(5):
        msg, at = f"m{i}", T0 + 10.0 * i
        deliveries.append(delivery(msg, at))
        deliveries.append(delivery(msg, at + 0.5, attempt=1, deduplicated=True, target="pod:10.0.0.2"))
        turns.append(turn(msg, at + 0.2))
    # held throughout; RedisReachable (not one of the exactly-once conditions) goes False at
    # T0+22, 2 s into the fault, and back at T0+33, 3 s after it ended
    down, up = ("False", "ConnectionFailed"), ("True", "ProbeSucceeded")
    samples = [held(s.at, RedisReachable=down if T0 + 22.0 <= s.at < T0 + 33.0 else up) for s in steady()]
    samples += [held(T0 + 22.0, RedisReachable=down), held(T0 + 33.0, RedisReachable=up)]
    fault = Fault("redis-down", T0 + 20.0, T0 + 30.0, "kill redis", Expectation("RedisReachable", "False"))
    return deliveries, turns, samples, [fault]


def test_clean_history_meets_the_targets() -> None:
    deliveries, turns, samples, faults = clean_history()
    report = run(deliveries, turns, samples, faults)
    assert (report["deliveries"], report["unique"], report["ok_deliveries"], report["deduplicated_deliveries"],
            report["failed_deliveries"]) == (10, 5, 10, 5, 0)
    assert (report["turns_started"], report["turns_answered"]) == (5, 5)
    assert (report["silent_duplicates"], report["announced_duplicates"], report["lost"], report["splits"],
            report["faults_unannounced"], report["faults_uncleared"]) == (0, 0, 0, 0, 0, 0)
    assert (report["fault_lag_max_s"], report["fault_clear_max_s"]) == (2.0, 3.0)
    assert report["faults"][0]["expected"] == "RedisReachable=False"
    assert report["failures"] == {}
    assert targets_met(report) is True


def test_clean_history_fails_when_the_fault_shows_later_than_the_bound() -> None:
    deliveries, turns, samples, faults = clean_history()
    report = run(deliveries, turns, samples, faults, lag=1.5)
    assert report["fault_lag_max_s"] == 2.0 and report["faults_unannounced"] == 0
    assert targets_met(report) is False


# -- duplicates ---------------------------------------------------------------------------

def duplicate(second: float) -> tuple[list[Delivery], list[Turn]]:
    """m1 answered twice (its redelivery was not deduplicated), m0 once. m1's first delivery was
    answered 503 (its turn ran; a drain cut the answer), so Redis need not hold its record: the
    re-run is not avoidable, only announced or silent."""
    return ([delivery("m0", T0), delivery("m1", T0 + 10.0, status=503),
             delivery("m1", second - 0.2, attempt=1)],
            [turn("m0", T0 + 0.2), turn("m1", T0 + 10.2), turn("m1", second)])


# -- avoidable ----------------------------------------------------------------------------

def recorded_then_rerun(second: float) -> tuple[list[Delivery], list[Turn]]:
    """m1 answered 200 at T0+10 (its record written), then run again at ``second``."""
    return ([delivery("m1", T0 + 10.0), delivery("m1", second - 0.2, attempt=1)],
            [turn("m1", T0 + 10.2), turn("m1", second)])


def test_a_rerun_of_a_recorded_message_is_avoidable_even_when_announced() -> None:
    deliveries, turns = recorded_then_rerun(T0 + 44.0)
    samples = steady() + [no_admission(T0 + 43.5), held(T0 + 45.0)]  # in force at its admission
    report = run(deliveries, turns, samples)
    assert (report["announced_duplicates"], report["avoidable_duplicates"]) == (1, 1)
    assert report["examples"]["avoidable_duplicates"][0]["recorded_at"] == T0 + 10.1
    assert targets_met(report) is False


@pytest.mark.parametrize("kind", ["redis_flush", "redis_restart", "redis_persistence_flip", "sqlite_to_redis"])
def test_a_rerun_after_redis_forgot_is_not_avoidable(kind: str) -> None:
    deliveries, turns = recorded_then_rerun(T0 + 44.0)
    report = run(deliveries, turns, faults=[Fault(kind, T0 + 30.0, T0 + 31.0)])
    assert report["avoidable_duplicates"] == 0


@pytest.mark.parametrize("kind", ["redis_pause", "redis_latency", "replica_partition", "redis_refuses_writes"])
def test_a_rerun_of_a_message_answered_while_redis_was_unwritable_is_not_avoidable(kind: str) -> None:
    deliveries, turns = recorded_then_rerun(T0 + 44.0)
    report = run(deliveries, turns, faults=[Fault(kind, T0 + 8.0, T0 + 12.0)])
    assert report["avoidable_duplicates"] == 0
    far = run(deliveries, turns, faults=[Fault(kind, T0 + 20.0, T0 + 22.0)])  # over before: the record was written
    assert far["avoidable_duplicates"] == 1


def test_silent_duplicate_while_held() -> None:
    deliveries, turns = duplicate(T0 + 40.0)
    report = run(deliveries, turns)
    assert (report["silent_duplicates"], report["announced_duplicates"], report["lost"]) == (1, 0, 0)
    assert report["examples"]["silent_duplicates"] == [{"msg": "m1", "turns": 2, "at": T0 + 40.0,
                                                        "admitted_after": T0 + 40.0}]
    assert report["turns_answered"] == 3
    assert targets_met(report) is False


ADMITTED = T0 + 44.0   # when the redelivery that ran m1 again was sent (the gateway admitted it then)


def carried_duplicate(admitted_at: float = ADMITTED, started: float | None = None) -> tuple[list[Delivery], list[Turn]]:
    """``duplicate``, with the redelivery that ran m1 again open while its turn ran (sent at
    ``admitted_at``, its turn started 0.5 s later, answered after the turn): its admission is the
    redelivery's ``sent``, not the turn's start."""
    started = admitted_at + 0.5 if started is None else started
    return ([delivery("m0", T0), delivery("m1", T0 + 10.0, status=503),
             Delivery("m1", 1, "pod:10.0.0.3", admitted_at, started + 1.5, 200)],
            [turn("m0", T0 + 0.2), turn("m1", T0 + 10.2), turn("m1", started)])


@pytest.mark.parametrize("sample", [degraded, no_admission], ids=["IdempotencyDegraded", "ExactlyOnceAdmission"])
@pytest.mark.parametrize("offset", [-30.0, -1.0, 0.0], ids=["long-before", "1s-before", "at-the-admission"])
def test_duplicate_announced_before_its_second_admission_and_still_in_force_is_announced(sample, offset: float) -> None:
    deliveries, turns = carried_duplicate()
    samples = steady(ADMITTED + offset - 0.1) + [sample(ADMITTED + offset), held(ADMITTED + 5.0)]
    report = run(deliveries, turns, samples)
    assert (report["silent_duplicates"], report["announced_duplicates"], report["excused_duplicates"]) == (0, 1, 0)
    assert report["examples"]["announced_duplicates"][0] == {"msg": "m1", "turns": 2, "at": ADMITTED + 0.5,
                                                             "admitted_after": ADMITTED}
    assert report["announcement_rule"] == "at-admission"
    assert targets_met(report) is True


@pytest.mark.parametrize("sample", [degraded, no_admission], ids=["IdempotencyDegraded", "ExactlyOnceAdmission"])
def test_duplicate_announced_1s_after_its_second_admission_is_silent(sample) -> None:
    """Issue 56's rule: shown 1 s after the redelivery was admitted (and 0.5 s after its turn
    started) is too late, though well within the health interval + timeout + 1 s that excused it
    before; it is counted as announced late, and silent."""
    deliveries, turns = carried_duplicate()
    report = run(deliveries, turns, steady() + [sample(ADMITTED + 1.0), held(ADMITTED + 5.0)])
    assert (report["silent_duplicates"], report["announced_duplicates"], report["announced_late_duplicates"]) == (1, 0, 1)
    assert report["examples"]["announced_late_duplicates"][0]["admitted_after"] == ADMITTED
    assert targets_met(report) is False


def test_duplicate_announced_after_its_admission_but_before_its_turn_started_is_silent() -> None:
    """In force when the turn started (it waited 10 s for its session's lock), not when the
    gateway admitted it: silent."""
    deliveries, turns = carried_duplicate(started=ADMITTED + 10.0)
    report = run(deliveries, turns, steady() + [no_admission(ADMITTED + 3.0)])
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (1, 0)


@pytest.mark.parametrize("sample", [degraded, no_admission], ids=["IdempotencyDegraded", "ExactlyOnceAdmission"])
@pytest.mark.parametrize("offset", [LAG + 0.1, LAG + 3.0], ids=["just-after-the-lag", "after"])
def test_duplicate_announced_later_than_the_lag_is_silent_and_not_counted_late(sample, offset: float) -> None:
    deliveries, turns = carried_duplicate()
    report = run(deliveries, turns, steady() + [sample(ADMITTED + offset), held(ADMITTED + offset + 1.0)])
    assert (report["silent_duplicates"], report["announced_duplicates"], report["announced_late_duplicates"]) == (1, 0, 0)
    assert targets_met(report) is False


@pytest.mark.parametrize("sample", [degraded, no_admission], ids=["IdempotencyDegraded", "ExactlyOnceAdmission"])
def test_duplicate_announced_and_cleared_just_before_its_admission_is_silent(sample) -> None:
    """No longer in force at the admission: the user was told it was held again."""
    deliveries, turns = carried_duplicate()
    report = run(deliveries, turns, steady() + [sample(ADMITTED - 3.0), held(ADMITTED - 0.1)])
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (1, 0)


def test_without_an_open_delivery_the_turns_start_is_its_admission() -> None:
    deliveries, turns = duplicate(ADMITTED)   # the redelivery answered before the turn started
    assert run(deliveries, turns, steady() + [degraded(ADMITTED)])["announced_duplicates"] == 1
    assert run(deliveries, turns, steady() + [degraded(ADMITTED + 0.1)])["silent_duplicates"] == 1


def test_the_second_admission_is_the_redelivery_not_the_first_runs_delivery_still_open() -> None:
    """m1's first turn still runs (its delivery open) when a redelivery reaches another replica and
    runs it again: the second admission is the redelivery's. Not held at the first delivery, held
    again at the redelivery: silent (the earliest open delivery would have called it announced)."""
    deliveries = [Delivery("m1", 0, "pod:10.0.0.2", T0 + 10.0, T0 + 60.0, 200),
                  Delivery("m1", 1, "pod:10.0.0.3", T0 + 40.0, T0 + 45.0, 200)]
    turns = [turn("m1", T0 + 10.5, ended=T0 + 59.0), turn("m1", T0 + 40.5, ended=T0 + 44.0)]
    samples = steady(T0) + [no_admission(T0 + 5.0), held(T0 + 30.0)]
    report = run(deliveries, turns, samples)
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (1, 0)
    assert report["examples"]["silent_duplicates"][0]["admitted_after"] == T0 + 40.0
    announced = run(deliveries, turns, steady(T0) + [no_admission(T0 + 35.0)])
    assert announced["announced_duplicates"] == 1


def test_admissions_match_each_turn_to_its_own_delivery() -> None:
    d0 = Delivery("m1", 0, "pod:a", T0, T0 + 1.0, None, error="RemoteDisconnected")   # its holder killed mid-turn
    d1 = Delivery("m1", 1, "pod:b", T0 + 5.0, T0 + 5.1, None, error="URLError")     # refused at once, never admitted
    d2 = Delivery("m1", 2, "pod:c", T0 + 20.0, T0 + 30.0, 200)
    t0, t1 = turn("m1", T0 + 0.5, answered=False, ended=T0 + 1.0), turn("m1", T0 + 20.5)
    found = admitted([d0, d1, d2], [t1, t0])
    # the open delivery is preferred to an earlier one that got no answer
    assert (found[id(t0)], found[id(t1)]) == (T0, T0 + 20.0)
    t2 = turn("m1", T0 + 40.0)
    assert admitted([d0, d1, d2], [t0, t1, t2])[id(t2)] == T0 + 5.0   # only the unanswered one is left
    assert id(t2) not in admitted([d0, d2], [t0, t1, t2])


# -- excused: a fault that makes Redis forget cannot be announced before it happens ----------

def flush_at(at: float = ADMITTED - 1.0, shown: float = ADMITTED + 2.0, expect: bool = True) -> tuple[Fault, list[Sample]]:
    fault = Fault("redis_flush", at, at + 0.1, "OK", Expectation("IdempotencyDegraded", "True", "DedupHistoryLost",
                                                                  clears=False) if expect else None)
    return fault, steady() + [held(shown, IdempotencyDegraded=("True", "DedupHistoryLost"))]


def test_a_duplicate_admitted_between_a_flush_and_its_announcement_is_excused_by_it() -> None:
    deliveries, turns = recorded_then_rerun(ADMITTED + 0.5)
    deliveries[1] = Delivery("m1", 1, "pod:10.0.0.3", ADMITTED, ADMITTED + 2.0, 200)
    fault, samples = flush_at()
    report = run(deliveries, turns, samples, [fault])
    assert (report["silent_duplicates"], report["announced_duplicates"], report["excused_duplicates"],
            report["avoidable_duplicates"]) == (0, 0, 1, 0)
    assert report["excused_by_fault"] == {"redis_flush": 1}
    assert report["examples"]["excused_duplicates"][0] == {"msg": "m1", "turns": 2, "at": ADMITTED + 0.5,
                                                           "admitted_after": ADMITTED, "fault": "redis_flush",
                                                           "fault_started": ADMITTED - 1.0}
    assert report["duplicates_at"]["excused"] == [ADMITTED + 0.5]
    assert targets_met(report) is True
    # once its condition shows, a re-run is announced as any other
    later, samples = flush_at(at=ADMITTED - 5.0, shown=ADMITTED - 2.0)
    assert run(deliveries, turns, samples, [later])["announced_duplicates"] == 1


def test_a_forgetting_fault_shown_later_than_the_lag_excuses_nothing() -> None:
    deliveries, turns = recorded_then_rerun(ADMITTED + 0.5)
    deliveries[1] = Delivery("m1", 1, "pod:10.0.0.3", ADMITTED, ADMITTED + 2.0, 200)
    fault, samples = flush_at(shown=ADMITTED - 1.0 + LAG + 0.5)
    report = run(deliveries, turns, samples, [fault])
    assert (report["silent_duplicates"], report["excused_duplicates"]) == (1, 0)
    assert report["faults_late"] == 1 and targets_met(report) is False


@pytest.mark.parametrize("kind", ["redis_restart", "sqlite_to_redis"])
def test_a_forgetting_fault_that_announces_nothing_excuses_nothing(kind: str) -> None:
    """A restart of a Redis that persists forgot nothing (no expectation); the switch from SQLite
    migrates the records: a re-run across either is silent, not excused."""
    deliveries, turns = recorded_then_rerun(ADMITTED + 0.5)
    fault = Fault(kind, ADMITTED - 1.0, ADMITTED + 0.2)
    report = run(deliveries, turns, faults=[fault])
    assert (report["silent_duplicates"], report["excused_duplicates"]) == (1, 0)


def test_a_forgetting_fault_excuses_no_message_whose_first_run_came_after_it() -> None:
    fault, samples = flush_at(at=T0 + 5.0, shown=ADMITTED + 2.0)   # shown 41 s late: not on time anyway
    deliveries, turns = carried_duplicate()
    report = run(deliveries, turns, samples, [fault], lag=60.0)    # on time under this bound
    assert (report["silent_duplicates"], report["excused_duplicates"]) == (1, 0)   # m1 first ran at T0+10.2


def test_unanswered_turn_then_answered_turn_is_not_a_duplicate() -> None:
    deliveries = [delivery("m1", T0, status=None, error="timeout"), delivery("m1", T0 + 5.0, attempt=1)]
    turns = [turn("m1", T0 + 0.2, answered=False, ended=T0 + 3.0), turn("m1", T0 + 5.2)]
    report = run(deliveries, turns)
    assert (report["silent_duplicates"], report["announced_duplicates"], report["lost"]) == (0, 0, 0)
    assert (report["turns_started"], report["turns_answered"]) == (2, 1)
    assert report["failures"] == {"service timeout": 1}
    assert targets_met(report) is True


def test_three_answered_turns_are_one_duplicate_message() -> None:
    deliveries = [delivery("m1", T0 + 10.0)]
    turns = [turn("m1", T0 + 10.2), turn("m1", T0 + 30.0), turn("m1", T0 + 20.0)]
    report = run(deliveries, turns)
    # the second answered turn in time (T0+20, not the second listed) is the one judged
    assert report["examples"]["silent_duplicates"] == [{"msg": "m1", "turns": 3, "at": T0 + 20.0,
                                                        "admitted_after": T0 + 20.0}]
    assert report["silent_duplicates"] == 1


def queued_duplicate(arrived: float) -> tuple[list[Delivery], list[Turn]]:
    """m1's redelivery arrives at ``arrived`` and waits (its session's lock) until T0+60 for its
    turn: the gateway admitted it when it arrived; the delivery is answered after the turn."""
    redelivery = Delivery("m1", 1, "service", arrived, T0 + 61.0, 200)
    return [delivery("m1", T0 + 10.0), redelivery], [turn("m1", T0 + 10.2), turn("m1", T0 + 60.0)]


def test_a_duplicate_admitted_while_not_held_is_announced_though_its_turn_started_later() -> None:
    deliveries, turns = queued_duplicate(T0 + 30.0)
    report = run(deliveries, turns, [*steady(T0 + 20.0), degraded(T0 + 29.0), held(T0 + 35.0)])
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (0, 1)
    assert report["examples"]["announced_duplicates"][0]["admitted_after"] == T0 + 30.0


def test_a_queued_duplicate_admitted_while_held_is_silent() -> None:
    deliveries, turns = queued_duplicate(T0 + 45.0)  # after the window closed (35 + LAG < 45)
    report = run(deliveries, turns, [*steady(T0 + 20.0), degraded(T0 + 29.0), held(T0 + 35.0)])
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (1, 0)


# -- lost ---------------------------------------------------------------------------------

def test_lost_when_the_only_delivery_was_deduplicated() -> None:
    report = run([delivery("m0", T0), delivery("m1", T0 + 10.0, deduplicated=True)], [turn("m0", T0 + 0.2)])
    assert report["lost"] == 1
    assert report["examples"]["lost"] == [{"msg": "m1", "deliveries": 1, "ok": 1, "deduplicated": 1,
                                            "turns_started": 0}]
    assert targets_met(report) is False


def test_lost_when_every_delivery_failed() -> None:
    deliveries = [delivery("m0", T0), delivery("m1", T0 + 10.0, status=None, error="refused", target="pod:10.0.0.3"),
                  delivery("m1", T0 + 12.0, attempt=1, status=None, error="reset", target="edge")]
    report = run(deliveries, [turn("m0", T0 + 0.2)])
    assert report["lost"] == 1
    assert report["examples"]["lost"] == [{"msg": "m1", "deliveries": 2, "ok": 0, "deduplicated": 0,
                                            "turns_started": 0}]
    assert report["failures"] == {"edge reset": 1, "pod refused": 1}
    assert (report["ok_deliveries"], report["failed_deliveries"]) == (1, 2)
    assert targets_met(report) is False


def test_lost_counts_turns_started_but_not_answered() -> None:
    report = run([delivery("m1", T0, status=502)], [turn("m1", T0 + 0.2, answered=False, ended=T0 + 1.0)])
    assert report["lost"] == 1
    assert report["examples"]["lost"][0]["turns_started"] == 1
    assert report["failures"] == {"service 502": 1}


def test_lost_when_it_ran_only_after_the_provider_gave_up() -> None:
    """A message held (503) past the retry horizon: it ran, but the provider had stopped retrying."""
    held_off = [delivery("m1", T0 + 30.0 * i, attempt=i, status=503, said="retry") for i in range(11)]
    report = run([*held_off, delivery("m1", T0 + 301.0, attempt=11)], [turn("m1", T0 + 301.2)],
                 samples=steady(T0 + 400.0))
    assert (report["lost"], report["retry_horizon_s"], report["fail_closed_503s"]) == (1, 300.0, 11)
    assert report["examples"]["lost"][0]["ran_after_s"] == 301.2
    assert targets_met(report) is False
    assert run([*held_off, delivery("m1", T0 + 301.0, attempt=11)], [turn("m1", T0 + 301.2)],
               samples=steady(T0 + 400.0), horizon=400.0)["lost"] == 0


def orphaned(last_in_progress: float) -> dict:
    """A holder force-deleted at T0+5 mid-turn; its message's retries are told "in progress" until
    ``last_in_progress``, then run elsewhere."""
    deliveries = [delivery("m1", T0, status=None, error="RemoteDisconnected", target="pod:10.0.0.2")]
    deliveries += [delivery("m1", at, attempt=1 + i, status=503, said="in_progress")
                   for i, at in enumerate(range(int(T0 + 6), int(last_in_progress) + 1, 10))]
    deliveries.append(delivery("m1", last_in_progress + 5.0, attempt=20))
    turns = [turn("m1", T0 + 0.5, answered=False), turn("m1", last_in_progress + 5.2)]
    return run(deliveries, turns, samples=steady(T0 + 1000.0), faults=[Fault("force_delete", T0 + 5.0, T0 + 6.0)])


def test_a_dead_holders_claim_is_measured_from_its_death_to_the_retry_that_took_it() -> None:
    assert orphaned(T0 + 66.0)["orphaned_claim_max_s"] == 66.2
    assert orphaned(T0 + 66.0)["in_progress_503s"] == 7
    assert targets_met(orphaned(T0 + 66.0)) is True
    # 0.1.16's 900 s claim: held far past the bound (and past the horizon: lost as well)
    report = orphaned(T0 + 836.0)
    assert report["orphaned_claim_max_s"] == 836.2 and report["lost"] == 1
    assert report["examples"]["orphaned_claims"][0]["holder_gone"] == T0 + 5.0
    assert targets_met(report) is False


def test_a_new_holders_turn_after_the_dead_ones_lease_is_not_counted_as_orphaned() -> None:
    """After the lease a retry takes the claim and runs a long turn: its own "in progress" answers
    belong to a live holder."""
    deliveries = [delivery("m1", T0, status=None, error="RemoteDisconnected", target="pod:10.0.0.2"),
                  delivery("m1", T0 + 30.0, attempt=1, status=503, said="in_progress"),
                  delivery("m1", T0 + 65.0, attempt=2),
                  delivery("m1", T0 + 90.0, attempt=3, status=503, said="in_progress")]
    turns = [turn("m1", T0 + 0.5, answered=False), turn("m1", T0 + 65.2, ended=T0 + 110.0)]
    report = run(deliveries, turns, samples=steady(T0 + 200.0), faults=[Fault("force_delete", T0 + 5.0, T0 + 6.0)])
    assert report["orphaned_claim_max_s"] == 60.2 and targets_met(report) is True


def test_a_live_holders_long_turn_is_not_an_orphaned_claim_until_it_ends() -> None:
    """Seed 182: a 100 s turn whose claim Redis forgot (a restart without persistence) while it ran;
    a retry was admitted elsewhere at +92 s and the first turn, its claim found gone, was fenced at
    +101 s. Its "in progress" answers before +92 s came from a holder running it: no orphan."""
    deliveries = [delivery("m1", T0, status=503, said="retry", target="edge"),
                  *(delivery("m1", T0 + at, attempt=i + 1, status=503, said="in_progress")
                    for i, at in enumerate((10.0, 40.0, 70.0, 85.0))),
                  delivery("m1", T0 + 92.0, attempt=6)]
    turns = [turn("m1", T0 + 0.1, answered=False, ended=T0 + 101.0), turn("m1", T0 + 92.3, ended=T0 + 190.0)]
    report = run(deliveries, turns, samples=steady(T0 + 300.0))
    assert report["orphaned_claim_max_s"] == 0.0 and report["examples"]["orphaned_claims"] == [], report["examples"]
    # the same turn ended (its claim left behind) at +30 s: the answers after that were of an orphan
    turns = [turn("m1", T0 + 0.1, answered=False, ended=T0 + 30.0), turn("m1", T0 + 92.3, ended=T0 + 190.0)]
    assert run(deliveries, turns, samples=steady(T0 + 300.0))["orphaned_claim_max_s"] == 62.3


# -- splits -------------------------------------------------------------------------------

def session_turns(b_history: tuple[str, ...]) -> list[Turn]:
    return [turn("A", T0, session="s"), turn("B", T0 + 10.0, session="s", history=b_history)]


def test_split_when_history_lacks_an_earlier_turn() -> None:
    turns = session_turns(())
    report = run([delivery("A", T0 - 0.2), delivery("B", T0 + 9.8)], turns)
    assert report["splits"] == 1
    assert report["examples"]["splits"] == [{"session": "s", "msg": "B", "missing": ["A"], "at": T0 + 10.0,
                                            "missing_started": T0, "missing_ended": T0 + 1.0,
                                            "times": [T0 + 10.0, T0]}]
    assert targets_met(report) is False


def test_no_split_when_history_has_the_earlier_turn() -> None:
    report = run([delivery("A", T0 - 0.2), delivery("B", T0 + 9.8)], session_turns(("A",)))
    assert report["splits"] == 0
    assert targets_met(report) is True


def test_no_split_for_a_turn_that_ended_within_the_slack() -> None:
    # A ends at T0+9 and B starts at T0+10: within slack=2 they may overlap in the gateway
    turns = [turn("A", T0, session="s", ended=T0 + 9.0), turn("B", T0 + 10.0, session="s")]
    assert run(turns=turns)["splits"] == 0
    assert run(turns=turns, slack=0.5)["splits"] == 1


def test_no_split_across_sessions_or_without_a_session() -> None:
    turns = [turn("A", T0, session="s"), turn("B", T0 + 10.0, session="t"),
             turn("C", T0, session=""), turn("D", T0 + 10.0, session="")]
    assert run(turns=turns)["splits"] == 0


def test_crossed_when_a_history_holds_another_sessions_message() -> None:
    # what a session key that renders empty does: both conversations share hook:<path>
    turns = [turn("A", T0, session="s"), turn("B", T0 + 10.0, session="t", history=("A",))]
    report = run(turns=turns)
    assert (report["crossed"], report["splits"]) == (1, 0)
    assert report["examples"]["crossed"] == [{"session": "t", "msg": "B", "at": T0 + 10.0, "foreign": ["A"]}]
    assert targets_met(report) is False
    apart = run(turns=[turn("A", T0, session="s"), turn("B", T0 + 10.0, session="t")])
    assert apart["crossed"] == 0 and targets_met(apart) is True


def test_unanswered_earlier_turn_is_not_required() -> None:
    turns = [turn("A", T0, session="s", answered=False, ended=T0 + 1.0), turn("B", T0 + 10.0, session="s")]
    assert run(turns=turns)["splits"] == 0


def test_window_requires_only_the_last_earlier_turns() -> None:
    turns = [turn("A1", T0, session="s"), turn("A2", T0 + 10.0, session="s", history=("A1",)),
             turn("B", T0 + 20.0, session="s", history=("A2",))]
    assert run(turns=turns, window=1)["splits"] == 0
    unbounded = run(turns=turns)
    assert unbounded["splits"] == 1
    assert unbounded["examples"]["splits"][0]["missing"] == ["A1"]
    # with window=1 the last earlier turn is still required
    lacking = [*turns[:2], turn("B", T0 + 20.0, session="s", history=("A1",))]
    report = run(turns=lacking, window=1)
    assert report["splits"] == 1 and report["examples"]["splits"][0]["missing"] == ["A2"]


def test_a_full_window_that_dropped_an_older_turn_for_a_newer_one_is_no_split() -> None:
    """A bounded history of 2 that holds the last turn and one that ended within the slack (or
    whose caller hung up) has dropped the turn before them: not a split; a gap inside it is."""
    turns = [turn("A1", T0, session="s"), turn("A2", T0 + 10.0, session="s", history=("A1",)),
             turn("A3", T0 + 18.5, session="s", answered=False, ended=T0 + 19.5)]
    full = turns + [turn("B", T0 + 20.0, session="s", history=("A2", "A3"))]
    assert run(turns=full, window=2)["splits"] == 0
    gap = [*turns[:2], turn("A2b", T0 + 12.0, session="s", history=("A1", "A2")),
           turn("B", T0 + 20.0, session="s", history=("A1", "A3"))]
    report = run(turns=gap, window=2)
    assert report["splits"] == 1 and report["examples"]["splits"][0]["missing"] == ["A2", "A2b"]


def test_a_message_that_ran_twice_sits_in_the_window_where_its_latest_run_put_it() -> None:
    """A duplicate's second run appends it again: a bounded history of 2 after A1, A2, A1 (again)
    holds A2 and A1, and A1's first place no longer counts; a gap is still a split."""
    turns = [turn("A1", T0, session="s"), turn("A2", T0 + 10.0, session="s", history=("A1",)),
             turn("A1", T0 + 20.0, session="s", history=("A1", "A2")), turn("A3", T0 + 25.0, session="s")]
    turns[-1] = turn("A3", T0 + 25.0, session="s", history=("A2", "A1"))
    assert run(turns=turns, window=2)["splits"] == 0
    lacking = [*turns[:3], turn("A3", T0 + 25.0, session="s", history=("A1",))]
    report = run(turns=lacking, window=2)
    assert report["splits"] == 1 and report["examples"]["splits"][0]["missing"] == ["A2"]


# -- fault lag ----------------------------------------------------------------------------

def test_fault_lag_is_measured_from_start_and_end() -> None:
    fault = Fault("redis-down", T0 + 20.0, T0 + 30.0, "kill", Expectation("IdempotencyDegraded", "True", "RedisDown"))
    samples = [held(T0), held(T0 + 23.0, IdempotencyDegraded=("True", "RedisDown")), held(T0 + 32.0)]
    report = run(samples=samples, faults=[fault])
    row = report["faults"][0]
    assert (row["announced_after_s"], row["cleared_after_s"]) == (3.0, 2.0)
    assert (report["fault_lag_max_s"], report["fault_clear_max_s"]) == (3.0, 2.0)
    assert (report["faults_unannounced"], report["faults_uncleared"]) == (0, 0)
    assert row["expected"] == "IdempotencyDegraded=True RedisDown"
    assert targets_met(report) is True


def test_a_fault_whose_fact_exists_once_it_ended_is_measured_from_its_end() -> None:
    """A managed Redis recreated (persistence flipped) forgets its records when the new pod answers,
    at the fault's end: the operator cannot show it sooner. Shown before the end is no lag; shown
    later than the bound after the end is still late."""
    lost = ("True", "DedupHistoryLost")

    def flip(shown_at: float) -> dict:
        fault = Fault("redis_persistence_flip", T0 + 20.0, T0 + 24.6, expect=Expectation(
            "IdempotencyDegraded", "True", "DedupHistoryLost", clears=False, since_end=True))
        return run(samples=steady(T0 + 20.0) + [held(shown_at, IdempotencyDegraded=lost)], faults=[fault], lag=4.0)
    in_time = flip(T0 + 24.3)   # as seed 26 saw it: 4.3 s after the patch, before the new pod was seen Ready
    assert in_time["faults"][0]["announced_after_s"] == 0.0 and targets_met(in_time) is True
    assert flip(T0 + 27.6)["faults"][0]["announced_after_s"] == 3.0
    late = flip(T0 + 29.0)
    assert late["faults"][0]["announced_after_s"] == 4.4 and targets_met(late) is False
    # the same history for a fault whose fact exists from its start (a flush) is late
    flush = Fault("redis_flush", T0 + 20.0, T0 + 20.1, expect=Expectation(
        "IdempotencyDegraded", "True", "DedupHistoryLost", clears=False))
    assert targets_met(run(samples=steady(T0 + 20.0) + [held(T0 + 24.3, IdempotencyDegraded=lost)],
                           faults=[flush], lag=4.0)) is False


def test_fault_lag_max_is_the_worst_fault() -> None:
    expect = Expectation("RedisReachable", "False")
    faults = [Fault("a", T0 + 10.0, T0 + 12.0, expect=expect), Fault("b", T0 + 50.0, T0 + 52.0, expect=expect)]
    down, up = ("False", "ConnectionFailed"), ("True", "ProbeSucceeded")
    samples = [held(T0, RedisReachable=up), held(T0 + 11.0, RedisReachable=down), held(T0 + 16.0, RedisReachable=up),
               held(T0 + 54.5, RedisReachable=down), held(T0 + 55.0, RedisReachable=up)]
    report = run(samples=samples, faults=faults)
    assert [(f["announced_after_s"], f["cleared_after_s"]) for f in report["faults"]] == [(1.0, 4.0), (4.5, 3.0)]
    assert (report["fault_lag_max_s"], report["fault_clear_max_s"]) == (4.5, 4.0)
    assert targets_met(report) is True
    assert targets_met(run(samples=samples, faults=faults, lag=4.2)) is False


def test_fault_whose_condition_never_shows_is_unannounced() -> None:
    fault = Fault("redis-down", T0 + 20.0, T0 + 30.0, expect=Expectation("RedisReachable", "False"))
    report = run(faults=[fault])
    assert report["faults_unannounced"] == 1
    assert report["faults"][0]["announced_after_s"] is None
    assert report["fault_lag_max_s"] is None
    assert targets_met(report) is False


def test_fault_whose_condition_shows_with_another_reason_is_unannounced() -> None:
    fault = Fault("flush", T0 + 20.0, T0 + 30.0,
                  expect=Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False))
    samples = steady() + [held(T0 + 21.0, IdempotencyDegraded=("True", "RedisDown"))]
    assert run(samples=samples, faults=[fault])["faults_unannounced"] == 1


def test_fault_that_need_not_clear_is_not_uncleared() -> None:
    samples = steady(T0 + 20.0) + [degraded(T0 + 21.0)]   # never goes back
    stays = Fault("flush", T0 + 20.0, T0 + 22.0,
                  expect=Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False))
    report = run(samples=samples, faults=[stays])
    assert report["faults"][0]["announced_after_s"] == 1.0
    assert report["faults"][0]["cleared_after_s"] is None
    assert (report["faults_unannounced"], report["faults_uncleared"]) == (0, 0)
    assert targets_met(report) is True
    # the same history for a fault that must clear
    must = Fault("flush", T0 + 20.0, T0 + 22.0, expect=Expectation("IdempotencyDegraded", "True", "DedupHistoryLost"))
    report = run(samples=samples, faults=[must])
    assert report["faults_uncleared"] == 1
    assert targets_met(report) is False


def test_fault_that_need_not_clear_is_not_measured_when_it_does_clear() -> None:
    # a lost dedup history stays for its TTL: its clearing, long after the fault, is not held against the bound
    samples = steady(T0 + 20.0) + [degraded(T0 + 21.0), held(T0 + 322.0)]
    stays = Fault("flush", T0 + 20.0, T0 + 22.0,
                  expect=Expectation("IdempotencyDegraded", "True", "DedupHistoryLost", clears=False))
    report = run(samples=samples, faults=[stays])
    assert (report["faults"][0]["clears"], report["faults"][0]["cleared_after_s"]) == (False, None)
    assert report["fault_clear_max_s"] is None
    assert targets_met(report) is True
    must = Fault("flush", T0 + 20.0, T0 + 22.0, expect=Expectation("IdempotencyDegraded", "True", "DedupHistoryLost"))
    report = run(samples=samples, faults=[must])
    assert (report["fault_clear_max_s"], report["faults_uncleared"]) == (300.0, 0)
    assert targets_met(report) is False


def test_fault_without_expectation_is_not_measured() -> None:
    report = run(faults=[Fault("pod-kill", T0 + 20.0, T0 + 21.0, "gw-0")])
    assert report["faults"][0]["expected"] is None
    assert (report["faults_unannounced"], report["faults_uncleared"], report["fault_lag_max_s"]) == (0, 0, None)
    assert targets_met(report) is True


# -- timeline -----------------------------------------------------------------------------

def test_timeline_sorts_and_answers_the_state_in_force() -> None:
    timeline = Timeline([held(T0 + 10.0), degraded(T0 + 5.0), held(T0)])
    assert [s.at for s in timeline.samples] == [T0, T0 + 5.0, T0 + 10.0]
    assert timeline.at(T0 - 1.0) is None
    assert timeline.at(T0 + 7.0).state == "not-held"
    assert timeline.held_throughout(T0 + 10.0, T0 + 20.0) is True
    assert timeline.held_throughout(T0, T0 + 4.9) is True
    assert timeline.held_throughout(T0, T0 + 5.0) is False
    assert timeline.first(T0 + 1.0, lambda s: s.state == "not-held") == T0 + 5.0
    assert timeline.first(T0 + 6.0, lambda s: s.state == "not-held") == T0 + 6.0
    assert timeline.first(T0 + 11.0, lambda s: s.state == "not-held") is None


def test_unknown_admission_is_not_held() -> None:
    assert Sample(T0, {"IdempotencyDegraded": ("False", "")}).state == "not-held"
    assert Sample(T0, {"ExactlyOnceAdmission": ("True", "")}).state == "held"


def test_turn_of_a_record() -> None:
    t = Turn.of({"msg": "m1", "session": "s", "started": "1000.5", "ended": None, "answered": 1, "history": ["a", 7]})
    assert t == Turn("m1", "s", 1000.5, None, True, ("a", "7"))
    assert Turn.of({"msg": "m2", "started": 1, "ended": 2}) == Turn("m2", "", 1.0, 2.0, False, ())


# -- table --------------------------------------------------------------------------------

def test_table_has_the_headline_figures_and_a_line_per_fault() -> None:
    deliveries, turns, samples, faults = clean_history()
    deliveries += [delivery("m9", T0 + 70.0), delivery("m9", T0 + 79.8, attempt=1)]   # one silent duplicate
    turns += [turn("m9", T0 + 70.2), turn("m9", T0 + 80.0)]
    report = run(deliveries, turns, samples, faults)
    text = table(report)
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}
    for key in ("deliveries", "silent_duplicates", "lost", "splits", "fault_lag_max_s", *KEYS):
        assert key in lines, key
    assert lines["deliveries"] == [str(report["deliveries"])] and report["deliveries"] == 12
    assert lines["silent_duplicates"] == ["1"]
    assert lines["lost"] == ["0"] and lines["splits"] == ["0"]
    assert lines["fault_lag_max_s"] == ["2.0"]
    fault_line = next(line for line in text.splitlines() if line.strip().startswith("redis-down"))
    assert "RedisReachable=False" in fault_line and fault_line.split()[-2:] == ["2.0", "3.0"]


# -- boundary: the window reaching back before the first sample ---------------------------

def test_duplicate_near_the_first_sample_with_all_held_is_silent() -> None:
    deliveries = [delivery("m1", T0), delivery("m1", T0 + 1.8, attempt=1)]
    turns = [turn("m1", T0 + 0.2), turn("m1", T0 + 2.0)]
    samples = [held(T0), held(T0 + 10.0)]   # the watch's first sample at T0, lag 5: window starts at T0-3
    report = classify(deliveries, turns, samples, [], LAG)
    assert (report["silent_duplicates"], report["announced_duplicates"]) == (1, 0)


def test_a_split_across_a_flush_is_counted_apart() -> None:
    flush = Fault("redis_flush", T0 + 5.0, T0 + 5.5, expect=Expectation("IdempotencyDegraded", "True",
                                                                         "DedupHistoryLost", clears=False))
    turns = [turn("A", T0, session="s"), turn("B", T0 + 10.0, session="s", history=())]
    deliveries = [delivery("A", T0), delivery("B", T0 + 10.0)]
    across = classify(deliveries, turns, [held(T0 - 1)], [flush], LAG)
    assert (across["splits"], across["splits_across_faults"]) == (0, 1)
    plain = classify(deliveries, turns, [held(T0 - 1)], [], LAG)
    assert (plain["splits"], plain["splits_across_faults"]) == (1, 0)


def test_a_turn_in_flight_at_a_flush_is_lost_with_it_one_started_after_is_not() -> None:
    """The flush took the running turn's session lock, so the session's next turn could read the
    history before that turn's append: the flush's split (seed 71's). A turn started after the
    flush that is missing later is a split."""
    flush = Fault("redis_flush", T0 + 5.0, T0 + 5.0, expect=Expectation("IdempotencyDegraded", "True",
                                                                         "DedupHistoryLost", clears=False))
    deliveries = [delivery("A", T0 + 4.0), delivery("B", T0 + 10.0)]
    in_flight = [turn("A", T0 + 4.0, session="s", ended=T0 + 7.0), turn("B", T0 + 10.0, session="s", history=())]
    across = classify(deliveries, in_flight, [held(T0 - 1)], [flush], LAG)
    assert (across["splits"], across["splits_across_faults"]) == (0, 1)
    after = [turn("A", T0 + 5.5, session="s", ended=T0 + 7.0), turn("B", T0 + 10.0, session="s", history=())]
    report = classify([delivery("A", T0 + 5.5), delivery("B", T0 + 10.0)], after, [held(T0 - 1)], [flush], LAG)
    assert (report["splits"], report["splits_across_faults"]) == (1, 0)


def test_a_split_across_the_switch_to_redis_is_counted_apart() -> None:
    switch = Fault("sqlite_to_redis", T0 + 5.0, T0 + 40.0)
    # A ran on the SQLite replica while the switch was under way (it serves until the others take over)
    turns = [turn("A", T0 + 10.0, session="s"), turn("B", T0 + 50.0, session="s", history=())]
    deliveries = [delivery("A", T0 + 10.0), delivery("B", T0 + 50.0)]
    across = classify(deliveries, turns, [held(T0 - 1)], [switch], LAG)
    assert (across["splits"], across["splits_across_faults"]) == (0, 1)
    assert targets_met(across) is True
    later = [turn("A", T0 + 45.0, session="s"), turn("B", T0 + 50.0, session="s", history=())]
    after = classify([delivery("A", T0 + 45.0), delivery("B", T0 + 50.0)], later, [held(T0 - 1)], [switch], LAG)
    assert (after["splits"], after["splits_across_faults"]) == (1, 0)  # both after the switch: a split


def test_a_split_across_a_flush_stays_apart_when_a_missing_turn_ran_again_later() -> None:
    # A ran before the flush and (an announced duplicate) again after B: B's split is the flush's
    flush = Fault("redis_flush", T0 + 5.0, T0 + 5.5, expect=Expectation("IdempotencyDegraded", "True",
                                                                         "DedupHistoryLost", clears=False))
    turns = [turn("A", T0, session="s"), turn("B", T0 + 10.0, session="s", history=()),
             turn("A", T0 + 30.0, session="s", history=("B",))]
    deliveries = [delivery("A", T0), delivery("B", T0 + 10.0), delivery("A", T0 + 30.0, attempt=1)]
    report = classify(deliveries, turns, [held(T0 - 1), degraded(T0 + 6.0)], [flush], LAG)
    assert (report["splits"], report["splits_across_faults"]) == (0, 1)


@pytest.mark.parametrize("kind", ["redis_pause", "redis_refuses_writes"])
def test_a_split_whose_turns_ran_while_the_history_could_not_be_written_is_counted_apart(kind: str) -> None:
    pause = Fault(kind, T0 + 20.0, T0 + 28.0, expect=Expectation("RedisReachable", "False"))
    turns = [turn("A", T0 + 22.0, session="s"), turn("B", T0 + 60.0, session="s", history=())]
    deliveries = [delivery("A", T0 + 22.0), delivery("B", T0 + 60.0)]
    across = classify(deliveries, turns, [held(T0 - 1)], [pause], LAG)
    assert (across["splits"], across["splits_across_faults"]) == (0, 1)
    later = Fault(kind, T0 + 40.0, T0 + 45.0)  # no turn of the split ran in it
    assert classify(deliveries, turns, [held(T0 - 1)], [later], LAG)["splits"] == 1


def test_a_saved_report_is_classified_again_from_its_records() -> None:
    import json
    from dataclasses import asdict
    deliveries, turns, samples, faults = clean_history()
    deliveries, turns = [*deliveries, *duplicate(T0 + 40.0)[0]], [*turns, *duplicate(T0 + 40.0)[1]]
    report = classify(deliveries, turns, samples, faults, LAG)
    saved = json.loads(json.dumps({**report, "settings": {"session_window": None},
                                   "timeline": [{"at": x.at, "state": x.state, "conditions": x.conditions} for x in samples],
                                   "records": {"deliveries": [asdict(d) for d in deliveries],
                                               "turns": [asdict(t) for t in turns],
                                               "faults": [asdict(f) for f in faults]}}))
    again = reclassify(saved)
    assert again == report and again["silent_duplicates"] >= 1


def test_a_partition_counts_how_long_the_cut_off_replica_took_traffic() -> None:
    """partition_in_traffic_max_s: the longest a replica cut off from Redis stayed in the traffic; a
    partition it never left counts whole (the readiness gate did nothing)."""
    def partition(left: float | None) -> Fault:
        return Fault("replica_partition", T0, T0 + 12, "p", left_traffic_after_s=left, back_after_s=2.0)
    assert run(faults=[partition(3.5), partition(0.0)])["partition_in_traffic_max_s"] == 3.5
    assert run(faults=[partition(3.5), partition(None)])["partition_in_traffic_max_s"] == 12.0
    assert run(faults=[])["partition_in_traffic_max_s"] is None
    row = run(faults=[partition(3.5)])["faults"][0]
    assert (row["left_traffic_after_s"], row["back_after_s"]) == (3.5, 2.0)
    # a target: a replica left in the traffic (the gate did nothing for 12 s) misses it
    assert targets_met(run(faults=[partition(3.5)])) is True
    lasting = Fault("replica_partition", T0, T0 + 30, "p", left_traffic_after_s=None, back_after_s=2.0)
    assert targets_met(run(faults=[lasting])) is False


# -- issue 56's faults: their own bound, the coalesce refusal -------------------------------

def claims_at_risk(shown_after: float, within: float | None = 10.0) -> dict:
    """A holder cut off past the lease at T0+20: ExactlyOnceAdmission False ``shown_after`` s later."""
    fault = Fault("long_partition", T0 + 20.0, T0 + 95.0, "gw-1", Expectation(
        "ExactlyOnceAdmission", "False", clears=False, within=within), left_traffic_after_s=6.0)
    samples = steady(T0 + 20.0) + [no_admission(T0 + 20.0 + shown_after), held(T0 + 100.0)]
    return run(samples=samples, faults=[fault], lag=4.0)


def test_a_fault_with_its_own_bound_is_held_to_it_not_to_the_lag() -> None:
    in_time = claims_at_risk(7.0)
    assert (in_time["fault_lag_max_s"], in_time["faults_late"], in_time["faults"][0]["bound_s"]) == (7.0, 0, 10.0)
    assert targets_met(in_time) is True
    late = claims_at_risk(11.0)
    assert (late["faults_late"], targets_met(late)) == (1, False)
    assert targets_met(claims_at_risk(7.0, within=None)) is False   # the lag bound (4 s) without its own


def coalesce(refused: bool | None, warned: bool | None) -> Fault:
    return Fault("coalesced_stop", T0 + 20.0, T0 + 21.0, "3 replicas", refused=refused, warned=warned)


def test_the_coalesce_refusal_is_reported_and_a_target() -> None:
    report = run(faults=[coalesce(True, True)])
    assert (report["coalesce_refused"], report["coalesce_warned"]) == (True, True)
    assert (report["faults"][0]["refused"], report["faults"][0]["warned"]) == (True, True)
    assert targets_met(report) is True
    accepted = run(faults=[coalesce(True, True), coalesce(False, True)])
    assert (accepted["coalesce_refused"], targets_met(accepted)) == (False, False)
    assert targets_met(run(faults=[coalesce(True, False)])) is False   # accepted under Warn without a word
    assert (run()["coalesce_refused"], run()["coalesce_warned"], targets_met(run())) == (None, None, True)
    assert "coalesce_refused" in table(report)


def test_a_saved_report_with_the_new_faults_is_classified_again() -> None:
    import json
    from dataclasses import asdict
    deliveries, turns = carried_duplicate()
    faults = [coalesce(True, True), Fault("holder_pause", T0 + 20.0, T0 + 95.0, "gw-1", Expectation(
        "ExactlyOnceAdmission", "False", clears=False, within=10.0))]
    samples = steady() + [no_admission(ADMITTED + 1.0)]
    report = classify(deliveries, turns, samples, faults, LAG)
    saved = json.loads(json.dumps({**report, "timeline": [{"at": x.at, "conditions": x.conditions} for x in samples],
                                   "records": {"deliveries": [asdict(d) for d in deliveries],
                                               "turns": [asdict(t) for t in turns],
                                               "faults": [asdict(f) for f in faults]}}))
    again = reclassify(saved)
    assert again == report and (again["announced_late_duplicates"], again["coalesce_refused"]) == (1, True)


def test_a_long_partition_is_held_to_the_partition_bound_too() -> None:
    cut = Fault("long_partition", T0, T0 + 75, "gw-1", left_traffic_after_s=7.5, back_after_s=3.0)
    assert run(faults=[cut])["partition_in_traffic_max_s"] == 7.5
    assert run(faults=[cut])["faults"][0]["left_traffic_after_s"] == 7.5
    stayed = Fault("long_partition", T0, T0 + 75, "gw-1", left_traffic_after_s=None)
    assert targets_met(run(faults=[stayed])) is False   # in the traffic for all 75 s


# -- matching turns to deliveries: shapes from saved runs (seeds 53 and 71) ---------------------

def test_a_delivery_that_waited_carries_the_turn_that_ended_as_it_was_answered() -> None:
    """Seed 71's m71-00067: the first delivery waited 15 s (the switch) and carried the turn that
    started second; a delivery sent just before the first turn carried it. Each turn takes the
    open delivery answered closest to its end."""
    waited = Delivery("m1", 0, "service", T0 + 17.3, T0 + 32.3, 200)
    quick = Delivery("m1", 21, "pod:b", T0 + 29.0, T0 + 29.2, 200)
    first, second = turn("m1", T0 + 29.1, ended=T0 + 29.15), turn("m1", T0 + 32.2, ended=T0 + 32.25)
    found = admitted([waited, quick], [first, second])
    assert (found[id(first)], found[id(second)]) == (T0 + 29.0, T0 + 17.3)


def test_the_second_admission_is_the_later_of_the_first_two_in_time() -> None:
    """Seed 71's m71-00036: admitted at T0+18 (it waited for its turn until T0+32.4) and again at
    T0+29.4, just after a flush at T0+28.6 that took its claim, shown at T0+30.7: the second
    admission (T0+29.4) came before the flush could be shown, so it is excused, though the turn
    that started second is the one admitted first."""
    flush = Fault("redis_flush", T0 + 28.6, T0 + 28.6, expect=Expectation("IdempotencyDegraded", "True",
                                                                           "DedupHistoryLost", clears=False))
    deliveries = [Delivery("m1", 0, "pod:a", T0 + 18.1, T0 + 32.4, 200), Delivery("m1", 21, "pod:b", T0 + 29.4, T0 + 31.7, 200)]
    turns = [turn("m1", T0 + 31.6, ended=T0 + 31.65), turn("m1", T0 + 32.4, ended=T0 + 32.41)]
    samples = steady(T0 + 30.0) + [degraded(T0 + 30.7)]
    report = run(deliveries, turns, samples, [flush])
    assert (report["silent_duplicates"], report["excused_duplicates"]) == (0, 1)
    assert report["examples"]["excused_duplicates"][0]["admitted_after"] == T0 + 29.4


def test_a_record_written_after_a_flush_took_the_running_turns_claim_is_not_trusted() -> None:
    """Seed 53's m53-00002: a flush while the first turn ran took its claim; another replica claimed
    the message (its holder then force-deleted), so the first turn's record, written after, did
    not take; when the dead holder's claim expired a retry ran it again. Not avoidable (Redis did
    not hold the record); a record written before the flush would have been gone too."""
    flush = Fault("redis_flush", T0 + 29.0, T0 + 29.0, expect=Expectation("IdempotencyDegraded", "True",
                                                                           "DedupHistoryLost", clears=False))
    deliveries = [Delivery("m1", 0, "pod:a", T0, T0 + 36.7, 200),
                  Delivery("m1", 10, "pod:b", T0 + 30.0, T0 + 54.6, None, error="RemoteDisconnected"),
                  Delivery("m1", 16, "pod:a", T0 + 115.6, T0 + 152.4, 200)]
    turns = [turn("m1", T0 + 0.01, ended=T0 + 36.7), turn("m1", T0 + 30.0, answered=False, ended=T0 + 54.6),
             turn("m1", T0 + 115.7, ended=T0 + 152.3)]
    report = run(deliveries, turns, steady(T0 + 200.0), [flush])
    assert report["avoidable_duplicates"] == 0
    assert run(deliveries, turns, steady(T0 + 200.0))["avoidable_duplicates"] == 1   # without the flush: avoidable


@pytest.mark.parametrize("kind", ["holder_pause", "long_partition"])
def test_a_split_across_a_fenced_holder_is_counted_apart(kind: str) -> None:
    """Seed 179's split: a holder paused (or cut off) past its lease ran a turn whose model answer came
    back; its fence then stopped the turn before its history was written, and the session's next
    turn elsewhere lacked it. The holder could not write the history: counted with the fault."""
    fault = Fault(kind, T0 + 2.0, T0 + 77.0, expect=Expectation("ExactlyOnceAdmission", "False", None, clears=False))
    turns = [turn("A", T0 + 1.0, session="s", ended=T0 + 60.0), turn("B", T0 + 70.0, session="s", history=())]
    deliveries = [delivery("A", T0 + 1.0), delivery("B", T0 + 70.0)]
    across = classify(deliveries, turns, [held(T0 - 1)], [fault], LAG)
    assert (across["splits"], across["splits_across_faults"]) == (0, 1)
    plain = classify(deliveries, turns, [held(T0 - 1)], [], LAG)
    assert (plain["splits"], plain["splits_across_faults"]) == (1, 0)
