"""Stopping a child process the way a kubelet does: SIGTERM, then SIGKILL after a grace period."""
from __future__ import annotations

import subprocess


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
