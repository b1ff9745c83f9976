"""A real ``redis-server`` process on a free loopback port, stoppable and restartable."""
from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .processes import terminate


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server. ``stop`` and ``start`` keep the same port so clients can reconnect."""

    def __init__(self, password: str | None = None, host: str = "127.0.0.1", port: int | None = None,
                 persistent: bool = False) -> None:
        """``persistent``: an append-only file in its directory, so a restart keeps the data (and the
        operator's canary: a restart without persistence is a lost dedup history, DedupHistoryLost)."""
        self.persistent = persistent
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary, self.host, self.password = binary, host, password
        self.port = port or free_port(host)
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, password=self.password,
                           socket_timeout=2, decode_responses=True)

    def start(self) -> "RedisServer":
        args = [self.binary, "--port", str(self.port), "--bind", self.host, "--save", "",
                "--appendonly", "yes" if self.persistent else "no", "--dir", str(self.dir), "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        terminate(self.proc, grace=5)
        self.proc = None

    def pause(self) -> None:
        """A hung Redis (SIGSTOP): connections are accepted by the kernel, nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
