"""The launcher's own Redis connections (the migration, the shared sessions, the claims a predecessor
left) and the owner-checked delete they share. redis-py only; the gateway's store keeps its own
client (gwop_upstream.RedisStore)."""

from __future__ import annotations

import time
from typing import Any, Mapping

from gwop_log import say

# delete KEYS[1] only while it still holds ARGV[1] (a claim or lock token)
RELEASE_LUA = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
RELEASE_BUDGET_SECONDS = 5.0   # scanning for and releasing this replica's unfinished claims


def redis_client(redis: Mapping[str, Any], timeout: float = 5.0) -> Any:
    import redis as redis_py
    if "url" in redis:
        return redis_py.Redis.from_url(str(redis["url"]), socket_timeout=timeout, socket_connect_timeout=timeout,
                                       decode_responses=True)
    return redis_py.Redis(host=redis["host"], port=int(redis.get("port", 6379)), db=int(redis.get("db", 0)),
                          password=redis.get("password") or None, socket_timeout=timeout,
                          socket_connect_timeout=timeout, decode_responses=True)


def store_client(redis: Mapping[str, Any]) -> Any:
    """A client made as the gateway's Redis idempotency store makes its own (0.1.16's
    ``_build_redis_client``: ``from_url`` with the URL's own socket timeouts, or host/port/db/password;
    decoded replies), without the PING that client is sent before the store is built."""
    import redis as redis_py
    if "url" in redis:
        return redis_py.Redis.from_url(str(redis["url"]), decode_responses=True)
    return redis_py.Redis(host=redis["host"], port=int(redis.get("port", 6379)), db=int(redis.get("db", 0)),
                          password=redis.get("password") or None, decode_responses=True)


# delete KEYS[1] only while its value starts with ARGV[1] (a process's token prefix: any of its claims)
RELEASE_PREFIX_LUA = ("local v = redis.call('get', KEYS[1]); "
                      "if v and string.sub(v, 1, string.len(ARGV[1])) == ARGV[1] then return redis.call('del', KEYS[1]) "
                      "else return 0 end")


def release_claims_of(client: Any, prefix: str, owner: str, budget: float = RELEASE_BUDGET_SECONDS) -> int:
    """Delete every key under ``prefix`` whose value starts with ``owner`` (a process's token prefix:
    each of its claims has a token of its own), compare-and-delete, within ``budget`` seconds; the
    values are read a scan batch at a time and only the owner's are sent the delete (an owner
    shorter than a token prefix is refused: it would match other processes' claims). A failure is
    logged, never raised."""
    deadline, released = time.monotonic() + budget, 0
    if len(owner) < 8:
        return 0
    try:
        batch: list = []
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                released += _release_batch(client, batch, owner)
                batch = []
            if time.monotonic() > deadline:
                say("releasing unfinished claims: out of time; the rest expire with their lease")
                return released
        released += _release_batch(client, batch, owner)
    except Exception as exc:  # noqa: BLE001 - say so and go on
        say(f"releasing unfinished claims failed: {type(exc).__name__}")
    return released


def _release_batch(client: Any, keys: list, owner: str) -> int:
    if not keys:
        return 0
    pipe = client.pipeline(transaction=False)   # GETs in one round trip (no MGET: the ACL grants GET)
    for key in keys:
        pipe.get(key)
    values = pipe.execute()
    return sum(int(client.eval(RELEASE_PREFIX_LUA, 1, key, owner) or 0)
               for key, value in zip(keys, values) if isinstance(value, str) and value.startswith(owner))
