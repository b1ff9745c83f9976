"""Drift of an owned object is put back when its watch says so, not at the next resync: the
operator here resyncs once in ten minutes, so an object put back within seconds was put back
because the watch delivered its change. The PodDisruptionBudget (two replicas or more) is the
object a full pass used to read back every resync because no watch covered it.

Real parts: the control plane, the operator CLI under the chart's RBAC, redis-server. Its pods run
on the SIMULATED node (nothing here needs a gateway to run). Its own control plane: the operator
here runs with a resync the session's operator does not."""
from __future__ import annotations

from typing import Iterator

import pytest

from harness.cluster import Cluster
from harness.gateways import apply_gateway, create_password_secret, redis_gateway
from harness.operator import OperatorProcess
from harness.redis_server import RedisServer
from harness.wait import until

RESYNC_S = 600.0


@pytest.fixture(scope="module")
def slow_resync(own_cluster: Cluster) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(own_cluster, resync_seconds=RESYNC_S, extra_args=["--redis-allow=127.0.0.1/32"]).start()
    try:
        yield operator
    finally:
        operator.stop()


def test_a_deleted_or_changed_disruption_budget_is_put_back_at_once(own_cluster: Cluster, slow_resync: OperatorProcess,
                                                                   redis_server: RedisServer) -> None:
    cluster = own_cluster
    namespace = cluster.new_namespace()
    create_password_secret(cluster, namespace, "redis-auth", redis_server.password)
    apply_gateway(cluster, namespace, redis_gateway("budget", redis_server, replicas=2))

    def budget() -> dict | None:
        found = cluster.get_json("-n", namespace, "poddisruptionbudgets")["items"]
        return next((b for b in found if b["metadata"]["name"] == "budget"), None)

    until(lambda: budget() is not None, timeout=60, what="the PodDisruptionBudget of two replicas")
    original = budget()
    assert original is not None and original["spec"]["maxUnavailable"] == 1

    cluster.kubectl("-n", namespace, "delete", "poddisruptionbudget", "budget")
    until(lambda: (b := budget()) is not None and b["metadata"]["uid"] != original["metadata"]["uid"],
          timeout=20, what=f"the deleted PodDisruptionBudget put back well before the resync ({RESYNC_S:.0f} s)")

    cluster.kubectl("-n", namespace, "patch", "poddisruptionbudget", "budget", "--type=merge",
                    "-p", '{"spec": {"maxUnavailable": 2}}')
    until(lambda: (b := budget()) is not None and b["spec"].get("maxUnavailable") == 1,
          timeout=20, what=f"the drifted PodDisruptionBudget put back well before the resync ({RESYNC_S:.0f} s)")
    assert "Traceback" not in slow_resync.log_text()
