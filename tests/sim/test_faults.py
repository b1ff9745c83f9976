"""Faults production brings (issue 9), on a control plane of its own: the operator SIGKILLed
in the middle of a rollout, kube-apiserver and etcd restarted, a Redis that hangs."""
from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from gateway_operator import reasons
from harness.cluster import REPO, Cluster
from harness.gateways import apply_gateway, create_password_secret, wait_condition
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.wait import until

pytestmark = pytest.mark.cluster


def restart(cluster: Cluster, component: str) -> None:
    subprocess.run([str(REPO / "hack/cluster.sh"), "restart", component], env=cluster.env, check=True,
                   capture_output=True, timeout=180)


def observed(cluster: Cluster, namespace: str, name: str) -> bool:
    body = cluster.get_json("-n", namespace, "gatewaydeployment", name)
    return body.get("status", {}).get("observedGeneration") == body["metadata"]["generation"]


def touch(cluster: Cluster, namespace: str, name: str, value: str) -> None:
    cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", name, "--type=merge", "-p",
                    json.dumps({"spec": {"podAnnotations": {"example.dev/touch": value}}}))


def test_a_successor_converges_after_the_operator_is_killed_mid_rollout(own_cluster: Cluster) -> None:
    cluster = own_cluster
    namespace = cluster.new_namespace()
    first = OperatorProcess(cluster).start()
    names = [f"roll-{i}" for i in range(20)]
    for name in names:
        apply_gateway(cluster, namespace, gateway_deployment(name))
    time.sleep(1.5)  # some reconciled, some not yet
    assert first.proc is not None
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    successor = OperatorProcess(cluster).start()
    try:
        for name in names:
            wait_condition(cluster, namespace, name, "Ready", "True", timeout=90)
        for kind in ("deployments", "configmaps", "services", "secrets"):
            items = cluster.get_json("-n", namespace, kind, "-l", "app.kubernetes.io/managed-by=gateway-operator")["items"]
            owners = [o["metadata"]["ownerReferences"][0]["name"] for o in items]
            assert sorted(owners) == sorted(names), (kind, owners)  # one each, none duplicated or lost
        assert all(observed(cluster, namespace, n) for n in names)
        assert "Traceback" not in successor.log_text()
    finally:
        successor.stop()
        first.stop()


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_watches_resume_after_a_control_plane_restart(own_cluster: Cluster, component: str) -> None:
    cluster = own_cluster
    namespace = cluster.new_namespace()
    op = OperatorProcess(cluster, lease=(15, 10, 2)).start()  # the chart's lease periods
    successor: OperatorProcess | None = None
    try:
        apply_gateway(cluster, namespace, gateway_deployment("steady"))
        wait_condition(cluster, namespace, "steady", "Ready", "True")
        restart(cluster, component)
        started = time.monotonic()
        touch(cluster, namespace, "steady", component)
        # a leader that could not renew its Lease for 10 s exits, as it must (a standby may
        # have taken over): its Deployment restarts it, as this test does
        assert op.proc is not None
        if op.proc.poll() is not None:
            assert op.proc.returncode == 1 and "lost the Lease" in op.log_text(), op.log_tail()
            successor = OperatorProcess(cluster, lease=(15, 10, 2)).start()
        running = successor or op
        until(lambda: observed(cluster, namespace, "steady"), timeout=120, interval=0.5,
              tolerate=(AssertionError, json.JSONDecodeError), what=f"a change reconciled after the {component} restart")
        print(f"\nafter a {component} restart: a spec change reconciled {time.monotonic() - started:.1f} s later"
              f"{' (by a restarted operator: the leader exited on its lost Lease)' if successor else ''}")
        apply_gateway(cluster, namespace, gateway_deployment("newcomer"))
        wait_condition(cluster, namespace, "newcomer", "Ready", "True", timeout=60)
        assert running.proc is not None and running.proc.poll() is None, running.log_tail()  # no crash loop
        assert "Traceback" not in running.log_text()
    finally:
        if successor:
            successor.stop()
        op.stop()


def test_a_hung_redis_flips_the_conditions_within_the_bound(own_cluster: Cluster) -> None:
    cluster = own_cluster
    namespace = cluster.new_namespace()
    redis = RedisServer(password="fault-pw").start()
    op = OperatorProcess(cluster).start()
    try:
        create_password_secret(cluster, namespace, "redis-auth", redis.password or "")
        apply_gateway(cluster, namespace, gateway_deployment("hung", replicas=2, config=redis_store(), redis={
            "url": redis.url, "passwordSecretRef": {"name": "redis-auth"}}))
        wait_condition(cluster, namespace, "hung", "RedisReachable", "True")
        redis.pause()
        started = time.monotonic()
        wait_condition(cluster, namespace, "hung", "RedisReachable", "False", reasons.CONNECTION_FAILED, timeout=30)
        flipped = time.monotonic() - started
        redis.resume()
        wait_condition(cluster, namespace, "hung", "RedisReachable", "True", timeout=30)
        recovered = time.monotonic() - started - flipped
        print(f"\nRedis paused: RedisReachable False after {flipped:.1f} s; resumed: True after {recovered:.1f} s "
              "(interval 1 s, timeout 1 s)")
        assert flipped < 1 + 1 + 3  # interval + timeout + one reconcile's own work
    finally:
        op.stop()
        redis.close()
