"""Are the watches the loops depend on still delivering? A watch stream can end without being
restarted, or freeze after a connection reset, with no log (kopf #1276, #996, #955); the
leader then keeps renewing its Lease while it reconciles nothing.

A quiet stream is normal, so silence alone proves nothing. Every ``period`` the checker lists
the watched objects' resourceVersions (metadata only) and compares them with what the watch
delivered: an object whose listed version the watch has not delivered within ``bound`` seconds
of the list that first showed it means that stream is stalled. The operator then gives up its
Lease (a standby takes over at once), fails its liveness endpoint and exits, so the pod restarts
with fresh streams. ``Watches`` is pure (the clock is an input); ``check_forever`` does the I/O.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping

from gateway_operator import api

log = logging.getLogger(__name__)

Key = tuple[str, str]  # namespace, name
#: the streams checked: (apiVersion, kind, label selector) of what the loops read
WATCHED: tuple[tuple[str, str, str], ...] = (
    (f"{api.GROUP}/{api.VERSION}", api.KIND, ""),
    ("apps/v1", "Deployment", f"{api.LABEL_MANAGED_BY}={api.MANAGED_BY},{api.LABEL_COMPONENT}=gateway"),
    ("v1", "Pod", f"{api.LABEL_MANAGED_BY}={api.MANAGED_BY},{api.LABEL_COMPONENT}=gateway"),
)


def version(value: object) -> int | None:
    """etcd's resourceVersions are integers (opaque by contract: anything else is not compared)."""
    try:
        return int(str(value))
    except ValueError:
        return None


@dataclass
class Watches:
    bound: float = 90.0                                      # seconds a listed change may stay undelivered
    heard: dict[str, dict[Key, int]] = field(default_factory=dict)  # kind -> object -> version delivered
    behind: dict[tuple[str, Key], tuple[float, int]] = field(default_factory=dict)  # first seen behind, listed
    stalled: str = ""                                        # why the operator must restart ("" : fine)
    # kind -> object -> the uid of its controller, for the kinds whose handler says it (Secrets:
    # a generated one the watch shows is known to be ours without a read)
    controllers: dict[str, dict[Key, str]] = field(default_factory=dict)

    def delivered(self, kind: str, key: Key, resource_version: object, deleted: bool = False,
                  controller: str | None = None) -> None:
        """A watch event (kopf handler): the stream of ``kind`` is alive up to this version
        (``controller``: the object's controller uid, kept for kinds whose handler passes it)."""
        objects = self.heard.setdefault(kind, {})
        if deleted:
            objects.pop(key, None)
            self.controllers.get(kind, {}).pop(key, None)
            self.behind.pop((kind, key), None)
            return
        v = version(resource_version)
        if v is not None and v >= objects.get(key, 0):
            objects[key] = v
            if controller is not None:
                self.controllers.setdefault(kind, {})[key] = controller
            else:
                self.controllers.get(kind, {}).pop(key, None)
            if v >= self.behind.get((kind, key), (0.0, v + 1))[1]:
                self.behind.pop((kind, key), None)

    def version(self, kind: str, namespace: str, name: str) -> int | None:
        """The resourceVersion the watch last delivered of this object (None: none, or deleted)."""
        return self.heard.get(kind, {}).get((namespace, name))

    def controller(self, kind: str, namespace: str, name: str) -> str | None:
        """The controller uid of the object as the watch last delivered it (None: none, or not kept)."""
        return self.controllers.get(kind, {}).get((namespace, name))

    def listed(self, kind: str, versions: Mapping[Key, int], now: float) -> str:
        """A list of ``kind``: returns (and keeps) why its stream is stalled, or ""."""
        objects = self.heard.setdefault(kind, {})
        for key in [k for (k_kind, k) in self.behind if k_kind == kind and k not in versions]:
            self.behind.pop((kind, key), None)  # gone: its deletion is the watch's to deliver
        for key, v in versions.items():
            if objects.get(key, 0) >= v:
                self.behind.pop((kind, key), None)
            elif (kind, key) not in self.behind:
                self.behind[(kind, key)] = (now, v)
        late = [(since, key) for (k_kind, key), (since, _) in self.behind.items()
                if k_kind == kind and now - since > self.bound]
        if late and not self.stalled:
            since, key = min(late)
            self.stalled = (f"the {kind} watch delivered no change of {key[0]}/{key[1]} for {now - since:.0f}s "
                            f"after a list showed it ({len(late)} objects behind); restarting with fresh watches")
        return self.stalled


Lister = Callable[[str, str, str], Mapping[Key, int]]  # apiVersion, kind, selector -> versions


async def check_forever(watches: Watches, list_versions: Lister, period: float,
                        on_stall: Callable[[str], Awaitable[None]]) -> None:
    """Every ``period`` seconds, list each watched kind (in a thread; a list that fails is
    retried next period: an API server that does not answer is not a stalled watch)."""
    while True:
        await asyncio.sleep(period)
        for api_version, kind, selector in WATCHED:
            try:
                versions = await asyncio.to_thread(list_versions, api_version, kind, selector)
            except Exception as e:  # noqa: BLE001 - the API server's trouble, not the stream's
                log.debug("listing %s for the watch check failed: %s", kind, type(e).__name__)
                continue
            if watches.listed(kind, versions, time.monotonic()):
                log.error("%s", watches.stalled)
                await on_stall(watches.stalled)
                return
