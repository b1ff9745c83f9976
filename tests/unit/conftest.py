"""tests/unit: no control plane at all (pure code, real redis-server and gateway processes on
loopback, offline CLIs). A test that needs a cluster belongs in tests/sim or tests/node."""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def cluster() -> None:
    pytest.fail("tests/unit has no control plane: a test that needs one goes to tests/sim "
                "(simulated node) or tests/node (real node)", pytrace=False)


@pytest.fixture
def pinned_draws() -> Iterator[None]:
    """A derandomized Hypothesis search draws the same examples in every process, whatever else was
    imported before it (harness.pinned_hypothesis): for the modules that mark themselves with it."""
    from harness.pinned_hypothesis import pinned
    with pinned():
        yield
