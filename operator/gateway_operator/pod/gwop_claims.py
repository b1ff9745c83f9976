"""The webhook claims this replica holds in the gateway's Redis store: a duplicate of a turn still in
flight is told to retry (503), not that it was deduplicated; a turn cut by the drain's end releases
its claim before the provider is answered; the claims left by a stopped or killed process of this
pod are released (owner-checked) so the provider's retry runs them on another replica."""

from __future__ import annotations

import asyncio
from typing import Any, List, Mapping, Optional

import gwop_upstream as upstream
from gwop_log import say
from gwop_redis import release_claims_of, redis_client, store_client

# {push prefix}hookidem-owner:<pod> holds the owner token of the pod's running gateway process, so
# that the next process in the same pod (a container restarted after SIGKILL, OOM or a liveness
# kill: nothing ran to release its claims) releases what its predecessor still held
OWNER_KEY = "hookidem-owner:"
STORE_SUFFIX = "hookidem:"  # the store's prefix is push.redis.prefix + this
HOLD_RETRY_AFTER_SECONDS = 2  # a delivery held by the fail-closed window: retry soon (another replica may answer)


def build_store(gateway: Any, redis: Optional[Mapping[str, Any]]) -> None:
    """Build the gateway's idempotency store (what its first reserve would do). With
    ``store_backend: redis`` (``redis``: the push.redis settings) a Redis that does not answer the
    build's one PING must not leave this replica on 0.1.16's fallback, a per-replica SQLite store for
    the life of the process: its first webhook ran the agent without asking anyone, and so did the
    same webhook on a replica that could ask (a silent duplicate; the operator then restarted the
    replica, which heals a partition only by luck). The Redis store is put in place anyway, marked
    unreachable: the outage journal holds deliveries for the fail-closed window, then admits them
    best-effort, journalled and announced, and it all ends when Redis answers, not when the pod restarts."""
    upstream.build_store(gateway)
    if redis and upstream.redis_store(gateway) is None:
        upstream.install_redis_store(gateway, store_client(redis), str(redis.get("prefix") or "praison:push:"))
        say("Redis did not answer as the idempotency store was built: handled as an outage of the Redis store "
            "(held, then best-effort, until Redis answers), not a per-replica store for the life of the process")


def release_unfinished_claims(store: Optional[upstream.RedisStore]) -> int:
    """Release, owner-checked, the in-flight claims this replica still holds once the server has
    stopped: a turn cut by the drain's end (a cancelled handler never releases its claim in 0.1.16)
    would otherwise answer the provider's retries for the whole in-flight lease, and the message
    would never be answered. 0.1.16 keeps no list of its claims, so the store's keys are scanned for
    its owner token and deleted only while they still hold it. Any other store (SQLite) is left."""
    if store is None:
        return 0
    return release_claims_of(store.client, store.prefix, store.token)


def release_predecessor_claims(redis: Optional[Mapping[str, Any]], backend: Optional[str], pod: str) -> int:
    """At start: the claims a killed earlier gateway process of this pod left (see OWNER_KEY)."""
    if backend != "redis" or not redis or not pod:
        return 0
    prefix = str(redis.get("prefix") or "praison:push:")
    try:
        client = redis_client(redis)
        token = client.get(f"{prefix}{OWNER_KEY}{pod}")
        released = release_claims_of(client, f"{prefix}{STORE_SUFFIX}", token) if token else 0
    except Exception as exc:  # noqa: BLE001 - a Redis that does not answer now: the lease ends them
        say(f"releasing a predecessor's claims failed: {type(exc).__name__}")
        return 0
    if released:
        say(f"released {released} webhook claim(s) a killed predecessor in this pod left: their retries run")
    return released


async def record_owner(gateway: Any, start: "asyncio.Future[Any]", pod: str) -> None:
    """Once the gateway's idempotency store is built (0.1.16 builds it on the first webhook: building
    it earlier, before a new Redis answers, would fall back to SQLite), record the store's owner
    token under this pod's name (OWNER_KEY)."""
    while upstream.idempotency_store(gateway) is None and not start.done():
        await asyncio.sleep(0.2)
    store = upstream.redis_store(gateway)
    if store is None or not pod or not store.prefix.endswith(STORE_SUFFIX):
        return
    try:
        store.client.set(f"{store.prefix[:-len(STORE_SUFFIX)]}{OWNER_KEY}{pod}", store.token)
    except Exception as exc:  # noqa: BLE001 - the lease still ends a dead process's claims
        say(f"recording the store's owner failed: {type(exc).__name__}")


def answer_inflight_duplicates(gateway: Any, journal: Any) -> bool:
    """A delivery whose key another request still holds in flight is answered 503 with
    Retry-After, not 0.1.16's 200 ``deduplicated``: a 2xx makes the provider stop retrying, and if
    the turn in flight then fails or its pod stops, the message is never answered (found by the
    checker: lost messages whose only turn was still queued when their retries were answered).
    A recorded key is still answered 200 ``deduplicated``. A delivery the fail-closed window holds
    (``journal``: this replica cannot ask Redis) is answered 503 with Retry-After too. Wraps the
    reserve call (which sees the outcome) and the ``/hooks/`` route's endpoint (which can change the
    answer); Redis store only."""
    import contextvars
    from starlette.responses import JSONResponse
    from starlette.routing import request_response
    route = upstream.hook_route(gateway)
    if route is None:
        say("warning: no /hooks/ route found; in-flight duplicates keep 0.1.16's 200 deduplicated")
        return False
    in_flight: "contextvars.ContextVar[bool]" = contextvars.ContextVar("gwop_in_flight", default=False)
    claimed: "contextvars.ContextVar[List[str]]" = contextvars.ContextVar("gwop_claimed")
    calls, endpoint = upstream.claim_calls(gateway), route.endpoint

    def reserve_or_note(key: str) -> bool:
        if calls.reserve(key):
            held = claimed.get(None)
            if held is not None:
                held.append(key)
            return True
        store = upstream.redis_store(gateway)
        if store is not None and not journal.holding.get() and not journal.broken:
            try:
                recorded = store.is_recorded(key)
            except Exception:  # noqa: BLE001 - Redis just answered reserve; treat as in flight
                recorded = False
            if not recorded:
                in_flight.set(True)
        return False

    async def hook_endpoint(request: Any) -> Any:
        marker, held, holding = in_flight.set(False), claimed.set([]), journal.holding.set(False)
        try:
            response = await endpoint(request)
            if journal.holding.get():
                return JSONResponse({"ok": False, "retry": True,
                                     "error": "this replica cannot reach its idempotency store; retry"},
                                    status_code=503, headers={"Retry-After": str(HOLD_RETRY_AFTER_SECONDS)})
            if in_flight.get():
                return JSONResponse({"ok": False, "in_progress": True,
                                     "error": "this delivery is being processed; retry later"},
                                    status_code=503, headers={"Retry-After": "10"})
            return response
        except asyncio.CancelledError:
            # the drain ended with this turn still running (uvicorn cancels it): release its claim
            # (owner-checked) before anything answers the provider, so that a retry sent the moment
            # it sees the answer already finds the key free, then say so; 0.1.16 releases nothing
            for key in claimed.get():
                upstream.claim_calls(gateway).release(key)
            if claimed.get():
                say(f"released {len(claimed.get())} unfinished webhook claim(s) as the drain ended: the provider "
                    "is answered 503 and its retry runs the turn on another replica")
            return JSONResponse({"ok": False, "retry": True, "error": "this replica stopped before the turn "
                                 "finished; retry (another replica runs it)"}, status_code=503,
                                headers={"Retry-After": "1"})
        finally:
            in_flight.reset(marker)
            claimed.reset(held)
            journal.holding.reset(holding)

    upstream.set_claim_calls(gateway, upstream.ClaimCalls(reserve_or_note, calls.record, calls.release))
    route.endpoint, route.app = hook_endpoint, request_response(hook_endpoint)
    return True
