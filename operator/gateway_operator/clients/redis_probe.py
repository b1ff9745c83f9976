"""The operator's own Redis probe: connect, authenticate, and a ``SET NX PX`` round trip
under the gateway's prefix - the same operations the idempotency store needs.

A replica's clean /health proves nothing until it has handled a webhook (its store is built
lazily), so this probe is what gates scale-out and what RedisReachable reports.

The probe connects wherever a tenant's spec.redis points and sends the password the tenant
named, so it is bounded on every side: an allowlist checked before any connection (the
chart's ``redisProbe.allow``), a fixed ceiling on its timeout, and its own concurrency
limits (per namespace and in total) so that one namespace's slow or black-holed Redis never
delays another namespace. It runs on the event loop (resp.py, a minimal RESP2 connection for
both the full and the observation probe): no thread is held.

It reaches only what the tenant may reach: the GatewayDeployment's own managed Redis, or a
target of its own that is no other GatewayDeployment's managed Redis (checked by name and by
every address the name resolves to, before connecting). Outside the privileged targets (its own
managed Redis, a target the allowlist names) its failures collapse to three outcomes that say
nothing of what answered (unreachable; not a Redis this gateway can use; a refused password),
and a namespace whose
probes keep failing is probed with a backoff, so the probe is neither an oracle nor a scanner.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import secrets
import socket
import ssl
from collections import defaultdict
from dataclasses import dataclass, replace
import time
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import redis

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients import resp
from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.core.dedup_history import CANARY_KEY, StoreFacts
from gateway_operator.core import probe_wording as say
from gateway_operator.core.probe_result import ProbeResult, bound
from gateway_operator.pod.gwop_contract import carried_key, migrated_key

log = logging.getLogger(__name__)

TIMEOUT_CEILING = 5.0      # whatever spec.health.timeoutSeconds says
PER_NAMESPACE = 4          # probes in flight for one namespace
IN_FLIGHT = 64             # probes in flight in total
# unprivileged targets: after the n-th failure in a row in one namespace (n >= BACKOFF_AFTER),
# no probe there for BACKOFF_BASE * 2**(n-BACKOFF_AFTER) seconds, at most BACKOFF_CEILING; meanwhile
# every GatewayDeployment of the namespace is told the last failure. Not after the first: where many
# GatewayDeployments share one Redis, one probe's fluke would be announced as an outage for all of
# them (201 of them at once, at 3,000 x 2 in one namespace), while a Redis that is really down
# fails the next probes too, within seconds
BACKOFF_AFTER = 3
BACKOFF_BASE = 10.0
BACKOFF_CEILING = 300.0
# is (namespace, name)'s target, by name or by one of its addresses, another GatewayDeployment's
# managed Redis? (handlers.py answers from its index of managed Redis Services and pods)
ForeignCheck = Callable[[str, str, str, Sequence[str]], bool]


class Credentials(NamedTuple):
    """What the probe signs in and checks TLS with, read from the spec's Secrets (never logged)."""

    password: str | None = None
    username: str | None = None   # an ACL user (spec.redis.usernameSecretRef)
    ca: str | None = None         # PEM bundle (spec.redis.tls.caSecretRef); None: the system's CAs


def ca_bundle_loads(pem: str) -> bool:
    """Does ``pem`` hold at least one certificate TLS can trust?"""
    if "-----BEGIN CERTIFICATE-----" not in pem:
        return False
    try:
        ssl.create_default_context().load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError):
        return False
    return True


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Allowlist:
    """Where the probe may connect: CIDRs, host names, and ``.suffix`` domains. Empty: open."""

    networks: tuple[Network, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "Allowlist":
        networks, hosts = [], []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.append(entry.lower().rstrip("."))
        return cls(tuple(networks), tuple(hosts))

    @property
    def open(self) -> bool:
        return not (self.networks or self.hosts)

    def permits_name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == h or (h.startswith(".") and host.endswith(h)) for h in self.hosts)

    def permits_addresses(self, addresses: Sequence[str]) -> bool:
        ips = [ipaddress.ip_address(a) for a in addresses]
        return bool(ips) and all(any(ip in net for net in self.networks) for ip in ips)


class _Backoff:
    """Consecutive failures of unprivileged probes in one namespace, and the last result."""

    def __init__(self) -> None:
        self.failures = 0
        self.until = 0.0
        self.last: ProbeResult | None = None
        self.last_endpoint = ""


class Prober:
    def __init__(self, allowlist: Allowlist | None = None, per_namespace: int = PER_NAMESPACE,
                 in_flight: int = IN_FLIGHT, timeout_ceiling: float = TIMEOUT_CEILING,
                 foreign: ForeignCheck = lambda *_: False, clock: Callable[[], float] = time.monotonic) -> None:
        self.allowlist = allowlist or Allowlist()
        self.timeout_ceiling = timeout_ceiling
        self.foreign = foreign
        self.clock = clock
        self._total = asyncio.Semaphore(in_flight)
        self._per_namespace: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(per_namespace))
        self._backoff: defaultdict[str, _Backoff] = defaultdict(_Backoff)

    async def probe(self, namespace: str, target: RedisTarget, credentials: Credentials | str | None,
                    timeout: float, managed_ip: str | None = None, owner: str = "",
                    wait: bool = True, kept: KeptConnection | None = None,
                    base: StoreFacts | None = None) -> ProbeResult | None:
        """``credentials``: a password alone may be given as a string. ``managed_ip``: the ready
        pod of the GatewayDeployment's own managed Redis (its Service name resolves only inside the
        cluster network); "" when none is ready yet. ``owner``: the GatewayDeployment's name (a
        target must not be another one's managed Redis). ``wait=False``: None at once when the
        namespace's (or the operator's) probes in flight are at their bound, rather than queueing
        (an observation pass then keeps its last result: its /health poll must not wait)."""
        signed = credentials if isinstance(credentials, Credentials) else Credentials(credentials)
        timeout = max(0.1, min(timeout, self.timeout_ceiling))
        if managed_ip == "":  # an ordinary start, not a failure: no Warning for it
            return say.managed_redis_starting(target.endpoint)
        privileged = bool(managed_ip) or not self.allowlist.open
        backoff = self._backoff[namespace]
        if not privileged and backoff.last is not None and self.clock() < backoff.until:
            # a namespace whose probes keep failing waits its turn (for whichever target)
            if backoff.last_endpoint == target.endpoint:
                return backoff.last
            return say.held_back(target.endpoint, timeout, backoff.until - self.clock())
        if not wait and (self._per_namespace[namespace].locked() or self._total.locked()):
            return None
        async with self._per_namespace[namespace], self._total:
            try:  # a timeout, not a cancel swallowed (controller._loop says why)
                async with fair_timeout(bound(timeout)):
                    result = await self._probe(namespace, owner, target, signed, timeout, managed_ip, privileged,
                                               kept, base)
            except asyncio.TimeoutError:
                result = say.unreachable(target.endpoint, timeout)
        if privileged:
            return result
        if result.ok:
            self._backoff.pop(namespace, None)
            return result
        if result.reason != reasons.TARGET_NOT_ALLOWED:  # nothing was sent for that one
            backoff.failures += 1
            if backoff.failures >= BACKOFF_AFTER:
                backoff.until = self.clock() + min(BACKOFF_CEILING,
                                                   BACKOFF_BASE * 2 ** (backoff.failures - BACKOFF_AFTER))
            backoff.last, backoff.last_endpoint = result, target.endpoint
        return result

    async def _probe(self, namespace: str, owner: str, target: RedisTarget, credentials: Credentials,
                     timeout: float, managed_ip: str | None, privileged: bool,
                     kept: KeptConnection | None = None, base: StoreFacts | None = None) -> ProbeResult:
        if managed_ip:
            return await _round_trip(target, managed_ip, credentials, timeout, privileged, kept, base)
        if self.foreign(namespace, owner, target.host, ()):  # by Service name, before any lookup
            return say.unreachable(target.endpoint, timeout)
        addresses = await _addresses(target, timeout)
        if addresses is None:
            return say.unreachable(target.endpoint, timeout)
        if self.foreign(namespace, owner, target.host, addresses):
            # another GatewayDeployment's managed Redis serves only its own: never connected to,
            # and said like any target that cannot be reached (nothing about it is revealed)
            return say.unreachable(target.endpoint, timeout)
        if not self.allowlist.open and not (self.allowlist.permits_name(target.host)
                                            or self.allowlist.permits_addresses(addresses)):
            return say.target_not_allowed(target.host)
        # the checked address is the one connected to (no second lookup to race with); TLS
        # verifies the name the spec expects there
        return await _round_trip(target, addresses[0], credentials, timeout, privileged, kept, base)


async def _addresses(target: RedisTarget, timeout: float) -> list[str] | None:
    """Every address the target's host resolves to (None: it does not resolve). An address
    is its own answer: no resolver thread for it."""
    try:
        return [str(ipaddress.ip_address(target.host.strip("[]")))]
    except ValueError:
        pass
    try:
        async with fair_timeout(timeout):
            infos = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, asyncio.TimeoutError, UnicodeError, ValueError):
        return None
    return list(dict.fromkeys(str(info[4][0]) for info in infos)) or None


async def _round_trip(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                      privileged: bool = True, kept: KeptConnection | None = None,
                      base: StoreFacts | None = None) -> ProbeResult:
    """``privileged``: the GatewayDeployment's own managed Redis, or a target the allowlist names:
    its failures keep their detail. Otherwise a failure is one of three outcomes with fixed words:
    unreachable, not a usable Redis, or a refused password."""
    try:
        result = await _exchange(target, host, credentials, timeout, kept, base)
    except Exception as e:  # noqa: BLE001 - e.g. redis-py's HELLO handling fails on a server that says +OK to all
        result = say.answered_unexpectedly(target.endpoint, type(e).__name__)
    if privileged or result.ok or result.reason == reasons.AUTHENTICATION_FAILED:
        return result
    # the tenant's status says no more than the three outcomes; the operator's own log (debug)
    # keeps what happened, for whoever runs the operator
    log.debug("probe of %s for %s: %s", target.endpoint, host, result.message)
    if result.reason == reasons.CONNECTION_FAILED:
        return say.unreachable(target.endpoint, timeout)
    return say.unusable(target.endpoint)


class KeptConnection:
    """One GatewayDeployment's connection for its observation probes (the controller owns it and
    closes it when its loop ends).

    A full pass probes on a fresh connection (closed after): connect, TLS, ``AUTH``/``SELECT`` and
    every command the gateway needs, as a new gateway client would. Between full passes
    (``--resync-seconds``) an observation probe goes over this connection (opened by the first
    observation probe and kept) and asks only what can change
    without a spec change: the ``SET NX PX`` round trip, the canary, the ``run_id`` and the
    migration marker (the commands and persistence of the last full probe stand until the next).
    A kept connection that fails is retried once on a fresh one (the server may have closed it
    while idle); it is kept only for the address, target and credentials it was opened with."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.client: resp.Connection | None = None

    def take(self, key: tuple[Any, ...]) -> resp.Connection | None:
        """The open connection, when it was opened for ``key``."""
        client = self.client
        return client if client is not None and self.key == key and client.open else None

    def swap(self, key: tuple[Any, ...] | None, client: resp.Connection | None) -> None:
        """Keeps ``client`` for ``key``; the one kept before is closed."""
        old, self.key, self.client = self.client, key, client
        if old is not None and old is not client:
            old.close()

    async def aclose(self) -> None:
        self.swap(None, None)


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


async def _exchange(target: RedisTarget, host: str, credentials: Credentials, timeout: float,
                    kept: KeptConnection | None = None, base: StoreFacts | None = None) -> ProbeResult:
    """``kept`` and ``base`` (the last full probe's store facts): an observation probe, over the
    kept connection (see KeptConnection). Without them: a full probe on a fresh connection."""
    if kept is not None and base is not None:
        return await _observe(target, host, credentials, timeout, kept, base)
    client = None
    try:
        client = await _connect(target, host, credentials, timeout)
        async with fair_timeout(timeout):
            return await _commands(client, target, credentials)
    except Exception as e:  # noqa: BLE001 - said as _failure says it, or raised again
        return _failure(e, target, credentials, timeout)
    finally:
        if client is not None:
            client.close()


async def _connect(target: RedisTarget, host: str, credentials: Credentials, timeout: float) -> resp.Connection:
    """A new connection, as a new gateway client opens one: TCP, TLS verifying the spec's server
    name, then ``AUTH`` and ``SELECT``, each within ``timeout``."""
    tls = resp.tls_context(target.tls_options.insecure_skip_verify, credentials.ca) if target.tls else None
    return await resp.Connection.connect(host, target.port, timeout, tls=tls, server_name=target.server_name,
                                         username=credentials.username, password=credentials.password, db=target.db)


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
            client = await _connect(target, host, credentials, timeout)
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
        aof = (resp.info(persistence, ("aof_enabled",)) or {}).get("aof_enabled") == 1
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
