"""The one module that names what the launcher relies on inside the gateway's packages and offers no
public API: praisonai-bot's ``WebSocketGateway`` webhook path and Redis idempotency store,
praisonaiagents' agent history, uvicorn's server, redis-py's TLS connection classes.

Every such name is a ``Requirement`` below, checked when the process starts (``check`` before the
gateway is built, ``check_gateway`` on the built instance). A release that moved one of them is
refused with exit 78 and one line naming what is missing and the versions found: running without
one of them doubles messages or crosses conversations silently (a renamed ``_RECORD_LUA`` never
leaves fail-open; a handler that stops calling ``_hook_reserve`` bypasses the in-flight answer and
the outage journal; a renamed ``__chat_history_state`` mixes sessions). The other pod modules reach
these names only through the functions here. Written against praisonai-bot 0.1.16 with
praisonaiagents 1.7.17.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import gwop_contract as contract

# what the names below were read from (the gateway image's release)
WRITTEN_FOR = {"praisonai-bot": "0.1.16", "praisonaiagents": "1.7.17"}
HOOK_ROUTE = "/hooks/{path:path}"


class UpstreamMismatch(Exception):
    """The installed gateway lacks a name the launcher relies on: a fatal configuration (78), since
    restarting the same image cannot help."""


def versions() -> Dict[str, str]:
    """The installed versions of the packages the requirements are read from."""
    from importlib import metadata
    found = {}
    for package in WRITTEN_FOR:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


# -- the requirements ----------------------------------------------------------------------------

def _gateway_class() -> Any:
    from praisonai_bot.gateway.server import WebSocketGateway
    return WebSocketGateway


def _redis_store_class() -> Any:
    from praisonai_bot.bots._idempotency import RedisIdempotencyStore
    return RedisIdempotencyStore


def _source_has(function: Callable[[], Any], *needles: str) -> bool:
    source = inspect.getsource(function())
    return all(needle in source for needle in needles)


def _store_state_present() -> bool:
    """A store over no client (its constructor only keeps the arguments and mints the token) has
    the attributes the launcher reads, and an owner token long enough to tell replicas apart."""
    store = _redis_store_class()(object(), prefix="p:hookidem:")
    return (all(hasattr(store, n) for n in ("_client", "_prefix", "_token", "_ttl_ms", "_inflight_ms"))
            and len(store._token) >= 16)


def _assigns(function: Callable[[], Any], attribute: str) -> bool:
    """``function``'s source assigns ``self.<attribute>`` (that exact name, not a longer one)."""
    return re.search(rf"self\.{re.escape(attribute)}\s*(:[^=\n]*)?=(?!=)", inspect.getsource(function())) is not None


def _is_static(owner: Callable[[], Any], name: str) -> bool:
    return isinstance(inspect.getattr_static(owner(), name), staticmethod)


def _callable(owner: Callable[[], Any], name: str) -> bool:
    return callable(getattr(owner(), name))


@dataclass(frozen=True)
class Requirement:
    """One name the launcher relies on: ``what`` says where it lives, ``why`` what breaks without it,
    ``present`` looks it up (an exception counts as missing)."""
    what: str
    why: str
    present: Callable[[], bool]

    def holds(self) -> bool:
        try:
            return bool(self.present())
        except Exception:  # noqa: BLE001 - an import or attribute error is the answer: missing
            return False


REQUIREMENTS: Tuple[Requirement, ...] = (
    Requirement("WebSocketGateway._run_hook(hook, payload)", "each webhook turn runs on its session's history",
                lambda: list(inspect.signature(_gateway_class()._run_hook).parameters)[:3] == ["self", "hook", "payload"]),
    Requirement("WebSocketGateway._dispatch_agent_turn (static)", "each webhook turn runs on its session's history",
                lambda: _is_static(_gateway_class, "_dispatch_agent_turn")),
    Requirement("WebSocketGateway._hook_reserve", "in-flight duplicates, the outage journal",
                lambda: _callable(_gateway_class, "_hook_reserve")),
    Requirement("WebSocketGateway._hook_record", "the outage journal", lambda: _callable(_gateway_class, "_hook_record")),
    Requirement("WebSocketGateway._hook_release", "the outage journal, claims released at the drain",
                lambda: _callable(_gateway_class, "_hook_release")),
    Requirement("the /hooks/ handler calls self._hook_reserve/_hook_record/_hook_release",
                "in-flight duplicates, the outage journal, claims released at the drain",
                lambda: _source_has(lambda: _gateway_class().start, "self._hook_reserve(", "self._hook_record(",
                                    "self._hook_release(", f'Route("{HOOK_ROUTE}"')),
    Requirement("the /health route answers self.health()", "/health carries the launcher's own view",
                lambda: _source_has(lambda: _gateway_class().start, "JSONResponse(self.health())", 'Route("/health"')),
    Requirement("WebSocketGateway._get_hook_idem_store", "claims leased from the first webhook on",
                lambda: _callable(_gateway_class, "_get_hook_idem_store")),
    Requirement("WebSocketGateway._hook_idem", "the Redis store the journal and the claims use",
                lambda: _assigns(lambda: _gateway_class().__init__, "_hook_idem")),
    Requirement("WebSocketGateway._hook_idempotency_ttl", "a store built while Redis did not answer is the Redis one",
                lambda: _assigns(lambda: _gateway_class().__init__, "_hook_idempotency_ttl")),
    Requirement("WebSocketGateway._get_hook_idem_store builds the store with ttl_seconds=self._hook_idempotency_ttl",
                "a record lives spec.redis.recordTTLSeconds, not 0.1.16's fixed 24 h",
                # a release without the method at all is named by its own requirement above
                lambda: not hasattr(_gateway_class(), "_get_hook_idem_store")
                or _source_has(lambda: _gateway_class()._get_hook_idem_store, "ttl_seconds=self._hook_idempotency_ttl")),
    Requirement("WebSocketGateway._server (uvicorn.Server)", "the drain's bound, the in-flight answer",
                lambda: _assigns(lambda: _gateway_class().__init__, "_server")),
    Requirement("RedisIdempotencyStore._client/_prefix/_token/_ttl_ms/_inflight_ms",
                "claims released by owner, the journal's records",
                _store_state_present),
    Requirement("RedisIdempotencyStore._redis_key", "the journal's records", lambda: _callable(_redis_store_class, "_redis_key")),
    Requirement("RedisIdempotencyStore._RECORD_LUA/_RELEASE_LUA/_RECORDED",
                "the journal's owner-checked records, each claim released by its own token",
                lambda: isinstance(_redis_store_class()._RECORD_LUA, str) and isinstance(_redis_store_class()._RELEASE_LUA, str)
                and _redis_store_class()._RECORDED == "recorded"),
    Requirement("RedisIdempotencyStore(client, prefix=, ttl_seconds=)",
                "a store built while Redis did not answer is the Redis one",
                lambda: _redis_store_class()(object(), prefix="p:", ttl_seconds=5)._ttl_ms == 5000),
    Requirement("RedisIdempotencyStore._mark_runtime_degraded(op, error) / _runtime_degraded",
                "the journal sees the store fail open",
                lambda: list(inspect.signature(_redis_store_class()._mark_runtime_degraded).parameters) == ["self", "op", "error"]
                and _source_has(lambda: _redis_store_class()._mark_runtime_degraded, "self._runtime_degraded = True")),
    Requirement("RedisIdempotencyStore._mark_runtime_recovered", "/health recovers once Redis answers",
                lambda: _callable(_redis_store_class, "_mark_runtime_recovered")),
    Requirement("praisonai_bot.bots._session.record_durability_degraded(component, *, reason)",
                "/health names a Redis that refuses writes",
                lambda: {"component", "reason"} <= set(inspect.signature(
                    __import__("praisonai_bot.bots._session").bots._session.record_durability_degraded).parameters)),
    Requirement("Agent.__chat_history_state (AsyncSafeState)", "conversations never cross",
                lambda: _source_has(_agent_class, "self.__chat_history_state = AsyncSafeState(")
                and _async_safe_state() is not None),
    Requirement("HookConfig.resolve_session_key", "each webhook turn runs on its session's history",
                lambda: _callable(_hook_config_class, "resolve_session_key")),
    Requirement("uvicorn.Config.timeout_graceful_shutdown", "the drain's bound",
                lambda: hasattr(__import__("uvicorn").Config(app=None), "timeout_graceful_shutdown")),
    Requirement("GatewayPIDLock: ~/.praisonai/gateway-<host>-<port>.pid", "a replica restarted after SIGKILL starts",
                lambda: _source_has(lambda: _pid_lock_class().__init__, 'f"gateway-{safe_host}-{port}.pid"')),
    Requirement("praisonaiagents ConfigYamlScheduleStore._file_lock/_load/_save/_reload_locked/_jobs/_job_state",
                "a scheduled job fires once across the replicas", lambda: _schedule_store_shape()),
    Requirement("praisonai_bot.scheduler.config_loader._CONFIG_JOB_PREFIX",
                "a replica's own scheduled jobs carried into the shared store, not the declared ones",
                lambda: isinstance(__import__("praisonai_bot.scheduler.config_loader").scheduler.config_loader
                                   ._CONFIG_JOB_PREFIX, str)),
    Requirement("redis-py SSLConnection._wrap_socket_with_ssl / async _connection_arguments",
                "spec.redis.tls.serverName", lambda: _callable(lambda: __import__("redis.connection").connection.SSLConnection,
                                                               "_wrap_socket_with_ssl")
                and _callable(lambda: __import__("redis.asyncio.connection").asyncio.connection.SSLConnection,
                              "_connection_arguments")),
)


def _agent_class() -> Any:
    from praisonaiagents import Agent
    return Agent


def _async_safe_state() -> Any:
    from praisonaiagents.agent.async_safety import AsyncSafeState
    return AsyncSafeState


def _hook_config_class() -> Any:
    from praisonaiagents.gateway.hooks import HookConfig
    return HookConfig


def _schedule_store_class() -> Any:
    from praisonaiagents.scheduler.config_store import ConfigYamlScheduleStore
    return ConfigYamlScheduleStore


def _schedule_store_shape() -> bool:
    """The file store's cross-process critical section is ``_file_lock()`` around ``_reload_locked()``
    (``_jobs`` and ``_job_state`` emptied, then ``_load()``) and ``_save() -> bool``, and its claim
    runs inside it; ``set_default_store`` is what the gateway's tick and the chat tools read."""
    cls = _schedule_store_class()
    from praisonaiagents import scheduler
    return (all(callable(getattr(cls, n)) for n in ("_file_lock", "_load", "_save", "_reload_locked", "claim_due",
                                                        "complete", "update"))
            and _source_has(lambda: cls._reload_locked, "self._jobs = {}", "self._job_state = {}", "self._load()")
            and _source_has(lambda: cls.claim_due, "self._file_lock()", "self._reload_locked()", "self._save()")
            and list(inspect.signature(cls.claim_due).parameters) == ["self", "now", "owner_id", "lease_seconds"]
            and callable(scheduler.set_default_store) and callable(scheduler.get_default_store))


def _pid_lock_class() -> Any:
    from praisonai_bot.gateway.port_utils import GatewayPIDLock
    return GatewayPIDLock


def missing(requirements: Tuple[Requirement, ...] = REQUIREMENTS) -> List[str]:
    """What the installed packages lack, by ``Requirement.what``."""
    return [r.what for r in requirements if not r.holds()]


def refusal(absent: List[str], found: Mapping[str, str]) -> str:
    """The one line a refused start says (also the container's termination message)."""
    have = ", ".join(f"{p} {v}" for p, v in found.items())
    written = ", ".join(f"{p} {v}" for p, v in WRITTEN_FOR.items())
    return (f"this gateway ({have}) lacks what the launcher relies on: {'; '.join(absent)} "
            f"(written for {written}); refusing to start rather than run without exactly-once")


def check() -> Dict[str, str]:
    """Every requirement, at start; raises UpstreamMismatch naming what is missing. Returns the
    versions found."""
    found = versions()
    absent = missing()
    if absent:
        raise UpstreamMismatch(refusal(absent, found))
    return found


def check_gateway(gateway: Any) -> None:
    """What only the built instance shows: the attributes its constructor sets."""
    absent = [name for name in ("_hook_idem", "_server") if name not in vars(gateway)]
    if absent:
        raise UpstreamMismatch(refusal([f"WebSocketGateway.{n}" for n in absent], versions()))


# -- building the gateway -------------------------------------------------------------------------

class GatewayRejected(Exception):
    """The gateway's own loader refused the config (schema, ``${VAR}``)."""


def load_checked(path: str) -> Dict[str, Any]:
    """Run the gateway's own loader (schema checks + ``${VAR}`` expansion)."""
    try:
        return _gateway_class().load_gateway_config(path)
    except (ValueError, FileNotFoundError) as exc:
        raise GatewayRejected(f"gateway rejected the config: {exc}") from None


def build_gateway(host: str, port: int, allowed_origins: List[str], auth_token: Optional[str],
                  redis_kwargs: Optional[Mapping[str, Any]], turn_lock: Optional[Mapping[str, Any]]) -> Any:
    """The gateway with the settings 0.1.16 only honours from Python (``start_with_config`` never
    applies ``push``, ``turn_lock``, ``allowed_origins`` or ``auth_token`` from YAML)."""
    from praisonaiagents.gateway.config import GatewayConfig, PushConfig, RedisConfig, TurnLockConfig
    config = GatewayConfig(
        host=host, port=port, allowed_origins=allowed_origins, auth_token=auth_token,
        push=PushConfig(redis=RedisConfig(**redis_kwargs) if redis_kwargs else None),
        turn_lock=TurnLockConfig.from_dict(dict(turn_lock) if turn_lock else None),
    )
    gateway = _gateway_class()(config=config)
    check_gateway(gateway)
    return gateway


def set_record_ttl(gateway: Any, seconds: float) -> None:
    """How long a webhook that ran stays recorded (spec.redis.recordTTLSeconds): 0.1.16 fixes
    ``_hook_idempotency_ttl`` at 24 h in its constructor and builds its store (Redis, SQLite or
    memory) with it, on the first webhook. Set before that store is built (right after
    ``build_gateway``): a store already built keeps its own, so that is refused."""
    if idempotency_store(gateway) is not None:
        raise RuntimeError("the record TTL must be set before the gateway's idempotency store is built")
    gateway._hook_idempotency_ttl = float(seconds)


# -- the webhook path -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimCalls:
    """The gateway's three idempotency calls, as its /hooks/ handler makes them."""
    reserve: Callable[[str], bool]
    record: Callable[[str], None]
    release: Callable[[str], None]


def claim_calls(gateway: Any) -> ClaimCalls:
    return ClaimCalls(gateway._hook_reserve, gateway._hook_record, gateway._hook_release)


def set_claim_calls(gateway: Any, calls: ClaimCalls) -> None:
    gateway._hook_reserve, gateway._hook_record, gateway._hook_release = calls.reserve, calls.record, calls.release


def turn_calls(gateway: Any) -> Tuple[Callable[..., Any], Callable[..., Any]]:
    """``_run_hook(hook, payload, ...)`` and the static ``_dispatch_agent_turn(agent, content, ...)``."""
    return gateway._run_hook, gateway._dispatch_agent_turn


def set_turn_calls(gateway: Any, run_hook: Callable[..., Any], dispatch: Callable[..., Any]) -> None:
    gateway._run_hook, gateway._dispatch_agent_turn = run_hook, dispatch


def session_key(hook: Any, payload: Any) -> str:
    return hook.resolve_session_key(payload)


def set_agent_history(agent: Any, history: List[Dict[str, Any]]) -> None:
    """Give ``agent`` (a copy of the hook's one Agent) a history of its own: praisonaiagents keeps
    it in the private ``AsyncSafeState`` the public ``chat_history`` reads."""
    agent._Agent__chat_history_state = _async_safe_state()([dict(m) for m in history])


def health_call(gateway: Any) -> Callable[[], Any]:
    """What ``GET /health`` answers (the route calls ``self.health()`` at each request)."""
    return gateway.health


def set_health_call(gateway: Any, call: Callable[[], Any]) -> None:
    gateway.health = call


def server(gateway: Any) -> Any:
    """The gateway's uvicorn server, or None before it runs."""
    return gateway._server


def hook_route(gateway: Any) -> Any:
    """The starlette Route of ``/hooks/{path}``, through the middleware, or None."""
    from starlette.routing import Route
    app = getattr(server(gateway), "config", None)
    app = app.app if app is not None else None
    for _ in range(8):  # through middleware (each holds the next as .app) to the router
        routes = getattr(app, "routes", None)
        if routes is not None:
            return next((r for r in routes if isinstance(r, Route) and r.path == HOOK_ROUTE), None)
        app = getattr(app, "app", None)
    return None


# -- the Redis idempotency store ------------------------------------------------------------------

@dataclass(frozen=True)
class RedisStore:
    """The gateway's Redis idempotency store, as the launcher uses it: its client, its key layout
    (``prefix + key``), its owner token and leases, and its owner-checked record."""
    store: Any

    @property
    def client(self) -> Any:
        return self.store._client

    @property
    def prefix(self) -> str:
        return str(self.store._prefix)

    @property
    def token(self) -> str:
        return str(self.store._token)

    @property
    def ttl_ms(self) -> int:
        return int(self.store._ttl_ms)

    @property
    def inflight_ms(self) -> int:
        return int(self.store._inflight_ms)

    def key(self, key: str) -> str:
        return self.store._redis_key(key)

    def record(self, key: str, left_ms: int, token: str) -> bool:
        """The store's own owner-checked record: over nothing, the claim ``token`` names, or a record.
        False when another claim holds the key (nothing written)."""
        return bool(self.client.eval(self.store._RECORD_LUA, 1, self.key(key), token, self.store._RECORDED, left_ms))

    def release(self, key: str, token: str) -> bool:
        """The store's own compare-and-delete of the claim ``token`` names."""
        return bool(self.client.eval(self.store._RELEASE_LUA, 1, self.key(key), token))

    @contextlib.contextmanager
    def acting_as(self, token: str) -> Iterator[None]:
        """The store's own reserve/record/release, for the one synchronous call inside, under
        ``token`` (0.1.16 has one token per store; the launcher gives each claim its own). The
        gateway makes those calls on the event loop's thread, one at a time, so the swap is
        seen by that call alone."""
        saved, self.store._token = self.store._token, token
        try:
            yield
        finally:
            self.store._token = saved

    def lease(self, inflight_ms: int) -> None:
        """Before its first claim: the in-flight lease its claims carry."""
        self.store._inflight_ms = int(inflight_ms)

    def is_recorded(self, key: str) -> bool:
        return self.client.get(self.key(key)) in (b"recorded", "recorded")

    def degraded(self) -> bool:
        """Failed open at runtime (0.1.16 sets the attribute at the first failure only: ``check``
        verified that ``_mark_runtime_degraded`` is what sets it)."""
        return bool(vars(self.store).get("_runtime_degraded", False))

    def mark_degraded(self, op: str, error: BaseException) -> None:
        """What the store's own failing call does (its degraded fact, and /health's), for a failure
        the launcher met on a connection of its own (a claim renewal round); the listeners
        ``on_runtime_degraded`` added are not told (the launcher is the one telling)."""
        type(self.store)._mark_runtime_degraded(self.store, op, error)

    def mark_recovered(self) -> None:
        """What the store's next successful call does: clears its degraded fact (and /health's)."""
        self.store._mark_runtime_recovered()


def idempotency_store(gateway: Any) -> Any:
    """The store the gateway built (on its first webhook), or None."""
    return gateway._hook_idem


def build_store(gateway: Any) -> Any:
    """The gateway's store, built now if it is not yet (what its first reserve would do)."""
    return gateway._get_hook_idem_store()


def install_redis_store(gateway: Any, client: Any, prefix: str) -> RedisStore:
    """Put in place, as the gateway's store, the Redis store 0.1.16 builds when its one PING answers
    (same class, prefix and TTL; ``client`` made as its own), marked degraded as 0.1.16 marks a store
    that lost Redis at runtime (which also replaces the build-time fact in /health)."""
    store = _redis_store_class()(client, prefix=contract.store_key(prefix), ttl_seconds=gateway._hook_idempotency_ttl)
    store._mark_runtime_degraded("build", ConnectionError("Redis did not answer when the store was built"))
    gateway._hook_idem = store
    return RedisStore(store)


def on_runtime_degraded(store: RedisStore, told: Callable[[BaseException], None]) -> None:
    """Call ``told(error)`` after each failure the store records (its ``_mark_runtime_degraded(op,
    error)``, whose signature ``check`` verified; 0.1.16 itself reports only the first), so that the
    launcher names a Redis that refuses at the failing call, not at its next probe."""
    original = store.store._mark_runtime_degraded

    def marked(op: str, error: Exception) -> None:
        original(op, error)
        told(error)

    store.store._mark_runtime_degraded = marked


def record_idempotency_degraded(reason: str) -> None:
    """Replace the reason /health gives for ``durability:idempotency`` (0.1.16's registry)."""
    from praisonai_bot.bots._session import record_durability_degraded
    record_durability_degraded("idempotency", reason=reason)


def redis_store(gateway: Any) -> Optional[RedisStore]:
    """The gateway's store when it is the Redis one (not SQLite, memory, or not built yet)."""
    store = idempotency_store(gateway)
    return RedisStore(store) if isinstance(store, _redis_store_class()) else None


# -- the schedule store ---------------------------------------------------------------------------

def shared_schedule_store(backend: Any, local_dir: str) -> Any:
    """praisonaiagents' own schedule store (its claim, its lease, its misfire and retire rules), with
    its cross-process critical section moved from a file lock and a YAML file to ``backend``:
    ``backend.lock()`` (a context manager, re-entrant in one thread), ``backend.read() -> dict``
    (``{"schedules": {id: job dict}, "job_state": {id: dict}}``) and ``backend.write(dict) -> bool``
    (False when the write did not happen: the claim is then dropped, as the file store drops one it
    could not save). Its run history stays in ``local_dir`` (per replica)."""
    import contextlib
    import os
    from praisonaiagents.scheduler.models import ScheduleJob
    base = _schedule_store_class()

    class SharedScheduleStore(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self._gwop_loading = False  # no Redis call while the base constructor runs
            super().__init__(config_path=os.path.join(local_dir, "config.yaml"))
            self._gwop_loading = True

        @contextlib.contextmanager
        def _file_lock(self) -> Any:
            with backend.lock():
                yield

        def _load(self) -> None:
            if not self._gwop_loading:
                return
            doc = backend.read()
            self._jobs = {}
            for job_id, data in (doc.get("schedules") or {}).items():
                if isinstance(data, dict) and data.get("name"):
                    data.setdefault("id", job_id)
                    job = ScheduleJob.from_dict(data)
                    self._jobs[job.id] = job
            self._job_state = {str(k): v for k, v in (doc.get("job_state") or {}).items() if isinstance(v, dict)}

        def _save(self) -> bool:
            return backend.write({"schedules": {job.id: job.to_dict() for job in self._jobs.values()},
                                  "job_state": dict(self._job_state)})

        def _fresh(self) -> None:
            """The replicas' latest jobs before a read (the chat tools' list, the declarative loader's
            get); Redis unusable: the last ones read."""
            try:
                with self._lock:
                    self._load()
            except Exception as exc:  # noqa: BLE001 - told to the backend, which says it once
                backend.failed(exc)

        def get(self, job_id: str) -> Any:
            self._fresh()
            return super().get(job_id)

        def get_by_name(self, name: str, principal: Optional[str] = None) -> Any:
            self._fresh()
            return super().get_by_name(name, principal)

        def list(self, agent_id: Optional[str] = None, principal: Optional[str] = None) -> Any:
            self._fresh()
            return super().list(agent_id, principal)

        def claim_due(self, now: float, owner_id: str, lease_seconds: float = 300.0) -> Any:
            # Redis unusable: nothing is claimed, so nothing runs twice; 0.1.16's tick would otherwise
            # back off up to 300 s after a few failed ticks
            try:
                return super().claim_due(now, owner_id, lease_seconds)
            except Exception as exc:  # noqa: BLE001
                backend.failed(exc)
                return []

        def update(self, job: Any) -> None:
            # a copy read before another replica's claim must not move the job's last run back, nor its
            # run count (0.1.16's declarative loader reads, then updates with the config's job: a count
            # of 0, and a last run from before the claim: the job would be due again and fire twice)
            with self._lock, self._file_lock():
                self._reload_locked()
                existing = self._jobs.get(job.id)
                if existing is not None:
                    if (existing.last_run_at or 0) > (job.last_run_at or 0):
                        job.last_run_at = existing.last_run_at
                    job.run_count = max(job.run_count, existing.run_count)
                super().update(job)

    return SharedScheduleStore()


def file_schedule_store(path: str) -> Any:
    """praisonaiagents' own file store over ``path`` (a replica's jobs before the store was shared)."""
    return _schedule_store_class()(config_path=path)


def schedule_data_dir() -> str:
    """Where praisonaiagents' own file store keeps a replica's jobs (``<data dir>/config.yaml``)."""
    from praisonaiagents.paths import get_data_dir
    return str(get_data_dir())


def declarative_job(job: Any) -> bool:
    """A job the gateway loaded from gateway.yaml's ``schedules:`` (its id carries the loader's prefix)."""
    from praisonai_bot.scheduler.config_loader import _CONFIG_JOB_PREFIX
    return str(job.id).startswith(_CONFIG_JOB_PREFIX)


def install_schedule_store(store: Any) -> None:
    """Every reader of the schedule store (the gateway's tick, its declarative loader, the chat tools)
    uses ``store`` (praisonaiagents' documented override)."""
    from praisonaiagents.scheduler import set_default_store
    set_default_store(store)


# -- redis-py's TLS connections -------------------------------------------------------------------

def connection_classes_naming(server_name: str) -> Tuple[Any, Any]:
    """Subclasses of redis-py's sync and async ``SSLConnection`` that verify ``server_name`` and
    send it as SNI instead of the host connected to (redis-py has no URL option for it)."""
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection

    class NamedSSLConnection(sync_connection.SSLConnection):
        def _wrap_socket_with_ssl(self, sock: Any) -> Any:
            host, self.host = self.host, server_name  # the one name it is read by
            try:
                return super()._wrap_socket_with_ssl(sock)
            finally:
                self.host = host

    class NamedAsyncSSLConnection(async_connection.SSLConnection):
        def _connection_arguments(self) -> Any:
            return {**super()._connection_arguments(), "server_hostname": server_name}

    return NamedSSLConnection, NamedAsyncSSLConnection
