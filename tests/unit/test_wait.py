"""The harness's one wait (``until``) and one "stays" check (``stays``): each fails when it must."""
from __future__ import annotations

import time

import pytest

from harness.wait import WaitTimeout, stays, until


def test_until_returns_the_first_truthy_value_and_times_out_saying_what() -> None:
    start = time.monotonic()
    assert until(lambda: time.monotonic() - start > 0.2 and "done", timeout=5, interval=0.05) == "done"
    with pytest.raises(WaitTimeout, match="waiting for the flag; last: False"):
        until(lambda: False, timeout=0.2, interval=0.05, what="the flag")


def test_stays_fails_at_the_first_look_that_does_not_hold() -> None:
    stays(lambda: True, 0.3, interval=0.05)
    start = time.monotonic()
    with pytest.raises(AssertionError, match="the count did not hold"):
        stays(lambda: time.monotonic() - start < 0.15, 2.0, interval=0.05, what="the count")
    assert time.monotonic() - start < 1.0  # it failed at once, not at the end


def test_stays_looks_at_the_end_too() -> None:
    start = time.monotonic()
    with pytest.raises(AssertionError):
        stays(lambda: time.monotonic() - start < 0.28, 0.3, interval=10)  # the last look, at 0.3 s, fails
