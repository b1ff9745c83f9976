"""Faults production brings (issue 9), on a control plane of its own: the operator SIGKILLed
in the middle of a rollout, kube-apiserver and etcd restarted, a Redis that hangs."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from gateway_operator.api import reasons
from harness.cluster import REPO, Cluster
from harness.gateways import apply_gateway, conditions, create_password_secret, wait_condition
from harness.operator import SYSTEM_NAMESPACE, OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.stall_proxy import StallProxy
from harness.tls import make_ca, server_cert
from harness.wait import stays, until


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
    until(lambda: any(observed(cluster, namespace, n) for n in names), timeout=60, interval=0.2,
          what="the first GatewayDeployments reconciled (the rest not yet)")
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
    processes = [OperatorProcess(cluster, lease=(15, 10, 2)).start()]  # the chart's lease periods

    def leader() -> OperatorProcess:
        """The process leading now. A leader that could not renew its Lease for 10 s exits, as it
        must (a standby may have taken over), at whatever moment its renewal deadline passes: up
        to 10 s after the control plane answers again. Its Deployment restarts it, as this does."""
        current = processes[-1]
        assert current.proc is not None
        if current.proc.poll() is not None:
            assert current.proc.returncode == 1 and "lost the Lease" in current.log_text(), current.log_tail()
            assert len(processes) < 3, "the operator lost its Lease twice after one restart"
            processes.append(OperatorProcess(cluster, lease=(15, 10, 2)).start())
        return processes[-1]

    try:
        apply_gateway(cluster, namespace, gateway_deployment("steady"))
        wait_condition(cluster, namespace, "steady", "Ready", "True")
        restart(cluster, component)
        started = time.monotonic()
        touch(cluster, namespace, "steady", component)

        def reconciled() -> bool:
            leader()  # its own failures fail the test, the API's count as "not yet"
            try:
                return observed(cluster, namespace, "steady")
            except (AssertionError, json.JSONDecodeError):
                return False

        try:
            until(reconciled, timeout=120, interval=0.5, tolerate=(),
                  what=f"a change reconciled after the {component} restart")
        except AssertionError as e:
            raise AssertionError(f"{e}\nthe operator's log:\n{processes[-1].log_tail(120)}") from None
        restarted = len(processes) > 1
        print(f"\nafter a {component} restart: a spec change reconciled {time.monotonic() - started:.1f} s later"
              f"{' (by a restarted operator: the leader exited on its lost Lease)' if restarted else ''}")
        apply_gateway(cluster, namespace, gateway_deployment("newcomer"))
        wait_condition(cluster, namespace, "newcomer", "Ready", "True", timeout=60)
        running = leader()
        assert running.proc is not None and running.proc.poll() is None, running.log_tail()  # no crash loop
        assert "Traceback" not in running.log_text()
    finally:
        for process in processes:
            process.stop()


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


def test_a_namespace_being_deleted_flips_nothing_and_logs_no_refusal(own_cluster: Cluster) -> None:
    """Deleting a namespace, the namespace controller removes the gateway's objects, and the API
    server refuses to create anything there again (403, NamespaceTerminating). The operator's
    re-creation attempts must not flip Stalled=True ApplyFailed, post Events, or log warnings.
    The namespace controller (kube-controller-manager) is paused (SIGSTOP) to hold the namespace
    in Terminating while the gateway's ConfigMap is gone: the moment a real deletion passes
    through."""
    cluster = own_cluster
    namespace = cluster.new_namespace()
    op = OperatorProcess(cluster).start()
    assert cluster.directory is not None
    controller_manager = int((cluster.directory / "run/kube-controller-manager.pid").read_text())
    try:
        apply_gateway(cluster, namespace, gateway_deployment("leaving"))
        wait_condition(cluster, namespace, "leaving", "Ready", "True")
        os.kill(controller_manager, signal.SIGSTOP)
        try:
            cluster.kubectl("delete", "namespace", namespace, "--wait=false")
            until(lambda: cluster.get_json("namespace", namespace)["status"].get("phase") == "Terminating",
                  timeout=30, what="the namespace to be Terminating")
            cluster.kubectl("-n", namespace, "delete", "configmap", "leaving-gateway-config")
            touch(cluster, namespace, "leaving", "again")    # a full pass at once: it re-applies the ConfigMap
            until(lambda: "leaving-gateway-config" in op.log_text() or observed(cluster, namespace, "leaving"),
                  timeout=30, what="a full pass after the ConfigMap went")
            try:
                stays(lambda: conditions(cluster, namespace, "leaving")["Stalled"]["status"] == "False", 8,
                      what="Stalled=False while the namespace terminates")
            except AssertionError:
                raise AssertionError(f"{conditions(cluster, namespace, 'leaving')['Stalled']}\n{op.log_tail()}")
        finally:
            os.kill(controller_manager, signal.SIGCONT)
        until(lambda: cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0, timeout=120,
              what="the namespace to go")
        mine = [line for line in op.log_text().splitlines() if namespace in line]
        assert not [line for line in mine if "WARNING" in line or "ApplyFailed" in line], mine
        # the kubelet's probes of /healthz (every few seconds in a pod) are no access lines
        assert "GET /healthz" not in op.log_text()
    finally:
        os.kill(controller_manager, signal.SIGCONT)
        op.stop()


def _upstream(cluster: Cluster, directory: Path) -> tuple[tuple[str, int], Path]:
    entry = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)["clusters"][0]
    url = urllib.parse.urlsplit(entry["cluster"]["server"])
    ca = entry["cluster"].get("certificate-authority")
    if ca is None:
        ca = directory / "apiserver-ca.crt"
        ca.write_bytes(base64.b64decode(entry["cluster"]["certificate-authority-data"]))
    return (url.hostname or "127.0.0.1", url.port or 443), Path(ca)


def test_a_frozen_watch_is_found_and_the_leader_hands_over(own_cluster: Cluster, tmp_path: Path) -> None:
    """A watch stream that stays open and delivers nothing (a proxy between the operator and the
    API server stops forwarding the GatewayDeployment watch): without the check nothing is
    reconciled; with it the leader gives up its Lease and exits, and a successor reconciles the
    change made during the freeze."""
    cluster = own_cluster
    namespace = cluster.new_namespace()
    ca = make_ca(tmp_path / "proxy-ca")
    upstream, upstream_ca = _upstream(cluster, tmp_path)
    frozen = (lambda path: "gatewaydeployments" in path and "watch=true" in path)
    proxies = []

    def through_proxy(*flags: str, lease: tuple[int, int, int]) -> OperatorProcess:
        proxy = StallProxy(upstream, upstream_ca, server_cert(ca, tmp_path / f"proxy-{len(proxies)}"))
        proxies.append(proxy)
        return OperatorProcess(cluster, lease=lease, extra_args=flags,
                               server=(f"https://127.0.0.1:{proxy.port}", ca.cert_path)).start()

    ops: list[OperatorProcess] = []
    try:
        # 1. the freeze is real: an operator without the check reconciles nothing behind it
        ops.append(through_proxy("--watch-check-seconds", "0", lease=(4, 3, 1)))
        apply_gateway(cluster, namespace, gateway_deployment("watched"))
        wait_condition(cluster, namespace, "watched", "Ready", "True")
        proxies[0].freeze(frozen)
        touch(cluster, namespace, "watched", "unchecked")
        stays(lambda: not observed(cluster, namespace, "watched"), 12, what="the change unreconciled (frozen watch)")
        assert proxies[0].frozen_paths, "the proxy froze no stream"
        ops[0].stop()
        # 2. with the check (2 s period, 6 s bound): found, the Lease given up, the process gone
        ops.append(through_proxy("--watch-check-seconds", "2", "--watch-stall-seconds", "6", lease=(15, 10, 2)))
        until(lambda: observed(cluster, namespace, "watched"), timeout=60, what="the checked operator reconciling")
        proxies[1].freeze(frozen)
        frozen_at = time.monotonic()
        touch(cluster, namespace, "watched", "checked")
        process = ops[1].proc
        assert process is not None
        until(lambda: process.poll() is not None, timeout=60, what="the operator with a frozen watch to exit")
        detected = time.monotonic() - frozen_at
        assert process.returncode == 1
        log = ops[1].log_text()
        assert f"the GatewayDeployment watch delivered no change of {namespace}/watched" in log
        assert "gave up the Lease" in log
        lease = cluster.get_json("-n", SYSTEM_NAMESPACE, "lease", f"{ops[1].release}-leader")
        assert not lease["spec"].get("holderIdentity")
        # 3. a successor (its own lease duration 15 s: it leads at once only because the Lease was given up)
        successor = OperatorProcess(cluster, lease=(15, 10, 2))
        ops.append(successor)
        exited_at = time.monotonic()
        successor.start()
        until(lambda: observed(cluster, namespace, "watched"), timeout=60, what="the successor reconciling")
        handed_over = time.monotonic() - exited_at
        print(f"frozen watch: detected and exited in {detected:.1f}s, reconciled by the successor "
              f"{handed_over:.1f}s later")
        assert handed_over < 15, handed_over
    except AssertionError:
        raise AssertionError("\n\n".join(op.log_tail(25) for op in ops)) from None
    finally:
        for op in ops:
            op.stop()
        for proxy in proxies:
            proxy.close()
