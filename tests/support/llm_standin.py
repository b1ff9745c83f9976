"""LLM STAND-IN: a tiny offline OpenAI-compatible HTTP server for the real gateway.

The gateway's agents reach it through ``OPENAI_BASE_URL`` (``base_url``), so hook-triggered
agent turns complete without network. ``GET /v1/models`` lists one model;
``POST /v1/chat/completions`` answers every request with the canned ``REPLY`` (plain JSON,
or an SSE stream when the request asks for ``stream``). ``completions`` counts the turns
it served, which is how tests see whether a replica ran an agent turn at all; as a pod
(``python3 -m support.llm_standin --port 8080``, see support/llm_pod.py) it reports them at
``GET /stats``.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict

from .http import send_json

# What the gateway gets as OPENAI_API_KEY: never a real key, never sent anywhere but here.
API_KEY = "sk-standin-not-a-real-key"


class StandInLLM:
    """Offline stand-in for the LLM: answers chat completions with a canned reply."""

    REPLY = "stand-in reply"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.completions = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def env(self) -> Dict[str, str]:
        """The environment that points an OpenAI client (the gateway's agents) here."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": API_KEY}

    def start(self) -> "StandInLLM":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self) -> None:
        with self._lock:
            self.completions += 1

    def _handler(self) -> type:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/stats":
                    send_json(self, {"completions": llm.completions})
                    return
                send_json(self, {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                llm._count()
                if body.get("stream"):
                    self._send_stream()
                else:
                    send_json(self, completion(llm.REPLY))

            def _send_stream(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for delta, finish in (({"role": "assistant", "content": llm.REPLY}, None), ({}, "stop")):
                    chunk = {"id": "standin", "object": "chat.completion.chunk", "created": int(time.time()),
                             "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler


def completion(text: str) -> Dict[str, Any]:
    """A non-streamed chat completion carrying ``text``."""
    return {
        "id": "standin", "object": "chat.completion", "created": int(time.time()), "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


def main() -> None:
    """Serve in the foreground until SIGTERM (the stand-in's pod)."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description="LLM STAND-IN (offline, OpenAI-compatible)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    llm = StandInLLM(args.host, args.port).start()
    print(f"LLM stand-in serving {llm.base_url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.pause()


if __name__ == "__main__":
    main()
