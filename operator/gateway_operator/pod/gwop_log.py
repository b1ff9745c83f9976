"""The launcher's one way to speak: a ``gateway-launcher:`` line on stderr (the pod's log), and
``redact`` for any text that could carry a secret (a value behind ``${VAR}``, the Redis password,
pydantic's echo of its whole input). Standard library only."""

from __future__ import annotations

import os
import re
import sys
from typing import Iterable, Optional

from gwop_contract import LINE_PREFIX

# Pydantic ends each error line with "[type=..., input_value=<repr of the
# whole input>, ...]"; that repr can hold expanded secrets, so it is cut off.
_PYDANTIC_SUFFIX = re.compile(r"\s*\[type=.*$", re.MULTILINE)


def say(message: str) -> None:
    print(f"{LINE_PREFIX}{message}", file=sys.stderr, flush=True)


# where the kubelet takes a stopped container's last words from (the pod's terminationMessagePath,
# by default): they show in the pod's lastState.terminated.message, which the operator reads
TERMINATION_LOG = "/dev/termination-log"


def last_words(message: str, path: str = TERMINATION_LOG) -> None:
    """The line the process stops with, also where the kubelet keeps it (never fails the exit)."""
    say(message)
    try:  # only into a file the kubelet made (never creates one: outside a pod there is none)
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError:
        return  # not in a pod: the log has it
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"{LINE_PREFIX}{message}"[:1024])
    except OSError:
        pass


def redact(message: str, secrets: Iterable[Optional[str]]) -> str:
    """One-line, secret-free version of an error message."""
    text = _PYDANTIC_SUFFIX.sub("", str(message))
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines) or "unknown error"
