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
from gateway_operator.clients.kube import RETRIES, Kube
from gateway_operator.core import conditions as C
from gateway_operator.core import facts as status_facts
from gateway_operator.core.schedule import Schedule
from gateway_operator.core.shards import LeaseView, Timing
from gateway_operator.loop.shard_holder import ShardHolder
from test_loop import ApiStandIn, gateway, run

FAST = Timing(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)


class LeasesStandIn:
    def __init__(self) -> None:
        self.store: dict[str, tuple[str, int]] = {}
        self.version = 0
        self.down = False

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

    def write(self, name: str, read: LeaseView | None, holder: str, duration: float) -> bool:
        self._up()
        current = self.store.get(name)
        if (read is None) != (current is None) or (current and read and str(current[1]) != read.version):
            return False
        self.version += 1
        self.store[name] = (holder, self.version)
        return True

    def delete(self, name: str, read: LeaseView) -> None:
        self._up()
        self.store.pop(name, None)


async def _holding(leases: LeasesStandIn, events: list[tuple[str, frozenset[int], float]]) -> ShardHolder:
    async def gained(shards: frozenset[int]) -> None:
        events.append(("gained", shards, time.monotonic()))

    async def lost(shards: frozenset[int]) -> None:
        events.append(("lost", shards, time.monotonic()))

    holder = ShardHolder(leases, 4, "a", FAST, gained, lost)  # type: ignore[arg-type]
    await holder.tick()
    return holder


def test_a_holder_cut_off_from_the_api_server_stops_its_loops_at_the_renew_deadline() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder = await _holding(leases, events)
        assert events[0][:2] == ("gained", frozenset(range(4))) and holder.owns("any-uid")
        task = asyncio.create_task(holder.run())
        await asyncio.sleep(0.5)
        leases.down = True
        cut = time.monotonic()
        last_renewal = max(holder.observed.renewed_at.values())
        await asyncio.sleep(FAST.renew_deadline + 0.3)
        lost = [e for e in events if e[0] == "lost"]
        assert lost and frozenset().union(*(e[1] for e in lost)) == frozenset(range(4)), events
        assert all(at <= last_renewal + FAST.renew_deadline + 0.1 for _, _, at in lost), (lost, last_renewal)
        assert lost[0][2] > cut and not holder.owns("any-uid") and not holder.held
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(scenario())


def test_a_stopping_holder_drains_before_it_clears_the_leases_and_deletes_its_member_lease() -> None:
    async def scenario() -> None:
        leases, events = LeasesStandIn(), []
        holder = await _holding(leases, events)
        cleared_before_drain = []

        async def lost(shards: frozenset[int]) -> None:
            cleared_before_drain.append(any(leases.store[f"g-shard-{s}"][0] == "" for s in shards))
            events.append(("lost", shards, time.monotonic()))
        holder.on_lose = lost
        await holder.stop()
        assert cleared_before_drain == [False]
        assert {name: h for name, (h, _) in leases.store.items()} == {f"g-shard-{s}": "" for s in range(4)}
        assert not holder.held
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
