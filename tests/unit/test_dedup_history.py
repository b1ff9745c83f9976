"""A Redis that forgets is caught (issue 18): the probe's canary and INFO/CONFIG reads against a
real redis-server, and the pure history and conditions they feed."""
from __future__ import annotations

import asyncio

from gateway_operator import conditions, reasons
from gateway_operator.conditions import Facts
from gateway_operator.dedup_history import RECORD_TTL_SECONDS, History, StoreFacts, assess
from gateway_operator.redis_probe import ProbeResult, Prober
from gateway_operator.redis_target import RedisTarget
from harness.redis_server import RedisServer

T0 = 1_800_000_000.0


def probe(server: RedisServer) -> ProbeResult:
    target = RedisTarget("127.0.0.1", server.port, 0, False, "gwop:ns:bot:", None)
    return asyncio.run(Prober().probe("ns", target, server.password, 2))


def facts(history: History, store: StoreFacts | None, now: float) -> dict[str, conditions.Condition]:
    result = ProbeResult(True, reasons.PROBE_SUCCEEDED, "ok", store)
    f = Facts(generation=1, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
              redis_configured=True, running_replicas=3, ready_replicas=3, updated_replicas=3, rollout_observed=True,
              probe=result, health=(), dedup=history, now=now)
    return {c.type: c for c in conditions.compute(f)}


def test_a_flush_and_a_restart_without_persistence_are_seen_by_the_canary(redis_server: RedisServer) -> None:
    first = probe(redis_server).store
    assert first is not None and first.canary_created
    history = assess(History(), first, T0)
    assert history.canary == first.canary and not history.lost(T0)  # the first canary is no loss

    again = probe(redis_server).store
    assert again is not None and not again.canary_created and again.canary == first.canary
    history = assess(history, again, T0 + 2)
    assert not history.lost(T0 + 2)

    redis_server.client().flushall()
    flushed = probe(redis_server).store
    assert flushed is not None and flushed.canary_created and flushed.canary != first.canary
    lost = assess(history, flushed, T0 + 4)
    assert lost.lost(T0 + 4) and lost.lost_why == "the operator's canary key vanished"
    assert lost.lost_until == T0 + 4 + RECORD_TTL_SECONDS

    # the test server persists nothing (--save "" --appendonly no): a restart is a loss by two signs
    assert flushed.persistent is False and flushed.maxmemory_policy == "noeviction" and flushed.run_id
    redis_server.restart()
    restarted = probe(redis_server).store
    assert restarted is not None and restarted.run_id != flushed.run_id and restarted.canary_created
    assert assess(lost, restarted, T0 + 10).lost_at == T0 + 10  # the window starts again


def test_a_new_run_id_without_persistence_is_a_loss_even_if_the_canary_came_back() -> None:
    before = History(canary="c1", run_id="r1")
    same_canary = StoreFacts("c1", False, run_id="r2", persistent=False, maxmemory_policy="noeviction")
    assert assess(before, same_canary, T0).lost_why == "Redis restarted (a new run_id) without persistence"
    persistent = StoreFacts("c1", False, run_id="r2", persistent=True, maxmemory_policy="noeviction")
    assert not assess(before, persistent, T0).lost(T0)
    refused = StoreFacts("c1", False, run_id=None, persistent=None, maxmemory_policy=None, refused=("INFO", "CONFIG GET"))
    kept = assess(before, refused, T0)
    assert not kept.lost(T0) and kept.run_id == "r1"  # an INFO that is refused forgets nothing


def test_the_lost_window_shows_in_conditions_and_clears_after_one_ttl() -> None:
    store = StoreFacts("c2", True, run_id="r1", persistent=True, maxmemory_policy="noeviction")
    lost = assess(History(canary="c1", run_id="r1"), store, T0)
    during = facts(lost, store, T0 + 60)
    assert (during["IdempotencyDegraded"].status, during["IdempotencyDegraded"].reason) == ("True", "DedupHistoryLost")
    assert (during["ExactlyOnceAdmission"].status, during["ExactlyOnceAdmission"].reason) == ("False", "DedupHistoryLost")
    message = during["IdempotencyDegraded"].message
    assert "2027-01-15T08:00:00Z" in message and "2027-01-16T08:00:00Z" in message and "86400s" in message, message
    # status keeps it across an operator failover, and it clears by itself one TTL later
    assert History.from_status(lost.status()) == lost
    after = assess(lost, StoreFacts("c2", False, "r1", True, "noeviction"), T0 + RECORD_TTL_SECONDS)
    cleared = facts(after, store, T0 + RECORD_TTL_SECONDS)
    assert cleared["IdempotencyDegraded"].status == "False" and cleared["ExactlyOnceAdmission"].status == "Unknown"
    assert "dedupHistoryLost" not in after.status()


def test_redis_durable_says_what_can_lose_records() -> None:
    def durable(store: StoreFacts) -> tuple[str, str]:
        c = facts(History(), store, T0)["RedisDurable"]
        return c.status, c.reason
    assert durable(StoreFacts("c", False, "r", True, "noeviction")) == ("True", "DurableStore")
    assert durable(StoreFacts("c", False, "r", True, "volatile-lru")) == ("False", "EvictingMaxmemoryPolicy")
    assert durable(StoreFacts("c", False, "r", False, "noeviction")) == ("False", "PersistenceOff")
    refused = StoreFacts("c", False, None, None, None, ("INFO", "CONFIG GET"))
    assert durable(refused) == ("Unknown", "RedisConfigNotReadable")
    assert "INFO and CONFIG GET" in facts(History(), refused, T0)["RedisDurable"].message


def test_a_probe_that_must_not_wait_is_not_sent_while_the_namespaces_slots_are_taken(redis_server: RedisServer) -> None:
    """Prober(per_namespace=1): while one probe of namespace ns is in flight (Redis paused, so it
    hangs), a second that must not wait returns None at once; another namespace still probes."""
    target = RedisTarget("127.0.0.1", redis_server.port, 0, False, "gwop:ns:bot:", None)

    async def go() -> tuple[ProbeResult | None, ProbeResult | None, float]:
        prober = Prober(per_namespace=1)
        redis_server.pause()  # the first probe hangs until its timeout
        try:
            hanging = asyncio.create_task(prober.probe("ns", target, redis_server.password, 1))
            await asyncio.sleep(0.2)
            started = asyncio.get_running_loop().time()
            skipped = await prober.probe("ns", target, redis_server.password, 1, wait=False)
            took = asyncio.get_running_loop().time() - started
            await hanging
        finally:
            redis_server.resume()
        other = await prober.probe("other", target, redis_server.password, 2, wait=False)
        return skipped, other, took
    skipped, other, took = asyncio.run(go())
    assert skipped is None and took < 0.1
    assert other is not None and other.ok
