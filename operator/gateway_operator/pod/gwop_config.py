"""The gateway's configuration as the launcher reads it: the documented ``gateway.yaml`` the operator
renders, translated into the shape praisonai-bot's loader accepts, and the settings the launcher
applies itself (``push.redis``, ``turn_lock``, ``session_history``, the drain). Pure but for
reading the mounted file and writing the working copy; no praisonai import (those live in
gwop_upstream).

Why a translation at all: 0.1.16's CLI rejects the documented nested ``hooks: {idempotency,
hooks}`` form, never applies top-level ``push:`` or ``turn_lock:``, and never applies
``gateway.allowed_origins`` / ``gateway.auth_token``; so ``store_backend: redis`` always ended in
the per-replica fallback. The launcher writes a working copy in the accepted shape and builds
the gateway in Python with the rest (gwop_upstream.build_gateway).
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import yaml

from gwop_contract import GUARD_KEY, SESSION_HISTORY_KEY

WORKING_COPY_NAME = "gateway.yaml"
DEFAULT_DRAIN_TIMEOUT = 10.0
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
    cfg.pop(GUARD_KEY, None)            # the launcher's own (guard_settings)
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


# the documented config's launcher-only section (SESSION_HISTORY_KEY), written by the operator from spec.sessions:
# ``session_history: {store: redis|replica, max_messages, ttl_seconds, max_sessions}``


def session_settings(documented: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    raw = documented.get(SESSION_HISTORY_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("store") not in ("redis", "replica"):
        raise ConfigError(f"{SESSION_HISTORY_KEY}.store must be redis or replica")
    return {"store": raw["store"], "max_messages": _as_int(raw.get("max_messages", 50), "max_messages"),
            "ttl_seconds": _as_int(raw.get("ttl_seconds", 604800), "ttl_seconds"),
            "max_sessions": _as_int(raw.get("max_sessions", 10_000), "max_sessions")}


def drain_timeout(loaded: Mapping[str, Any]) -> float:
    try:
        return float((loaded.get("gateway") or {}).get("drain_timeout") or DEFAULT_DRAIN_TIMEOUT)
    except (TypeError, ValueError):
        return DEFAULT_DRAIN_TIMEOUT


# the documented config's other launcher-only section, written by the operator from spec.redis and
# spec.maxRequestBodyBytes:
# ``idempotency_guard: {fail_closed_seconds, claim_lease_seconds, record_ttl_seconds, max_body_bytes}`` (GUARD_KEY)
DEFAULT_FAIL_CLOSED_SECONDS = 30.0
DEFAULT_CLAIM_LEASE_SECONDS = 60.0
MIN_CLAIM_LEASE_SECONDS = 10.0
# a dead holder's claim must free within 90 s: the lease is at most this (the operator's CRD says the same)
MAX_CLAIM_LEASE_SECONDS = 60.0
# how long a recorded webhook stays deduplicated: 72 h by default (Stripe retries for 3 days; 0.1.16's own
# 24 h is shorter), from 1 hour to 7 days
DEFAULT_RECORD_TTL_SECONDS = 72 * 3600.0
MIN_RECORD_TTL_SECONDS, MAX_RECORD_TTL_SECONDS = 3600.0, 7 * 24 * 3600.0
# the largest webhook body a replica reads (gwop_limits answers 413 past it); 1 MiB unless the operator says
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MIN_MAX_BODY_BYTES = 1024


def guard_settings(documented: Mapping[str, Any]) -> Dict[str, float]:
    """How long a replica that cannot ask Redis answers 503 before it fails open
    (``fail_closed_seconds``, 0: fail open at once as 0.1.16 does), the in-flight claim's lease
    (``claim_lease_seconds``: renewed by its holder while the turn runs, so a dead holder's claim
    goes within one lease, at most 60 s so that it goes within 90 s), how long a webhook that ran
    stays recorded (``record_ttl_seconds``, 1 hour to 7 days), and the largest webhook body read
    (``max_body_bytes``). A value outside its bounds is a ConfigError (exit 78), never clamped."""
    raw = documented.get(GUARD_KEY)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{GUARD_KEY} must be a mapping")
    closed = _as_float(raw.get("fail_closed_seconds", DEFAULT_FAIL_CLOSED_SECONDS), f"{GUARD_KEY}.fail_closed_seconds")
    lease = _as_float(raw.get("claim_lease_seconds", DEFAULT_CLAIM_LEASE_SECONDS), f"{GUARD_KEY}.claim_lease_seconds")
    ttl = _as_float(raw.get("record_ttl_seconds", DEFAULT_RECORD_TTL_SECONDS), f"{GUARD_KEY}.record_ttl_seconds")
    body = _as_int(raw.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), f"{GUARD_KEY}.max_body_bytes")
    if closed < 0:
        raise ConfigError(f"{GUARD_KEY}.fail_closed_seconds must be 0 or more")
    if lease < MIN_CLAIM_LEASE_SECONDS:
        raise ConfigError(f"{GUARD_KEY}.claim_lease_seconds must be at least {MIN_CLAIM_LEASE_SECONDS:g}")
    if lease > MAX_CLAIM_LEASE_SECONDS:
        raise ConfigError(f"{GUARD_KEY}.claim_lease_seconds is {lease:g}: it must be at most "
                          f"{MAX_CLAIM_LEASE_SECONDS:g}, so that the claims of a replica killed or cut off mid-turn "
                          "free within 90 s and the provider's retry runs the message elsewhere")
    if not MIN_RECORD_TTL_SECONDS <= ttl <= MAX_RECORD_TTL_SECONDS:
        raise ConfigError(f"{GUARD_KEY}.record_ttl_seconds is {ttl:g}: it must be {MIN_RECORD_TTL_SECONDS:g} to "
                          f"{MAX_RECORD_TTL_SECONDS:g} (1 hour to 7 days)")
    if body < MIN_MAX_BODY_BYTES:
        raise ConfigError(f"{GUARD_KEY}.max_body_bytes must be at least {MIN_MAX_BODY_BYTES}")
    return {"fail_closed_seconds": closed, "claim_lease_seconds": lease, "record_ttl_seconds": ttl,
            "max_body_bytes": body}


def id_templates(documented: Mapping[str, Any]) -> Dict[str, Optional[str]]:
    """The ``idempotency_key`` template of each enabled hook of the documented config, by path (as the
    gateway's ``get_hook`` normalises it: whitespace and '/' stripped); None where the hook has none
    (the gateway then hashes the whole payload). What gwop_limits.refusal needs when it is handed no
    gateway."""
    hooks = documented.get("hooks")
    entries = hooks.get("hooks") if isinstance(hooks, Mapping) else hooks
    found: Dict[str, Optional[str]] = {}
    for hook in entries if isinstance(entries, list) else []:
        if isinstance(hook, Mapping) and hook.get("enabled", True) is not False and hook.get("path"):
            template = hook.get("idempotency_key")
            found[str(hook["path"]).strip().strip("/")] = str(template) if template else None
    return found


def _as_float(value: Any, field: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{field} must be a number") from None
