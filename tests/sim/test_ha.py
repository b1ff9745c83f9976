"""Two operator replicas with leader election (issue 9): only the leader writes, and the
standby takes over when the leader is SIGKILLed. Runs on a control plane of its own (both
operators watch every namespace, which would otherwise race the session's operator)."""
from __future__ import annotations

import json
import signal
import time

from harness.cluster import Cluster
from harness.gateways import apply_gateway, wait_condition
from harness.operator import SYSTEM_NAMESPACE, OperatorProcess, RELEASE, gateway_deployment
from harness.wait import until

GATEWAYS = [f"gw-{i}" for i in range(5)]


def holder(cluster: Cluster) -> str:
    return cluster.get_json("-n", SYSTEM_NAMESPACE, "lease", f"{RELEASE}-leader")["spec"]["holderIdentity"]


def test_the_standby_takes_over_when_the_leader_is_killed(own_cluster: Cluster) -> None:
    cluster = own_cluster
    first = OperatorProcess(cluster).start()
    until(lambda: holder(cluster) == first.leader_identity, timeout=30, what="the first operator to lead")
    second = OperatorProcess(cluster).start()  # answers its liveness probe as a standby
    try:
        namespace = cluster.new_namespace()
        for name in GATEWAYS:
            apply_gateway(cluster, namespace, gateway_deployment(name))
        for name in GATEWAYS:
            wait_condition(cluster, namespace, name, "Ready", "True")
        assert holder(cluster) == first.leader_identity
        assert "applied" not in second.log_text() and "waiting to lead" in second.log_text()  # only the leader writes

        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", GATEWAYS[0], "--type=merge", "-p",
                        json.dumps({"spec": {"podAnnotations": {"example.dev/after": "failover"}}}))
        generation = cluster.get_json("-n", namespace, "gatewaydeployment", GATEWAYS[0])["metadata"]["generation"]
        until(lambda: cluster.get_json("-n", namespace, "gatewaydeployment", GATEWAYS[0]).get("status", {})
              .get("observedGeneration") == generation, timeout=60, interval=0.2, what="the successor to reconcile")
        failover = time.monotonic() - killed
        print(f"\nfailover: leader SIGKILLed -> successor reconciled a spec change in {failover:.1f} s "
              "(lease 4 s, retry 1 s)")
        assert holder(cluster) == second.leader_identity
        assert failover < 15, failover
        template = cluster.get_json("-n", namespace, "deployment", GATEWAYS[0])["spec"]["template"]
        assert template["metadata"]["annotations"]["example.dev/after"] == "failover"

        # nothing duplicated, nothing stuck: one of each object per gateway, every one Ready
        for kind in ("deployments", "configmaps", "services"):
            names = [o["metadata"]["name"] for o in cluster.get_json("-n", namespace, kind)["items"]
                     if o["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "gateway-operator"]
            assert len(names) == len(set(names)) == len(GATEWAYS), (kind, names)
        for name in GATEWAYS:
            wait_condition(cluster, namespace, name, "Ready", "True")
        assert "Traceback" not in second.log_text()
    finally:
        second.stop()
        first.stop()
