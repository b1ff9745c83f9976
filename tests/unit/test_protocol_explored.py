"""The claim, lease, window and journal protocol explored, not only sampled, with time checked
(issue 35, item 7; issue 56, item 6).

The pod code's own decisions (the /hooks/ endpoint's wrapper around gwop_leases around gwop_journal
around praisonai-bot 0.1.16's claim calls and its real Redis store) run for three replicas against
the REDIS STAND-IN of harness.protocol_sim, on a simulated clock, with the operator's poll and its
real ``conditions.compute`` over the replicas' /health answers, through interleavings Hypothesis
generates: deliveries (to any replica, its own in-flight messages included), turns that end or
fail (one ending just as the journal's flush, on its own thread, writes its key), time passing,
Redis paused, one replica cut off (for longer than the lease too), writes refused (OOM), flushes,
restarts with and without persistence, replicas killed, stopped (their drain finishing or cutting
the turns), SIGSTOPped and resumed, their thread pool busy, their
renewals late, their /health out of the operator's reach. Each interleaving is checked against
protocol_sim.check: no re-run of a recorded webhook within the fail-closed window, no duplicate
unless ExactlyOnceAdmission said so at the operator's last poll before the second admission (or
Redis forgot), dead holders' claims freed within 90 s, nothing lost, every journal carried to
Redis once it is usable.

The searches are derandomized and draw the same interleavings in every process (the
``pinned_draws`` fixture, harness.pinned_hypothesis): what one finds in CI, it finds here.

The launcher before issue 56 failed it (holes 1-3), and so did the hooks with coalesce the operator
then admitted on several replicas (hole 4): planted back, the exploration finds each hole in seconds
(``test_the_exploration_finds_each_hole_planted_back``), and each hole's shortest interleaving is
kept as a replay (HOLES, COALESCED_STOP) that today's launcher and admission pass.
"""
from __future__ import annotations

import os
import re
import time
from typing import Any, Callable, Sequence

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness.operator import gateway_deployment, redis_store
from harness.protocol_sim import OPS, STEPS, Sim, check, patched, play

Ops = list[tuple[str, int, int, float]]

# time steps around what the protocol counts: the journal's second, the poll's two, the lease's
# renewal (20 s), the window (30 s), the lease (60 s), the promised 90 s
MARKS = st.sampled_from((0.5, 1.0, 2.0, 5.0, 20.0, 29.0, 31.0, 61.0, 95.0))
SECONDS = st.one_of(st.floats(0.1, 45.0), MARKS)
COMMON = ("deliver", "deliver", "deliver", "finish", "advance")  # most of what happens; faults are the rest


def interleavings(ops: Sequence[str] = OPS, replicas: int = 3, messages: int = 12, min_size: int = 0,
                  max_size: int = 60, seconds: Any = SECONDS) -> Any:
    """Lists of ``(op, replica, message, seconds)``: ``ops`` (deliveries, turns and time weighted up)."""
    def one(names: Sequence[str]) -> Any:
        return st.tuples(st.sampled_from(tuple(names)), st.integers(0, replicas - 1), st.integers(0, messages - 1),
                         seconds)
    return st.lists(st.one_of(one([o for o in COMMON if o in ops]), one(ops)), min_size=min_size, max_size=max_size)


# PROTOCOL_EXAMPLES=n PROTOCOL_RANDOM=1 explores n new ones (docs/development.md); by default the same
# interleavings at every run of `make test` (a rare one found there would fail an unrelated change's CI):
# 2,600 of 20 to 60 ops make about 103,000 steps, some 55 s of one core (about 1,900 steps/s).
# PROTOCOL_SHRINK=1 shrinks what it finds (minutes, on today's launcher)
EXAMPLES = int(os.environ.get("PROTOCOL_EXAMPLES", "2600"))
STEPS_BUDGET = 100_000  # issue 56: at least this many steps over the exploration
PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + ((Phase.shrink,) if os.environ.get("PROTOCOL_SHRINK") else ())
EXPLORED = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("PROTOCOL_RANDOM") != "1",
                    database=None, suppress_health_check=[HealthCheck.too_slow], phases=PHASES)


# the derandomized searches draw the same interleavings whatever else the process imported
pytestmark = pytest.mark.usefixtures("pinned_draws")


def explore(make: Callable[[], Sim], ops: Ops) -> Sim:
    """Play ``ops`` on ``make()``'s simulation and check it; returns the simulation played."""
    sim = make()
    undo = patched(sim.clock)
    try:
        check(play(sim, ops))
    finally:
        sim.close()
        undo()
    return sim


def test_the_protocol_keeps_exactly_once_through_every_interleaving() -> None:
    before, started = STEPS[0], time.monotonic()

    @EXPLORED
    @given(interleavings(min_size=20))
    def explored(ops: Ops) -> None:
        explore(Sim, ops)

    cpu = time.process_time()
    try:
        explored()
    finally:
        steps, took, cpu = STEPS[0] - before, time.monotonic() - started, time.process_time() - cpu
        print(f"explored {steps} steps in {took:.0f} s ({cpu:.0f} s of CPU: {steps / max(cpu, 1e-9):.0f} steps/s)")
    # the derandomized 2,600 make 101,854 steps; a random draw of as many varies around that
    assert steps >= STEPS_BUDGET or EXAMPLES < 2600 or os.environ.get("PROTOCOL_RANDOM") == "1", \
        f"only {steps} steps explored (issue 56 asks {STEPS_BUDGET})"


def _found(make: Callable[[], Sim], examples: int = 2000, strategy: Any = None, shape: str | None = None) -> str:
    """The first counterexample Hypothesis finds for ``make``'s protocol (it must find one); with
    ``shape`` (a regular expression) the first whose message matches it (the others are passed over)."""
    found: list[str] = []

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None,
              derandomize=True,  # the same search each run: the planted defect is found, or never
              report_multiple_bugs=False, phases=(Phase.generate,))  # found is enough: no shrinking
    @given(strategy if strategy is not None else interleavings())
    def search(ops: Ops) -> None:
        try:
            explore(make, ops)
        except AssertionError as e:
            if shape is None or re.search(shape, str(e)):
                found.append(str(e))
                raise

    with pytest.raises(AssertionError):
        search()
    return found[-1]


# -- issue 56's holes, planted back ------------------------------------------------------

SILENT = "answered twice, silently"
#: hole -> (the ops its search draws from, the shape of its finding). Each search is given the
#: faults its hole needs (two replicas, two messages, times at the protocol's marks) and looks for a
#: violation of that shape:
#: 1. a delivery held in an outage, retried to the same replica past the window, admitted
#:    best-effort; when Redis answers its claim goes (the flush writes it with the per-process
#:    token and the next tick's release of "maybe claimed" keys deletes it, or it is never renewed
#:    and expires, or the flush drops it past its time) while its turn runs: the first run was
#:    best-effort, the operator said True at the second;
#: 2. a replica cut off from Redis past the lease, its turn running (admitted asking Redis): its
#:    claim expires, and the operator said True at the second admission;
#: 3. renewals behind a busy thread pool (no fault of Redis at all): the claim expires while the
#:    replica answers /health, and the operator said True at the second admission;
#: 4. coalesced hooks: a delivery recorded and answered 202 before its group runs; a stop cancels the
#:    group, and the provider's retry to the other replica is answered deduplicated: lost.
FIRST_BEST_EFFORT = rf"{SILENT}: by r\d \(admitted at \+\d+ s, best-effort\) and .*ExactlyOnceAdmission True"
FIRST_ASKED_REDIS = (rf"{SILENT}: by r\d \(admitted at \+\d+ s\) and .*ExactlyOnceAdmission True.*"
                     r"'s claim expired")
HOLE_SEARCHES: dict[int, tuple[tuple[str, ...], str]] = {
    1: (("deliver", "finish", "advance", "pause", "resume"), FIRST_BEST_EFFORT),
    2: (("deliver", "finish", "advance", "cut", "heal_one"), FIRST_ASKED_REDIS),
    3: (("deliver", "finish", "advance", "busy"), FIRST_ASKED_REDIS),
    4: (("deliver", "finish", "advance", "stop", "kill"), r"accepted for a coalesced run.*lost"),
}


def _each_replica(sim: Sim, change: Callable[[Any], None]) -> Sim:
    """``change`` applied to every replica the simulation has and every one it makes."""
    for r in sim.pool:
        change(r)
    original = sim._new

    def new() -> Any:
        replica = original()
        change(replica)
        return replica
    sim._new = new  # type: ignore[method-assign]
    return sim


def _one_token_per_process(r: Any) -> None:
    """The launcher before issue 56: every claim of a process under one token, and the journal's
    flush writing a running turn's claim (SET NX, that token) that nothing holds or renews."""
    r.leases.new_token = lambda: r.leases.process + "all"

    def flushed_claim(key: str, at: float, replaces: Any = None) -> bool:
        store = r.leases._store()
        store.client.set(store.key(key), r.leases.process + "all", nx=True, px=r.leases.lease_ms)
        return False
    r.journal.adopt = flushed_claim


def _claims_unsaid(r: Any) -> None:
    """/health as before issue 56: how many claims, how many lost, nothing of their renewal (and a
    failed renewal round opens no breaker, which would list durability:idempotency)."""
    leases = r.leases
    leases.view = lambda: {"claims_held": len(leases.held), "leases_lost": leases.lost}
    leases.on_failure = None


def _hole_1() -> Sim:
    return _each_replica(Sim(replicas=2), _one_token_per_process)


def _hole_2() -> Sim:
    """No fence, no word in /health of a claim that could not be renewed, and an operator that reads
    neither a replica's claims nor its own view of Redis."""
    return _each_replica(Sim(replicas=2, fenced=False, operator_reads_claims=False), _claims_unsaid)


def _hole_3() -> Sim:
    """Renewals through the default executor the agent's calls hold, and no fence."""
    return Sim(replicas=2, renewals_on_the_pool=True, fenced=False)


def _hole_4() -> Sim:
    """Hooks with coalesce on two replicas: what the operator admitted before issue 56."""
    return Sim(replicas=2, coalesced=True)


PLANTED: dict[int, Callable[[], Sim]] = {1: _hole_1, 2: _hole_2, 3: _hole_3, 4: _hole_4}


@pytest.mark.parametrize("hole", sorted(HOLE_SEARCHES))
def test_the_exploration_finds_each_hole_planted_back(hole: int) -> None:
    """Each of issue 56's holes, planted back into today's launcher, is found in seconds."""
    ops, shape = HOLE_SEARCHES[hole]
    started = time.process_time()
    message = _found(PLANTED[hole], 3000,
                     interleavings(ops, replicas=2, messages=2, min_size=6, max_size=14, seconds=MARKS), shape)
    print(f"hole {hole}, found in {time.process_time() - started:.1f} s of CPU: {message}")


#: each hole's shortest interleaving (Hypothesis shrank the searches above): with the hole planted
#: back each runs a webhook twice while ExactlyOnceAdmission says True; today's launcher runs each
#: message once, or says beforehand that exactly-once is not held
HOLES: dict[str, tuple[Callable[[], Sim], Ops]] = {
    # Redis paused; m1 held on r1 (its SET NX waits in Redis: "maybe claimed"); past the window r1
    # admits m1's retry best-effort; Redis resumes (the queued SET NX writes r1's claim, the flush
    # finds it); at r1's next tick the release of "maybe claimed" deletes it: r2 admits m1
    "hole 1: the claim released": (_hole_1, [
        ("pause", 0, 0, 1.0), ("deliver", 0, 1, 1.0), ("advance", 0, 0, 31.0), ("deliver", 0, 1, 1.0),
        ("resume", 0, 0, 1.0), ("advance", 0, 0, 2.0), ("deliver", 1, 1, 1.0)]),
    # r1 cut off; m2 held (the window starts), m1 admitted best-effort past it; the cut heals, the
    # flush writes m1's claim with what is left of a lease, and nothing renews it: it expires while
    # the turn runs, and r2 admits m1
    "hole 1: the flushed claim never renewed": (_hole_1, [
        ("cut", 0, 0, 1.0), ("deliver", 0, 2, 1.0), ("advance", 0, 0, 31.0), ("deliver", 0, 1, 1.0),
        ("heal_one", 0, 0, 1.0), ("advance", 0, 0, 61.0), ("deliver", 1, 1, 1.0)]),
    # r1 admits m1 and is cut off from Redis; its renewals fail silently; past the lease r2 admits m1
    "hole 2: cut off past the lease": (_hole_2, [
        ("deliver", 0, 1, 1.0), ("cut", 0, 0, 1.0), ("advance", 0, 0, 61.0), ("deliver", 1, 1, 1.0)]),
    # r1 admits m1; the agent's calls hold r1's thread pool for 70 s, its renewals wait behind
    # them; the claim expires at 60 s, r2 admits m1, r1's turn records (nothing: r2's claim) first
    "hole 3: renewals behind a busy pool": (_hole_3, [
        ("deliver", 0, 1, 1.0), ("busy", 0, 0, 70.0), ("advance", 0, 0, 61.0), ("deliver", 1, 1, 1.0),
        ("finish", 0, 0, 1.0)]),
}


@pytest.mark.parametrize("name", sorted(HOLES))
def test_each_hole_replayed_runs_once_today_and_twice_silently_planted_back(name: str) -> None:
    planted, ops = HOLES[name]
    explore(lambda: Sim(replicas=2), ops)
    with pytest.raises(AssertionError, match=f"{SILENT}.*ExactlyOnceAdmission True"):
        explore(planted, ops)


#: hole 4, shrunk: r1 answers m1 202 (recorded, its group pending), r1 stops (the group cancelled),
#: the provider's retry to r2 is answered deduplicated
COALESCED_STOP = [("deliver", 0, 1, 1.0), ("stop", 0, 0, 1.0), ("deliver", 1, 1, 1.0)]


def test_hole_4_loses_a_coalesced_delivery_planted_back_and_is_refused_today() -> None:
    """Today the operator refuses coalesce on more than one replica under Refuse (and under Warn says
    ExactlyOnceAdmission False CoalescedHooks from the start, tests/unit/test_horizons.py): the
    protocol it admits runs the replay once; the one it admitted before loses m1."""
    from gateway_operator import offline
    from gateway_operator.api import validation
    explore(lambda: Sim(replicas=2), COALESCED_STOP)
    with pytest.raises(AssertionError, match="m1: its provider was answered 2xx .* lost"):
        explore(_hole_4, COALESCED_STOP)
    config = redis_store()
    config["hooks"]["hooks"] = [{"path": "events", "message": "{text}", "coalesce": {"group_key": "{repo}"}}]
    body = gateway_deployment("gw", replicas=2, redis={"url": "redis://redis:6379/0"}, config=config)
    assert f"spec: Invalid value: {validation.MSG_COALESCE_ONE_REPLICA}" in offline.check(body)
    body["spec"]["replicas"] = 1
    assert offline.check(body) == []


# -- defects planted back (issue 35) ------------------------------------------------------------

def _without_window() -> Sim:
    """The breaker before the fail-closed window: a failed call admits what follows best-effort at
    once (0.1.16's fail-open; issue 35, cases 2 and 7)."""
    return Sim(window=0.0)


def _claims_of_900_s() -> Sim:
    """0.1.16's in-flight claim: 900 s (issue 35, case 3)."""
    return Sim(lease=900.0)


def _journal_not_carried() -> Sim:
    """What a replica admitted while Redis was unusable never written there: no journal flush."""
    sim = Sim()
    for r in sim.pool:
        r.journal.flush = lambda limit=None: 0  # type: ignore[method-assign]
    original = sim._new

    def new() -> Any:
        replica = original()
        replica.journal.flush = lambda limit=None: 0
        return replica
    sim._new = new  # type: ignore[method-assign]
    return sim


def _unfenced(sim: Sim) -> Sim:
    sim.fenced = False
    return sim


def _records_unchecked() -> Sim:
    """The journal before the exploration found it: a record 0.1.16 writes nothing for (another
    replica's claim holds the key) counted as written."""
    def unchecked(replica: Any) -> Any:
        replica.journal._verify = lambda store, key: None
        replica.journal.settle_contested = lambda: replica.journal.contested.clear() or 0
        return replica
    sim = Sim()
    sim.pool = [unchecked(r) for r in sim.pool]
    original = sim._new
    sim._new = lambda: unchecked(original())  # type: ignore[method-assign]
    return sim


# each search looks for its defect's shape
@pytest.mark.parametrize("planted, finds", [
    (_without_window, "the window promises"),
    (_claims_of_900_s, "still claimed by a holder that died"),
    # its journal never empties: what it admitted best-effort is never carried to Redis (and the
    # window that announces it never closes)
    (_journal_not_carried, "never carried"),
], ids=["no fail-closed window", "900 s claims", "journal never written"])
def test_the_exploration_finds_each_defect_planted_back(planted: Callable[[], Sim], finds: str) -> None:
    message = _found(planted, 15000, shape=finds)
    print(f"{planted.__name__}: {message}")


#: what the exploration found in the launcher, shrunk: a turn admitted on r1 (0); Redis paused; the
#: same webhook held on r2, whose SET NX waits in the paused Redis; the pause outlasts r1's lease;
#: r1's turn ends (its record waits too). When Redis resumes, r2's claim is set, r1's record finds
#: it and writes nothing, r2 releases its held claim: no record, and a redelivery runs again
RECORD_LOST = [("deliver", 0, 2, 1.0), ("pause", 0, 0, 1.0), ("deliver", 1, 2, 1.0), ("advance", 0, 0, 61.0),
               ("finish", 0, 0, 1.0)]


def test_the_record_the_exploration_found_dropped_is_kept_until_it_is_written() -> None:
    """Replayed (a rare interleaving: a derandomized search of 15,000 does not reach it in every
    process, whose set orders differ): the journal before this change answers it twice; now
    the contested record is written once r2's claim goes, and the redelivery is refused."""
    explore(Sim, RECORD_LOST)
    # r1's turn outlives its claim: today's fence stops it first; the defect shows without the fence
    with pytest.raises(AssertionError, match="answered twice, silently"):
        explore(lambda: _unfenced(_records_unchecked()), RECORD_LOST)


#: found by a random exploration: Redis paused; r3 SIGSTOPped at +29 as Redis comes back (empty);
#: r1 runs m2 and records it; Redis is paused again at +32 and r3 resumed. r3 saw no moment of
#: Redis answering: to it the outage is one of 32 s, past its window, and it runs m2's redelivery
#: best-effort while the operator says Redis is unreachable
STOPPED_ACROSS_A_RECOVERY = [("pause", 0, 1, 1.0), ("deliver", 2, 5, 1.0), ("advance", 0, 0, 29.0),
                             ("sigstop", 2, 0, 1.0), ("restart_empty", 0, 0, 1.0), ("deliver", 0, 2, 1.0),
                             ("advance", 0, 0, 3.0), ("deliver", 2, 2, 1.0), ("finish", 0, 0, 1.0),
                             ("pause", 0, 0, 1.0)]


def test_a_replica_stopped_across_a_recovery_it_never_saw_keeps_its_window_and_is_announced() -> None:
    """The window is of the spells a replica could see: stopped while Redis came back and went again,
    it resumes into what is, to it, one outage past its window. Its best-effort run of a webhook
    Redis recorded meanwhile is announced (the operator says Redis is unreachable), never silent."""
    sim = explore(Sim, STOPPED_ACROSS_A_RECOVERY)
    again = [run for run in sim.runs if run.msg == "m2" and run.recorded_in_redis]
    assert [run.replica for run in again] == ["r3"] and again[0].best_effort, again
    assert again[0].said[0] != "True", again[0].said


#: r1 admits m1 and is SIGSTOPped past its lease; r2 admits the redelivery once the claim expired
#: (announced: r1, a holder, went silent); r1 is resumed and its turn would end next
PAUSED_PAST_THE_LEASE = [("deliver", 0, 1, 1.0), ("sigstop", 0, 0, 1.0), ("advance", 0, 0, 61.0),
                         ("deliver", 1, 1, 1.0), ("sigcont", 0, 0, 1.0), ("finish", 0, 0, 1.0),
                         ("finish", 1, 0, 1.0)]


def test_a_holder_resumed_past_its_lease_stops_its_turn_instead_of_answering_it() -> None:
    """The checker's holder_pause (seed 178): on SIGCONT the renewal found the claim gone and dropped
    it, so the fence never saw it and the resumed turn answered: twice in all, announced only. A claim
    found gone under its turn is fenced like one past its deadline: one answer."""
    sim = explore(lambda: Sim(replicas=2), PAUSED_PAST_THE_LEASE)
    answered = [run.replica for run in sim.runs if run.msg == "m1" and run.answered]
    assert answered == ["r2"], [(run.replica, run.ended) for run in sim.runs if run.msg == "m1"]


# -- the flush and a turn's end at once -------------------------------------------------------------

def _adoption_kept_after_its_turn() -> Sim:
    """The journal before this change: a claim its flush adopted for a turn that ended meanwhile
    (on the event loop, as the flush's thread wrote it) stays held and renewed, the turn's record
    goes out under another token and finds that claim."""
    def undisowned(replica: Any) -> None:
        replica.journal.disown = None
    return _each_replica(Sim(), undisowned)


#: seen under load in tests/unit/test_launcher_real_gateway.py (a record never written, the key
#: claimed for as long as the replica ran), then found by the model: Redis paused; m1 held on r1
#: (the window opens); past the window r1 admits m0 best-effort and journals it; Redis answers, and
#: r1's turn of m0 ends just as the flush has written m0's claim for it, before the flush notes it
#: running
ENDED_MID_FLUSH = [("pause", 0, 1, 1.0), ("deliver", 0, 1, 1.0), ("advance", 0, 0, 31.0),
                   ("deliver", 0, 0, 1.0), ("finish_mid_flush", 0, 0, 1.0)]


def test_a_turn_that_ends_while_the_flush_claims_it_is_recorded_over_that_claim() -> None:
    """The flush's thread and the event loop at once: the claim adopted for a turn that has already
    ended is let go and the turn's record written over it. Planted back (the claim kept held),
    the record never reaches Redis and the key stays claimed while the replica lives."""
    explore(Sim, ENDED_MID_FLUSH)
    with pytest.raises(AssertionError, match="r1's journal still holds m0 .* never carried"):
        explore(_adoption_kept_after_its_turn, ENDED_MID_FLUSH)


def test_the_exploration_finds_a_turn_ending_mid_flush_planted_back() -> None:
    started = time.process_time()
    message = _found(_adoption_kept_after_its_turn, 3000,
                     interleavings(("deliver", "finish", "advance", "pause", "resume", "finish_mid_flush"),
                                   replicas=2, messages=2, min_size=6, max_size=14, seconds=MARKS), "never carried")
    print(f"found in {time.process_time() - started:.1f} s of CPU: {message}")


# -- the breaker a renewal round opens ------------------------------------------------------------

def _breaker_unsaid() -> Sim:
    """The journal before this change: a breaker opened by something other than the store's own
    failing call (a renewal round) leaves /health without ``durability:idempotency``."""
    import gwop_journal  # the pod code, as protocol_sim imports it (its clock the simulation's once patched)

    def unsaid(replica: Any) -> None:
        journal = replica.journal

        def opened() -> None:
            if not journal.broken:
                journal.broken, journal.broken_since = True, gwop_journal.time.monotonic()
                journal.unusable_since = journal.broken_since
        journal._break = opened
    return _each_replica(Sim(), unsaid)


#: seen in CI (tests/node/test_node.py: a replica answered a webhook 503 during a Redis pause and
#: its /health listed no durability:idempotency), then found by the model once it wired a failed
#: renewal round to the breaker as the pod does: r1 holds m0's claim; Redis paused; the renewal
#: round at +20 s fails and opens r1's breaker; past the window r1 admits m1 best-effort without
#: asking the store, whose degraded fact (all /health says of it) was never set
RENEWAL_OPENED_THE_BREAKER = [("deliver", 0, 0, 1.0), ("pause", 0, 0, 1.0), ("advance", 0, 0, 21.0),
                              ("advance", 0, 0, 31.0), ("deliver", 0, 1, 1.0)]


def test_a_breaker_a_renewal_round_opened_is_said_in_health_before_anything_is_admitted_best_effort() -> None:
    """Whatever opened the breaker, the replica's own /health lists durability:idempotency while it
    holds deliveries and admits them best-effort (IdempotencyDegraded counts it): planted back (only
    the store's failing call says so), the best-effort admission is unannounced by its replica."""
    sim = explore(Sim, RENEWAL_OPENED_THE_BREAKER)
    assert [(run.msg, run.best_effort, run.owner_said) for run in sim.runs if run.msg == "m1"][:1] == \
        [("m1", True, True)], [(run.msg, run.best_effort, run.owner_said) for run in sim.runs]
    with pytest.raises(AssertionError, match="m1: r1 admitted it best-effort .* did not list durability:idempotency"):
        explore(_breaker_unsaid, RENEWAL_OPENED_THE_BREAKER)


def test_the_exploration_finds_a_breaker_left_unsaid_planted_back() -> None:
    started = time.process_time()
    message = _found(_breaker_unsaid, 3000,
                     interleavings(("deliver", "finish", "advance", "pause", "resume", "cut", "heal_one"),
                                   replicas=2, messages=2, min_size=6, max_size=14, seconds=MARKS),
                     "did not list durability:idempotency")
    print(f"found in {time.process_time() - started:.1f} s of CPU: {message}")
