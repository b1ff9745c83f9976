"""The operator's own Redis probe (``Prober``): connect, authenticate, and a ``SET NX PX`` round
trip under the gateway's prefix - the same operations the idempotency store needs.

A replica's clean /health proves nothing until it has handled a webhook (its store is built
lazily), so this probe is what gates scale-out and what RedisReachable reports.

The probe connects wherever a tenant's spec.redis points and sends the password the tenant
named, so it is bounded on every side: an allowlist checked before any connection (the
chart's ``redisProbe.allow``), a fixed ceiling on its timeout, and its own concurrency
limits (per namespace and in total) so that one namespace's slow or black-holed Redis never
delays another namespace. It runs on the event loop (resp.py, a minimal RESP2 connection for
both the full and the observation probe): no thread is held.

It reaches only what the tenant may reach: the GatewayDeployment's own managed Redis, or a
target of its own that is no other GatewayDeployment's managed Redis (checked by name and by
every address the name resolves to, before connecting). Outside the privileged targets (its own
managed Redis, a target the allowlist names) its failures collapse to three outcomes that say
nothing of what answered (unreachable; not a Redis this gateway can use; a refused password),
and a namespace whose
probes keep failing is probed with a backoff, so the probe is neither an oracle nor a scanner.

This module holds the bounds (the timeout's ceiling, the probes in flight) and the order of a
probe; the rest is by job: redis_guard.py (the allowlist, the foreign-target check, the backoff,
what an unprivileged target is told), redis_connection.py (the credentials, a new connection, the
kept connection), redis_protocol.py (what is said to Redis and what the answers mean) and
core/probe_wording.py (every message).
"""
from __future__ import annotations

import asyncio
from collections import defaultdict
import time
from typing import Callable

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients import redis_protocol
from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.clients.redis_connection import Credentials, KeptConnection
from gateway_operator.clients.redis_guard import Allowlist, Backoff, ForeignCheck, address, told
from gateway_operator.core import probe_wording as say
from gateway_operator.core.dedup_history import StoreFacts
from gateway_operator.core.probe_result import ProbeResult, bound

TIMEOUT_CEILING = 5.0      # whatever spec.health.timeoutSeconds says
PER_NAMESPACE = 4          # probes in flight for one namespace
IN_FLIGHT = 64             # probes in flight in total


class Prober:
    def __init__(self, allowlist: Allowlist | None = None, per_namespace: int = PER_NAMESPACE,
                 in_flight: int = IN_FLIGHT, timeout_ceiling: float = TIMEOUT_CEILING,
                 foreign: ForeignCheck = lambda *_: False, clock: Callable[[], float] = time.monotonic) -> None:
        self.allowlist = allowlist or Allowlist()
        self.timeout_ceiling = timeout_ceiling
        self.foreign = foreign
        self.clock = clock
        self._total = asyncio.Semaphore(in_flight)
        self._per_namespace: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(per_namespace))
        self._backoff: defaultdict[str, Backoff] = defaultdict(Backoff)

    async def probe(self, namespace: str, target: RedisTarget, credentials: Credentials | str | None,
                    timeout: float, managed_ip: str | None = None, owner: str = "",
                    wait: bool = True, kept: KeptConnection | None = None,
                    base: StoreFacts | None = None) -> ProbeResult | None:
        """``credentials``: a password alone may be given as a string. ``managed_ip``: the ready
        pod of the GatewayDeployment's own managed Redis (its Service name resolves only inside the
        cluster network); "" when none is ready yet. ``owner``: the GatewayDeployment's name (a
        target must not be another one's managed Redis). ``wait=False``: None at once when the
        namespace's (or the operator's) probes in flight are at their bound, rather than queueing
        (an observation pass then keeps its last result: its /health poll must not wait)."""
        signed = credentials if isinstance(credentials, Credentials) else Credentials(credentials)
        timeout = max(0.1, min(timeout, self.timeout_ceiling))
        if managed_ip == "":  # an ordinary start, not a failure: no Warning for it
            return say.managed_redis_starting(target.endpoint)
        privileged = bool(managed_ip) or not self.allowlist.open
        backoff = self._backoff[namespace]
        if not privileged and (held := backoff.holds(target.endpoint, timeout, self.clock())) is not None:
            return held  # a namespace whose probes keep failing waits its turn (for whichever target)
        if not wait and (self._per_namespace[namespace].locked() or self._total.locked()):
            return None
        async with self._per_namespace[namespace], self._total:
            try:  # a timeout, not a cancel swallowed (controller._loop says why)
                async with fair_timeout(bound(timeout)):
                    result = await self._probe(namespace, owner, target, signed, timeout, managed_ip, privileged,
                                               kept, base)
            except asyncio.TimeoutError:
                result = say.unreachable(target.endpoint, timeout)
        if privileged:
            return result
        if result.ok:
            self._backoff.pop(namespace, None)
            return result
        backoff.failed(result, target.endpoint, self.clock())
        return result

    async def _probe(self, namespace: str, owner: str, target: RedisTarget, credentials: Credentials,
                     timeout: float, managed_ip: str | None, privileged: bool,
                     kept: KeptConnection | None = None, base: StoreFacts | None = None) -> ProbeResult:
        if managed_ip:
            return await _round_trip(target, managed_ip, credentials, timeout, privileged, kept, base)
        checked = await address(namespace, owner, target, timeout, self.allowlist, self.foreign)
        if isinstance(checked, ProbeResult):
            return checked
        return await _round_trip(target, checked, credentials, timeout, privileged, kept, base)


async def _round_trip(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                      privileged: bool = True, kept: KeptConnection | None = None,
                      base: StoreFacts | None = None) -> ProbeResult:
    """The exchange at ``host`` (redis_protocol.exchange), said as the guard lets the tenant be
    told (redis_guard.told: ``privileged`` keeps a failure's detail)."""
    try:
        result = await redis_protocol.exchange(target, host, credentials, timeout, kept, base)
    except Exception as e:  # noqa: BLE001 - e.g. redis-py's HELLO handling fails on a server that says +OK to all
        result = say.answered_unexpectedly(target.endpoint, type(e).__name__)
    return told(result, target, host, timeout, privileged)
