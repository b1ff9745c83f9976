"""What the Redis probe says to a Redis, and what it makes of the answers: the protocol.

Two scripts, each a pipeline or two over a connection of redis_connection.py:

- the full probe (a full pass, on a fresh connection closed after): the ``SET NX PX`` round trip
  under the gateway's prefix, every command the gateway needs (redis_acl.COMMANDS), each tried
  once on the probe's own keys, and the store's facts (the canary, INFO, CONFIG GET);
- the observation probe (between full passes, over the KeptConnection): only what can change
  without a spec change (the round trip, the canary, ``run_id``, the migration marker).

Both say every failure the same way (``_failure``: a refused password, a NOPERM, a TLS failure,
no answer), in core/probe_wording.py's words. ``carried`` reads the leaving replicas' marks over the
kept connection. Where the probe may connect, and what an unprivileged target is told, is
redis_guard.py's; the bounds around a probe are redis_probe.py's.
"""
from __future__ import annotations

import asyncio
import re
import secrets
import ssl
from dataclasses import replace
import time
from typing import Any, Sequence

import redis

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients import resp
from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.clients.redis_connection import Credentials, KeptConnection, connect
from gateway_operator.core import probe_wording as say
from gateway_operator.core.dedup_history import CANARY_KEY, StoreFacts
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.pod.gwop_contract import carried_key, migrated_key


# the leaving replicas' words read in one probe; more wait for the next, and one whose wait runs out
# first counts as having left its journal (unrecorded.settle): an announcement too many, never one missed
MAX_MARKS = 16


async def carried(kept: KeptConnection | None, prefix: str, pods: Sequence[str], timeout: float) -> frozenset[str]:
    """Which of ``pods`` said at their stop that their journal is all in Redis
    (``<prefix>gwop-carried:<pod>``): read over the connection the last successful probe left open,
    within ``timeout``; none when there is no such connection or the read fails."""
    client, asked = (kept.client if kept is not None else None), list(pods)[:MAX_MARKS]
    if client is None or not asked:
        return frozenset()
    try:
        async with fair_timeout(timeout):
            values = _raised(await client.execute([("GET", carried_key(prefix, pod)) for pod in asked]))
    except (redis.RedisError, OSError, asyncio.TimeoutError):
        return frozenset()
    return frozenset(pod for pod, value in zip(asked, values) if value is not None)


async def exchange(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                   kept: KeptConnection | None = None, base: StoreFacts | None = None) -> ProbeResult:
    """``kept`` and ``base`` (the last full probe's store facts): an observation probe, over the
    kept connection (see KeptConnection). Without them: a full probe on a fresh connection."""
    if kept is not None and base is not None:
        return await _observe(target, host, credentials, timeout, kept, base)
    client = None
    try:
        client = await connect(target, host, credentials, timeout)
        async with fair_timeout(timeout):
            return await _commands(client, target, credentials)
    except Exception as e:  # noqa: BLE001 - said as _failure says it, or raised again
        return _failure(e, target, credentials, timeout)
    finally:
        if client is not None:
            client.close()


async def _observe(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                   kept: KeptConnection, base: StoreFacts) -> ProbeResult:
    key = (host, target.port, target.db, target.tls, target.server_name, target.tls_options, credentials)
    reused = kept.take(key) is not None
    started = time.monotonic()
    result = await _observed(target, host, credentials, timeout, kept, key, base)
    # a kept connection the server closed while idle fails at once: once more, afresh; one
    # that waited out the timeout met a server that hangs, and a second wait would only
    # double how long the outage takes to show
    if reused and result.reason == reasons.CONNECTION_FAILED and time.monotonic() - started < timeout / 2:
        kept.swap(None, None)
        result = await _observed(target, host, credentials, timeout, kept, key, base)
    if not result.ok:   # kept only after a probe that succeeded
        kept.swap(None, None)
    return result


async def _observed(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                    kept: KeptConnection, key: tuple[Any, ...], base: StoreFacts) -> ProbeResult:
    """One observation probe over the connection kept for ``key``, opened (and kept) when there
    is none; whatever was raised, as the full probe says it."""
    try:
        client = kept.take(key)
        if client is None:
            kept.swap(None, None)   # one opened for other credentials or another address
            client = await connect(target, host, credentials, timeout)
            kept.swap(key, client)
        async with fair_timeout(timeout):
            return await _light_commands(client, target, base)
    except Exception as e:  # noqa: BLE001 - said as _failure says it, or raised again
        return _failure(e, target, credentials, timeout)


async def _light_commands(client: resp.Connection, target: RedisTarget, base: StoreFacts) -> ProbeResult:
    """One round trip: the ``SET NX PX`` read back and deleted, the canary, the migration marker
    and, unless the full probe found INFO refused, what INFO says can change (``LIVE_SECTIONS``)."""
    where, prefix = target.endpoint, target.prefix
    key, token = f"{prefix}operator-probe:{secrets.token_hex(8)}", secrets.token_hex(8)
    commands: list[tuple[str, ...]] = [("SET", key, token, "NX", "PX", "10000"), ("GET", key),
                                       ("GET", f"{prefix}{CANARY_KEY}"), ("GET", migrated_key(prefix)),
                                       ("DEL", key)]
    if "INFO" not in base.refused:
        commands += [("INFO", section) for section in LIVE_SECTIONS]
    answers = await client.execute(commands)
    stored, read = _raised(answers[:2])
    if stored is None:
        return say.set_refused(where)
    if read != token.encode():
        return say.value_not_returned(where)
    value, migrated, _deleted = _raised(answers[2:5])
    created, canary = await _canary_over(client, prefix, value)
    live = _live_facts(*(resp.info(a) for a in answers[5:])) if len(answers) > 5 else {}
    facts = replace(base, canary=canary, canary_created=created, **live,
                    migrated=migrated.decode(errors="replace") if isinstance(migrated, bytes) else None)
    return say.succeeded(where, facts)


async def _canary_over(client: resp.Connection, prefix: str, value: Any) -> tuple[bool, str]:
    """``_canary`` over the minimal connection: SET NX and the read in one round trip."""
    if value is None:
        key, fresh = f"{prefix}{CANARY_KEY}", f"{int(time.time())}-{secrets.token_hex(6)}"
        stored, value = _raised(await client.execute([("SET", key, fresh, "NX"), ("GET", key)]))
        return stored is not None, (value or fresh.encode()).decode(errors="replace")
    return False, value.decode(errors="replace")


async def _commands(client: resp.Connection, target: RedisTarget, credentials: Credentials) -> ProbeResult:
    """The full probe: the ``SET NX PX`` round trip, every command the gateway needs, the store's facts."""
    where = target.endpoint  # as status names it, whatever address was connected to
    key, token = f"{target.prefix}operator-probe:{secrets.token_hex(8)}", secrets.token_hex(8)
    stored, read = _raised(await client.execute([("SET", key, token, "NX", "PX", "10000"), ("GET", key)]))
    if stored is None:
        return say.set_refused(where)
    if read != token.encode():
        return say.value_not_returned(where)
    refused, facts = await _checks(client, key, target.prefix)
    if refused:
        return say.not_permitted(where, refused, bool(credentials.username))
    return say.succeeded(where, facts)


def _failure(e: Exception, target: RedisTarget, credentials: Credentials, timeout: float) -> ProbeResult:
    """What a probe that raised ``e`` says (either probe, either client); ``e`` again when it is
    none of these (the caller says "answered unexpectedly")."""
    where = target.endpoint
    if isinstance(e, redis.AuthenticationError):  # a ConnectionError to redis-py: first
        return say.refused_password(where, bool(credentials.username))
    if isinstance(e, redis.exceptions.NoPermissionError):
        return say.not_permitted(where, [_noperm(e, target.prefix) or "a command"], bool(credentials.username))
    if isinstance(e, redis.ResponseError):
        if "NOAUTH" in str(e) or "WRONGPASS" in str(e):
            return say.refused_password(where, bool(credentials.username))
        if _noperm(e, target.prefix):
            return say.not_permitted(where, [_noperm(e, target.prefix) or ""], bool(credentials.username))
        return say.refused_probe(where, type(e).__name__)
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)):
        if target.tls and isinstance(e, (redis.TimeoutError, asyncio.TimeoutError)):
            return say.no_tls_handshake(where, timeout)
        why = f"no answer within {timeout:g}s" if isinstance(e, asyncio.TimeoutError) else _short(e)
        return _tls_failure(target, credentials, e) or say.cannot_connect(where, why)
    if isinstance(e, redis.RedisError):  # e.g. something that is not Redis answers on that port
        return say.answered_unexpectedly(where, type(e).__name__)
    if isinstance(e, (UnicodeError, ValueError)):  # e.g. a host name the resolver refuses
        return say.cannot_connect(where, type(e).__name__)
    raise e


def _noperm(error: BaseException, prefix: str) -> str | None:
    """The command a NOPERM refusal names (or the prefix's keys), None when ``error`` is no NOPERM."""
    text = str(error)
    if not isinstance(error, redis.ResponseError) or not ("NOPERM" in text or "no permissions" in text):
        return None
    named = _NOPERM_COMMAND.search(text)
    return named.group(1).upper() if named else f"keys under {prefix}"


def _raised(answers: list[Any]) -> list[Any]:
    """A pipeline's answers, raising the first refusal among them (as the command alone would)."""
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return answers


async def _checks(client: resp.Connection, key: str, prefix: str) -> tuple[list[str], StoreFacts | None]:
    """One round trip: the commands of redis_acl.COMMANDS beyond SET and GET that the server
    refuses to this user, each tried once on the probe's own keys (they expire in 10 s) and then
    deleted, and the store's facts (``_store_facts``). ``None`` facts when a command was refused
    (they are not looked at then)."""
    listing, counter, index = f"{key}:list", f"{key}:n", f"{key}:sessions"
    history: list[tuple[str, ...]] = [  # in a transaction, as the shared session history appends
        ("RPUSH", listing, "p"), ("LTRIM", listing, "-1", "-1"), ("EXPIRE", listing, "10"),
        ("ZADD", index, "1", listing), ("ZREMRANGEBYSCORE", index, "-inf", "0"), ("EXPIRE", index, "10"),
        ("ZCARD", index)]
    others: list[tuple[str, ...]] = [
        ("PING",), ("EXISTS", key), ("INCR", counter), ("PEXPIRE", counter, "10000"), ("PTTL", counter),
        ("LRANGE", listing, "0", "-1"), ("EVAL", "return redis.call('get', KEYS[1])", "1", key),
        ("SCAN", "0", "MATCH", f"{prefix}operator-probe:*", "COUNT", "1"), ("ZPOPMIN", index, "1"),
        ("DEL", key, listing, counter, index)]
    facts: list[tuple[str, ...]] = [
        ("GET", f"{prefix}{CANARY_KEY}"), ("INFO", "persistence"), ("CONFIG", "GET", "maxmemory-policy"),
        ("CONFIG", "GET", "save"), ("GET", migrated_key(prefix)), *(("INFO", s) for s in LIVE_SECTIONS)]
    answers = await client.execute([("MULTI",), *history, ("EXEC",), *others, *facts])
    transaction, executed = answers[:len(history) + 1], answers[len(history) + 1]
    refused = _transaction_refused(transaction, executed, prefix)
    rest = answers[len(history) + 2:]
    refused += [_noperm(a, prefix) or "" for a in rest[:len(others)] if isinstance(a, redis.RedisError)]
    refused = [c for c in dict.fromkeys(refused) if c]
    return refused, None if refused else await _store_facts(client, prefix, rest[len(others):])


def _transaction_refused(queued: Sequence[Any], executed: Any, prefix: str) -> list[str]:
    """What a MULTI ... EXEC was refused: MULTI itself (its commands then ran alone, and EXEC
    found no MULTI), else the first command refused when queued (EXEC aborted), else any that
    failed inside EXEC; "" for a failure that is no NOPERM."""
    if isinstance(executed, redis.RedisError):
        if "EXEC without MULTI" in str(executed):
            return ["MULTI"]
        return [_noperm(next((q for q in queued if isinstance(q, redis.RedisError)), executed), prefix) or ""]
    return [_noperm(a, prefix) or "" for a in executed if isinstance(a, redis.RedisError)] \
        if isinstance(executed, list) else []


#: what INFO says that can change between probes: the run_id, the replication ids (a failover) and
#: memory (one section each: Redis before 7 takes one section per INFO)
LIVE_SECTIONS = ("server", "replication", "memory")


def _live_facts(server: Any, replication: Any, memory: Any) -> dict[str, Any]:
    """The INFO sections of ``LIVE_SECTIONS``, parsed (resp.info), as StoreFacts fields; nothing for an INFO that was refused."""
    out: dict[str, Any] = {}
    if isinstance(server, dict):
        out["run_id"] = str(server.get("run_id") or "") or None
    if isinstance(replication, dict) and replication.get("role") == "master":
        out["replid"] = _replication_id(replication.get("master_replid"))
        out["replid2"] = _replication_id(replication.get("master_replid2"))
    if isinstance(memory, dict) and isinstance(memory.get("used_memory"), int):
        out["used_memory"] = memory["used_memory"]
        limit = memory.get("maxmemory")
        out["maxmemory"] = limit if isinstance(limit, int) else None
    return out


def _replication_id(value: Any) -> str | None:
    """An id as INFO gives it; None for the 40 zeros of "none" (redis-py reads an id of digits as
    a number, so those arrive as 0)."""
    text = str(value or "")
    return text if text.strip("0") else None


async def _store_facts(client: resp.Connection, prefix: str, answers: list[Any]) -> StoreFacts:
    """The canary (written when absent, with no TTL) and, where the server allows INFO and CONFIG
    GET, its run_id, replication ids, memory, persistence and maxmemory-policy. A refused INFO or
    CONFIG GET (managed services often refuse CONFIG) is noted, never a failure."""
    value, persistence, policy_answer, save_answer, migrated, server, replication, memory = answers
    _raised([value, migrated])
    created, canary = await _canary_over(client, prefix, value)
    refused: list[str] = []
    aof, save, policy = None, None, None
    if isinstance(server, redis.RedisError) or isinstance(persistence, redis.RedisError):
        refused.append("INFO")
    else:
        facts = resp.info(persistence, ("aof_enabled",))  # a dict, or None for a reply that is no INFO
        aof = isinstance(facts, dict) and facts.get("aof_enabled") == 1
    if isinstance(policy_answer, redis.RedisError):
        refused.append("CONFIG GET")
    else:  # as when each was sent alone: the policy is kept when only CONFIG GET save is refused
        policy = resp.pairs(policy_answer).get("maxmemory-policy")
        if isinstance(save_answer, redis.RedisError):
            refused.append("CONFIG GET")
        else:
            save = resp.pairs(save_answer).get("save")
    persistent = True if aof else (bool(save.strip()) if save is not None and aof is not None else None)
    return StoreFacts(canary, created, persistent=persistent, maxmemory_policy=policy, refused=tuple(refused),
                      migrated=migrated.decode(errors="replace") if isinstance(migrated, bytes) else None,
                      **_live_facts(*(resp.info(a) for a in (server, replication, memory))))


_NOPERM_COMMAND = re.compile(r"run the '([A-Za-z|_ -]{1,40})' command")


def _tls_failure(target: RedisTarget, credentials: Credentials, error: BaseException) -> ProbeResult | None:
    """The specific reason of a failed TLS handshake, found in the exception's chain (redis-py
    re-raises the ssl error as a ConnectionError)."""
    if not target.tls:
        return None
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    where = target.endpoint
    if isinstance(cause, ssl.SSLCertVerificationError):
        detail = str(cause.verify_message or cause.reason or "certificate verify failed")
        if "expired" in detail or "not yet valid" in detail:
            return say.tls_certificate_expired(where, detail)
        if "mismatch" in detail:
            return say.tls_name_mismatch(where, target.server_name, detail)
        return say.tls_certificate_untrusted(where, detail, bool(credentials.ca))
    return say.tls_handshake_failed(where, cause.reason or type(cause).__name__)


def _short(error: Exception) -> str:
    # redis-py's connection errors name host and port only; keep the first line
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__
