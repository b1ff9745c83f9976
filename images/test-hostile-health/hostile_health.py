"""A hostile tenant's /health (TEST IMAGE, images/test-hostile-health): /ready and /live answer
as the gateway's do; /health answers in the mode the test last chose with PUT /mode/<mode>."""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = 8765  # the gateway's port, which the operator polls
HEALTHY = json.dumps({"status": "healthy", "uptime": 1.0, "agents": 1, "sessions": 0, "clients": 0,
                      "channels": {}, "last_inbound_at": None}).encode()
mode = "healthy"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:  # noqa: N802
        global mode
        wanted = self.path.removeprefix("/mode/")
        if not self.path.startswith("/mode/") or wanted not in ANSWERS:
            return self.fixed(404, b'{"error": "no such mode"}')
        mode = wanted
        self.fixed(200, json.dumps({"mode": mode}).encode())

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/ready":
            return self.fixed(200, b'{"ready": true, "failing": [], "uptime": 1.0}')
        if self.path == "/live":
            return self.fixed(200, b'{"alive": true}')
        if self.path == "/health":
            return ANSWERS[mode](self)
        self.fixed(404, b"{}")

    def fixed(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def endless(self) -> None:
        """A chunked body that never ends (for 60 s: then the thread is free again)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"x" * 65536
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def huge(self) -> None:
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

    def deep(self) -> None:
        """60 KiB of nested arrays: small enough to be read whole, the parser must cope."""
        self.fixed(200, (b"[" * 60000 + b"]" * 60000)[:60 * 1024])

    def log_message(self, *args: object) -> None:
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # the poller hung up, as it should
            self.close_connection = True


ANSWERS = {"healthy": lambda h: h.fixed(200, HEALTHY), "endless": Handler.endless, "huge": Handler.huge,
           "deep": Handler.deep}

if __name__ == "__main__":
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
