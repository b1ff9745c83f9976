"""The one pass at a time of a GatewayDeployment's loop, which may outlast the step that started it.

A full pass queued behind others for the API threads (a resync wave) must never delay what the
replicas report: the step that started it waits for it only as long as the schedule says
(schedule.publish_wait), then publishes without it; the pass goes on, the next steps start none,
and when it ends it wakes the loop. Apart from the controller (controller.py), which starts a
pass when none runs and asks for it after each poll: what goes in (the pass to run, how long to
wait), what comes out (the pass's result once it ended, else None).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Coroutine, Generic, TypeVar

T = TypeVar("T")


@dataclass
class PassTask(Generic[T]):
    """The pass running, if any: ``wake`` is called when one that outlasted its step ends."""

    wake: Callable[[], None]
    _pending: asyncio.Future[T] | None = None  # a pass that outlasted its step (it wakes the loop when it ends)
    _waking: bool = False                      # ... and it will

    @property
    def running(self) -> bool:
        return self._pending is not None

    def start(self, run: Coroutine[object, object, T], ended: Callable[[], None] | None = None) -> None:
        """Runs ``run`` as the pass (none runs now); ``ended`` is called once when it ends."""
        assert self._pending is None, "one pass at a time"
        self._pending = asyncio.ensure_future(run)
        if ended is not None:
            self._pending.add_done_callback(lambda _: ended())

    async def ended(self, timeout: float) -> T | None:
        """The pass's result once it ended, waited for up to ``timeout`` seconds; else None, and the
        pass goes on: it wakes the loop when it ends."""
        pending = self._pending
        assert pending is not None, "no pass started"
        if not pending.done():
            await asyncio.wait({pending}, timeout=timeout)
        if pending.done():
            self._pending, self._waking = None, False
            return pending.result()  # a pass never raises (reconcile's boundary); its bookkeeping might
        if not self._waking:
            pending.add_done_callback(lambda _: self.wake())
            self._waking = True
        return None

    def cancel(self) -> None:
        """The loop ends: so does its pass."""
        if self._pending is not None:
            self._pending.cancel()
