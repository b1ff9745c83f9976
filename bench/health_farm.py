"""HEALTH ENDPOINT STAND-INS for the scale benchmark, in a process of their own.

kwok simulates the pods, so no gateway runs behind their IPs (loopback addresses); this
process answers ``GET /health`` at every such IP the way the gateway documents it, with
``degraded_owners`` set on command, and serves the launcher's long-poll health watch beside it
(the real pod/gwop_watch.py server on api.WATCH_PORT; a command wakes its waiters, as the
launcher's tick would; ``--no-watch``: an image without it). It runs apart from the operator and from the measuring
process, so its CPU is neither charged to the operator nor in the benchmark's hot path.

Commands arrive as JSON lines on stdin, one reply line each on stdout:
  {"op": "serve", "ips": [...]}            listen on these IPs too (the gateway's port)
  {"op": "degrade", "ips": [...]}          /health reports durability:idempotency (runtime)
  {"op": "clear", "ips": [...]}            back to healthy
  {"op": "stats"}                          {"requests": polls and watch answers, "watch_answers": ..., "cpu_s": ...}
"""
from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

from gateway_operator.api import GATEWAY_PORT as PORT
from gateway_operator.api import WATCH_PORT
from gateway_operator.pod.gwop_watch import Watched, WatchServer
from harness.standins import RUNTIME, health_body, idempotency_owner  # the one /health shape


def _response(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


#: uvicorn's default timeout_keep_alive, which the gateway (praisonai_bot/gateway/server.py) keeps:
#: an idle connection is closed this long after its last answer, so a poller cannot reuse one
#: across a longer interval here either
KEEP_ALIVE_S = 5.0

_ANSWERS = {False: _response(json.dumps(health_body([])).encode()),
            True: _response(json.dumps(health_body([idempotency_owner(RUNTIME)])).encode())}


class CountedWatch(Watched):
    """The launcher's Watched, counting its answers."""

    def __init__(self, farm: "Farm", ip: str) -> None:
        self.farm, self.ip = farm, ip
        super().__init__(lambda: health_body([idempotency_owner(RUNTIME)] if ip in farm.degraded else []))

    async def answer(self, since: str, wait: float) -> tuple[str, bytes]:
        answered = await super().answer(since, wait)
        self.farm.requests += 1
        self.farm.watch_answers += 1
        return answered


class Farm:
    def __init__(self, watch: bool = True) -> None:
        self.servers: dict[str, asyncio.AbstractServer] = {}
        self.watches: dict[str, tuple[WatchServer, CountedWatch]] = {}
        self.watch = watch
        self.degraded: set[str] = set()
        self.requests = 0
        self.watch_answers = 0

    def changed(self, ips: list[str]) -> None:
        for ip in ips:
            if ip in self.watches:
                self.watches[ip][1].refresh()

    def protocol(self, ip: str) -> asyncio.Protocol:
        farm = self

        class Replica(asyncio.Protocol):
            """Minimal HTTP/1.1 with keep-alive (closed when idle for KEEP_ALIVE_S, as uvicorn
            does): one answer per request head."""

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport  # type: ignore[assignment]
                self.buffer = b""
                self.idle = asyncio.get_running_loop().call_later(KEEP_ALIVE_S, transport.close)

            def connection_lost(self, exc: Exception | None) -> None:
                self.idle.cancel()

            def data_received(self, data: bytes) -> None:
                self.buffer += data
                while b"\r\n\r\n" in self.buffer:
                    head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                    farm.requests += 1
                    self.idle.cancel()
                    self.idle = asyncio.get_running_loop().call_later(KEEP_ALIVE_S, self.transport.close)
                    self.transport.write(_ANSWERS[ip in farm.degraded])  # type: ignore[attr-defined]
                    if b"connection: close" in head.lower():
                        self.transport.close()
                        return

        return Replica()

    async def serve(self, ips: list[str]) -> int:
        loop = asyncio.get_running_loop()
        for ip in ips:
            if ip not in self.servers:
                self.servers[ip] = await loop.create_server(lambda ip=ip: self.protocol(ip), ip, PORT,
                                                            reuse_address=True, backlog=64)
            if self.watch and ip not in self.watches:
                server, watched = WatchServer(), CountedWatch(self, ip)
                await server.listen(ip, WATCH_PORT, watched)
                self.watches[ip] = (server, watched)
        return len(self.servers)


async def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per IP plus one per poller connection
    farm = Farm(watch="--no-watch" not in sys.argv)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        op, ips = command["op"], command.get("ips", [])
        if op == "serve":
            try:
                reply: dict[str, object] = {"serving": await farm.serve(ips)}
            except OSError as e:  # e.g. another run already listens there
                reply = {"error": f"cannot listen on {ips}: {e}"}
        elif op == "degrade":
            farm.degraded.update(ips)
            farm.changed(ips)
            reply = {"degraded": len(farm.degraded)}
        elif op == "clear":
            farm.degraded.difference_update(ips)
            farm.changed(ips)
            reply = {"degraded": len(farm.degraded)}
        elif op == "stats":
            usage = resource.getrusage(resource.RUSAGE_SELF)
            reply = {"requests": farm.requests, "watch_answers": farm.watch_answers,
                     "cpu_s": usage.ru_utime + usage.ru_stime}
        else:
            reply = {"error": f"unknown op {op}"}
        reply["at"] = time.time()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
