"""Shared session history for webhook turns: each turn runs on its conversation's history, kept in
Redis and locked per session, so a conversation alternating between replicas sees its whole
history and never another's. 0.1.16 runs every webhook turn of a hook on one Agent whose one
history mixes every conversation, and offers no hook for this: the gateway's turn calls are
wrapped through gwop_upstream."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import copy
import os
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import gwop_upstream as upstream
from gwop_config import ConfigError
from gwop_contract import SESSION_KEY_ENV
from gwop_log import say
from gwop_redis import RELEASE_LUA, redis_client

SESSION_LOCK_LEASE_MS = 30_000     # renewed while the turn runs; a dead replica's lock goes after it
SESSION_LOCK_WAIT_SECONDS = 300.0  # a turn waits this long for its session's earlier turn, then is refused
# extend KEYS[1]'s expiry only while it still holds ARGV[1] (this turn's session lock)
RENEW_LOCK_LUA = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
                  "else return 0 end")


class SessionBusy(Exception):
    """A turn whose session's earlier turn still holds the lock past SESSION_LOCK_WAIT_SECONDS: it
    fails (the gateway answers 500 and releases the webhook's claim), and the provider's retry runs
    it once the earlier turn is done, never beside it on the same history."""
DEFAULT_MAX_SESSIONS = 10_000      # api.SessionsSpec.max_sessions's default



class RedisHistoryStore:
    """The Redis list behind one session's history, as the package's session stores are called
    (``add_message``, ``get_chat_history``), so that its own ``EncryptedSessionStore`` can wrap it:
    ``{prefix}session:<sha256 of the key>``, each append one MULTI (RPUSH, LTRIM to ``max_messages``,
    EXPIRE ``ttl``).

    The sessions themselves are bounded too (``max_sessions``), so that session history cannot
    take the memory the dedup records need (under ``noeviction`` a full Redis refuses new records):
    the same MULTI notes the session in ``{prefix}sessions`` (a sorted set by last append, entries
    older than ``ttl`` dropped) and counts it; past the bound the least recently used histories are
    deleted. Two replicas past the bound at once may each delete one: at most ``max_sessions``."""

    def __init__(self, client: Any, prefix: str, max_messages: int, ttl: int,
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.client, self.prefix, self.max_messages, self.ttl = client, prefix, max_messages, ttl
        self.max_sessions = max(1, max_sessions)
        self.index = f"{prefix}sessions"

    def key(self, session_id: str) -> str:
        import hashlib
        return f"{self.prefix}session:{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"

    def add_message(self, session_id: str, role: str, content: str, metadata: Any = None, **_: Any) -> bool:
        import json
        key, now = self.key(session_id), time.time()
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, json.dumps({"role": role, "content": content}))
        pipe.ltrim(key, -self.max_messages, -1)
        pipe.expire(key, self.ttl)
        pipe.zadd(self.index, {key: now})
        pipe.zremrangebyscore(self.index, "-inf", now - self.ttl)  # expired histories
        pipe.expire(self.index, self.ttl)
        pipe.zcard(self.index)
        over = pipe.execute()[-1] - self.max_sessions
        if over > 0:
            self.evict(over)
        return True

    def evict(self, count: int) -> int:
        """Delete the ``count`` least recently used histories; returns how many went."""
        oldest = [member for member, _ in self.client.zpopmin(self.index, count)]
        if oldest:
            self.client.delete(*oldest)
            say(f"{len(oldest)} least recently used session histories deleted: more than {self.max_sessions} "
                "sessions (spec.sessions.maxSessions)")
        return len(oldest)

    def get_chat_history(self, session_id: str, max_messages: Optional[int] = None) -> List[Dict[str, Any]]:
        import json
        rows = [json.loads(raw) for raw in self.client.lrange(self.key(session_id), 0, -1)]
        return rows[-max_messages:] if max_messages else rows


class HistoryUnavailable(Exception):
    """The turn's shared history cannot be read now, within the fail-closed window: the turn is not
    run on this replica's (possibly stale) copy; the gateway answers the delivery 500 and releases
    its claim, and the provider's retry runs it with the whole history."""


class SharedSessions:
    """One history per webhook session (the hook's ``session_key``), kept in Redis under
    ``{prefix}session:<sha256 of the key>`` as a list of JSON messages, bounded to ``max_messages``
    (LTRIM) and ``ttl_seconds`` (EXPIRE), each append one MULTI. A turn of a session takes the
    session's lock (``{prefix}session-lock:<hash>``, SET NX PX with its own token, renewed while it
    runs, released owner-checked), so turns of one conversation run one after another on any
    replica and each sees every earlier one. While Redis cannot be used the turn runs on this
    replica's last copy of the session's history (kept per session, bounded like the shared one;
    never the hook agent's own, which 0.1.16 shares between every session of the hook) and the
    next turn tries Redis again."""

    LOCAL_SESSIONS = 1000  # the sessions whose last history a replica keeps for an outage
    SKIP_SECONDS = 2.0     # after a failed Redis call, turns use the replica's copy this long

    def __init__(self, client: Any, prefix: str, max_messages: int, ttl_seconds: int, key: str = "",
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        """``key``: a Fernet key; the history is then stored through the package's own
        ``EncryptedSessionStore`` (content encrypted; roles and the key's hash stay readable)."""
        self.client, self.prefix = client, prefix
        self.inner = RedisHistoryStore(client, prefix, max(2, max_messages), max(60, ttl_seconds), max_sessions)
        self.store: Any = self.inner
        if key:
            from praisonaiagents.session.encrypted_store import EncryptedSessionStore, SessionEncryptionError
            try:
                self.store = EncryptedSessionStore(self.inner, key)
            except SessionEncryptionError:
                raise ConfigError(f"{SESSION_KEY_ENV} (spec.sessions.encryptionKeySecretRef) is not a Fernet key: "
                                  "32 url-safe base64-encoded bytes (or cryptography is missing)") from None
        # like the webhook's fail-closed window: from the first failed call, a turn whose history
        # cannot be read is refused (retried by the provider) this long before it runs on the copy
        self.fail_closed = 0.0
        self._failing_since: Optional[float] = None  # monotonic, from the first failed call until one succeeds
        self._past_window = False
        # when the webhook path's own window began (the outage journal's), if it did: one window per
        # outage, from the first failure either side saw, never two in a row
        self.other_window: Callable[[], Optional[float]] = lambda: None
        self.local: "collections.OrderedDict[str, List[Dict[str, Any]]]" = collections.OrderedDict()
        self._local_locks: Dict[str, List[Any]] = {}  # session -> [asyncio.Lock, turns holding or waiting]
        self._skip_until = 0.0
        # what turns added while the shared history could not be written (a turn on this replica's
        # copy, an append that failed), per session in order: written back once Redis takes it,
        # so the session's next turns on any replica see it (bounded like ``local``)
        self.unsaved: "collections.OrderedDict[str, List[Dict[str, Any]]]" = collections.OrderedDict()
        self._saver: "Optional[asyncio.Future[None]]" = None
        self._unsaved_lock = threading.Lock()  # the loop adds, a worker thread writes back
        # the session locks' renewals, on threads of their own: never behind the agent's blocking
        # work in the event loop's default executor (a busy pool let a lock expire under its turn)
        self._renewals = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="gwop-session-lock")
        self.locks_lost = 0  # turns whose session lock went while they ran (said in the log)

    def _remember(self, session: str, history: List[Dict[str, Any]]) -> None:
        self.local[session] = history[-self.inner.max_messages:]
        self.local.move_to_end(session)
        while len(self.local) > self.LOCAL_SESSIONS:
            self.local.popitem(last=False)

    async def _run_local(self, session: str, agent: Any, dispatch: Any, content: str, *args: Any, **kwargs: Any) -> Any:
        """One turn on this replica's copy of the session's history; turns of one session run one
        after another here too (a lock per session, dropped when no turn holds or waits for it).
        A turn that came here because Redis failed, and waited for the lock until Redis may be used
        again, runs on the shared history after all."""
        self._start_saving()
        entry = self._local_locks.setdefault(session, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                if self.client is None or time.monotonic() < self._skip_until:
                    history = list(self.local.get(session, ()))
                    turn_agent = _turn_copy(agent, history)
                    result = await dispatch(turn_agent, content, *args, **kwargs)
                    self._remember(session, [dict(m) for m in turn_agent.chat_history])
                    if self.client is not None:  # shared history: what this turn added goes back there
                        self._keep_unsaved(session, list(turn_agent.chat_history)[len(history):])
                    return result
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._local_locks.pop(session, None)
        return await self.run(session, agent, dispatch, content, *args, **kwargs)

    def _keys(self, session: str) -> Tuple[str, str]:
        key = self.inner.key(session)
        return key, key.replace(f"{self.prefix}session:", f"{self.prefix}session-lock:", 1)

    def load(self, session: str) -> List[Dict[str, Any]]:
        return [{"role": m.get("role"), "content": m.get("content")} for m in self.store.get_chat_history(session)]

    def append(self, session: str, messages: List[Dict[str, Any]]) -> None:
        for m in messages:
            if m.get("role") and isinstance(m.get("content"), str):
                self.store.add_message(session, str(m["role"]), m["content"])

    async def _lock(self, session: str, token: str) -> bool:
        _, lock = self._keys(session)
        deadline = asyncio.get_running_loop().time() + SESSION_LOCK_WAIT_SECONDS
        pause = 0.02
        while not await asyncio.to_thread(self.client.set, lock, token, nx=True, px=SESSION_LOCK_LEASE_MS):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        return True

    async def _renew(self, session: str, token: str) -> None:
        """Every third of the lease, while the turn runs: a failed renewal (Redis paused) is tried
        again at the next one, so the lock outlives an outage shorter than its lease. A lock found
        gone is said (the turn goes on: a turn of the same session elsewhere may read the history
        without this one's messages) and counted."""
        _, lock = self._keys(session)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SESSION_LOCK_LEASE_MS / 3000)
            try:
                renewed = await loop.run_in_executor(self._renewals, self.client.eval, RENEW_LOCK_LUA, 1, lock,
                                                     token, SESSION_LOCK_LEASE_MS)
            except Exception:  # noqa: BLE001 - the next renewal tries again
                continue
            if not int(renewed or 0):
                self.locks_lost += 1
                say(f"a session's lock went while its turn ran ({self.locks_lost} so far): a turn of the same "
                    "session on another replica may have read its history without this turn's messages")
                return

    async def run(self, session: str, agent: Any, dispatch: Any, content: str, *args: Any, **kwargs: Any) -> Any:
        """One turn of ``session`` on a copy of ``agent`` whose history is the session's."""
        import secrets
        if self.client is None:  # store: replica
            return await self._run_local(session, agent, dispatch, content, *args, **kwargs)
        if time.monotonic() < self._skip_until:  # Redis just failed
            self._refuse_while_closed()
            return await self._run_local(session, agent, dispatch, content, *args, **kwargs)
        token = secrets.token_hex(16)
        _, lock = self._keys(session)
        locked = False
        self._start_saving()
        try:
            locked = await self._lock(session, token)
            if session in self.unsaved and locked:  # this session's earlier turns first
                await asyncio.to_thread(self.save_unsaved, session)
            history = await asyncio.to_thread(self.load, session) if locked else []
        except Exception as exc:  # noqa: BLE001 - Redis unusable: this turn runs on this replica's copy
            self._note_failure(exc)
            if locked:  # taken, then the history could not be read: let the next turn have it
                await self._unlock(lock, token)
            self._refuse_while_closed()
            return await self._run_local(session, agent, dispatch, content, *args, **kwargs)
        if not locked:  # an earlier turn of the session still runs: never two turns on one history
            raise SessionBusy(f"an earlier turn of this conversation has held its lock for "
                              f"{SESSION_LOCK_WAIT_SECONDS:g}s; retry later")
        renew = asyncio.ensure_future(self._renew(session, token))
        try:
            turn_agent = _turn_copy(agent, history)
            result = await dispatch(turn_agent, content, *args, **kwargs)
            self._remember(session, [dict(m) for m in turn_agent.chat_history])
            added = list(turn_agent.chat_history)[len(history):]
            try:
                await asyncio.to_thread(self.append, session, added)
                self._note_recovery()
            except Exception as exc:  # noqa: BLE001 - written back once Redis takes it
                self._keep_unsaved(session, added)
                self._note_failure(exc)
            return result
        finally:
            if renew is not None:
                renew.cancel()
            if locked:
                await self._unlock(lock, token)

    def _keep_unsaved(self, session: str, messages: List[Dict[str, Any]], first: bool = False) -> None:
        with self._unsaved_lock:
            kept = self.unsaved.setdefault(session, [])
            at = 0 if first else len(kept)  # a write-back that failed goes before what came since
            kept[at:at] = [dict(m) for m in messages]
            del kept[:-self.inner.max_messages]
            self.unsaved.move_to_end(session)
            while len(self.unsaved) > self.LOCAL_SESSIONS:
                self.unsaved.popitem(last=False)

    def save_unsaved(self, session: Optional[str] = None) -> int:
        """Append what turns added while the shared history could not be written (one session, or
        every one); raises on a failed append (the rest is tried again later). Returns the sessions
        written back."""
        written = 0
        for name in [session] if session is not None else list(self.unsaved):
            with self._unsaved_lock:
                messages = self.unsaved.pop(name, None)
            if not messages:
                continue
            try:
                self.append(name, _not_yet_in(self.load(name), messages))
            except Exception:
                self._keep_unsaved(name, messages, first=True)  # before what came since
                raise
            written += 1
        return written

    def _start_saving(self) -> None:
        if self._saver is None and self.client is not None:
            self._saver = asyncio.ensure_future(self._keep_saving())

    async def _keep_saving(self) -> None:
        """Every second while something is unsaved: write it back (off the event loop)."""
        while True:
            await asyncio.sleep(1.0)
            if not self.unsaved or time.monotonic() < self._skip_until:
                continue
            try:
                written = await asyncio.to_thread(self.save_unsaved)
                if written:
                    say(f"wrote back to the shared history what turns of {written} session(s) added while it "
                        "could not be written")
                self._note_recovery()
            except Exception as exc:  # noqa: BLE001 - still unusable: the next round
                self._note_failure(exc)

    async def _unlock(self, lock: str, token: str) -> None:
        """Release the session's lock if it is still ours (compare-and-delete)."""
        try:
            await asyncio.to_thread(self.client.eval, RELEASE_LUA, 1, lock, token)
        except Exception:  # noqa: BLE001 - the lease ends it
            pass

    def _refuse_while_closed(self) -> None:
        """Within the window (from the first failure either side saw) a turn is refused; once the
        window has passed, turns run on the replica's copy until Redis answers again (no second
        window for the same outage)."""
        starts = [t for t in (self._failing_since, self.other_window()) if t is not None]
        if not starts or self._past_window:
            return
        if time.monotonic() - min(starts) >= self.fail_closed:
            self._past_window = True
            return
        raise HistoryUnavailable("the conversation's shared history cannot be read now; retry")

    def _note_failure(self, exc: BaseException) -> None:
        self._skip_until = time.monotonic() + self.SKIP_SECONDS
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            say(f"shared session history unavailable ({type(exc).__name__}): turns use this replica's history "
                "until Redis answers again")

    def _note_recovery(self) -> None:
        """A call succeeded: the next turn asks Redis again (its copy here may lack what other
        replicas added), even within the SKIP_SECONDS of the last failure."""
        if self._failing_since is not None:
            say("shared session history available again")
        self._failing_since, self._past_window, self._skip_until = None, False, 0.0


def _not_yet_in(history: List[Dict[str, Any]], messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """What of ``messages`` the history still lacks: an append that timed out while Redis was paused
    still runs when it resumes (the command was queued), up to the message it had sent, so the part
    of ``messages`` the history already ends with (or all of it, found in a row) is left out."""
    want = [(m.get("role"), m.get("content")) for m in messages]
    have = [(m.get("role"), m.get("content")) for m in history]
    if want and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
        return []
    done = next((k for k in range(min(len(want), len(have)), 0, -1) if have[-k:] == want[:k]), 0)
    return messages[done:]


def _turn_copy(agent: Any, history: List[Dict[str, Any]]) -> Any:
    """A shallow copy of the hook's one Agent with a history of its own: 0.1.16 runs every webhook
    turn on that shared instance, so its in-memory history mixes every session of the replica. The
    copy shares the LLM client and tools; only its history is its own."""
    turn = copy.copy(agent)
    upstream.set_agent_history(turn, history)
    return turn


def share_sessions(gateway: Any, settings: Optional[Mapping[str, Any]], redis: Optional[Mapping[str, Any]],
                   fail_closed_seconds: float = 0.0) -> Optional["SharedSessions"]:
    """Wrap the gateway's webhook path so that each turn runs on its session's shared history
    (what 0.1.16 offers no hook for: ``_run_hook`` resolves the session key and then calls the
    static ``_dispatch_agent_turn(agent, message)`` without it). The session key reaches the
    dispatch through a context variable set around ``_run_hook``. With ``store: replica`` (or no
    Redis) each session still gets its own history, in this replica's memory: 0.1.16 runs every
    webhook turn of a hook on one Agent, whose one history mixes every conversation of the hook."""
    if not settings:
        return None
    import contextvars
    if settings.get("store") == "redis" and redis:
        shared = SharedSessions(redis_client(redis, timeout=2.0), str(redis.get("prefix") or "praison:push:"),
                                settings["max_messages"], settings["ttl_seconds"], os.environ.get(SESSION_KEY_ENV, ""),
                                settings["max_sessions"])
    else:
        shared = SharedSessions(None, "", settings["max_messages"], settings["ttl_seconds"])
    shared.fail_closed = float(fail_closed_seconds)
    current: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("gwop_session", default=None)
    run_hook, dispatch = upstream.turn_calls(gateway)

    async def run_hook_in_session(hook: Any, payload: Any, *args: Any, **kwargs: Any) -> Any:
        marker = current.set(upstream.session_key(hook, payload))
        try:
            return await run_hook(hook, payload, *args, **kwargs)
        finally:
            current.reset(marker)

    async def dispatch_in_session(agent: Any, content: Any, *args: Any, **kwargs: Any) -> Any:
        session = current.get()
        if session is None:
            return await dispatch(agent, content, *args, **kwargs)
        return await shared.run(session, agent, dispatch, content, *args, **kwargs)

    upstream.set_turn_calls(gateway, run_hook_in_session, dispatch_in_session)
    return shared

