"""Gateway pod launcher for praisonai-bot 0.1.16.

The operator mounts this file (via a ConfigMap) into every gateway pod and runs::

    python3 /etc/gateway-operator/launch.py --config /etc/gateway/gateway.yaml \\
        --workdir /var/lib/gateway/work --host 0.0.0.0 --port 8765

It must stay self-contained: only the standard library, PyYAML and the
praisonai packages shipped in the gateway image may be imported here (never
``gateway_operator``).

Why it exists: the operator renders the *documented* gateway config, but the
0.1.16 CLI (``praisonai-bot gateway start --config``)

* rejects the documented nested ``hooks: {idempotency: ..., hooks: [...]}``
  form (it wants ``hooks: [...]`` plus top-level ``hooks_idempotency``),
* never applies top-level ``push:`` (the Redis connection) or ``turn_lock:``,
* never applies ``gateway.allowed_origins`` / ``gateway.auth_token``,

so ``store_backend: redis`` always ended in the per-replica fallback. The
launcher translates the config into the accepted shape, writes a working copy
into ``--workdir`` (the config mount is read-only), validates it with the
gateway's own loader, and builds the gateway in Python with
``GatewayConfig(push=PushConfig(redis=...), turn_lock=...)``.

Documented keys the launcher itself interprets (everything else is passed to
the gateway unchanged): ``hooks.idempotency``, ``hooks.hooks``,
``push.redis.{url|host,port,db, username, password, prefix, max_connections,
tls_server_name}``,
``turn_lock`` (or ``gateway.turn_lock``), ``gateway.{host, port,
allowed_origins, auth_token, drain_timeout}``.

Exit codes follow the gateway protocol: 0 clean stop (including SIGTERM),
75 restartable failure, 78 fatal configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import yaml

EXIT_OK = 0
EXIT_RESTART = 75
EXIT_FATAL_CONFIG = 78

WORKING_COPY_NAME = "gateway.yaml"
DEFAULT_DRAIN_TIMEOUT = 10.0
# of the drain, WebSocket sessions get at most this (the gateway's own drain); in-flight webhook
# turns get the whole drain (uvicorn's graceful shutdown)
WEBSOCKET_DRAIN_MAX = 10.0
RELEASE_BUDGET_SECONDS = 5.0   # scanning for and releasing this replica's unfinished claims

# Keys of ``push.redis`` that map onto praisonaiagents' RedisConfig, and the launcher's own: an ACL
# user name (0.1.16's RedisConfig has none: it goes into the URL beside the password) and the name a
# TLS server's certificate must carry when it is not the URL's host (see name_tls_server)
_LAUNCHER_REDIS_KEYS = frozenset({"username", "tls_server_name"})
_REDIS_KEYS = frozenset({"url", "host", "port", "db", "password", "prefix", "max_connections"}) | _LAUNCHER_REDIS_KEYS
_REDIS_INT_KEYS = ("port", "db", "max_connections")
_REDIS_URL_SCHEMES = ("redis", "rediss")
# Keys the documented nested ``hooks:`` mapping may carry.
_NESTED_HOOK_KEYS = frozenset({"idempotency", "hooks"})
# Other places 0.1.16 reads the idempotency backend from. Only ``hooks.idempotency`` is
# honoured, as in the operator's admission rule (validation.OTHER_IDEMPOTENCY_FORMS): a
# second form could silently override what the operator's replica guard checked.
_OTHER_IDEMPOTENCY_FORMS = (("hooks_idempotency",), ("idempotency",), ("gateway", "hooks_idempotency"),
                            ("gateway", "hooks"))
# Same pattern the gateway's loader uses for ``${VAR}`` expansion.
_ENV_REF = re.compile(r"\$\{([^}]+)\}")
# Pydantic ends each error line with "[type=..., input_value=<repr of the
# whole input>, ...]"; that repr can hold expanded secrets, so it is cut off.
_PYDANTIC_SUFFIX = re.compile(r"\s*\[type=.*$", re.MULTILINE)


class ConfigError(Exception):
    """The gateway config cannot be used; the pod must not crash-loop (78)."""


# --------------------------------------------------------------------------
# Pure translation (unit-testable, no praisonai imports)
# --------------------------------------------------------------------------


def expand_env(value: Any, env: Mapping[str, str]) -> Any:
    """Expand ``${VAR}`` in strings (recursively); unset vars become ``""``.

    Mirrors ``WebSocketGateway._substitute_env_vars`` so values the launcher
    applies itself behave exactly like values the gateway expands.
    """
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, Mapping):
        return {k: expand_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env) for v in value]
    return value


def env_refs(value: Any) -> List[str]:
    """Names of all ``${VAR}`` references in a (nested) config value."""
    if isinstance(value, str):
        return _ENV_REF.findall(value)
    if isinstance(value, Mapping):
        return [name for v in value.values() for name in env_refs(v)]
    if isinstance(value, list):
        return [name for v in value for name in env_refs(v)]
    return []


def translate_config(documented: Mapping[str, Any]) -> Dict[str, Any]:
    """Translate the documented config into the shape 0.1.16's loader accepts.

    * ``hooks: {idempotency: X, hooks: [...]}`` -> ``hooks: [...]`` plus
      top-level ``hooks_idempotency: X`` (a list-shaped ``hooks`` is kept).
    * ``push`` / ``turn_lock`` are dropped: 0.1.16 ignores them in YAML (the
      launcher applies them in Python), and ``push`` names the Redis password,
      which must not be echoed back by schema errors.

    ``${VAR}`` placeholders are left untouched for the gateway's loader.
    """
    if not isinstance(documented, Mapping):
        raise ConfigError("gateway config must be a YAML mapping")
    others = [".".join(path) for path in _OTHER_IDEMPOTENCY_FORMS if _lookup(documented, path) is not None]
    if others:
        raise ConfigError(f"set the idempotency store only as hooks.idempotency; remove {', '.join(others)}")
    cfg = copy.deepcopy(dict(documented))
    cfg.pop("push", None)
    cfg.pop("turn_lock", None)
    cfg.pop(SESSION_HISTORY_KEY, None)  # the launcher's own (share_sessions)
    hooks = cfg.pop("hooks", None)
    if isinstance(hooks, Mapping):
        entries, idempotency = _split_nested_hooks(hooks)
        cfg["hooks"] = entries
        if idempotency is not None:
            cfg.setdefault("hooks_idempotency", idempotency)
    elif hooks is not None:
        cfg["hooks"] = hooks
    return cfg


def _lookup(config: Mapping[str, Any], path: Tuple[str, ...]) -> Any:
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _split_nested_hooks(hooks: Mapping[str, Any]) -> Tuple[List[Any], Any]:
    unknown = sorted(set(hooks) - _NESTED_HOOK_KEYS)
    if unknown:
        raise ConfigError(f"hooks: unsupported key(s) {', '.join(map(str, unknown))} (expected idempotency, hooks)")
    entries = hooks.get("hooks") or []
    if not isinstance(entries, list):
        raise ConfigError("hooks.hooks must be a list of hook definitions")
    return list(entries), hooks.get("idempotency")


def apply_bind(cfg: Dict[str, Any], host: Optional[str], port: Optional[int]) -> Dict[str, Any]:
    """Let the launcher's --host/--port win over ``gateway.host/port``.

    ``start_with_config`` re-applies ``gateway.host/port`` from the file, so the
    override has to live in the working copy, not only in GatewayConfig.
    """
    gateway = cfg.get("gateway")
    if gateway is None:
        gateway = cfg["gateway"] = {}
    if not isinstance(gateway, dict):
        raise ConfigError("gateway must be a mapping")
    if host:
        gateway["host"] = host
    if port:
        gateway["port"] = int(port)
    return cfg


def redis_settings(documented: Mapping[str, Any], env: Mapping[str, str]) -> Optional[Dict[str, Any]]:
    """Keyword arguments for ``RedisConfig`` from documented ``push.redis``.

    Returns ``None`` when no Redis is configured. ``${VAR}`` is expanded from
    ``env``; an empty password means "no password". With the ``url`` form the
    user name and password are embedded into the URL, because 0.1.16 builds its
    Redis clients with ``from_url(url)`` and then ignores ``RedisConfig.password``
    (and has no user name at all).
    """
    push = documented.get("push")
    if push is None:
        return None
    if not isinstance(push, Mapping):
        raise ConfigError("push must be a mapping")
    raw = push.get("redis")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError("push.redis must be a mapping")
    unknown = sorted(set(raw) - _REDIS_KEYS)
    if unknown:
        raise ConfigError(f"push.redis: unsupported key(s) {', '.join(map(str, unknown))}")

    settings = {k: v for k, v in expand_env(dict(raw), env).items() if v not in (None, "")}
    for key in _REDIS_INT_KEYS:
        if key in settings:
            settings[key] = _as_int(settings[key], f"push.redis.{key}")
    if "url" in settings:
        settings["url"] = _url_with_credentials(str(settings["url"]), settings.pop("username", None),
                                                settings.get("password"))
    elif "host" not in settings:
        raise ConfigError("push.redis needs either url or host")
    elif "username" in settings or "tls_server_name" in settings:
        raise ConfigError("push.redis.username and tls_server_name need the url form")
    return settings


def redis_config_kwargs(redis: Mapping[str, Any]) -> Dict[str, Any]:
    """``RedisConfig``'s keyword arguments: the settings without the launcher's own keys."""
    return {k: v for k, v in redis.items() if k not in _LAUNCHER_REDIS_KEYS}


def name_tls_server(server_name: Optional[str]) -> None:
    """Make every TLS connection to Redis in this process (the gateway's store, lock and push
    clients, which 0.1.16 builds with ``from_url``, and the launcher's own) verify ``server_name``
    and send it as SNI, instead of the host connected to: redis-py has no URL option for it, but
    its URL parser picks ``SSLConnection`` by name at each call, so a subclass in its place is used."""
    if not server_name:
        return
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection

    class NamedSSLConnection(sync_connection.SSLConnection):  # type: ignore[misc, valid-type]
        def _wrap_socket_with_ssl(self, sock: Any) -> Any:
            host, self.host = self.host, server_name  # the one name it is read by
            try:
                return super()._wrap_socket_with_ssl(sock)
            finally:
                self.host = host

    class NamedAsyncSSLConnection(async_connection.SSLConnection):  # type: ignore[misc, valid-type]
        def _connection_arguments(self) -> Any:
            return {**super()._connection_arguments(), "server_hostname": server_name}

    sync_connection.SSLConnection = NamedSSLConnection  # type: ignore[misc]
    async_connection.SSLConnection = NamedAsyncSSLConnection  # type: ignore[misc]


def turn_lock_settings(documented: Mapping[str, Any], env: Mapping[str, str]) -> Optional[Dict[str, Any]]:
    """Mapping for ``TurnLockConfig.from_dict`` (top-level, else ``gateway.turn_lock``)."""
    raw = documented.get("turn_lock")
    if raw is None:
        gateway = documented.get("gateway")
        raw = gateway.get("turn_lock") if isinstance(gateway, Mapping) else None
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError("turn_lock must be a mapping")
    return expand_env(dict(raw), env)


def idempotency_backend(cfg: Mapping[str, Any]) -> Optional[str]:
    """The ``store_backend`` selected in a *translated* config (for logging)."""
    idem = cfg.get("hooks_idempotency")
    if isinstance(idem, Mapping):
        idem = idem.get("store_backend")
    return None if idem is None else str(idem)


def config_warnings(translated: Mapping[str, Any], redis: Optional[Mapping[str, Any]]) -> List[str]:
    """Settings that start fine but silently defeat their purpose."""
    if idempotency_backend(translated) == "redis" and not redis:
        return ["hooks idempotency store_backend is redis but push.redis is not set; "
                "the gateway will fall back to per-replica dedup"]
    return []


def describe_redis(settings: Optional[Mapping[str, Any]]) -> str:
    """Credential-free description of a Redis endpoint for log lines."""
    if not settings:
        return "none"
    if "url" in settings:
        parts = urlsplit(str(settings["url"]))
        where = f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"
    else:
        where = f"redis://{settings['host']}:{settings.get('port', 6379)}/{settings.get('db', 0)}"
    return f"{where} prefix={settings.get('prefix', '(default)')}"


def redact(message: str, secrets: Iterable[Optional[str]]) -> str:
    """One-line, secret-free version of an error message."""
    text = _PYDANTIC_SUFFIX.sub("", str(message))
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines) or "unknown error"


def _as_int(value: Any, field: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{field} must be an integer") from None


def _url_with_credentials(url: str, username: Optional[str], password: Optional[str]) -> str:
    parts = urlsplit(url)
    if parts.scheme not in _REDIS_URL_SCHEMES or not parts.hostname:
        raise ConfigError("push.redis.url must look like redis://host:port/db or rediss://...")
    if not password or parts.password is not None:
        return url  # nothing to add, or the URL's own credentials win
    user = username if username else unquote(parts.username) if parts.username else ""
    netloc = f"{quote(str(user), safe='')}:{quote(str(password), safe='')}@{parts.netloc.rsplit('@', 1)[-1]}"
    return urlunsplit(parts._replace(netloc=netloc))


# --------------------------------------------------------------------------
# I/O around the pure core
# --------------------------------------------------------------------------


def read_documented(path: str) -> Dict[str, Any]:
    """Parse the mounted (documented) config; any problem is a ConfigError."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise ConfigError(f"invalid YAML in {path}{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must contain a YAML mapping")
    return data


def write_working_copy(cfg: Mapping[str, Any], workdir: str) -> str:
    """Atomically write the translated config into the (writable) workdir."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, WORKING_COPY_NAME)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        yaml.safe_dump(dict(cfg), fh, sort_keys=False)
    os.replace(tmp, path)
    return path


def load_checked(path: str) -> Dict[str, Any]:
    """Run the gateway's own loader (schema checks + ``${VAR}`` expansion)."""
    from praisonai_bot.gateway.server import WebSocketGateway

    try:
        return WebSocketGateway.load_gateway_config(path)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"gateway rejected the config: {exc}") from None


# praisonai-bot 0.1.16's per-replica store (Path.home()/.praisonai/state/hook_idempotency.sqlite)
# and its Redis layout (push.redis.prefix + "hookidem:" + key); a record lives RECORD_TTL_SECONDS
SQLITE_STORE = (".praisonai", "state", "hook_idempotency.sqlite")
RECORD_TTL_SECONDS = 86400.0
# set once this replica's SQLite records are in Redis (no TTL): the operator's probe reads it
# before it lets a second Redis-backed replica take traffic (the operator's dedup_history.MIGRATED_KEY)
MIGRATED_KEY = "sqlite-migrated"
SQLITE_MIGRATION_ENV = "GWOP_SQLITE_MIGRATION"  # the operator's token for one migration (render.py)


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
        if client.set(f"{prefix}hookidem:{key}", "recorded", nx=True, px=left_ms):
            copied += 1
        else:
            kept += 1
    client.set(f"{prefix}{MIGRATED_KEY}", token)
    return copied, kept


MIGRATION_WAIT_SECONDS = 120.0  # for a Redis that starts with the switch (a new managed Redis)


class MigrationPending(Exception):
    """The records could not reach Redis yet: exit 75, so the kubelet restarts the container and
    it tries again (the operator holds the other replicas back meanwhile)."""


def migrate_before_start(redis: Optional[Mapping[str, Any]], backend: Optional[str], home: str,
                         token: str, wait: float = MIGRATION_WAIT_SECONDS) -> None:
    """At start-up of the one Redis-backed replica the operator runs with the single SQLite
    replica's state volume still mounted (``token``: its ``SQLITE_MIGRATION_ENV``, empty
    otherwise), bring that replica's records into Redis, then write ``token`` as the marker the
    operator waits for before a second replica takes traffic. The Redis often starts with the
    switch (a managed Redis enabled in the same change), so it is tried for ``wait`` seconds."""
    if backend != "redis" or not redis or not token:
        return
    path = os.path.join(home, *SQLITE_STORE)
    deadline = time.monotonic() + wait
    while True:
        try:
            client = _redis_client(redis)
            prefix = str(redis.get("prefix") or "praison:push:")
            copied, kept = migrate_sqlite_records(path, client, prefix, time.time(), token)
            _say(f"migrated the single replica's SQLite dedup records to Redis: {copied} copied, {kept} already there")
            return
        except Exception as exc:  # noqa: BLE001 - a Redis still starting: try again, bounded
            if time.monotonic() > deadline:
                raise MigrationPending(f"the SQLite dedup records could not reach Redis within {wait:g}s "
                                       f"({type(exc).__name__}); restarting to try again") from None
            time.sleep(2)


# --------------------------------------------------------------------------
# Shared session history for webhook turns (issue 18: conversations must not split)
# --------------------------------------------------------------------------

# the documented config's launcher-only section, written by the operator from spec.sessions:
# ``session_history: {store: redis|replica, max_messages, ttl_seconds}``
SESSION_HISTORY_KEY = "session_history"
SESSION_LOCK_LEASE_MS = 30_000     # renewed while the turn runs; a dead replica's lock goes after it
SESSION_LOCK_WAIT_SECONDS = 300.0  # a turn waits this long for its session's earlier turn, then runs
_RELEASE_LUA = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def session_settings(documented: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    raw = documented.get(SESSION_HISTORY_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("store") not in ("redis", "replica"):
        raise ConfigError(f"{SESSION_HISTORY_KEY}.store must be redis or replica")
    return {"store": raw["store"], "max_messages": _as_int(raw.get("max_messages", 50), "max_messages"),
            "ttl_seconds": _as_int(raw.get("ttl_seconds", 604800), "ttl_seconds")}


SESSION_KEY_ENV = "GATEWAY_SESSION_KEY"  # a Fernet key from a Secret (render.py): history encrypted at rest


class RedisHistoryStore:
    """The Redis list behind one session's history, as the package's session stores are called
    (``add_message``, ``get_chat_history``), so that its own ``EncryptedSessionStore`` can wrap it:
    ``{prefix}session:<sha256 of the key>``, each append one MULTI (RPUSH, LTRIM to ``max_messages``,
    EXPIRE ``ttl``)."""

    def __init__(self, client: Any, prefix: str, max_messages: int, ttl: int) -> None:
        self.client, self.prefix, self.max_messages, self.ttl = client, prefix, max_messages, ttl

    def key(self, session_id: str) -> str:
        import hashlib
        return f"{self.prefix}session:{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"

    def add_message(self, session_id: str, role: str, content: str, metadata: Any = None, **_: Any) -> bool:
        import json
        key = self.key(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, json.dumps({"role": role, "content": content}))
        pipe.ltrim(key, -self.max_messages, -1)
        pipe.expire(key, self.ttl)
        pipe.execute()
        return True

    def get_chat_history(self, session_id: str, max_messages: Optional[int] = None) -> List[Dict[str, Any]]:
        import json
        rows = [json.loads(raw) for raw in self.client.lrange(self.key(session_id), 0, -1)]
        return rows[-max_messages:] if max_messages else rows


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

    def __init__(self, client: Any, prefix: str, max_messages: int, ttl_seconds: int, key: str = "") -> None:
        """``key``: a Fernet key; the history is then stored through the package's own
        ``EncryptedSessionStore`` (content encrypted; roles and the key's hash stay readable)."""
        self.client, self.prefix = client, prefix
        self.inner = RedisHistoryStore(client, prefix, max(2, max_messages), max(60, ttl_seconds))
        self.store: Any = self.inner
        if key:
            from praisonaiagents.session.encrypted_store import EncryptedSessionStore, SessionEncryptionError
            try:
                self.store = EncryptedSessionStore(self.inner, key)
            except SessionEncryptionError:
                raise ConfigError(f"{SESSION_KEY_ENV} (spec.sessions.encryptionKeySecretRef) is not a Fernet key: "
                                  "32 url-safe base64-encoded bytes (or cryptography is missing)") from None
        self.failing = False
        self.local: "collections.OrderedDict[str, List[Dict[str, Any]]]" = collections.OrderedDict()
        self._local_locks: Dict[str, List[Any]] = {}  # session -> [asyncio.Lock, turns holding or waiting]
        self._skip_until = 0.0

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
        entry = self._local_locks.setdefault(session, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                if self.client is None or time.monotonic() < self._skip_until:
                    history = list(self.local.get(session, ()))
                    turn_agent = _turn_copy(agent, history)
                    result = await dispatch(turn_agent, content, *args, **kwargs)
                    self._remember(session, [dict(m) for m in turn_agent.chat_history])
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
        again at the next one, so the lock outlives an outage shorter than its lease."""
        _, lock = self._keys(session)
        while True:
            await asyncio.sleep(SESSION_LOCK_LEASE_MS / 3000)
            try:
                if await asyncio.to_thread(self.client.get, lock) not in (token, token.encode()):
                    return
                await asyncio.to_thread(self.client.pexpire, lock, SESSION_LOCK_LEASE_MS)
            except Exception:  # noqa: BLE001 - the next renewal tries again
                continue

    async def run(self, session: str, agent: Any, dispatch: Any, content: str, *args: Any, **kwargs: Any) -> Any:
        """One turn of ``session`` on a copy of ``agent`` whose history is the session's."""
        import secrets
        if self.client is None or time.monotonic() < self._skip_until:  # store: replica, or Redis just failed
            return await self._run_local(session, agent, dispatch, content, *args, **kwargs)
        token = secrets.token_hex(16)
        _, lock = self._keys(session)
        locked = False
        try:
            locked = await self._lock(session, token)
            history = await asyncio.to_thread(self.load, session)
        except Exception as exc:  # noqa: BLE001 - Redis unusable: this turn runs on this replica's copy
            self._note_failure(exc)
            if locked:  # taken, then the history could not be read: let the next turn have it
                await self._unlock(lock, token)
            return await self._run_local(session, agent, dispatch, content, *args, **kwargs)
        renew = asyncio.ensure_future(self._renew(session, token)) if locked else None
        try:
            turn_agent = _turn_copy(agent, history)
            result = await dispatch(turn_agent, content, *args, **kwargs)
            self._remember(session, [dict(m) for m in turn_agent.chat_history])
            try:
                await asyncio.to_thread(self.append, session, list(turn_agent.chat_history)[len(history):])
                self._note_recovery()
            except Exception as exc:  # noqa: BLE001
                self._note_failure(exc)
            return result
        finally:
            if renew is not None:
                renew.cancel()
            if locked:
                await self._unlock(lock, token)

    async def _unlock(self, lock: str, token: str) -> None:
        """Release the session's lock if it is still ours (compare-and-delete)."""
        try:
            await asyncio.to_thread(self.client.eval, _RELEASE_LUA, 1, lock, token)
        except Exception:  # noqa: BLE001 - the lease ends it
            pass

    def _note_failure(self, exc: BaseException) -> None:
        self._skip_until = time.monotonic() + self.SKIP_SECONDS
        if not self.failing:
            _say(f"shared session history unavailable ({type(exc).__name__}): turns use this replica's history "
                 "until Redis answers again")
        self.failing = True

    def _note_recovery(self) -> None:
        if self.failing:
            _say("shared session history available again")
        self.failing = False


def _turn_copy(agent: Any, history: List[Dict[str, Any]]) -> Any:
    """A shallow copy of the hook's one Agent with a history of its own: 0.1.16 runs every webhook
    turn on that shared instance, so its in-memory history mixes every session of the replica. The
    copy shares the LLM client and tools; only ``chat_history`` (praisonaiagents 1.7.17 keeps it in
    the private ``_Agent__chat_history_state``, an ``AsyncSafeState``) is its own."""
    import copy as copy_module
    from praisonaiagents.agent.async_safety import AsyncSafeState
    turn = copy_module.copy(agent)
    turn._Agent__chat_history_state = AsyncSafeState([dict(m) for m in history])
    return turn


def share_sessions(gateway: Any, settings: Optional[Mapping[str, Any]],
                   redis: Optional[Mapping[str, Any]]) -> Optional["SharedSessions"]:
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
        shared = SharedSessions(_redis_client(redis, timeout=2.0), str(redis.get("prefix") or "praison:push:"),
                                settings["max_messages"], settings["ttl_seconds"], os.environ.get(SESSION_KEY_ENV, ""))
    else:
        shared = SharedSessions(None, "", settings["max_messages"], settings["ttl_seconds"])
    current: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("gwop_session", default=None)
    run_hook, dispatch = gateway._run_hook, gateway._dispatch_agent_turn

    async def run_hook_in_session(hook: Any, payload: Any, *args: Any, **kwargs: Any) -> Any:
        marker = current.set(hook.resolve_session_key(payload))
        try:
            return await run_hook(hook, payload, *args, **kwargs)
        finally:
            current.reset(marker)

    async def dispatch_in_session(agent: Any, content: Any, *args: Any, **kwargs: Any) -> Any:
        session = current.get()
        if session is None:
            return await dispatch(agent, content, *args, **kwargs)
        return await shared.run(session, agent, dispatch, content, *args, **kwargs)

    gateway._run_hook, gateway._dispatch_agent_turn = run_hook_in_session, dispatch_in_session
    gateway._gwop_sessions = shared
    return shared


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


def build_gateway(
    loaded: Mapping[str, Any],
    redis: Optional[Mapping[str, Any]],
    turn_lock: Optional[Mapping[str, Any]],
) -> Any:
    """Build the gateway with the settings 0.1.16 only honours from Python."""
    from praisonai_bot.gateway.server import WebSocketGateway
    from praisonaiagents.gateway.config import GatewayConfig, PushConfig, RedisConfig, TurnLockConfig

    gw = loaded.get("gateway") or {}
    try:
        config = GatewayConfig(
            host=str(gw.get("host") or "127.0.0.1"),
            port=int(gw.get("port") or 8765),
            # start_with_config never applies these two from YAML.
            allowed_origins=list(gw.get("allowed_origins") or []),
            auth_token=str(gw["auth_token"]) if gw.get("auth_token") else None,
            push=PushConfig(redis=RedisConfig(**redis_config_kwargs(redis)) if redis else None),
            turn_lock=TurnLockConfig.from_dict(dict(turn_lock) if turn_lock else None),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid gateway settings: {exc}") from None
    return WebSocketGateway(config=config)


def drain_timeout(loaded: Mapping[str, Any]) -> float:
    try:
        return float((loaded.get("gateway") or {}).get("drain_timeout") or DEFAULT_DRAIN_TIMEOUT)
    except (TypeError, ValueError):
        return DEFAULT_DRAIN_TIMEOUT


async def serve(gateway: Any, config_path: str, drain: float) -> int:
    """Run the gateway until SIGTERM/SIGINT; return the process exit code."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    start = asyncio.ensure_future(gateway.start_with_config(config_path))
    # start_with_config installs its own SIGTERM/SIGINT handlers before its
    # first await; those only flip uvicorn's should_exit and silently drop a
    # signal that arrives while channels are still starting. Yield once so it
    # has installed them, then take the signals back.
    await asyncio.sleep(0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    stopper = asyncio.ensure_future(_stop_when_requested(gateway, start, stop_requested, drain))
    owner = asyncio.ensure_future(register_owner(gateway, start, os.environ.get("HOSTNAME", "")))
    try:
        await start
    finally:
        stop_requested.set()  # normal return or failure: stop whatever still runs
        await stopper
        owner.cancel()
        released = release_unfinished_claims(getattr(gateway, "_hook_idem", None))
        if released:
            _say(f"released {released} unfinished webhook claim(s): a provider's retry runs them on another replica")
    return EXIT_OK


async def _stop_when_requested(
    gateway: Any, start: "asyncio.Future[Any]", requested: asyncio.Event, drain: float
) -> None:
    await requested.wait()
    # Until is_running the uvicorn server does not exist and stop() is a no-op.
    while not (gateway.is_running or start.done()):
        await asyncio.sleep(0.05)
    server = getattr(gateway, "_server", None)
    if server is not None and getattr(server, "config", None) is not None:
        # 0.1.16 never sets it, so uvicorn would wait for in-flight webhook turns without a bound
        # (until the kubelet's SIGKILL leaves their claims stuck): give them the drain, then
        # uvicorn cancels them and their claims are released below. Read at shutdown time.
        server.config.timeout_graceful_shutdown = max(1.0, drain)
    state = getattr(server, "server_state", None)
    _say(f"draining: no new requests; {len(getattr(state, 'tasks', ()) or ())} in flight get up to {drain:g}s")
    try:
        # Drains sessions, makes uvicorn exit and releases the PID lock; the
        # gateway's own signal path never calls it.
        await gateway.stop(drain_timeout=min(drain, WEBSOCKET_DRAIN_MAX))
    except Exception as exc:  # noqa: BLE001 - shutdown must not mask the exit code
        _say(f"gateway stop failed: {type(exc).__name__}")


def release_unfinished_claims(store: Any, budget: float = RELEASE_BUDGET_SECONDS) -> int:
    """Release, owner-checked, the in-flight claims this replica still holds once the server has
    stopped: a turn cut by the drain's end (a cancelled handler never releases its claim in 0.1.16)
    would otherwise answer the provider's retries ``deduplicated`` for the 900 s lease, and the
    message would never be answered. 0.1.16 keeps no list of its claims, so the Redis store's keys
    are scanned for its owner token (``_client``, ``_prefix``, ``_token``) and deleted only while
    they still hold it (a compare-and-delete). Any other store (SQLite) is left as it is."""
    client, prefix, token = (getattr(store, name, None) for name in ("_client", "_prefix", "_token"))
    if client is None or not prefix or not token or not hasattr(client, "scan_iter"):
        return 0
    return release_claims_of(client, str(prefix), str(token), budget)


def release_claims_of(client: Any, prefix: str, token: str, budget: float = RELEASE_BUDGET_SECONDS) -> int:
    """Delete every key under ``prefix`` whose value is ``token`` (compare-and-delete, one Lua call
    each), within ``budget`` seconds; a failure is logged, never raised."""
    deadline, released = time.monotonic() + budget, 0
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            if time.monotonic() > deadline:
                _say("releasing unfinished claims: out of time; the rest expire with their lease")
                break
            released += int(client.eval(_RELEASE_LUA, 1, key, token) or 0)
    except Exception as exc:  # noqa: BLE001 - say so and go on
        _say(f"releasing unfinished claims failed: {type(exc).__name__}")
    return released


# {push prefix}hookidem-owner:<pod> holds the owner token of the pod's running gateway process, so
# that the next process in the same pod (a container restarted after SIGKILL, OOM or a liveness
# kill: nothing ran to release its claims) releases what its predecessor still held
OWNER_KEY = "hookidem-owner:"


def _redis_client(redis: Mapping[str, Any], timeout: float = 5.0) -> Any:
    import redis as redis_py
    kwargs = dict(socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True)
    if "url" in redis:
        return redis_py.Redis.from_url(str(redis["url"]), **kwargs)
    return redis_py.Redis(host=redis["host"], port=int(redis.get("port", 6379)), db=int(redis.get("db", 0)),
                          password=redis.get("password") or None, **kwargs)


def release_predecessor_claims(redis: Optional[Mapping[str, Any]], backend: Optional[str], pod: str) -> int:
    """At start: the claims a killed earlier gateway process of this pod left (see OWNER_KEY)."""
    if backend != "redis" or not redis or not pod:
        return 0
    prefix = str(redis.get("prefix") or "praison:push:")
    try:
        client = _redis_client(redis)
        token = client.get(f"{prefix}{OWNER_KEY}{pod}")
        released = release_claims_of(client, f"{prefix}hookidem:", token) if token else 0
    except Exception as exc:  # noqa: BLE001 - a Redis that does not answer now: the lease ends them
        _say(f"releasing a predecessor's claims failed: {type(exc).__name__}")
        return 0
    if released:
        _say(f"released {released} webhook claim(s) a killed predecessor in this pod left: their retries run")
    return released


def answer_inflight_duplicates(gateway: Any) -> bool:
    """A delivery whose key another request still holds in flight is answered 503 with
    Retry-After, not 0.1.16's 200 ``deduplicated``: a 2xx makes the provider stop retrying, and if
    the turn in flight then fails or its pod stops, the message is never answered (found by the
    checker: lost messages whose only turn was still queued when their retries were answered).
    A recorded key is still answered 200 ``deduplicated``. Wraps ``_hook_reserve`` (which sees the
    outcome) and the ``/hooks/`` route's endpoint (which can change the answer); Redis store only."""
    import contextvars
    from starlette.responses import JSONResponse
    from starlette.routing import Route, request_response
    app = getattr(getattr(getattr(gateway, "_server", None), "config", None), "app", None)
    route = None
    for _ in range(8):  # through middleware to the router
        routes = getattr(app, "routes", None)
        if routes is not None:
            route = next((r for r in routes if isinstance(r, Route) and r.path == "/hooks/{path:path}"), None)
            break
        app = getattr(app, "app", None)
    if route is None:
        _say("warning: no /hooks/ route found; in-flight duplicates keep 0.1.16's 200 deduplicated")
        return False
    in_flight: "contextvars.ContextVar[bool]" = contextvars.ContextVar("gwop_in_flight", default=False)
    claimed: "contextvars.ContextVar[List[str]]" = contextvars.ContextVar("gwop_claimed")
    reserve, endpoint = gateway._hook_reserve, route.endpoint

    def reserve_or_note(key: str) -> bool:
        if reserve(key):
            held = claimed.get(None)
            if held is not None:
                held.append(key)
            return True
        store = getattr(gateway, "_hook_idem", None)
        client, prefix = getattr(store, "_client", None), getattr(store, "_prefix", None)
        if client is not None and prefix:
            try:
                value = client.get(f"{prefix}{key}")
            except Exception:  # noqa: BLE001 - Redis just answered reserve; treat as in flight
                value = None
            if value not in (b"recorded", "recorded"):
                in_flight.set(True)
        return False

    async def hook_endpoint(request: Any) -> Any:
        marker, held = in_flight.set(False), claimed.set([])
        try:
            response = await endpoint(request)
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
                gateway._hook_release(key)
            if claimed.get():
                _say(f"released {len(claimed.get())} unfinished webhook claim(s) as the drain ended: the provider "
                     "is answered 503 and its retry runs the turn on another replica")
            return JSONResponse({"ok": False, "retry": True, "error": "this replica stopped before the turn "
                                 "finished; retry (another replica runs it)"}, status_code=503,
                                headers={"Retry-After": "1"})
        finally:
            in_flight.reset(marker)
            claimed.reset(held)

    gateway._hook_reserve = reserve_or_note
    route.endpoint, route.app = hook_endpoint, request_response(hook_endpoint)
    return True


class OutageJournal:
    """What this replica admitted while Redis could not be used, written to Redis once it answers.

    0.1.16's Redis store fails open: while Redis is down every delivery is admitted and nothing is
    recorded, so a redelivery after Redis is back runs the agent again while every condition says
    exactly-once holds (found by the checker after a Redis pause). The journal wraps the gateway's
    ``_hook_reserve``/``_hook_record``/``_hook_release``: a key admitted or finished while the
    store is degraded is kept here (bounded: ``MAX_KEYS``, and no longer than the record TTL), a
    redelivery of it to this replica meanwhile is not run again, and as soon as Redis answers (an
    attempt every second, and before the next reservation) each key is written as the store
    writes it: ``recorded`` with the TTL left (the store's own owner-checked record: over nothing,
    this replica's claim or a record; a paused Redis runs the commands it had queued when it
    resumes, so a claim that timed out can appear then), or this replica's in-flight claim
    (``SET NX``), so what another replica wrote is kept. A redelivery to *another* replica during the outage
    still runs (announced: RedisReachable=False)."""

    MAX_KEYS = 100_000

    def __init__(self, gateway: Any) -> None:
        import threading
        self.gateway = gateway
        self.admitted: "collections.OrderedDict[str, float]" = collections.OrderedDict()  # in flight
        self.done: "collections.OrderedDict[str, float]" = collections.OrderedDict()      # ran, not recorded
        self.dropped = 0
        self._lock = threading.Lock()
        # after a failed call the request path stops calling Redis (each call would hold the event
        # loop for the client's socket timeout, and liveness probes then fail) until the journal's
        # own attempt, off the loop, finds Redis answering again
        self.broken = False

    def _store(self) -> Any:
        store = getattr(self.gateway, "_hook_idem", None)
        return store if getattr(store, "_client", None) is not None and hasattr(store, "_redis_key") else None

    @staticmethod
    def _degraded(store: Any) -> bool:
        return bool(getattr(store, "_runtime_degraded", False))

    def _keep(self, table: "collections.OrderedDict[str, float]", key: str) -> None:
        with self._lock:
            table[key] = time.time()
            table.move_to_end(key)
            while len(self.admitted) + len(self.done) > self.MAX_KEYS:
                (self.done if self.done else self.admitted).popitem(last=False)
                self.dropped += 1

    def wrap(self) -> None:
        reserve, record, release = self.gateway._hook_reserve, self.gateway._hook_record, self.gateway._hook_release

        def reserve_journalled(key: str) -> bool:
            store = self._store()
            if store is None:
                return reserve(key)
            if key in self.admitted or key in self.done:
                return False  # this replica admitted it during the outage: not again
            if self.broken:  # fail open at once, as 0.1.16 would after its timeout, journalled
                self._keep(self.admitted, key)
                return True
            admitted = reserve(key)
            if self._degraded(store):
                self.broken = True
                if admitted:
                    self._keep(self.admitted, key)
            return admitted

        def record_journalled(key: str) -> None:
            store = self._store()
            if store is None or not self.broken:
                record(key)
            with self._lock:
                self.admitted.pop(key, None)
            if store is not None and (self.broken or self._degraded(store)):
                self.broken = True
                self._keep(self.done, key)

        def release_journalled(key: str) -> None:
            journalled = key in self.admitted
            with self._lock:
                self.admitted.pop(key, None)
            if not (self.broken and journalled):
                release(key)

        self.gateway._hook_reserve, self.gateway._hook_record = reserve_journalled, record_journalled
        self.gateway._hook_release = release_journalled

    def flush(self, limit: Optional[int] = None) -> int:
        """Write what is journalled to Redis (SET NX); stop at the first failure. Returns the
        keys written or found there."""
        store = self._store()
        if store is None:
            return 0
        with self._lock:
            pending = [(k, at, True) for k, at in self.done.items()] + [(k, at, False) for k, at in self.admitted.items()]
        written, now = 0, time.time()
        ttl_ms, inflight_ms = int(getattr(store, "_ttl_ms", 86_400_000)), int(getattr(store, "_inflight_ms", 900_000))
        for key, at, ran in pending[:limit]:
            left = (ttl_ms if ran else inflight_ms) - int((now - at) * 1000)
            try:
                if left > 0 and ran:  # the store's own owner-checked record: absent, our claim or recorded
                    store._client.eval(store._RECORD_LUA, 1, store._redis_key(key), store._token, store._RECORDED, left)
                elif left > 0:
                    store._client.set(store._redis_key(key), store._token, nx=True, px=left)
            except Exception:  # noqa: BLE001 - still down: the next attempt
                break
            with self._lock:
                (self.done if ran else self.admitted).pop(key, None)
            written += 1
        return written

    def _answers(self) -> bool:
        store = self._store()
        try:
            return store is not None and bool(store._client.ping())
        except Exception:  # noqa: BLE001 - still down
            return False

    async def run(self) -> None:
        """Every second while Redis is taken as down or something is journalled: see whether
        Redis answers (off the event loop), write what is journalled, and close the breaker."""
        told = 0
        while True:
            await asyncio.sleep(1.0)
            was = self.broken
            if self.broken and not (self.admitted or self.done):
                self.broken = not await asyncio.to_thread(self._answers)
            if self.admitted or self.done:
                written = await asyncio.to_thread(self.flush)
                if not (self.admitted or self.done):
                    self.broken = False
                    if written:
                        _say(f"wrote {written} webhook record(s) admitted while Redis was unusable to Redis")
            if was and not self.broken:
                # Redis answers again: what 0.1.16's next successful call would do (it clears the
                # store's degraded fact, so /health and the conditions recover without a webhook)
                recovered = getattr(self._store(), "_mark_runtime_recovered", None)
                try:
                    if callable(recovered):
                        recovered()
                except Exception:  # noqa: BLE001 - the next successful call clears it anyway
                    pass
            if self.dropped > told:
                _say(f"the outage journal is full: {self.dropped - told} admitted webhook(s) dropped from it "
                     "(a redelivery of them may run again)")
                told = self.dropped


async def register_owner(gateway: Any, start: "asyncio.Future[Any]", pod: str) -> None:
    """Once the gateway runs, answer in-flight duplicates 503, and once its idempotency store is
    built (0.1.16 builds it on the first webhook: building it earlier, before a new Redis answers,
    would fall back to SQLite), record the store's owner token under this pod's name."""
    while not (gateway.is_running or start.done()):
        await asyncio.sleep(0.05)
    journal = OutageJournal(gateway)
    try:
        journal.wrap()
        answer_inflight_duplicates(gateway)
    except Exception as exc:  # noqa: BLE001 - 0.1.16's own answer stays
        _say(f"wrapping the webhook path failed: {type(exc).__name__}")
    flusher = asyncio.ensure_future(journal.run())
    while getattr(gateway, "_hook_idem", None) is None and not start.done():
        await asyncio.sleep(0.2)
    try:
        store = gateway._hook_idem
        client, prefix, token = (getattr(store, n, None) for n in ("_client", "_prefix", "_token"))
        if client is not None and prefix and token and pod and str(prefix).endswith("hookidem:"):
            client.set(f"{str(prefix)[:-len('hookidem:')]}{OWNER_KEY}{pod}", token)
    except Exception as exc:  # noqa: BLE001 - the lease still ends a dead process's claims
        _say(f"recording the store's owner failed: {type(exc).__name__}")
    try:
        await flusher
    finally:
        flusher.cancel()


def exit_code_for(exc: BaseException) -> int:
    """Fatal-config classes -> 78, anything else is restartable -> 75."""
    # Same classes the 0.1.16 CLI maps to 78 (a missing package included).
    if isinstance(exc, (ConfigError, ValueError, FileNotFoundError, ImportError)):
        return EXIT_FATAL_CONFIG
    # Binding 0.0.0.0 without a strong token / allowed origins: fixing it needs
    # a config change, so restarting (75, as the CLI does) cannot help.
    if type(exc).__name__ in ("FatalConfigError", "GatewayStartupError"):
        return EXIT_FATAL_CONFIG
    return EXIT_RESTART


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description="Launch the praisonai-bot gateway from the operator's config.")
    parser.add_argument("--config", default=env.get("GATEWAY_CONFIG", "/etc/gateway/gateway.yaml"))
    parser.add_argument("--workdir", default=env.get("GATEWAY_WORKDIR", "/var/lib/gateway/work"))
    parser.add_argument("--host", default=env.get("GATEWAY_HOST") or None)
    # argparse applies type=int to string defaults too.
    parser.add_argument("--port", type=int, default=env.get("GATEWAY_PORT") or None)
    return parser.parse_args(argv)


def _say(message: str) -> None:
    print(f"gateway-launcher: {message}", file=sys.stderr, flush=True)


def _secrets(documented: Mapping[str, Any], redis: Optional[Mapping[str, Any]]) -> List[Optional[str]]:
    """Values that must never reach a log line (env behind ``${VAR}`` + token)."""
    names = set(env_refs(documented)) | {"GATEWAY_AUTH_TOKEN", "GATEWAY_REDIS_USERNAME", "GATEWAY_REDIS_PASSWORD",
                                         SESSION_KEY_ENV}
    values = [os.environ.get(name) for name in names]
    if redis:
        values.append(str(redis.get("password") or ""))
    return values


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    documented: Dict[str, Any] = {}
    redis: Optional[Dict[str, Any]] = None
    try:
        documented = read_documented(args.config)
        working = apply_bind(translate_config(documented), args.host, args.port)
        redis = redis_settings(documented, os.environ)
        turn_lock = turn_lock_settings(documented, os.environ)
        path = write_working_copy(working, args.workdir)
        loaded = load_checked(path)
        name_tls_server((redis or {}).get("tls_server_name"))
        migrate_before_start(redis, idempotency_backend(working), os.environ.get("HOME") or str(Path.home()),
                             os.environ.get(SQLITE_MIGRATION_ENV, ""))
        release_predecessor_claims(redis, idempotency_backend(working), os.environ.get("HOSTNAME", ""))
        if clear_stale_pid_lock(os.environ.get("HOME") or str(Path.home()), args.port):
            _say("removed a stale gateway PID lock left by an earlier container of this pod")
        gateway = build_gateway(loaded, redis, turn_lock)
        sessions = session_settings(documented)
        shared = share_sessions(gateway, sessions, redis)
        for warning in config_warnings(working, redis):
            _say(f"warning: {warning}")
        _say(
            f"starting on {loaded['gateway'].get('host')}:{loaded['gateway'].get('port')} "
            f"config={path} idempotency={idempotency_backend(working) or 'default'} "
            f"redis={describe_redis(redis)} turn_lock={(turn_lock or {}).get('backend', 'local')} "
            f"webhook sessions={'shared in Redis' if shared and shared.client else 'per replica'}"
            f"{' (encrypted)' if shared and shared.client and os.environ.get(SESSION_KEY_ENV) else ''}"
        )
        return asyncio.run(serve(gateway, path, drain_timeout(loaded)))
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line + exit code
        code = exit_code_for(exc)
        kind = "fatal config error" if code == EXIT_FATAL_CONFIG else f"gateway failed ({type(exc).__name__})"
        _say(f"{kind}: {redact(str(exc), _secrets(documented, redis))}")
        return code


if __name__ == "__main__":
    # Before the event loop owns signals, SIGTERM is a clean stop as well.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_OK))
    sys.exit(main())
