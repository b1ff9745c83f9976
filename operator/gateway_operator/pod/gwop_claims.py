"""The webhook claims this replica holds in the gateway's Redis store: a duplicate of a turn still in
flight is told to retry (503), not that it was deduplicated; a turn cut by the drain's end releases
its claim before the provider is answered, unless its agent had already answered (then it is
recorded: a retry must not run it again); a turn the fence stopped (gwop_leases) is answered 503
without touching Redis; the claims left by a stopped or killed process of this pod are released
(owner-checked) so the provider's retry runs them on another replica."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional

import gwop_contract as contract
import gwop_limits
import gwop_upstream as upstream
from gwop_log import say
from gwop_redis import release_claims_of, redis_client, store_client

if TYPE_CHECKING:  # the claims' holder; gwop_leases imports this module
    from gwop_leases import Leases

# {push prefix}hookidem-owner:<pod> (contract.owner_key) holds the token prefix of the pod's running gateway
# process (every claim it writes starts with it), so that the next process in the same pod (a container
# restarted after SIGKILL, OOM or a liveness kill: nothing ran to release its claims) releases what
# its predecessor still held. It lives two leases and is refreshed at each renewal round: a pod
# that is gone leaves no key behind, and its claims are gone by then anyway
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


def release_unfinished_claims(leases: "Leases", journal: Any) -> int:
    """Release, owner-checked, the claims this process still holds once the server has stopped: a
    turn cut by the drain's end (a cancelled handler never releases its claim in 0.1.16) would
    otherwise answer the provider's retries "in progress" for its lease, and what a held delivery
    may have left in Redis (``journal.maybe_claimed``). Each by its own token: nothing else is
    touched."""
    released = leases.release_all()
    store = upstream.redis_store(leases.gateway)
    if store is not None:
        for key, token in list(journal.maybe_claimed.items()):
            try:
                released += int(store.release(key, token))
            except Exception:  # noqa: BLE001 - Redis unusable: their lease ends them
                break
    return released


def release_predecessor_claims(redis: Optional[Mapping[str, Any]], backend: Optional[str], pod: str) -> int:
    """At start: the claims a killed earlier gateway process of this pod left (see contract.owner_key)."""
    if backend != "redis" or not redis or not pod:
        return 0
    prefix = str(redis.get("prefix") or "praison:push:")
    try:
        client = redis_client(redis)
        token = client.get(contract.owner_key(prefix, pod))
        released = release_claims_of(client, contract.store_key(prefix), token) if token else 0
    except Exception as exc:  # noqa: BLE001 - a Redis that does not answer now: the lease ends them
        say(f"releasing a predecessor's claims failed: {type(exc).__name__}")
        return 0
    if released:
        say(f"released {released} webhook claim(s) a killed predecessor in this pod left: their retries run")
    return released


async def record_owner(gateway: Any, start: "asyncio.Future[Any]", pod: str, leases: "Leases") -> None:
    """Once the gateway's idempotency store is built (0.1.16 builds it on the first webhook: building
    it earlier, before a new Redis answers, would fall back to SQLite), record this process's token
    prefix under this pod's name (contract.owner_key), for two leases; the renewal rounds refresh it."""
    while upstream.idempotency_store(gateway) is None and not start.done():
        await asyncio.sleep(0.2)
    store = upstream.redis_store(gateway)
    if store is None or not pod or not store.prefix.endswith(contract.STORE_KEY):
        return
    key = contract.owner_key(store.prefix[:-len(contract.STORE_KEY)], pod)
    leases.owner_key = key
    try:
        await asyncio.to_thread(store.client.set, key, leases.process, px=2 * leases.lease_ms)
    except Exception as exc:  # noqa: BLE001 - the lease still ends a dead process's claims
        say(f"recording the store's owner failed: {type(exc).__name__}")


def guard_claim_calls(gateway: Any, journal: Any, leases: "Leases", max_body_bytes: int,
                      on_loop: Callable[[Callable[[], Any]], Any]) -> bool:
    """The webhook path's guards, in the one order the pod (gwop_serve) and the protocol model
    (tests/harness/protocol_sim.py) both use: a renewal round that fails opens the outage journal's
    breaker (on the event loop: ``on_loop(callable)``), as a failed call of the store does; the
    journal around 0.1.16's claim calls, the leases around it, the in-flight answer around the
    route. Returns whether the route was found."""
    leases.on_failure = lambda: on_loop(journal.note_unusable)
    journal.wrap()
    leases.wrap()
    return answer_inflight_duplicates(gateway, journal, leases, max_body_bytes)


def answer_inflight_duplicates(gateway: Any, journal: Any, leases: "Leases", max_body_bytes: int) -> bool:
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
    # the agent has answered this request's turn: what follows (0.1.16 delivering the reply to
    # deliver_to) may still fail or be cut by the drain, and 0.1.16 then releases the key, so that
    # the provider's retry runs the agent again; the turn is recorded instead (the reply that did
    # not go out is said in the log: a second agent run would be the worse outcome)
    answered: "contextvars.ContextVar[bool]" = contextvars.ContextVar("gwop_answered", default=False)
    calls, endpoint = upstream.claim_calls(gateway), route.endpoint
    run_hook, dispatch = upstream.turn_calls(gateway)

    async def dispatch_noted(*args: Any, **kwargs: Any) -> Any:
        reply = await dispatch(*args, **kwargs)
        answered.set(True)   # awaited in the request's own task (no task between): its context
        return reply

    def release_unless_answered(key: str) -> None:
        if answered.get():
            say("a webhook turn's agent answered but what followed failed (its reply's delivery, or the drain "
                "cut it): recorded, not released, so that a retry does not run the agent again; its reply is "
                "not delivered")
            calls.record(key)
        else:
            calls.release(key)

    def reserve_or_note(key: str) -> bool:
        if calls.reserve(key):
            held = claimed.get(None)
            if held is not None:
                held.append(key)
            return True
        if journal.runs(key):  # this replica's turn of it still runs (admitted while Redis could not be asked)
            in_flight.set(True)
            return False
        store = upstream.redis_store(gateway)
        if store is not None and not journal.holding.get() and not journal.broken:
            try:
                recorded = store.is_recorded(key)
            except Exception:  # noqa: BLE001 - Redis just answered reserve; treat as in flight
                recorded = False
            if not recorded:
                in_flight.set(True)
        return False

    hooks = gwop_limits.GatewayHooks(gateway.get_hook)

    async def hook_endpoint(request: Any) -> Any:
        # a body past the bound (413), a delivery lacking a field its id template needs (400):
        # answered before the gateway reads it or claims anything
        refused = await gwop_limits.refusal(request, hooks, max_body_bytes)
        if refused is not None:
            return refused
        marker, held, holding = in_flight.set(False), claimed.set([]), journal.holding.set(False)
        ran = answered.set(False)
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
            if leases.fenced_of(claimed.get()):
                # the fence stopped this turn: its claim could expire before the turn ended, and
                # Redis has not confirmed it for most of a lease (asking it again here would hold
                # the event loop); the claim expires, and the provider's retry runs the message once
                for key in claimed.get():
                    leases.drop(key)
                return JSONResponse({"ok": False, "retry": True, "error": "this replica could not keep its claim "
                                     "on this delivery; retry (another replica runs it)"}, status_code=503,
                                    headers={"Retry-After": "5"})
            # the drain ended with this turn still running (uvicorn cancels it): release its claim
            # (owner-checked) before anything answers the provider, so that a retry sent the moment
            # it sees the answer already finds the key free, then say so; 0.1.16 releases nothing
            if answered.get():  # ... unless its agent had answered: recorded, the provider told so
                for key in claimed.get():
                    upstream.claim_calls(gateway).record(key)
                return JSONResponse({"ok": True, "action": "agent", "stopped_after_answer": True}, status_code=200)
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
            answered.reset(ran)

    upstream.set_claim_calls(gateway, upstream.ClaimCalls(reserve_or_note, calls.record, release_unless_answered))
    upstream.set_turn_calls(gateway, run_hook, dispatch_noted)
    route.endpoint, route.app = hook_endpoint, request_response(hook_endpoint)
    return True
