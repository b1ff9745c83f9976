"""Polling with a deadline: tests wait for what a user would see, never sleep blindly."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def until(condition: Callable[[], T], timeout: float = 60, interval: float = 0.5,
          what: str = "condition") -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = condition()
            if value:
                return value
            last = value
        except AssertionError as e:  # a kubectl call failing while things settle
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)
