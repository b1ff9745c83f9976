"""The operator's own Redis probe: connect, authenticate, and a ``SET NX PX`` round trip
under the gateway's prefix - the same operations the idempotency store needs.

A replica's clean /health proves nothing until it has handled a webhook (its store is built
lazily), so this probe is what gates scale-out and what RedisReachable reports.

The probe connects wherever a tenant's spec.redis points and sends the password the tenant
named, so it is bounded on every side: an allowlist checked before any connection (the
chart's ``redisProbe.allow``), a fixed ceiling on its timeout, and its own concurrency
limits (per namespace and in total) so that one namespace's slow or black-holed Redis never
delays another namespace. It runs on the event loop (redis.asyncio): no thread is held.
"""
from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import reasons
from .redis_target import RedisTarget

TIMEOUT_CEILING = 5.0      # whatever spec.health.timeoutSeconds says
PER_NAMESPACE = 4          # probes in flight for one namespace
IN_FLIGHT = 64             # probes in flight in total


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str   # a reasons.* RedisReachable reason
    message: str  # never holds the password


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


class Prober:
    def __init__(self, allowlist: Allowlist | None = None, per_namespace: int = PER_NAMESPACE,
                 in_flight: int = IN_FLIGHT, timeout_ceiling: float = TIMEOUT_CEILING) -> None:
        self.allowlist = allowlist or Allowlist()
        self.timeout_ceiling = timeout_ceiling
        self._total = asyncio.Semaphore(in_flight)
        self._per_namespace: defaultdict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(per_namespace))

    async def probe(self, namespace: str, target: RedisTarget, password: str | None, timeout: float,
                    managed_ip: str | None = None) -> ProbeResult:
        """``managed_ip``: the ready pod of an operator-managed Redis (its Service name
        resolves only inside the cluster network); "" when none is ready yet."""
        timeout = max(0.1, min(timeout, self.timeout_ceiling))
        if managed_ip == "":  # an ordinary start, not a failure: no Warning for it
            return ProbeResult(False, reasons.MANAGED_REDIS_STARTING,
                               f"waiting for the managed Redis {target.endpoint} to have a ready pod")
        async with self._per_namespace[namespace], self._total:
            try:
                return await asyncio.wait_for(self._probe(target, password, timeout, managed_ip), 3 * timeout + 1)
            except asyncio.TimeoutError:
                return ProbeResult(False, reasons.CONNECTION_FAILED,
                                   f"Redis at {target.endpoint} did not answer within {timeout:g}s")

    async def _probe(self, target: RedisTarget, password: str | None, timeout: float,
                     managed_ip: str | None) -> ProbeResult:
        host = managed_ip or await self._permitted_address(target, timeout)
        if host is None:
            return ProbeResult(False, reasons.TARGET_NOT_ALLOWED,
                               f"{target.host} is outside the operator's Redis allowlist; the probe did not connect")
        return await _round_trip(target, host, password, timeout)

    async def _permitted_address(self, target: RedisTarget, timeout: float) -> str | None:
        """The address to connect to, or None when the allowlist forbids the target. The
        checked address is the one connected to (no second lookup to race with)."""
        if self.allowlist.open or self.allowlist.permits_name(target.host):
            return target.host
        try:
            infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM), timeout)
        except (OSError, asyncio.TimeoutError):
            return None
        addresses = [str(info[4][0]) for info in infos]
        if not self.allowlist.permits_addresses(addresses):
            return None
        return target.host if target.tls else addresses[0]  # TLS verifies the name


async def _round_trip(target: RedisTarget, host: str, password: str | None, timeout: float) -> ProbeResult:
    where = target.endpoint  # as status names it, whatever address was connected to
    # no retries: one probe is one attempt, bounded by the timeout (redis-py retries by default)
    client = aioredis.Redis(host=host, port=target.port, db=target.db, password=password or None,
                            ssl=target.tls, socket_timeout=timeout, socket_connect_timeout=timeout,
                            retry=Retry(NoBackoff(), 0))
    key = f"{target.prefix}operator-probe:{secrets.token_hex(8)}"
    try:
        token = secrets.token_hex(8)
        if not await client.set(key, token, nx=True, px=10_000):
            return ProbeResult(False, reasons.PROBE_FAILED, f"SET NX PX under the prefix was refused at {where}")
        if await client.get(key) != token.encode():
            return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} did not return the probe value")
        await client.delete(key)
        return ProbeResult(True, reasons.PROBE_SUCCEEDED, f"Redis at {where} answered a SET NX PX round trip")
    except redis.AuthenticationError:
        return ProbeResult(False, reasons.AUTHENTICATION_FAILED, f"Redis at {where} refused the password")
    except redis.ResponseError as e:
        if "NOAUTH" in str(e) or "WRONGPASS" in str(e):
            return ProbeResult(False, reasons.AUTHENTICATION_FAILED,
                               f"Redis at {where} requires a password that was not accepted")
        return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} refused the probe: {type(e).__name__}")
    except (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError) as e:
        return ProbeResult(False, reasons.CONNECTION_FAILED, f"cannot connect to Redis at {where}: {_short(e)}")
    except redis.RedisError as e:  # e.g. something that is not Redis answers on that port
        return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} answered unexpectedly: {type(e).__name__}")
    except (UnicodeError, ValueError) as e:  # e.g. a host name the resolver refuses
        return ProbeResult(False, reasons.CONNECTION_FAILED, f"cannot connect to Redis at {where}: {type(e).__name__}")
    finally:
        try:
            await client.aclose()
        except Exception:  # noqa: BLE001 - closing a broken connection must not mask the result
            pass


def _short(error: Exception) -> str:
    # redis-py's connection errors name host and port only; keep the first line
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__
