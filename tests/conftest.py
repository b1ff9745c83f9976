"""Fixtures of every kind of test: real Redis, the LLM stand-in, and what works the same on either
kind of control plane (a fresh namespace, the operator, the health stand-ins). Which control plane
a test gets is its folder's to say: tests/sim/conftest.py (the simulated node) and
tests/node/conftest.py (the real node) each give ``cluster``; tests/unit has none."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from harness.cluster import Cluster
from harness.redis_server import RedisServer

if TYPE_CHECKING:
    from harness.llm_standin import StandInLLM
    from harness.operator import OperatorProcess
    from harness.standins import HealthStandIns


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


@pytest.fixture
def standins(cluster: Cluster) -> Iterator["HealthStandIns"]:
    """HEALTH ENDPOINT STAND-INS at pod IPs, as ``cluster`` needs them: served here for a simulated
    node's pods; on a real node (``cluster.real_node``) the pods (the stand-in TEST IMAGE) serve them."""
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
