"""tests/sim: control planes whose node is SIMULATED (kwok reports pods Running at loopback IPs
and runs nothing; hack/cluster.sh), for tests whose pods need not run: admission, chart installs,
tenancy, control-plane smoke tests, and those that restart components or need hundreds of pods on
a control plane of their own. GWOP_TEST_KUBECONFIG points ``cluster`` at an existing cluster
instead (whose pods do run: ``real_node``)."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from harness.cluster import Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The session's control plane with the simulated node (.cluster/test, or GWOP_TEST_CLUSTER_DIR)."""
    c = Cluster.from_environment()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def own_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A control plane with a simulated node of the module's own (.cluster/<module>), for tests
    that restart its components or run operators of their own beside the session's."""
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        pytest.skip("needs a control plane of its own")
    c = Cluster.from_environment(f".cluster/{request.module.__name__.removeprefix('test_')}")
    try:
        yield c
    finally:
        c.stop()
