"""LLM STAND-IN: a tiny offline OpenAI-compatible HTTP server for the real gateway.

The gateway's agents reach it through ``OPENAI_BASE_URL`` (``base_url``), so hook-triggered
agent turns complete without network. ``GET /v1/models`` lists one model;
``POST /v1/chat/completions`` answers every request with the canned ``REPLY`` (plain JSON,
or an SSE stream when the request asks for ``stream``). ``completions`` counts the turns
it served, which is how tests see whether a replica ran an agent turn at all; as a pod
(``python3 -m harness.llm_standin --port 8080``, see harness/llm_pod.py) it reports them at
``GET /stats``.

For the exactly-once checker (harness/exactly_once.py) a turn can name itself: when the last
user message holds ``msg=<id>`` the stand-in keeps a record of the turn (``GET /turns?since=N``):
that id, its ``session=<s>``, when it started and ended, whether the answer reached the caller,
and the ``msg=`` ids of the earlier messages it was sent (the history the gateway gave the
agent). ``delay=<seconds>`` in the message makes the turn take that long, as a slow model does.
"""
from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

from .http import send_json

# What the gateway gets as OPENAI_API_KEY: never a real key, never sent anywhere but here.
API_KEY = "sk-standin-not-a-real-key"
_FIELD = re.compile(r"\b(msg|session|delay)=([A-Za-z0-9_.:-]+)")


def fields(text: str) -> Dict[str, str]:
    """The checker's ``msg=``, ``session=`` and ``delay=`` fields of one message's text."""
    return dict(_FIELD.findall(text or ""))


def _text(message: Dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # the multi-part form
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class StandInLLM:
    """Offline stand-in for the LLM: answers chat completions with a canned reply."""

    REPLY = "stand-in reply"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.completions = 0
        self.turns: List[Dict[str, Any]] = []  # the named turns, in the order they started
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

    def _begin(self, body: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The record of a named turn (None for any other request), with the history it was sent."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        users = [fields(_text(m)) for m in messages if m.get("role") == "user"]
        if not users or "msg" not in users[-1]:
            return None
        last = users[-1]
        try:
            delay = min(max(float(last.get("delay", 0)), 0.0), 3600.0)
        except ValueError:
            delay = 0.0
        turn = {"msg": last["msg"], "session": last.get("session", ""), "delay": delay,
                "history": [u["msg"] for u in users[:-1] if "msg" in u],
                "started": time.time(), "ended": None, "answered": False}
        with self._lock:
            self.turns.append(turn)
        return turn

    def _end(self, turn: Optional[Dict[str, Any]], answered: bool) -> None:
        if turn is not None:
            with self._lock:
                turn.update(ended=time.time(), answered=answered)

    def _handler(self) -> type:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/stats":
                    send_json(self, {"completions": llm.completions})
                    return
                if self.path.startswith("/turns"):
                    since = int((re.search(r"since=(\d+)", self.path) or [0, 0])[1])
                    with llm._lock:
                        send_json(self, {"turns": [dict(t) for t in llm.turns[since:]], "next": len(llm.turns)})
                    return
                send_json(self, {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                llm._count()
                turn = llm._begin(body)
                if turn and self._caller_left(turn["delay"]):
                    llm._end(turn, False)  # the gateway went away during the model turn: never answered
                    self.close_connection = True
                    return
                try:
                    if body.get("stream"):
                        self._send_stream()
                    else:
                        send_json(self, completion(llm.REPLY))
                    self.wfile.flush()
                except OSError:  # the caller went away (its pod was stopped): not answered
                    llm._end(turn, False)
                    raise
                llm._end(turn, True)

            def _caller_left(self, seconds: float) -> bool:
                """Wait ``seconds`` (a slow model), watching the caller's connection: True when it
                closed (its pod stopped). A write to a connection the peer has closed may still
                succeed, so "answered" is decided here, not by the write."""
                end = time.time() + seconds
                while True:
                    readable, _, _ = select.select([self.connection], [], [], max(0.0, min(0.2, end - time.time())))
                    if readable:
                        try:
                            if self.connection.recv(1, socket.MSG_PEEK) == b"":
                                return True
                        except OSError:
                            return True
                    if time.time() >= end:
                        return False
                    if readable:
                        time.sleep(0.2)

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
