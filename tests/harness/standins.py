"""HEALTH ENDPOINT STAND-INS: a replica's /health, /ready and /live at its pod IP, answering
the way the gateway documents them with ``degraded_owners`` set by the test, or the way a
hostile tenant's image would.

One server does it (images/test-health-standin/health_standin.py). On the REAL node it is the
pod itself: the TEST IMAGE runs it in place of the gateway. On a SIMULATED node (kwok runs no
process) it runs here, bound to the pod's loopback IP. Either way the test steers it over HTTP.
The real gateway behind real pods is exercised in tests/test_node.py.
"""
from __future__ import annotations

import importlib.util
import json
import threading
import urllib.request
from functools import cache
from http.server import ThreadingHTTPServer
from types import ModuleType
from typing import Any

from gateway_operator.api import GATEWAY_PORT

from .cluster import REPO

SERVER = REPO / "images/test-health-standin/health_standin.py"
BUILD_TIME = "redis idempotency backend not available (running per-replica)"
RUNTIME = "redis idempotency backend unreachable at runtime (dedup best-effort until it recovers)"


@cache
def server_module() -> ModuleType:
    """The stand-in server, the same file the TEST IMAGE runs."""
    spec = importlib.util.spec_from_file_location("health_standin", SERVER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def health_body(degraded_owners: list[dict[str, Any]]) -> dict[str, Any]:
    """``GET /health`` as the gateway documents it."""
    return server_module().health_body(degraded_owners)


def idempotency_owner(reason: str) -> dict[str, Any]:
    return {"owner_kind": "gateway", "owner_id": "durability:idempotency", "state": "cold",
            "reason": reason, "retry_hint": "restore redis"}


class HealthStandIn:
    """One replica's stand-in, steered at ``ip:port``."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self._owners: list[dict[str, Any]] = []

    def _call(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(f"http://{self.ip}:{self.port}/standin", method=method,
                                         data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    @property
    def degraded_owners(self) -> list[dict[str, Any]]:
        return self._owners

    @degraded_owners.setter
    def degraded_owners(self, owners: list[dict[str, Any]]) -> None:
        """From now on /health answers the documented body with these owners (its own view of
        Redis: it answers)."""
        self.answer(owners)

    def answer(self, owners: list[dict[str, Any]], own_redis: str = "answers",
               versions: dict[str, str] | None = None) -> None:
        """From now on /health answers the documented body with these owners, and the launcher's
        section with ``own_redis`` as the replica's own view of Redis and ``versions`` as the gateway
        release it runs (none: a stand-in runs no gateway)."""
        self._call("PUT", {"mode": "answer", "degraded_owners": owners, "own_redis": own_redis,
                           "versions": versions or {}})
        self._owners = list(owners)

    def hostile(self, mode: str) -> None:
        """From now on /health answers as a hostile image: "endless", "huge" or "deep"."""
        self._call("PUT", {"mode": mode})
        self._owners = []  # the server dropped them with the documented body

    @property
    def requests(self) -> int:
        """The /health polls it has answered."""
        return int(self._call("GET")["health_requests"])


class HealthStandIns:
    """One stand-in per pod IP, created on demand: served here for a simulated node's pods
    (``local``), already running as the pod on a real node."""

    def __init__(self, local: bool = True, port: int = GATEWAY_PORT) -> None:
        self.local, self.port = local, port
        self.by_ip: dict[str, HealthStandIn] = {}
        self.servers: list[ThreadingHTTPServer] = []

    def at(self, ip: str) -> HealthStandIn:
        if ip not in self.by_ip:
            if self.local:
                server = server_module().make_server(ip, self.port)
                threading.Thread(target=server.serve_forever, daemon=True).start()
                self.servers.append(server)
            self.by_ip[ip] = HealthStandIn(ip, self.port)
        return self.by_ip[ip]

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers.clear()
        self.by_ip.clear()
