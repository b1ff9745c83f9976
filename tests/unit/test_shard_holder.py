"""The shard holder (loop/shard_holder.py) against an in-memory Lease store (a STAND-IN for the
API server's Leases: conditional writes on a resourceVersion, and an outage switch): what it
starts and stops, and when; and how long a write still in flight at a lost shard's deadline may
take (a loopback server that never answers), and what status says of a write given up so. The real Leases, two real operator processes and a
SIGKILL are tests/sim/test_shard_replicas.py."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from kubernetes import client

from gateway_operator.api import GatewaySpec
from gateway_operator.api import reasons as R
from gateway_operator.clients.kube import ACTING_FOR, RETRIES, Kube, NotHeld
from gateway_operator.core import conditions as C
from gateway_operator.core import facts as status_facts
from gateway_operator.core import shards as S
from gateway_operator.core.schedule import Schedule
from gateway_operator.core.shards import LeaseView, Timing
from gateway_operator.loop.shard_holder import ShardHolder
from harness.wait import until_async
from test_loop import ApiStandIn, gateway, run

FAST = Timing(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)


class LeasesStandIn:
    def __init__(self) -> None:
        self.store: dict[str, tuple[str, int]] = {}
        self.version = 0
        self.down = False
        self.lock = threading.Lock()

    def shard_name(self, shard: int) -> str:
        return f"g-shard-{shard}"

    def member_name(self, identity: str) -> str:
        return f"g-member-{identity}"

    def _up(self) -> None:
        if self.down:
            raise ConnectionError("the API server does not answer")

    def read(self) -> list[LeaseView]:
        self._up()
        return [LeaseView(name, holder, str(v), str(v), int(name.rsplit("-", 1)[1]) if "-shard-" in name else None)
                for name, (holder, v) in self.store.items()]

    def write(self, name: str, read: LeaseView | None, holder: str, duration: float) -> LeaseView | None:
        self._up()
        with self.lock:   # the holder writes its shards at once, from several threads
            current = self.store.get(name)
            if (read is None) != (current is None) or (current and read and str(current[1]) != read.version):
                return None
            self.version += 1
            self.store[name] = (holder, self.version)
            return LeaseView(name, holder, str(self.version), str(self.version),
                             int(name.rsplit("-", 1)[1]) if "-shard-" in name else None)

    def delete(self, name: str, read: LeaseView) -> None:
        self._up()
        self.store.pop(name, None)


async def _holding(leases: LeasesStandIn, events: list[tuple[str, frozenset[int], float]],
                   me: str = "a", timing: Timing = FAST) -> tuple[ShardHolder, asyncio.Task[None]]:
    async def gained(shards: frozenset[int]) -> None:
        events.append(("gained", shards, time.monotonic()))

    async def lost(shards: frozenset[int]) -> None:
        events.append(("lost", shards, time.monotonic()))

    holder = ShardHolder(leases, 4, me, timing, gained, lost)  # type: ignore[arg-type]
    task = asyncio.create_task(holder.run())
    await until_async(lambda: bool(holder.held))
    return holder, task


async def _stopped(holder: ShardHolder, task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await holder.stop()


def test_a_holder_cut_off_from_the_api_server_stops_its_loops_at_the_renew_deadline() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder, task = await _holding(leases, events)
        assert events[0][:2] == ("gained", frozenset(range(4))) and holder.owns("any-uid")
        await asyncio.sleep(0.5)
        leases.down = True
        cut = time.monotonic()
        last_renewal = max(holder.observed.renewed_at.values())
        await asyncio.sleep(FAST.renew_deadline + 0.3)
        lost = [e for e in events if e[0] == "lost"]
        assert lost and frozenset().union(*(e[1] for e in lost)) == frozenset(range(4)), events
        assert all(at <= last_renewal + FAST.renew_deadline + 0.1 for _, _, at in lost), (lost, last_renewal)
        assert lost[0][2] > cut and not holder.owns("any-uid") and not holder.held
        await _stopped(holder, task)
    asyncio.run(scenario())


def test_a_stopping_holder_drains_before_it_clears_the_leases_and_deletes_its_member_lease() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder, task = await _holding(leases, events)
        cleared_before_drain = []

        async def lost(shards: frozenset[int]) -> None:
            cleared_before_drain.append(any(leases.store[f"g-shard-{s}"][0] == "" for s in shards))
            events.append(("lost", shards, time.monotonic()))
        holder.on_lose = lost
        await _stopped(holder, task)
        assert cleared_before_drain == [False]
        assert {name: h for name, (h, _) in leases.store.items()} == {f"g-shard-{s}": "" for s in range(4)}
        assert not holder.held
    asyncio.run(scenario())


def test_an_event_loop_busy_past_the_renew_deadline_costs_no_shard() -> None:
    """Starting a shard's thousand loops holds the event loop for seconds (at 3,000 x 2 on this
    machine, 10-25 s): the Lease side renews on its own thread meanwhile, so the shards stay
    held and their loops are neither stopped nor restarted."""
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder, task = await _holding(leases, events)
        time.sleep(FAST.renew_deadline * 2.5)   # the event loop held: no await for 2.5 deadlines
        assert holder.owns("any-uid")
        await asyncio.sleep(FAST.retry_period * 2)
        assert [e[:2] for e in events] == [("gained", frozenset(range(4)))], events
        assert holder.held == frozenset(range(4)) and holder.owns("any-uid")
        await _stopped(holder, task)
    asyncio.run(scenario())


def test_a_shard_given_up_to_a_new_replica_is_cleared_only_after_its_loops_ended() -> None:
    """Drain, then hand over, with the drain slower than several ticks: the Lease keeps this
    replica's name until its loops have ended, it is not taken back meanwhile, and the newcomer
    starts it only after that."""
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        first, first_task = await _holding(leases, events, "a")
        drained: list[float] = []

        async def slow_lost(shards: frozenset[int]) -> None:
            events.append(("a lost", shards, time.monotonic()))
            assert all(leases.store[f"g-shard-{s}"][0] == "a" for s in shards)
            await asyncio.sleep(FAST.retry_period * 4)   # loops slow to end: several ticks
            assert all(leases.store[f"g-shard-{s}"][0] == "a" for s in shards)
            drained.append(time.monotonic())
        first.on_lose = slow_lost
        second_events: list[tuple[str, frozenset[int], float]] = []
        second, second_task = await _holding(leases, second_events, "b")
        await until_async(lambda: len(first.held) == 2 and len(second.held) == 2, timeout=10)
        gained_at = min(at for kind, _, at in second_events if kind == "gained")
        assert drained and gained_at > drained[0], (drained, second_events)
        assert first.held.isdisjoint(second.held)
        assert sum(1 for kind, *_ in events if kind == "gained") == 1, events   # never taken back
        await _stopped(second, second_task)
        await _stopped(first, first_task)
    asyncio.run(scenario())


# -- a write in flight at the deadline -----------------------------------------------------------

class _AnswersNoWrite(BaseHTTPRequestHandler):
    """Discovery answered (the dynamic client asks at start); every write held unanswered: an API
    server that accepted the request and is slow to commit it."""

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        body = {"/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
                "/api": {"kind": "APIVersions", "versions": ["v1"]}}.get(self.path, {"kind": "APIGroupList",
                                                                                    "groups": []})
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hold(self) -> None:
        self.server.held.set()  # type: ignore[attr-defined]
        time.sleep(30)

    do_PATCH = do_DELETE = do_POST = _hold


@pytest.fixture
def silent_api() -> Iterator[tuple[client.ApiClient, threading.Event]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersNoWrite)
    server.daemon_threads = True
    server.held = threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    config.retries = RETRIES   # the operator's (clients/kube.load_config)
    try:
        yield client.ApiClient(config), server.held  # type: ignore[attr-defined]
    finally:
        server.shutdown()


@pytest.mark.parametrize("write", ["status", "pod deletion", "pod condition"])
def test_a_write_held_by_the_api_server_is_given_up_within_the_lease_margin(silent_api, write) -> None:
    """With --shards every write is bounded by the margin between the renew deadline and the lease
    duration: a write sent just before the holder's deadline has landed or been given up before
    another replica may take the shard (the API server cancels a request whose client left; the
    default bound, 35 s, would leave a late write landing on the next holder's objects)."""
    api_client, held = silent_api
    timing = Timing(lease_duration=5, renew_deadline=3, retry_period=1)
    kube = Kube(api_client, write_timeout=timing.write_timeout)
    calls = {"status": lambda: kube.patch_status("team", "g", {"observedGeneration": 1}),
             "pod deletion": lambda: kube.delete_pod("team", "g-0", "uid"),
             "pod condition": lambda: kube.set_pod_condition("team", "g-0", "uid", {"type": "T", "status": "True"})}
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        calls[write]()
    took = time.monotonic() - started
    assert held.is_set()   # the write reached the server, which never answered
    margin = timing.lease_duration - timing.renew_deadline
    assert took < margin, (took, timing.write_timeout)


def test_the_write_bound_fits_the_margin_of_every_timing_the_cli_accepts() -> None:
    from gateway_operator.core.shards import MIN_MARGIN
    for lease, renew in ((15, 10), (6, 3), (12, 10), (60, 40), (100, 10)):
        timing = Timing(lease_duration=lease, renew_deadline=renew, retry_period=1)
        connect, read = timing.write_timeout
        assert lease - renew >= MIN_MARGIN
        assert 0.5 <= connect and 1.0 <= read and connect + read < lease - renew, (lease, renew, timing.write_timeout)


def test_a_write_the_api_server_did_not_answer_in_time_is_retried_and_shown_as_reconciling_not_stalled(
        silent_api) -> None:
    """At 3,000 x 2 on this machine the API server took longer than the shards' write bound for
    thousands of applies: each showed as Stalled=True ReconcileError with a traceback. The exception
    the client raises for a write nobody answered in time (taken from a real timed-out request) is
    the API server's state: Reconciling=True APIServerUnavailable, Ready=False, never Stalled, and
    the pass backs off and stays shown until a full pass gets through."""
    api_client, _ = silent_api
    with pytest.raises(Exception) as raised:
        Kube(api_client, write_timeout=(0.5, 0.5)).patch_status("team", "g", {"observedGeneration": 1})
    kube = ApiStandIn()
    kube.refuse_apply = raised.value   # type: ignore[assignment]
    body = gateway({})
    result, _ = run(kube, body)
    problem = result.outcome.problem
    assert problem is not None and problem.reason == R.API_SERVER_UNAVAILABLE, problem
    facts = status_facts.gather(body, GatewaySpec.parse(body["spec"]), result.outcome, [], time.time())
    shown = {c.type: (c.status, c.reason) for c in C.compute(facts)}
    assert shown[C.STALLED] == ("False", R.NO_PROBLEMS)
    assert shown[C.RECONCILING] == ("True", R.API_SERVER_UNAVAILABLE)
    assert shown[C.READY] == ("False", R.API_SERVER_UNAVAILABLE)
    s = Schedule()
    s.begin(0.0, 10.0, 1.0)
    assert s.settled(0.0, result.outcome, 1, 0.5) == problem and s.next_full == 2.0   # the first backoff
    assert s.settled(1.0, result.outcome._replace(problem=None, applied=False), 1, 0.5) == problem  # sticky


def test_past_the_deadline_a_loop_not_yet_stopped_sends_no_write(silent_api) -> None:
    """The loop side may stop a lost shard's loops late (the event loop busy); their writes stop
    at the deadline all the same: each is refused before it is sent, while the operator's own
    calls (no GatewayDeployment's loop) go on."""
    api_client, reached = silent_api
    kube = Kube(api_client, write_timeout=(0.5, 0.5))

    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder, task = await _holding(leases, events)
        kube.write_bound = holder.write_bound
        leases.down = True
        time.sleep(FAST.renew_deadline + 0.2)   # the event loop held past the deadline: nothing stopped yet
        assert holder.held and [e[0] for e in events] == ["gained"]
        token = ACTING_FOR.set("uid-of-a-gateway-here")
        try:
            for write in (lambda: kube.patch_status("team", "g", {"observedGeneration": 1}),
                          lambda: kube.delete_pod("team", "g-0", "uid"),
                          lambda: kube.set_pod_condition("team", "g-0", "uid", {"type": "T", "status": "True"})):
                with pytest.raises(NotHeld):
                    await asyncio.to_thread(write)
        finally:
            ACTING_FOR.reset(token)
        assert not reached.is_set()   # not one of them reached the API server
        with pytest.raises(Exception, match="timed out"):   # not a loop's: sent
            await asyncio.to_thread(kube.patch_status, "team", "g", {"observedGeneration": 1})
        assert reached.is_set()
        await _stopped(holder, task)
    asyncio.run(scenario())


class _AnswersWritesLate(_AnswersNoWrite):
    """Every write answered (an empty object) ``server.delay`` seconds after it arrived."""

    def _late(self) -> None:
        self.server.held.set()  # type: ignore[attr-defined]
        time.sleep(self.server.delay)  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_PATCH = do_DELETE = do_POST = _late


@pytest.fixture
def late_api() -> Iterator[tuple[client.ApiClient, ThreadingHTTPServer]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersWritesLate)
    server.daemon_threads = True
    server.held, server.delay = threading.Event(), 0.0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    config.retries = RETRIES
    try:
        yield client.ApiClient(config), server
    finally:
        server.shutdown()


LEASED = Timing(lease_duration=4.0, renew_deadline=2.5, retry_period=0.5)


def test_a_slow_write_early_in_a_renewal_is_waited_for_and_one_never_answered_ends_before_the_lease(
        late_api) -> None:
    """A GatewayDeployment's write has what is left of its shard's renewal on top of the margin's
    bound: an API server slow to commit (a Service create on a saturated machine: the 3,000 x 2 runs
    gave such writes up after 2.75 s and applied them again, one Service 4 minutes late) is waited
    for. A write the API server never answers is still given up before another replica may take
    the shard: the lease duration after the renewal it was sent under."""
    api_client, server = late_api
    kube = Kube(api_client, write_timeout=LEASED.write_timeout)
    fixed = sum(LEASED.write_timeout)

    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder, task = await _holding(leases, events, timing=LEASED)
        kube.write_bound = holder.write_bound
        token = ACTING_FOR.set("uid-of-a-gateway-here")
        try:
            server.delay = fixed + 0.4   # longer than a write sent at the deadline may take
            started = time.monotonic()
            assert await asyncio.to_thread(kube.patch_status, "team", "g", {"observedGeneration": 1}) == {}
            assert time.monotonic() - started >= fixed + 0.4
            leases.down = True   # no renewal from here: the last one is the one the write is sent under
            await asyncio.sleep(LEASED.retry_period + 0.1)
            renewed = holder.observed.renewed_at[S.shard_of("uid-of-a-gateway-here", 4)]
            server.delay = 30.0
            started = time.monotonic()
            with pytest.raises(Exception, match="timed out"):
                await asyncio.to_thread(kube.patch_status, "team", "g", {"observedGeneration": 1})
            ended = time.monotonic()
            assert ended - started > fixed and ended < renewed + LEASED.lease_duration, (
                started - renewed, ended - renewed)
        finally:
            ACTING_FOR.reset(token)
            await _stopped(holder, task)
    asyncio.run(scenario())


def test_a_write_in_flight_holds_the_hand_over_until_it_has_ended(late_api) -> None:
    """Drain, then hand over: a shard given up is cleared for the next holder only once the writes
    its loops already sent have ended (loop/handlers.py's ``lost``), and a write asked for after the
    give-up is refused before it is sent, so none lands while the next holder acts."""
    api_client, server = late_api
    kube = Kube(api_client, write_timeout=LEASED.write_timeout)
    held = {"uid-a": True}
    kube.write_bound = lambda uid: (0.5, 5.0) if held.get(uid) else None
    server.delay = 1.0

    def write() -> None:
        token = ACTING_FOR.set("uid-a")
        try:
            kube.patch_status("team", "g", {"observedGeneration": 1})
        finally:
            ACTING_FOR.reset(token)

    sent = threading.Thread(target=write)
    started = time.monotonic()
    sent.start()
    assert server.held.wait(5)   # the write reached the API server
    held["uid-a"] = False        # the shard given up
    assert not kube.wait_for_writes(lambda uid: uid == "uid-a", 0.2)   # still in flight
    assert kube.wait_for_writes(lambda uid: uid == "uid-a", 5)
    assert time.monotonic() - started >= 1.0
    sent.join()
    server.held.clear()
    with pytest.raises(NotHeld):
        write()
    assert not server.held.is_set() and kube.wait_for_writes(lambda uid: True, 0)


class SlowLeasesStandIn(LeasesStandIn):
    """An API server that takes ``write_s`` to answer each Lease write and ``read_s`` each list."""

    def __init__(self, write_s: float, read_s: float) -> None:
        super().__init__()
        self.write_s, self.read_s = write_s, read_s

    def read(self) -> list[LeaseView]:
        time.sleep(self.read_s)
        return super().read()

    def write(self, name: str, read: LeaseView | None, holder: str, duration: float) -> LeaseView | None:
        time.sleep(self.write_s)
        return super().write(name, read, holder, duration)


def test_an_api_server_slow_to_answer_each_call_costs_no_shard() -> None:
    """Each call answered late, within its timeout: a list and four sequential renewals between
    one renewal and the next (2.6 s here) would miss the renew deadline (2 s) every round, while
    renewals sent first and together (a write, then the list and the member's write: 1.4 s) keep
    every shard."""
    timing = Timing(lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)

    async def scenario() -> None:
        leases, events = SlowLeasesStandIn(write_s=0.4, read_s=0.6), []

        async def gained(shards: frozenset[int]) -> None:
            events.append(("gained", shards))

        async def lost(shards: frozenset[int]) -> None:
            events.append(("lost", shards))
        holder = ShardHolder(leases, 4, "a", timing, gained, lost)  # type: ignore[arg-type]
        task = asyncio.create_task(holder.run())
        await until_async(lambda: holder.held == frozenset(range(4)), timeout=10)
        await asyncio.sleep(timing.renew_deadline * 3)
        assert events == [("gained", frozenset(range(4)))], events
        await _stopped(holder, task)
    asyncio.run(scenario())
