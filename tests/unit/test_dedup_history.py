"""A Redis that forgets is caught (issue 18): the probe's canary and INFO/CONFIG reads against a
real redis-server, and the pure history and conditions they feed."""
from __future__ import annotations

import asyncio

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import conditions
from gateway_operator.core.conditions import Facts
from gateway_operator.core.dedup_history import RECORD_TTL_SECONDS, History, StoreFacts, assess
from gateway_operator.core.probe_result import ProbeResult
from harness.redis_server import RedisServer
from harness.wait import until

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


def test_a_failover_to_a_replica_opens_the_window_a_restart_with_persistence_does_not() -> None:
    """Two real redis-servers, the second a replica of the first: the canary is replicated, so
    only the replication ids tell that the server now answering was promoted (and may lack the
    last records it had not received). The primary restarted with its AOF is no failover."""
    primary = RedisServer(password="pw", persistent=True).start()
    replica = RedisServer(password="pw", persistent=True).start()
    try:
        primary.admin("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        replica.admin("CONFIG", "SET", "masterauth", "pw")
        first = probe(primary).store
        assert first is not None and first.replid and first.replid2 is None
        history = assess(History(), first, T0)
        replica.admin("REPLICAOF", "127.0.0.1", str(primary.port))
        in_sync = lambda: replica.client().info("replication").get("master_link_status") == "up"  # noqa: E731
        until(in_sync, timeout=20, what="the replica in sync")
        # a replica attaching gave the primary a new replication id: remembered, nothing lost
        attached = probe(primary).store
        assert attached is not None and attached.run_id == first.run_id and attached.replid != first.replid
        history = assess(history, attached, T0 + 2)
        assert history.repl_id == attached.replid and not history.lost(T0 + 2)

        # the primary restarted with persistence: a new run_id and replication id, no second id
        primary.restart()
        until(in_sync, timeout=20, what="the replica in sync again")
        restarted = probe(primary).store
        assert restarted is not None and restarted.run_id != first.run_id and restarted.canary == first.canary
        history = assess(history, restarted, T0 + 4)
        assert not history.lost(T0 + 4), history.lost_why

        # the primary dies, the replica is promoted (as Sentinel would) and now answers
        primary.stop()
        replica.admin("REPLICAOF", "NO", "ONE")
        promoted = probe(replica).store
        assert promoted is not None and promoted.canary == first.canary  # the canary alone sees nothing
        failed = assess(history, promoted, T0 + 6)
        assert failed.lost(T0 + 6) and failed.lost_why.startswith("Redis failed over to a replica"), failed
        assert failed.repl_id == promoted.replid and History.from_status(failed.status()) == failed
        shown = facts(failed, promoted, T0 + 7)
        assert (shown["ExactlyOnceAdmission"].status, shown["ExactlyOnceAdmission"].reason) == \
            ("False", "DedupHistoryLost")
        assert "failed over" in shown["ExactlyOnceAdmission"].message
        # the next probe of the same promoted server opens nothing new
        again = assess(failed, probe(replica).store, T0 + 8)
        assert again.lost_at == T0 + 6
    finally:
        primary.close()
        replica.close()


def test_redis_close_to_maxmemory_is_warned_before_it_refuses_records(redis_server: RedisServer) -> None:
    """A real redis-server whose maxmemory is set just above what it uses: RedisDurable says
    RedisNearlyFull from 85% on, keeps saying it down to 80% (no flip at every probe), and the
    message, read at every probe, names the limit, not the moving figure."""
    client = redis_server.client()
    client.set("session-like", "x" * 8_000_000)  # bulk, so that a connection's buffers do not move the share
    used = int(client.info("memory")["used_memory"])
    redis_server.admin("CONFIG", "SET", "maxmemory", str(int(used / 0.9)))
    store = probe(redis_server).store
    assert store is not None and store.maxmemory and store.used_memory
    share = store.memory_share()
    assert share is not None and 0.85 <= share < 1.0, share
    warned = facts(History(), store, T0)["RedisDurable"]
    assert (warned.status, warned.reason) == ("False", "RedisNearlyFull")
    assert "MiB" in warned.message and "maxmemory" in warned.message

    def durable(used_share: float, was: bool) -> str:
        at = StoreFacts("c", False, "r", True, "noeviction", used_memory=int(used_share * 1000), maxmemory=1000)
        f = Facts(generation=1, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
                  redis_configured=True, probe=ProbeResult(True, reasons.PROBE_SUCCEEDED, "ok", at),
                  dedup=History(), now=T0, memory_warned=was)
        return next(c.reason for c in conditions.compute(f) if c.type == "RedisDurable")
    assert durable(0.84, was=False) == "DurableStore"
    assert durable(0.84, was=True) == "RedisNearlyFull"   # holds down to 80%
    assert durable(0.79, was=True) == "DurableStore"
    no_limit = StoreFacts("c", False, "r", True, "noeviction", used_memory=10**9, maxmemory=0)
    assert no_limit.memory_share() is None
