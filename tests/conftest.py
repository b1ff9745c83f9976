"""Shared fixtures: one control plane per session, a fresh namespace per test, real Redis."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import pytest

from support.cluster import Cluster
from support.redis_server import RedisServer

if TYPE_CHECKING:
    from support.llm_standin import StandInLLM
    from support.operator import OperatorProcess
    from support.standins import HealthStandIns


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster.from_environment()
    try:
        yield c
    finally:
        c.stop()


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
def operator(cluster: Cluster) -> Iterator["OperatorProcess"]:
    """The real operator CLI, under the chart's ServiceAccount and RBAC, for the session."""
    from support.operator import OperatorProcess
    proc = OperatorProcess(cluster).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def standins() -> Iterator["HealthStandIns"]:
    from support.standins import HealthStandIns
    s = HealthStandIns()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def llm() -> Iterator["StandInLLM"]:
    """The offline OpenAI-compatible LLM STAND-IN the real gateway talks to."""
    from support.llm_standin import StandInLLM
    server = StandInLLM().start()
    yield server
    server.stop()
