"""A loopback TCP forwarder that can cut one client off from its server, as a partition does.

Between a gateway launcher and a real redis-server: while ``cut``, nothing is forwarded either way
and new connections are accepted but never answered (packets dropped: the client's reads and its
connects time out, as through a network partition, not a refused connection); ``heal`` forwards
again on every connection still open. Bytes are never altered. Loopback only.
"""
from __future__ import annotations

import asyncio
import threading


class TcpCut:
    """Runs on an event loop of its own (a thread)."""

    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self._open = asyncio.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True, name="tcp-cut").start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _start(self) -> asyncio.AbstractServer:
        self._open.set()
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()  # a connection made while cut waits, unanswered
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()  # held while cut: the bytes arrive only if it heals
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
