"""Shared fixtures: the session's control planes (one with the real node, one whose node is
simulated), a fresh namespace per test, real Redis, the operator."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from harness.cluster import REPO, Cluster
from harness.redis_server import RedisServer

if TYPE_CHECKING:
    from harness.llm_standin import StandInLLM
    from harness.operator import OperatorProcess
    from harness.standins import HealthStandIns


@pytest.fixture(scope="session")
def simulated_cluster() -> Iterator[Cluster]:
    """The session's control plane whose node is SIMULATED (kwok runs nothing): for modules whose
    pods need not run (admission, chart installs, control-plane smoke tests)."""
    c = Cluster.from_environment()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """The module's control plane: the real node's for modules marked ``real_pods``, else the
    simulated one."""
    wanted = "node_cluster" if request.node.get_closest_marker("real_pods") else "simulated_cluster"
    return request.getfixturevalue(wanted)


@pytest.fixture(scope="module")
def own_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A control plane of the module's own (.cluster/<module>), for tests that restart its
    components or run operators of their own beside the session's."""
    import os
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        pytest.skip("needs a control plane of its own")
    c = Cluster.from_environment(f".cluster/{request.module.__name__.removeprefix('test_')}")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = cluster.new_namespace()
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(password="test-redis-password").start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def operators() -> Iterator[dict[Path, "OperatorProcess"]]:
    """The session's operators, one per control plane, stopped at the end."""
    started: dict[Path, OperatorProcess] = {}
    try:
        yield started
    finally:
        for proc in started.values():
            proc.stop()


@pytest.fixture(scope="module")
def operator(cluster: Cluster, operators: dict[Path, "OperatorProcess"]) -> "OperatorProcess":
    """The real operator CLI, under the chart's ServiceAccount and RBAC, on the module's control
    plane (started once per session)."""
    from harness.operator import OperatorProcess
    if cluster.kubeconfig not in operators:
        operators[cluster.kubeconfig] = OperatorProcess(cluster).start()
    return operators[cluster.kubeconfig]


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[Cluster]:
    """The session's control plane with the REAL node (.cluster/test-node), for the modules whose
    pods must run (marked ``real_pods``). One node per host, so it starts after test_node.py's
    demo is down (pytest_collection_modifyitems); with GWOP_TEST_KUBECONFIG it is that cluster,
    the images loaded there."""
    import os
    from harness import node
    if os.environ.get("GWOP_TEST_KUBECONFIG"):
        yield Cluster.from_environment()
        return
    missing = node.why_no_real_node()
    if missing:
        node.unavailable(f"the real node cannot run here ({missing})")
    node.images()  # built before the node imports them
    c = node.cluster_up(REPO / ".cluster/test-node")
    try:
        yield c
    finally:
        c.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_node.py first: its demo's node is down before node_cluster starts one (one per host)."""
    items.sort(key=lambda item: item.module.__name__ != "test_node" if item.module else True)


@pytest.fixture
def standins(cluster: Cluster) -> Iterator["HealthStandIns"]:
    """HEALTH ENDPOINT STAND-INS at pod IPs: served here for a simulated node's pods; on a real
    node the pods (the stand-in TEST IMAGE) serve them."""
    from harness.standins import HealthStandIns
    s = HealthStandIns(local=not cluster.real_node)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def llm() -> Iterator["StandInLLM"]:
    """The offline OpenAI-compatible LLM STAND-IN the real gateway talks to."""
    from harness.llm_standin import StandInLLM
    server = StandInLLM().start()
    yield server
    server.stop()
