"""The Redis probe's guard: where it may connect, how often a namespace may have it try, and
what a tenant is told of a target it may not privilege.

The probe connects wherever a tenant's spec.redis points and sends the password the tenant
named; this module keeps it from being a scanner or an oracle:

- the allowlist (the chart's ``redisProbe.allow``), checked before any connection;
- another GatewayDeployment's managed Redis is never connected to: asked by name, then by every
  address the name resolves to (``ForeignCheck``), and said like any target that cannot be reached;
- the address checked is the one connected to (``address``: no second lookup to race with);
- a namespace whose unprivileged probes keep failing is probed with a backoff (``Backoff``);
- outside the privileged targets (the GatewayDeployment's own managed Redis, a target the allowlist
  names) a failure collapses to three outcomes that say nothing of what answered (``told``).

The probe itself (redis_probe.Prober) applies these; the words are core/probe_wording.py's.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from gateway_operator.api import reasons
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.core import probe_wording as say
from gateway_operator.core.probe_result import ProbeResult

log = logging.getLogger(__name__)

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


class Backoff:
    """Consecutive failures of unprivileged probes in one namespace, and the last result."""

    def __init__(self) -> None:
        self.failures = 0
        self.until = 0.0
        self.last: ProbeResult | None = None
        self.last_endpoint = ""

    def holds(self, endpoint: str, timeout: float, now: float) -> ProbeResult | None:
        """What a probe of ``endpoint`` is told while the namespace waits its turn (for whichever
        target): the last failure again, when it was that target's; None when it may probe."""
        if self.last is None or now >= self.until:
            return None
        if self.last_endpoint == endpoint:
            return self.last
        return say.held_back(endpoint, timeout, self.until - now)

    def failed(self, result: ProbeResult, endpoint: str, now: float) -> None:
        """Counts a failed unprivileged probe of ``endpoint`` (not one the allowlist stopped:
        nothing was sent for that one)."""
        if result.reason == reasons.TARGET_NOT_ALLOWED:
            return
        self.failures += 1
        if self.failures >= BACKOFF_AFTER:
            self.until = now + min(BACKOFF_CEILING, BACKOFF_BASE * 2 ** (self.failures - BACKOFF_AFTER))
        self.last, self.last_endpoint = result, endpoint


async def address(namespace: str, owner: str, target: RedisTarget, timeout: float, allowlist: Allowlist,
                  foreign: ForeignCheck) -> str | ProbeResult:
    """The address to connect to for a target that is not the GatewayDeployment's own managed
    Redis (``owner``: its name), or the result that says why the probe does not connect."""
    if foreign(namespace, owner, target.host, ()):  # by Service name, before any lookup
        return say.unreachable(target.endpoint, timeout)
    addresses = await resolve(target, timeout)
    if addresses is None:
        return say.unreachable(target.endpoint, timeout)
    if foreign(namespace, owner, target.host, addresses):
        # another GatewayDeployment's managed Redis serves only its own: never connected to,
        # and said like any target that cannot be reached (nothing about it is revealed)
        return say.unreachable(target.endpoint, timeout)
    if not allowlist.open and not (allowlist.permits_name(target.host) or allowlist.permits_addresses(addresses)):
        return say.target_not_allowed(target.host)
    # the checked address is the one connected to (no second lookup to race with); TLS
    # verifies the name the spec expects there
    return addresses[0]


async def resolve(target: RedisTarget, timeout: float) -> list[str] | None:
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


def told(result: ProbeResult, target: RedisTarget, host: str, timeout: float, privileged: bool) -> ProbeResult:
    """What the tenant's status says of a probe of ``target`` at ``host``. ``privileged``: the
    GatewayDeployment's own managed Redis, or a target the allowlist names: its failures keep their
    detail. Otherwise a failure is one of three outcomes with fixed words: unreachable, not a
    usable Redis, or a refused password."""
    if privileged or result.ok or result.reason == reasons.AUTHENTICATION_FAILED:
        return result
    # the tenant's status says no more than the three outcomes; the operator's own log (debug)
    # keeps what happened, for whoever runs the operator
    log.debug("probe of %s for %s: %s", target.endpoint, host, result.message)
    if result.reason == reasons.CONNECTION_FAILED:
        return say.unreachable(target.endpoint, timeout)
    return say.unusable(target.endpoint)
