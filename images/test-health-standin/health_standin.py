"""HEALTH ENDPOINT STAND-IN (a TEST IMAGE's server, images/test-health-standin; also run
in-process by tests/harness/standins.py at a simulated pod's IP).

It answers /ready and /live as the gateway does, and GET /health the way the test last chose:
    PUT /standin  {"mode": "answer", "degraded_owners": [...]}   the gateway's documented body, with the
                  launcher's own section ("own_redis": its view of Redis, "answers" unless given;
                  "versions": {"praisonai-bot": ..., "praisonaiagents": ...}, none unless given)
                  {"mode": "endless" | "huge" | "deep"}          a hostile tenant's answers
    GET /standin  {"mode": ..., "health_requests": <polls so far>}
In a pod, whatever command the operator runs, `python3` is this server (the image's wrapper).
Standard library only: it runs on the image's own python3.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

PORT = int(os.environ.get("GATEWAY_PORT") or 8765)  # the gateway's port (and env), which the operator polls
MODES = ("answer", "endless", "huge", "deep")


class State:
    def __init__(self) -> None:
        self.mode = "answer"
        self.degraded_owners: list[dict[str, Any]] = []
        self.own_redis = "answers"
        self.versions: dict[str, str] = {}  # the launcher's versions section, when a test gives one
        self.health_requests = 0
        self.lock = threading.Lock()


def health_body(degraded_owners: list[dict[str, Any]], own_redis: str = "answers",
                versions: dict[str, str] | None = None) -> dict[str, Any]:
    """``GET /health`` as the gateway documents it, with the operator's launcher's own section
    (its view of Redis; versions only when a test gives them: a stand-in runs no gateway)."""
    own: dict[str, Any] = {"idempotency": {"redis": own_redis}}
    if versions:
        own["versions"] = dict(versions)
    body: dict[str, Any] = {"status": "healthy", "uptime": 1.0, "agents": 1, "sessions": 0, "clients": 0,
                            "channels": {}, "last_inbound_at": None, "gateway_operator": own}
    if degraded_owners:
        body["degraded_owners"] = degraded_owners
    return body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State  # set per server by make_server

    def do_PUT(self) -> None:  # noqa: N802
        if self.path != "/standin":
            return self.fixed(404, {"error": "no such path"})
        try:
            wanted = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self.fixed(400, {"error": "not JSON"})
        if wanted.get("mode", "answer") not in MODES:
            return self.fixed(400, {"error": f"mode must be one of {MODES}"})
        with self.state.lock:
            self.state.mode = wanted.get("mode", "answer")
            self.state.degraded_owners = list(wanted.get("degraded_owners") or [])
            self.state.own_redis = str(wanted.get("own_redis") or "answers")
            versions = wanted.get("versions") or {}
            self.state.versions = {str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {}
        self.fixed(200, {"mode": self.state.mode})

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/ready":
            return self.fixed(200, {"ready": True, "failing": [], "uptime": 1.0})
        if self.path == "/live":
            return self.fixed(200, {"alive": True})
        if self.path == "/standin":
            with self.state.lock:
                return self.fixed(200, {"mode": self.state.mode, "health_requests": self.state.health_requests})
        if self.path != "/health":
            return self.fixed(404, {})
        with self.state.lock:
            self.state.health_requests += 1
            mode, owners, self.own_redis = self.state.mode, list(self.state.degraded_owners), self.state.own_redis
            self.versions = dict(self.state.versions)
        ANSWERS[mode](self, owners)

    def fixed(self, status: int, payload: Any) -> None:
        self.raw(status, json.dumps(payload).encode())

    def raw(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self, owners: list[dict[str, Any]]) -> None:
        self.fixed(200, health_body(owners, self.own_redis, self.versions))

    def endless(self, _owners: object) -> None:
        """A chunked body that never ends (for 60 s; then the thread is free again)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"x" * 65536
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def huge(self, _owners: object) -> None:
        """100 MiB announced and sent: a few of these read whole would pass the operator's
        memory limit (the chart's 256 MiB)."""
        head, chunk, tail, chunks = b'{"status": "healthy", "pad": "', b"y" * 65536, b'"}', 1600
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(head) + len(chunk) * chunks + len(tail)))
        self.end_headers()
        self.wfile.write(head)
        for _ in range(chunks):
            self.wfile.write(chunk)
        self.wfile.write(tail)

    def deep(self, _owners: object) -> None:
        """60 KiB of nested arrays: small enough to be read whole, so the parser must cope."""
        self.raw(200, (b"[" * 60000 + b"]" * 60000)[:60 * 1024])

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # the poller hung up, as it should
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


ANSWERS: dict[str, Callable[[Handler, list[dict[str, Any]]], None]] = {
    "answer": Handler.answer, "endless": Handler.endless, "huge": Handler.huge, "deep": Handler.deep}


def make_server(host: str, port: int = PORT) -> ThreadingHTTPServer:
    """A stand-in at ``host:port`` with a state of its own (serve_forever is the caller's)."""
    handler = type("StandInHandler", (Handler,), {"state": State()})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


if __name__ == "__main__":
    # PID 1 in its container: without a handler SIGTERM would be ignored until the kill
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    make_server("0.0.0.0").serve_forever()
