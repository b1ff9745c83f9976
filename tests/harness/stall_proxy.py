"""A TLS-terminating proxy between a client and the API server that can freeze chosen streams.

The client (the operator) trusts a throw-away CA (harness.tls) whose certificate the proxy shows;
the proxy connects to the real kube-apiserver, checked against the cluster's CA. It reads each
request line the client sends on a connection, so it knows which request a connection serves
(one watch stream per connection), and forwards everything both ways, except that once
``freeze(predicate)`` is called it stops forwarding the answers of connections whose current
request matches: the stream stays open and delivers nothing, as a watch frozen after a connection
reset does. Bytes are never altered. Loopback only.
"""
from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Callable

from .tls import ServerCert


class StallProxy:
    """Runs on an event loop of its own (a thread): asyncio's TLS streams, one reader and one
    writer per socket (an SSL socket must not be read and written from two threads)."""

    def __init__(self, upstream: tuple[str, int], upstream_ca: Path, cert: ServerCert) -> None:
        self.upstream, self.frozen_paths = upstream, []  # type: ignore[var-annotated]
        self._freeze: Callable[[str], bool] = lambda path: False
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(cert.cert_path, cert.key_path)
        self._client_ctx = ssl.create_default_context(cafile=str(upstream_ca))
        self._client_ctx.check_hostname = False  # the API server's certificate names its own address
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True, name="stall-proxy").start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_ctx), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self, predicate: Callable[[str], bool]) -> None:
        """From now on, answers to requests whose path matches are held back (connections stay open)."""
        self._freeze = predicate

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(
                *self.upstream, ssl=self._client_ctx, server_hostname=self.upstream[0]), 10)
        except (OSError, asyncio.TimeoutError):
            client_w.close()
            return
        state = {"path": ""}
        await asyncio.gather(self._requests(client_r, up_w, state), self._answers(up_r, client_w, state))

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        state: dict[str, str]) -> None:
        """Client to API server, noting each request's path (a head, then Content-Length bytes)."""
        buffer, body_left = b"", 0
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
                buffer += chunk
                while True:
                    if body_left:
                        taken = min(body_left, len(buffer))
                        buffer, body_left = buffer[taken:], body_left - taken
                        if body_left:
                            break
                    end = buffer.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4:]
                    lines = head.split("\r\n")
                    state["path"] = lines[0].split(" ")[1] if " " in lines[0] else ""
                    body_left = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                                      if k.strip().lower() == "content-length"), 0)
        except (OSError, ValueError):
            pass
        finally:
            writer.close()

    async def _answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       state: dict[str, str]) -> None:
        try:
            while chunk := await reader.read(65536):
                if self._freeze(state["path"]):
                    if state["path"] not in self.frozen_paths:
                        self.frozen_paths.append(state["path"])
                    continue  # held back: the stream stays open and says nothing
                writer.write(chunk)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
