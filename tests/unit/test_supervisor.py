"""The Supervisor under out-of-order watch events, and a loop whose object is gone.

A test double stands in for the API client here (named ``GoneKube``): every call answers
404, as the API server does for a deleted GatewayDeployment.
"""
from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client.rest import ApiException

from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop.supervisor import Supervisor
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
