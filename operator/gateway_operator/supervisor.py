"""Keeps one GatewayController task per GatewayDeployment, fed by watch events.

Tasks are plain asyncio tasks rather than kopf daemons: a kopf daemon puts a finalizer on
every object, and then a GatewayDeployment cannot be deleted while the operator is down.
Owned objects carry ownerReferences, so the garbage collector needs no finalizer.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping, Sequence

from . import metrics
from .controller import ControllerSettings, GatewayController
from .kube import Kube
from .reconcile import PodView

log = logging.getLogger(__name__)
Key = tuple[str, str]


class Supervisor:
    def __init__(self, kube: Kube, settings: ControllerSettings,
                 pods_of: Callable[[Key], Sequence[PodView]]) -> None:
        self.kube, self.settings, self.pods_of = kube, settings, pods_of
        self._controllers: dict[Key, tuple[str, GatewayController, asyncio.Task[None]]] = {}

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        if event_type == "DELETED" or meta.get("deletionTimestamp"):
            self.stop(key)
            return
        entry = self._controllers.get(key)
        if entry is None or entry[0] != meta["uid"]:  # new, or deleted and re-created
            self.stop(key)
            controller = GatewayController(self.kube, key[0], key[1], lambda: self.pods_of(key), self.settings)
            task = asyncio.get_running_loop().create_task(controller.run(), name=f"gateway {key[0]}/{key[1]}")
            entry = (meta["uid"], controller, task)
            self._controllers[key] = entry
        entry[1].update(body)

    def nudge(self, namespace: str, name: str | None) -> None:
        entry = self._controllers.get((namespace, name or ""))
        if entry:
            entry[1].nudge()

    def stop(self, key: Key) -> None:
        entry = self._controllers.pop(key, None)
        if entry:
            entry[2].cancel()
            metrics.forget(*key)

    async def stop_all(self) -> None:
        tasks = [entry[2] for entry in self._controllers.values()]
        self._controllers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
