"""The TLS server name of ``spec.redis.tls.serverName``: every TLS connection to Redis in this
process (the gateway's store, lock and push clients, which 0.1.16 builds with ``from_url``, and the
launcher's own) verifies that name and sends it as SNI instead of the host connected to. redis-py
has no URL option for it, but its URL parser picks ``SSLConnection`` by name at each call, so the
adapter's subclasses are put in its place."""

from __future__ import annotations

from typing import Optional

import gwop_upstream as upstream


def name_tls_server(server_name: Optional[str]) -> None:
    if not server_name:
        return
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection
    sync_class, async_class = upstream.connection_classes_naming(server_name)
    sync_connection.SSLConnection = sync_class  # type: ignore[misc]
    async_connection.SSLConnection = async_class  # type: ignore[misc]
