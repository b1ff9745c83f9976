"""tests/node: the REAL node (hack/node.sh: containerd, kubelet, kube-proxy, CoreDNS; root, one
node per host). test_node.py runs `make demo` in .cluster/node-demo; the other modules' pods run on
the session's control plane with a real node in .cluster/node-session (``cluster``), their
replicas the HEALTH ENDPOINT STAND-IN image; test_images.py checks the images both run. Without
root they skip in one line; under CI they fail."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from harness import node
from harness.cluster import REPO, Cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The session's control plane with the real node (.cluster/node-session). One node per host,
    so it starts after test_node.py's demo node is down (pytest_collection_modifyitems); with
    GWOP_TEST_KUBECONFIG it is that cluster, the images loaded there."""
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        yield Cluster.from_environment()
        return
    missing = node.why_no_real_node()
    if missing:
        node.unavailable(f"the real node cannot run here ({missing})")
    node.images()  # built before the node imports them
    c = node.cluster_up(REPO / ".cluster/node-session")
    try:
        yield c
    finally:
        c.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_node.py first: its demo's node is down before ``cluster`` starts one (one per host)."""
    items.sort(key=lambda item: item.module.__name__ != "test_node" if item.module else True)
