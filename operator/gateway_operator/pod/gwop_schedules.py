"""Scheduled jobs shared by the replicas. 0.1.16 runs a scheduler tick in every gateway process (every
15 s) over praisonaiagents' schedule store, a YAML file in the replica's own home: with N replicas
each one loads the ``schedules:`` of gateway.yaml and fires every job, so a daily report runs and is
delivered N times, and a job a user added in a chat lives only on the replica that served the chat.

With Redis (``push.redis``) the launcher gives every reader of the store (the tick, the declarative
loader, the chat tools) one store kept in Redis under ``<prefix>gwop-schedules``: praisonaiagents'
own store class and its own atomic claim (a due job's run advanced and leased under the store's
lock), with the lock a Redis key (``<prefix>gwop-schedules:lock``, taken with this process's token
for LOCK_MS) and the document written only while that lock is still this process's. A due job is
claimed by one replica, so it fires once; a replica killed while it runs a job loses that run
(the claim advanced the schedule: at most once, as the file store does). While Redis cannot be used
nothing is claimed, so nothing fires twice; the jobs due meanwhile fire at the next tick that can
claim them, or are recorded as missed past their misfire grace."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional

import gwop_upstream as upstream
from gwop_log import say
from gwop_redis import RELEASE_LUA, redis_client

DOC_KEY = "gwop-schedules"
LOCK_KEY = "gwop-schedules:lock"
LOCK_MS = 10_000          # the claim holds it for milliseconds; a holder stalled past this loses it
LOCK_WAIT_S = 0.5         # then the call fails (a claim claims nothing; the wait blocks the event loop)
SAY_EVERY_S = 60.0        # a Redis that stays unusable is said once a minute, not at every tick
# 0.1.16's tick calls the store from the gateway's event loop: a hung Redis holds every request of the
# replica for this long once per tick (15 s), so it is short; a claim that misses it claims nothing
# and the next tick tries again
TIMEOUT_S = 0.5
# write KEYS[2] only while KEYS[1] (the lock) still holds ARGV[1]: a holder that stalled past its lock
# and lost it to another replica writes nothing, so two claims of one job cannot both be saved
# take KEYS[1] for ARGV[1]: free, or already this process's (a SET whose answer timed out while Redis
# stalled still lands when it resumes, and would otherwise keep every claim of this replica out for LOCK_MS)
ACQUIRE_LUA = ("local v = redis.call('get', KEYS[1]) if v == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) "
               "return 1 end if v then return 0 end redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1")
WRITE_LUA = ("if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[2], ARGV[2]) return 1 "
             "else return 0 end")


class ScheduleStoreUnavailable(Exception):
    """Redis did not answer, or its lock stayed with another replica past LOCK_WAIT_S."""


class RedisScheduleDocument:
    """What the shared store keeps in Redis and how it is locked (the backend of
    ``gwop_upstream.shared_schedule_store``)."""

    def __init__(self, client: Any, prefix: str, pod: str = "") -> None:
        self.client, self.doc_key, self.lock_key = client, f"{prefix}{DOC_KEY}", f"{prefix}{LOCK_KEY}"
        self.token = f"{pod or 'gateway'}:{secrets.token_hex(12)}"
        self._held = threading.local()  # this thread's depth in the lock (the store re-enters it)
        self._said_at: Optional[float] = None
        self.lost_writes = 0

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        depth = getattr(self._held, "depth", 0)
        if depth == 0:
            self._acquire()
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth -= 1
            if self._held.depth == 0:
                try:
                    self.client.eval(RELEASE_LUA, 1, self.lock_key, self.token)
                except Exception:  # noqa: BLE001 - it expires within LOCK_MS
                    pass

    def _acquire(self) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                if int(self.client.eval(ACQUIRE_LUA, 1, self.lock_key, self.token, LOCK_MS) or 0):
                    return
            except Exception as exc:  # noqa: BLE001
                raise ScheduleStoreUnavailable(f"Redis did not answer ({type(exc).__name__})") from None
            if time.monotonic() > deadline:
                raise ScheduleStoreUnavailable(f"the schedule lock stayed taken for {LOCK_WAIT_S:g}s")
            time.sleep(0.05)

    def read(self) -> Dict[str, Any]:
        try:
            raw = self.client.get(self.doc_key)
        except Exception as exc:  # noqa: BLE001
            raise ScheduleStoreUnavailable(f"Redis did not answer ({type(exc).__name__})") from None
        doc = json.loads(raw) if raw else {}
        return doc if isinstance(doc, dict) else {}

    def write(self, doc: Mapping[str, Any]) -> bool:
        try:
            written = int(self.client.eval(WRITE_LUA, 2, self.lock_key, self.doc_key, self.token,
                                           json.dumps(doc, sort_keys=True, default=str)) or 0)
        except Exception as exc:  # noqa: BLE001 - not saved: the caller drops its claim
            self.failed(exc)
            return False
        if not written:
            self.lost_writes += 1
            say("the schedule lock was lost before the write (a stall past "
                f"{LOCK_MS // 1000}s): nothing saved, the claim dropped")
        return bool(written)

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        if self._said_at is None or now - self._said_at >= SAY_EVERY_S:
            self._said_at = now
            say(f"scheduled jobs: the shared store cannot be used ({exc}); nothing is claimed until it can")


def share_schedules(redis: Optional[Mapping[str, Any]], pod: str, home: str) -> Optional[Any]:
    """With Redis: the shared store, installed for every reader, and the jobs a user added in a chat
    on this replica before (its own file store) carried into it; else None (0.1.16's file store,
    per replica)."""
    if not redis:
        return None
    document = RedisScheduleDocument(redis_client(redis, timeout=TIMEOUT_S),
                                     str(redis.get("prefix") or "praison:push:"), pod)
    local_dir = Path(home) / ".praisonai" / "gwop-schedules"
    local_dir.mkdir(parents=True, exist_ok=True)
    store = upstream.shared_schedule_store(document, str(local_dir))
    carried = carry_local_jobs(store, Path(upstream.schedule_data_dir()))
    if carried:
        say(f"scheduled jobs: carried {carried} job(s) this replica's own store held into the shared store")
    upstream.install_schedule_store(store)
    return store


def carry_local_jobs(store: Any, data_dir: Path) -> int:
    """Jobs added in a chat before the store was shared sit in this replica's file store
    (``<data dir>/config.yaml``): each is added to the shared store (unless there already) and removed
    from the file, so that a later start does not bring back a job removed since. The declarative
    ones (``cfg-``) are not carried: the gateway loads those from gateway.yaml."""
    if not (data_dir / "config.yaml").exists():
        return 0
    carried = 0
    try:
        local = upstream.file_schedule_store(str(data_dir / "config.yaml"))
        for job in local.list():
            if upstream.declarative_job(job):
                continue
            if store.get(job.id) is None:
                store.add(job)
                carried += 1
            local.remove(job.id)
    except Exception as exc:  # noqa: BLE001 - Redis unusable: the file keeps them for the next start
        say(f"scheduled jobs: this replica's own jobs were not carried ({type(exc).__name__}); the next start tries again")
    return carried
