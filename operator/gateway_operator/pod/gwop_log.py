"""The launcher's one way to speak: a ``gateway-launcher:`` line on stderr (the pod's log), and
``redact`` for any text that could carry a secret (a value behind ``${VAR}``, the Redis password,
pydantic's echo of its whole input). Standard library only."""

from __future__ import annotations

import re
import sys
from typing import Iterable, Optional

# Pydantic ends each error line with "[type=..., input_value=<repr of the
# whole input>, ...]"; that repr can hold expanded secrets, so it is cut off.
_PYDANTIC_SUFFIX = re.compile(r"\s*\[type=.*$", re.MULTILINE)


def say(message: str) -> None:
    print(f"gateway-launcher: {message}", file=sys.stderr, flush=True)


def redact(message: str, secrets: Iterable[Optional[str]]) -> str:
    """One-line, secret-free version of an error message."""
    text = _PYDANTIC_SUFFIX.sub("", str(message))
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines) or "unknown error"
