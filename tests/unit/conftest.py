"""tests/unit: no control plane at all (pure code, real redis-server and gateway processes on
loopback, offline CLIs). A test that needs a cluster belongs in tests/sim or tests/node."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cluster() -> None:
    pytest.fail("tests/unit has no control plane: a test that needs one goes to tests/sim "
                "(simulated node) or tests/node (real node)", pytrace=False)
