"""HEALTH ENDPOINT STAND-INS: tiny HTTP servers at pod IPs that answer GET /health, /ready
and /live the way the gateway documents them, with ``degraded_owners`` set by the test.

Used where no real gateway process runs for a pod (the simulated node, kwok, runs none); the
real gateway is exercised on the real node in tests/test_node.py.
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from .http import send_json

BUILD_TIME = "redis idempotency backend not available (running per-replica)"
RUNTIME = "redis idempotency backend unreachable at runtime (dedup best-effort until it recovers)"


def health_body(degraded_owners: list[dict[str, Any]]) -> dict[str, Any]:
    """``GET /health`` as the gateway documents it."""
    body: dict[str, Any] = {"status": "healthy", "uptime": 1.0, "agents": 1, "sessions": 0, "clients": 0,
                            "channels": {}, "last_inbound_at": None}
    if degraded_owners:
        body["degraded_owners"] = degraded_owners
    return body


def idempotency_owner(reason: str) -> dict[str, Any]:
    return {"owner_kind": "gateway", "owner_id": "durability:idempotency", "state": "cold",
            "reason": reason, "retry_hint": "restore redis"}


class HealthStandIn:
    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self.degraded_owners: list[dict[str, Any]] = []
        self.requests = 0
        # a HOSTILE /health (the tenant's image answers it): writes the whole raw response
        self.raw_health: Callable[[BaseHTTPRequestHandler], None] | None = None
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                standin.requests += 1
                if self.path == "/health" and standin.raw_health is not None:
                    try:
                        standin.raw_health(self)
                    except OSError:  # the poller hung up, as it should
                        pass
                    return
                if self.path == "/health":
                    body = health_body(standin.degraded_owners)
                elif self.path == "/ready":
                    body = {"ready": True, "failing": [], "uptime": 1.0}
                else:
                    body = {"alive": True}
                send_json(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((ip, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class HealthStandIns:
    """One stand-in per pod IP, created on demand."""

    def __init__(self, port: int = 8765) -> None:
        self.port = port
        self.by_ip: dict[str, HealthStandIn] = {}

    def at(self, ip: str) -> HealthStandIn:
        if ip not in self.by_ip:
            self.by_ip[ip] = HealthStandIn(ip, self.port)
        return self.by_ip[ip]

    def close(self) -> None:
        for s in self.by_ip.values():
            s.close()
        self.by_ip.clear()
