"""Serving and draining: the gateway runs until SIGTERM/SIGINT, its webhook path is guarded once it
runs (the fail-closed window and outage journal, the claims' leases, the in-flight answer, the
store's owner recorded), and the stop drains: no new requests, in-flight turns get the drain, then
uvicorn cancels them, what the journal and the shared sessions hold is carried to Redis, and the
claims left are released. Also the stale PID lock an earlier container of this pod left."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import gwop_contract as contract
import gwop_upstream as upstream
from gwop_claims import guard_claim_calls, record_owner, release_unfinished_claims
from gwop_config import DEFAULT_MAX_BODY_BYTES
from gwop_health import extend as extend_health
from gwop_journal import OutageJournal
from gwop_leases import Leases
from gwop_log import say
from gwop_reach import Reach
from gwop_redis import redis_client
from gwop_sessions import SharedSessions
from gwop_watch import serve_watch

# at the stop, the journal and the unsaved session history may wait contract.CARRY_BUDGET_SECONDS for
# Redis to take them; contract.carried_key is written once this replica's journal is all in Redis, so
# that the operator, which saw its last /health say "journalled" before the stop, knows nothing was left
CARRIED_TTL_SECONDS = 600
# of the drain, WebSocket sessions get at most this (the gateway's own drain); in-flight webhook
# turns get the whole drain (uvicorn's graceful shutdown)
WEBSOCKET_DRAIN_MAX = 10.0


def clear_stale_pid_lock(home: str, port: Optional[int]) -> bool:
    """Remove the gateway's PID lock for ``port`` left by an earlier container of this pod.

    0.1.16 writes ``~/.praisonai/gateway-<host>-<port>.pid`` and refuses to start while the PID
    in it is alive. ``~/.praisonai`` is the pod's state volume, which outlives a container: after
    a SIGKILL (OOM, a liveness kill) the lock names PID 1, which in the new container is alive
    (it is this launcher), so the replica crash-looped for ever ("another instance is running";
    found by the exactly-once checker). One gateway runs per pod, started only by this launcher,
    so a lock present before it starts is always stale."""
    if not port:
        return False
    removed = False
    for lock in (Path(home) / ".praisonai").glob(f"gateway-*-{int(port)}.pid"):
        try:
            lock.unlink()
            removed = True
        except OSError:
            pass
    return removed


async def serve(gateway: Any, config_path: str, drain: float, guard: Mapping[str, float],
                sessions: Optional[SharedSessions] = None, store_redis: Optional[Mapping[str, Any]] = None,
                watch_port: Optional[int] = None) -> int:
    """Run the gateway until SIGTERM/SIGINT; return the process exit code (0). ``store_redis``: the
    push.redis settings when the idempotency store is the Redis one; ``watch_port``: where the
    long-poll /health is served (gwop_watch), once the gateway runs. At the stop, what
    the journal and the shared sessions still hold is carried to Redis (within contract.CARRY_BUDGET_SECONDS:
    Redis may be coming back), then this replica's unfinished claims are released."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    # asked once before the gateway serves, so that the first /health the operator reads already
    # says whether this replica reaches Redis (at most Reach.TIMEOUT_S when it cannot)
    reach = Reach(store_redis) if store_redis else None
    if reach is not None:
        await asyncio.to_thread(reach.probe)
    start = asyncio.ensure_future(gateway.start_with_config(config_path))
    # start_with_config installs its own SIGTERM/SIGINT handlers before its
    # first await; those only flip uvicorn's should_exit and silently drop a
    # signal that arrives while channels are still starting. Yield once so it
    # has installed them, then take the signals back.
    await asyncio.sleep(0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    stopper = asyncio.ensure_future(_stop_when_requested(gateway, start, stop_requested, drain))
    pod = os.environ.get("HOSTNAME", "")
    leases = Leases(gateway, guard["claim_lease_seconds"], pod, store_redis)
    journal = OutageJournal(gateway, guard["fail_closed_seconds"], adopt=leases.adopt, disown=leases.disown)
    if sessions is not None:
        sessions.other_window = lambda: journal.broken_since
    guarding = asyncio.ensure_future(guard_webhooks(gateway, start, pod, journal, leases, reach, watch_port,
                                                    int(guard["max_body_bytes"])))
    try:
        await start
    finally:
        stop_requested.set()  # normal return or failure: stop whatever still runs
        await stopper
        guarding.cancel()
        if await asyncio.to_thread(carry, journal, sessions, contract.CARRY_BUDGET_SECONDS) and store_redis and pod:
            await asyncio.to_thread(say_carried, store_redis, pod)
        leases.stop()
        released = await asyncio.to_thread(release_unfinished_claims, leases, journal)
        if released:
            say(f"released {released} unfinished webhook claim(s): a provider's retry runs them on another replica")
    return 0


def say_carried(store_redis: Mapping[str, Any], pod: str) -> None:
    """``SET <prefix>gwop-carried:<pod>``: nothing this replica admitted is left outside Redis."""
    try:
        redis_client(store_redis, timeout=1.0).set(contract.carried_key(store_redis.get("prefix") or "", pod),
                                                   str(int(time.time())), ex=CARRIED_TTL_SECONDS)
    except Exception:  # noqa: BLE001 - Redis unusable again: the operator announces the journal as left
        pass


def carry(journal: OutageJournal, sessions: Optional[SharedSessions], budget: float) -> bool:
    """At the stop: write what the journal holds (admitted or finished while Redis could not be
    used) and what turns added to the shared history meanwhile, trying every half second within
    ``budget`` (Redis may be answering again in a moment); what is left is said, and lost. True
    when nothing is left."""
    deadline = time.monotonic() + budget
    while True:
        try:
            journal.flush()
            journal.settle_contested()
            if sessions is not None:
                sessions.save_unsaved()
        except Exception:  # noqa: BLE001 - Redis still unusable: once more, within the budget
            pass
        left = (len(journal.admitted) + len(journal.done) + len(journal.contested)
                + (len(sessions.unsaved) if sessions is not None else 0))
        if not left:
            return True
        if time.monotonic() > deadline:
            say(f"stopping with {left} journalled webhook(s) or unsaved session(s) Redis never took: a redelivery "
                "of them may run again")
            return False
        time.sleep(0.5)


async def guard_webhooks(gateway: Any, start: "asyncio.Future[Any]", pod: str, journal: OutageJournal,
                         leases: Leases, reach: Optional[Reach] = None, watch_port: Optional[int] = None,
                         max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Once the gateway runs: the fail-closed window and the outage journal around its claim calls,
    the claims' short leases (renewed on their own thread, fenced on the event loop), in-flight
    duplicates answered 503, the long-poll /health on
    ``watch_port`` (its body is /health's, section included), and (once the store is built) the
    store's owner recorded under this pod."""
    while not (gateway.is_running or start.done()):
        await asyncio.sleep(0.05)
    try:
        # a renewal round that fails is an outage of Redis for this replica at once: new deliveries
        # are held (the fail-closed window) until the journal's own attempt finds Redis answering again
        guard_claim_calls(gateway, journal, leases, max_body_bytes, asyncio.get_running_loop().call_soon_threadsafe)
        extend_health(gateway, journal, leases, upstream.versions(), reach)
    except Exception as exc:  # noqa: BLE001 - 0.1.16's own answer stays
        say(f"wrapping the webhook path failed: {type(exc).__name__}")
    leases.run_thread()  # renewals on a thread of their own, never behind the agent's work
    tasks = [asyncio.ensure_future(journal.run()), asyncio.ensure_future(leases.fence())]
    if reach is not None:
        tasks.append(asyncio.ensure_future(reach.run()))
    if watch_port:
        tasks.append(asyncio.ensure_future(serve_watch(watch_port, upstream.health_call(gateway))))
    try:
        await record_owner(gateway, start, pod, leases)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def _stop_when_requested(
    gateway: Any, start: "asyncio.Future[Any]", requested: asyncio.Event, drain: float
) -> None:
    await requested.wait()
    # Until is_running the uvicorn server does not exist and stop() is a no-op.
    while not (gateway.is_running or start.done()):
        await asyncio.sleep(0.05)
    server = upstream.server(gateway)
    if server is not None:
        # 0.1.16 never sets it, so uvicorn would wait for in-flight webhook turns without a bound
        # (until the kubelet's SIGKILL leaves their claims stuck): give them the drain, then
        # uvicorn cancels them and their claims are released. Read at shutdown time.
        server.config.timeout_graceful_shutdown = max(1.0, drain)
    in_flight = len(server.server_state.tasks) if server is not None else 0
    say(f"draining: no new requests; {in_flight} in flight get up to {drain:g}s")
    try:
        # Drains sessions, makes uvicorn exit and releases the PID lock; the
        # gateway's own signal path never calls it.
        await gateway.stop(drain_timeout=min(drain, WEBSOCKET_DRAIN_MAX))
    except Exception as exc:  # noqa: BLE001 - shutdown must not mask the exit code
        say(f"gateway stop failed: {type(exc).__name__}")
