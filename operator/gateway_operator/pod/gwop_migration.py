"""The switch from one SQLite replica to Redis: the one Redis-backed replica the operator starts with
the single SQLite replica's state volume still mounted copies that replica's dedup records into
Redis before the gateway starts, then writes the marker the operator waits for before a second
replica takes traffic."""

from __future__ import annotations

import os
import time
from typing import Any, List, Mapping, Optional, Tuple

import gwop_contract as contract
from gwop_log import say
from gwop_redis import redis_client

# praisonai-bot 0.1.16's per-replica store (Path.home()/.praisonai/state/hook_idempotency.sqlite)
# and its Redis layout (push.redis.prefix + "hookidem:" + key); a record lives RECORD_TTL_SECONDS unless the
# launcher says otherwise (its record_ttl_seconds)
SQLITE_STORE = (".praisonai", "state", "hook_idempotency.sqlite")
RECORD_TTL_SECONDS = float(contract.GATEWAY_RECORD_TTL_SECONDS)
# once this replica's SQLite records are in Redis, contract.migrated_key is set (no TTL) to the operator's
# token (contract.SQLITE_MIGRATION_ENV): its probe reads it before it lets a second Redis-backed replica take traffic


def migrate_sqlite_records(sqlite_path: str, client: Any, prefix: str, now: float, token: str,
                           ttl: float = RECORD_TTL_SECONDS) -> Tuple[int, int]:
    """Copy the webhooks a single SQLite replica admitted into the Redis store, each with the TTL it
    has left (``SET NX PX``: a record Redis already holds is kept), and mark the prefix migrated.
    In-flight rows are skipped (their turn never finished: the provider's retry should run it).
    Returns (copied, already there)."""
    import sqlite3
    rows: List[Tuple[str, float]] = []
    if os.path.exists(sqlite_path):
        conn = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True, timeout=10)
        try:
            rows = [(str(k), float(ts)) for k, ts in conn.execute(
                "SELECT key, ts FROM hook_idempotency WHERE status = 'recorded'")]
        except sqlite3.DatabaseError:
            rows = []  # no table yet: nothing was admitted
        finally:
            conn.close()
    copied = kept = 0
    for key, ts in rows:
        left_ms = int((ts + ttl - now) * 1000)
        if left_ms <= 0:
            continue
        if client.set(contract.store_key(prefix, key), "recorded", nx=True, px=left_ms):
            copied += 1
        else:
            kept += 1
    client.set(contract.migrated_key(prefix), token)
    return copied, kept


MIGRATION_WAIT_SECONDS = 120.0  # for a Redis that starts with the switch (a new managed Redis)


class MigrationPending(Exception):
    """The records could not reach Redis yet: exit 75, so the kubelet restarts the container and
    it tries again (the operator holds the other replicas back meanwhile)."""


def migrate_before_start(redis: Optional[Mapping[str, Any]], backend: Optional[str], home: str,
                         token: str, wait: float = MIGRATION_WAIT_SECONDS, ttl: float = RECORD_TTL_SECONDS) -> None:
    """At start-up of the one Redis-backed replica the operator runs with the single SQLite
    replica's state volume still mounted (``token``: its ``SQLITE_MIGRATION_ENV``, empty
    otherwise), bring that replica's records into Redis, then write ``token`` as the marker the
    operator waits for before a second replica takes traffic. The Redis often starts with the
    switch (a managed Redis enabled in the same change), so it is tried for ``wait`` seconds. ``ttl``: how long
    a record lives (the launcher's record_ttl_seconds; each copied record keeps what is left of it)."""
    if backend != "redis" or not redis or not token:
        return
    path = os.path.join(home, *SQLITE_STORE)
    deadline = time.monotonic() + wait
    while True:
        try:
            client = redis_client(redis)
            prefix = str(redis.get("prefix") or "praison:push:")
            copied, kept = migrate_sqlite_records(path, client, prefix, time.time(), token, ttl)
            say(f"migrated the single replica's SQLite dedup records to Redis: {copied} copied, {kept} already there")
            return
        except Exception as exc:  # noqa: BLE001 - a Redis still starting: try again, bounded
            if time.monotonic() > deadline:
                raise MigrationPending(f"the SQLite dedup records could not reach Redis within {wait:g}s "
                                       f"({type(exc).__name__}); restarting to try again") from None
            time.sleep(2)


# --------------------------------------------------------------------------
# Shared session history for webhook turns (issue 18: conversations must not split)
# --------------------------------------------------------------------------

