"""The Supervisor under out-of-order watch events, a loop whose object is gone, and thousands of
loops found settled at once.

A test double stands in for the API client here (named ``GoneKube``): every call answers
404, as the API server does for a deleted GatewayDeployment.
"""
from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client.rest import ApiException

from gateway_operator.core.conditions import RECONCILING, STALLED
from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop.supervisor import ADOPTED_AT_ONCE, Supervisor
from harness.operator import gateway_deployment


class GoneKube:
    """Test double: every API call finds nothing (the object was deleted)."""

    def forget(self, owner_uid: str) -> None:
        """What a loop's objects were verified to carry: nothing to forget here."""

    def __getattr__(self, name: str) -> Any:
        def gone(*args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=404, reason="Not Found")
        return gone


def body(uid: str, generation: int = 1) -> dict:
    doc = gateway_deployment("gw")
    doc["metadata"].update(namespace="ns", uid=uid, generation=generation, resourceVersion="1")
    return doc


def supervisor() -> Supervisor:
    return Supervisor(GoneKube(), ControllerSettings(), lambda key: [])  # type: ignore[arg-type]


def test_late_events_of_a_deleted_object_start_nothing_and_stop_nothing() -> None:
    async def scenario() -> None:
        s = supervisor()
        s.observe("ADDED", body("uid-1"))
        assert s._controllers[("ns", "gw")][0] == "uid-1"
        s.observe("DELETED", body("uid-1"))
        assert ("ns", "gw") not in s._controllers
        s.observe("MODIFIED", body("uid-1"))  # stale event delivered after the deletion
        assert ("ns", "gw") not in s._controllers
        s.observe("ADDED", body("uid-2"))  # re-created under the same name
        s.observe("DELETED", body("uid-1"))  # a late, duplicate deletion of the old one
        assert s._controllers[("ns", "gw")][0] == "uid-2"
        await s.stop_all()
    asyncio.run(scenario())


def test_a_loop_whose_object_is_gone_ends_and_is_forgotten() -> None:
    async def scenario() -> None:
        s = supervisor()
        s.observe(None, body("uid-9"))
        task = s._controllers[("ns", "gw")][2]
        await asyncio.wait_for(task, timeout=10)  # ends by itself on the 404
        await asyncio.sleep(0)
        assert ("ns", "gw") not in s._controllers
    asyncio.run(scenario())


def test_a_loop_that_does_not_end_when_stopped_holds_a_shard_handover_only_for_the_bound(monkeypatch) -> None:
    """A shard given up waits for its loops to end, bounded: a loop stuck past it can no longer
    write (each of its writes is asked for as the GatewayDeployment it acts for, which the holder
    refuses once the shard is not held), so the handover goes on."""
    from gateway_operator.clients.kube import ACTING_FOR
    from gateway_operator.loop.controller import GatewayController
    acting: list[str] = []
    stuck = [True]

    async def stubborn(self: GatewayController) -> None:
        acting.append(ACTING_FOR.get())
        while stuck[0]:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
    monkeypatch.setattr(GatewayController, "run", stubborn)

    async def scenario() -> None:
        s = supervisor()
        s.observe(None, body("uid-5"))
        task = s._controllers[("ns", "gw")][2]
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        assert await s.drop(lambda uid: False, bound=0.3) == 1
        assert asyncio.get_running_loop().time() - started < 2.0
        assert ("ns", "gw") not in s._controllers and not task.done()
        assert acting == ["uid-5"]   # the loop's writes are asked for as its GatewayDeployment
        stuck[0] = False
        await task
    asyncio.run(scenario())


def settled(name: str, uid: str, generation: int = 1, observed: int = 1) -> dict:
    """A GatewayDeployment whose status says a pass reconciled ``observed`` and left nothing to do."""
    doc = body(uid, generation)
    doc["metadata"]["name"] = name
    doc["status"] = {"observedGeneration": observed, "conditions": [{"type": STALLED, "status": "False"},
                                                                    {"type": RECONCILING, "status": "False"}]}
    return doc


def test_settled_loops_found_together_start_a_few_at_a_time_and_a_change_among_them_does_not_wait(monkeypatch) -> None:
    """A shard taken over (or an operator start) finds thousands of settled GatewayDeployments at
    once: their first passes run ADOPTED_AT_ONCE at a time, the next as one ends. A spec change or
    a nudge of one still waiting starts it at once, and one deleted while waiting never starts."""
    from gateway_operator.loop.controller import GatewayController
    gate = asyncio.Event()
    running, most, passed = [0], [0], []

    async def first_pass(self: GatewayController, *args: Any) -> Any:
        running[0] += 1
        most[0] = max(most[0], running[0])
        passed.append(self.name)
        try:
            if self.name not in ("gw-097", "gw-099"):
                await gate.wait()
        finally:
            running[0] -= 1
        raise ApiException(status=404, reason="Not Found")  # the loop then ends, as for an object gone
    monkeypatch.setattr(GatewayController, "_pass", first_pass)

    async def scenario() -> None:
        s = supervisor()
        for i in range(100):
            s.observe(None, settled(f"gw-{i:03}", f"uid-{i}"))   # the first listing
        await asyncio.sleep(0.1)
        assert running[0] == ADOPTED_AT_ONCE and len(s._waiting) == 100 - ADOPTED_AT_ONCE
        s.observe("MODIFIED", settled("gw-099", "uid-99", generation=2))   # a spec change: at once
        s.nudge("ns", "gw-097")                                              # drift of an owned object: at once
        s.observe("DELETED", settled("gw-098", "uid-98"))                    # gone while it waited
        s.nudge("ns", "gw-096", listed=True)   # its pods found by an operator start's first listing: it waits
        await asyncio.sleep(0.1)
        assert {"gw-097", "gw-099"} <= set(passed) and len(passed) == ADOPTED_AT_ONCE + 2
        gate.set()
        for _ in range(200):
            if not s._controllers and not s._waiting:
                break
            await asyncio.sleep(0.05)
        assert sorted(passed) == sorted(f"gw-{i:03}" for i in range(100) if i != 98)
        assert most[0] <= ADOPTED_AT_ONCE + 2, most   # the listed ones never more than their share
    asyncio.run(scenario())
