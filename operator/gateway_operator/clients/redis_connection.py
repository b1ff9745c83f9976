"""The Redis probe's connections: what it signs in with (``Credentials``, the CA bundle it
trusts), how it opens a connection as a new gateway client would (``connect``), and the one
connection a GatewayDeployment keeps for its observation probes (``KeptConnection``).

The wire itself is resp.py's (minimal RESP2, every reply bounded); what is said over it is
redis_protocol.py's.
"""
from __future__ import annotations

import ssl
from typing import Any, NamedTuple

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients import resp


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


async def connect(target: RedisTarget, host: str, credentials: Credentials, timeout: float) -> resp.Connection:
    """A new connection, as a new gateway client opens one: TCP, TLS verifying the spec's server
    name, then ``AUTH`` and ``SELECT``, each within ``timeout``."""
    tls = resp.tls_context(target.tls_options.insecure_skip_verify, credentials.ca) if target.tls else None
    return await resp.Connection.connect(host, target.port, timeout, tls=tls, server_name=target.server_name,
                                         username=credentials.username, password=credentials.password, db=target.db)


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
    while idle); it is kept only for the address, target and credentials it was opened with
    (redis_protocol.py's observation probe does both)."""

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
