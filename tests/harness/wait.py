"""Polling with a deadline: tests (and the demo) wait for what a user would see, never sleep blindly."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError, TimeoutError):
    """A failed wait: an assertion for pytest, a timeout for scripts."""


def until(condition: Callable[[], T], timeout: float = 60, interval: float = 0.5, what: str = "condition",
          tolerate: tuple[type[BaseException], ...] = (AssertionError,)) -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` seconds.
    Exceptions in ``tolerate`` (a kubectl call failing while things settle) count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = condition()
            if value:
                return value
            last = value
        except tolerate as e:
            last = e
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


async def until_async(condition: Callable[[], T], timeout: float = 60, what: str = "condition",
                      interval: float = 0.02) -> T:
    """``until`` inside a running event loop: the loop runs between looks (a test of the operator's
    own tasks, which must make progress while it waits)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}; last: {value!r}")
        await asyncio.sleep(interval)


def stays(condition: Callable[[], object], seconds: float, interval: float = 0.5, what: str = "condition",
          tolerate: tuple[type[BaseException], ...] = ()) -> None:
    """"This must not change for ``seconds``" (Gomega's ``Consistently``): ``condition()`` must
    hold at every look, the first and the last included; fails at the first look where it does
    not, saying what it returned. The proof that something does not happen, in place of a sleep."""
    deadline = time.monotonic() + seconds
    looks = 0
    while True:
        try:
            value = condition()
        except tolerate:
            value = True  # a look that could not be made proves nothing either way
        looks += 1
        if not value:
            raise AssertionError(f"{what} did not hold (look {looks}, after "
                                 f"{seconds - max(0.0, deadline - time.monotonic()):.1f}s of {seconds:.0f}s): "
                                 f"{value!r}")
        if time.monotonic() >= deadline:
            return
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
