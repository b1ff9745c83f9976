"""Processes of the harness: stopping a child the way a kubelet does (SIGTERM, then SIGKILL after
a grace period), a free loopback port for one, and its resident memory."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float | None:
    """The process's resident set (VmRSS) in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def terminate(proc: "subprocess.Popen[bytes] | None", grace: float) -> int | None:
    """Stop ``proc`` (if still running) and return its exit code; safe to call twice."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode
