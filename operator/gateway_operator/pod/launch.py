"""Gateway pod launcher for praisonai-bot 0.1.16: the entry point of every gateway pod.

The operator ships this file and its ``gwop_*.py`` modules in the GatewayDeployment's ConfigMap,
mounted as a directory, and every pod runs::

    python3 /etc/gateway-operator/launch.py --config /etc/gateway-operator/gateway.yaml \\
        --workdir /var/lib/gateway/work --host 0.0.0.0 --port 8765

They import only the standard library, PyYAML and the packages of the gateway image (never
``gateway_operator``); ``gwop_upstream`` is the one module that names the gateway's private
names, and it checks every one of them before anything starts.

The modules, by job: gwop_config (the documented config and its translation), gwop_upstream (the
adapter), gwop_tls, gwop_migration (one SQLite replica -> Redis), gwop_sessions (shared session
history), gwop_schedules (scheduled jobs claimed once across the replicas), gwop_claims (in-flight
answers, claims released), gwop_leases (claims that free themselves), gwop_journal (the fail-closed
window and the outage journal), gwop_health (the launcher's own view in /health), gwop_serve (serve
and drain), gwop_contract (the names shared with the operator), gwop_redis and gwop_log
(shared helpers).

Exit codes follow the gateway protocol: 0 clean stop (including SIGTERM), 75 restartable failure,
78 fatal configuration error (a config the gateway cannot use, or a gateway release that lacks
what the launcher relies on).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import gwop_upstream as upstream
from gwop_claims import release_predecessor_claims
from gwop_config import (ConfigError, apply_bind, config_warnings, describe_redis,
                         drain_timeout, env_refs, guard_settings, idempotency_backend, read_documented,
                         redis_config_kwargs, redis_settings, session_settings, translate_config,
                         turn_lock_settings, write_working_copy)
from gwop_contract import (AUTH_TOKEN_ENV, EXIT_FATAL_CONFIG, EXIT_OK, EXIT_RESTART, GATEWAY_PORT, REDIS_PASSWORD_ENV,
                           REDIS_USERNAME_ENV, SESSION_KEY_ENV, SQLITE_MIGRATION_ENV, UNSUPPORTED_GATEWAY)
from gwop_log import last_words, redact, say
from gwop_migration import migrate_before_start
from gwop_serve import clear_stale_pid_lock, serve
from gwop_schedules import share_schedules
from gwop_sessions import share_sessions
from gwop_tls import name_tls_server


def build_gateway(loaded: Mapping[str, Any], redis: Optional[Mapping[str, Any]],
                  turn_lock: Optional[Mapping[str, Any]]) -> Any:
    gw = loaded.get("gateway") or {}
    try:
        return upstream.build_gateway(
            host=str(gw.get("host") or "127.0.0.1"), port=int(gw.get("port") or GATEWAY_PORT),
            allowed_origins=list(gw.get("allowed_origins") or []),
            auth_token=str(gw["auth_token"]) if gw.get("auth_token") else None,
            redis_kwargs=redis_config_kwargs(redis) if redis else None, turn_lock=turn_lock)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid gateway settings: {exc}") from None


def exit_code_for(exc: BaseException) -> int:
    """Fatal-config classes -> 78, anything else is restartable -> 75."""
    # Same classes the 0.1.16 CLI maps to 78 (a missing package included); a release without what
    # the launcher relies on cannot be fixed by a restart either.
    if isinstance(exc, (ConfigError, upstream.UpstreamMismatch, upstream.GatewayRejected, ValueError,
                        FileNotFoundError, ImportError)):
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
    # the long-poll /health (gwop_watch); none unless asked for
    parser.add_argument("--watch-port", type=int, default=env.get("GATEWAY_WATCH_PORT") or None)
    return parser.parse_args(argv)


def _secrets(documented: Mapping[str, Any], redis: Optional[Mapping[str, Any]]) -> List[Optional[str]]:
    """Values that must never reach a log line (env behind ``${VAR}`` + token)."""
    names = set(env_refs(documented)) | {AUTH_TOKEN_ENV, REDIS_USERNAME_ENV, REDIS_PASSWORD_ENV, SESSION_KEY_ENV}
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
        guard = guard_settings(documented)
        path = write_working_copy(working, args.workdir)
        versions = upstream.check()  # before anything reaches into the gateway
        loaded = upstream.load_checked(path)
        name_tls_server((redis or {}).get("tls_server_name"))
        migrate_before_start(redis, idempotency_backend(working), os.environ.get("HOME") or str(Path.home()),
                             os.environ.get(SQLITE_MIGRATION_ENV, ""), ttl=guard["record_ttl_seconds"])
        release_predecessor_claims(redis, idempotency_backend(working), os.environ.get("HOSTNAME", ""))
        if clear_stale_pid_lock(os.environ.get("HOME") or str(Path.home()), args.port):
            say("removed a stale gateway PID lock left by an earlier container of this pod")
        gateway = build_gateway(loaded, redis, turn_lock)
        upstream.set_record_ttl(gateway, guard["record_ttl_seconds"])  # before its store is built
        sessions = session_settings(documented)
        shared = share_sessions(gateway, sessions, redis, guard["fail_closed_seconds"])
        schedules = share_schedules(redis, os.environ.get("HOSTNAME", ""),
                                    os.environ.get("HOME") or str(Path.home()))
        for warning in config_warnings(working, redis):
            say(f"warning: {warning}")
        say(
            f"starting on {loaded['gateway'].get('host')}:{loaded['gateway'].get('port')} "
            f"config={path} idempotency={idempotency_backend(working) or 'default'} "
            f"redis={describe_redis(redis)} turn_lock={(turn_lock or {}).get('backend', 'local')} "
            f"webhook sessions={'shared in Redis' if shared and shared.client else 'per replica'}"
            f"{' (encrypted)' if shared and shared.client and os.environ.get(SESSION_KEY_ENV) else ''} "
            f"scheduled jobs={'shared in Redis' if schedules is not None else 'per replica'} "
            f"fail_closed={guard['fail_closed_seconds']:g}s claim_lease={guard['claim_lease_seconds']:g}s "
            f"gateway={' '.join(f'{p}={v}' for p, v in versions.items())}"
        )
        store_redis = redis if idempotency_backend(working) == "redis" else None
        return asyncio.run(serve(gateway, path, drain_timeout(loaded), guard, shared, store_redis,
                                 args.watch_port))
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line + exit code
        code = exit_code_for(exc)
        kind = (UNSUPPORTED_GATEWAY if isinstance(exc, upstream.UpstreamMismatch) else
                "fatal config error" if code == EXIT_FATAL_CONFIG else f"gateway failed ({type(exc).__name__})")
        last_words(f"{kind}: {redact(str(exc), _secrets(documented, redis))}")
        return code


if __name__ == "__main__":
    # Before the event loop owns signals, SIGTERM is a clean stop as well.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_OK))
    sys.exit(main())
