"""Keeps one GatewayController task per GatewayDeployment, fed by watch events.

Tasks are plain asyncio tasks rather than kopf daemons: a kopf daemon puts a finalizer on
every object, and then a GatewayDeployment cannot be deleted while the operator is down.
Owned objects carry ownerReferences, so the garbage collector needs no finalizer.

With ``--shards`` (shard_holder.py) every operator replica sees every GatewayDeployment's events
and keeps a loop only for those whose shard it holds (``owns``): a shard it takes has its objects
listed and started (``adopt``), a shard it loses or gives up has its loops stopped, and awaited,
before the holder lets another replica take it (``drop``).

Loops found settled together (the first listing at an operator start, the objects of a shard just
taken over: thousands at once) start ``ADOPTED_AT_ONCE`` at a time, the next as one's first pass
ends. Started all at once, their first passes (Secret reads, a Redis probe, the replicas' health
watches opened) held the event loop and the API threads for tens of seconds, and a spec change
among them waited behind the wave (docs/development.md has the figures). Anything that is not such
a listing (a spec change, a status written by someone, a nudge from an owned object) starts a
waiting loop at once.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

from gateway_operator.api.objects import meta_of, status_of
from gateway_operator.api.tenancy import Claim
from gateway_operator.clients.kube import ACTING_FOR, Kube
from gateway_operator.clients.redis_guard import Allowlist, ForeignCheck
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core.conditions import settled_at
from gateway_operator.core.pods import LiveDeployment, PodView
from gateway_operator.core.rollouts import RolloutGate
from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop import metrics
from gateway_operator.loop.controller import GatewayController

log = logging.getLogger(__name__)
Key = tuple[str, str]

#: loops found settled whose first pass may run together: twice the API threads (handlers.configure),
#: so that the threads stay busy while some of those passes wait on Redis or the event loop
ADOPTED_AT_ONCE = 32


async def _acting_for(uid: str, controller: GatewayController) -> None:
    """A loop's task: its API writes are sent only while this replica owns ``uid`` (clients/kube.py)."""
    ACTING_FOR.set(uid)
    await controller.run()


class Supervisor:
    def __init__(self, kube: Kube, settings: ControllerSettings,
                 pods_of: Callable[[Key], Sequence[PodView]],
                 deployment_of: Callable[[Key], LiveDeployment | None] = lambda _: None,
                 claims_of: Callable[[Sequence[str]], Mapping[str, Sequence[Claim]]] = lambda _: {},
                 foreign: ForeignCheck = lambda *_: False, owns: Callable[[str], bool] = lambda _: True) -> None:
        self.kube, self.settings, self.pods_of, self.deployment_of = kube, settings, pods_of, deployment_of
        self.owns = owns   # by uid: whether this replica holds the GatewayDeployment's shard
        self.claims_of = claims_of
        self.prober = Prober(Allowlist.parse(settings.redis_allow), foreign=foreign)  # one, so its limits hold across objects
        self.rollouts = RolloutGate(settings.max_concurrent_rollouts)  # operator-caused rollouts, a few at a time
        self._controllers: dict[Key, tuple[str, GatewayController, asyncio.Task[None]]] = {}
        # uids seen deleted: a late event of a deleted object (same name, re-created) must
        # neither start a loop for it nor stop the loop of its successor
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._hosts: dict[Key, tuple[str, ...]] = {}  # the hosts each GatewayDeployment last claimed
        # a watch event's context: kopf posts Events from a loop started in one (its event queue is
        # a context variable of each object's handler), so an adopted loop starts in a copy of it
        self._context: contextvars.Context | None = None
        # loops found settled waiting for their turn (oldest first), and how many started loops'
        # first passes still run
        self._waiting: OrderedDict[Key, tuple[str, Mapping[str, Any], contextvars.Context | None]] = OrderedDict()
        self._adopting = 0
        metrics.waiting_from(lambda: len(self._waiting))

    def hosts_seen(self, key: Key, hosts: Sequence[str], deleted: bool) -> tuple[str, ...]:
        """Records the hosts ``key`` claims now; returns those and the ones it claimed before
        (whoever claims one of them may have won or lost it)."""
        before = self._hosts.pop(key, ())
        if hosts and not deleted:
            self._hosts[key] = tuple(hosts)
        return tuple(dict.fromkeys((*before, *hosts)))

    def observe(self, event_type: str | None, body: Mapping[str, Any],
                context: contextvars.Context | None = None) -> None:
        """A watch event (from kopf's handler; ``context``: another context to start a loop in)."""
        if self._context is None and context is None:
            self._context = contextvars.copy_context()
        meta = meta_of(body)
        key: Key = meta.key
        uid = meta.uid
        if event_type == "DELETED" or meta.deleting:
            self._remember_deleted(uid)
            self.stop(key, uid)
            return
        if uid in self._deleted:
            return
        if not self.owns(uid):
            self.stop(key, uid)
            return
        entry = self._controllers.get(key)
        if entry is None or entry[0] != uid:  # new, or deleted and re-created
            listed = event_type is None and settled_at(status_of(body), meta.generation)
            if listed and self._adopting >= ADOPTED_AT_ONCE:
                self._waiting[key] = (uid, body, context)
                return
            self._waiting.pop(key, None)
            self._start(key, uid, body, context, adopted=listed)
            return
        entry[1].update(body)

    def _start(self, key: Key, uid: str, body: Mapping[str, Any], context: contextvars.Context | None,
               adopted: bool) -> GatewayController:
        """A loop for ``key`` (``adopted``: found settled, it takes a turn), fed ``body``."""
        self.stop(key)
        controller = GatewayController(self.kube, key[0], key[1], lambda: self.pods_of(key),
                                       lambda: self.deployment_of(key), self.claims_of, self.settings,
                                       self.prober, rollouts=self.rollouts)
        task = asyncio.get_running_loop().create_task(_acting_for(uid, controller),
                                                      name=f"gateway {key[0]}/{key[1]}", context=context)
        task.add_done_callback(lambda _: self._finished(key, uid))
        if adopted:  # its turn ends with its first pass, or with its loop
            controller.first_pass_ended = task_ended = self._turn()
            task.add_done_callback(lambda _: task_ended())
        self._controllers[key] = (uid, controller, task)
        controller.update(body)
        return controller

    def _turn(self) -> Callable[[], None]:
        """One of the ``ADOPTED_AT_ONCE`` turns taken; the callable gives it back (once)."""
        self._adopting += 1
        held = True

        def give_back() -> None:
            nonlocal held
            if held:
                held = False
                self._adopting -= 1
                self._start_waiting()
        return give_back

    def _start_waiting(self) -> None:
        """The loops waiting their turn start while turns are free (those this replica still owns)."""
        while self._waiting and self._adopting < ADOPTED_AT_ONCE:
            key, (uid, body, context) = self._waiting.popitem(last=False)
            if key not in self._controllers and uid not in self._deleted and self.owns(uid):
                self._start(key, uid, body, context, adopted=True)

    def _remember_deleted(self, uid: str) -> None:
        self._deleted[uid] = None
        while len(self._deleted) > 10_000:
            self._deleted.popitem(last=False)

    def _finished(self, key: Key, uid: str) -> None:
        """A loop that ended by itself (its object is gone): forget it."""
        entry = self._controllers.get(key)
        if entry and entry[0] == uid and entry[2].done():
            self._controllers.pop(key)
            self.kube.forget(uid)
            metrics.forget(*key)

    def nudge(self, namespace: str, name: str | None, listed: bool = False) -> None:
        """An owned object changed (``listed``: only found by a watch's first listing)."""
        key = (namespace, name or "")
        waiting = None if listed else self._waiting.pop(key, None)
        if waiting is not None:  # an owned object of a loop waiting its turn changed: it starts now
            uid, body, context = waiting
            if uid not in self._deleted and self.owns(uid):
                self._start(key, uid, body, context, adopted=False)
        entry = self._controllers.get(key)
        if entry:
            entry[1].nudge()

    def stop(self, key: Key, uid: str | None = None) -> None:
        """Stop the loop for ``key`` (only if it serves ``uid``, when given)."""
        waiting = self._waiting.get(key)
        if waiting is not None and (uid is None or waiting[0] == uid):
            self._waiting.pop(key)
        entry = self._controllers.get(key)
        if entry is None or (uid is not None and entry[0] != uid):
            return
        self._controllers.pop(key)
        entry[2].cancel()
        self.kube.forget(entry[0])
        self.rollouts.done(key)
        metrics.forget(*key)

    def adopt(self, bodies: Sequence[Mapping[str, Any]]) -> int:
        """Takes on the listed GatewayDeployments this replica now owns (their loops start, or wait
        their turn); how many. Before the first watch event none: the watch's first listing then
        starts them itself."""
        started = 0
        for body in bodies:
            meta = meta_of(body)
            if self._context is not None and self.owns(meta.uid) and meta.key not in self._controllers:
                self.observe(None, body, self._context.copy())
                started += 1
        return started

    async def drop(self, owned: Callable[[str], bool], bound: float) -> int:
        """Stops the loops of the GatewayDeployments ``owned`` no longer covers and awaits their
        end (a pass in flight is cancelled at its next await) for ``bound`` seconds at most; how
        many. A loop still running then writes nothing more: ``owned`` is what each of its writes
        asks before it is sent (clients/kube.py), so the shard may move on."""
        for key in [key for key, (uid, _, _) in self._waiting.items() if not owned(uid)]:
            self._waiting.pop(key)
        keys = [key for key, (uid, _, _) in self._controllers.items() if not owned(uid)]
        tasks = [self._controllers[key][2] for key in keys]
        for key in keys:
            self.stop(key)
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=bound)
            if running:
                log.warning("%d of %d stopped loops did not end within %.0f s; their writes are refused",
                            len(running), len(tasks), bound)
        return len(keys)

    async def stop_all(self) -> None:
        self._waiting.clear()
        tasks = [entry[2] for entry in self._controllers.values()]
        self._controllers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
