"""Operator replicas that share the work (``--shards``, issue 33): each reconciles the
GatewayDeployments of the shards it holds through Leases. On a control plane of its own (both
operators watch every namespace, which would otherwise race the session's operator).

One test walks what a user of two replicas sees: the first alone holds every shard; the second
joins and gets half, handed over drained; a killed holder's shards move to the survivor within
the Lease duration plus a pass; and, from the API server's audit log, no GatewayDeployment's
objects were ever written by one replica after the other had started on it.
"""
from __future__ import annotations

import re
import signal

from harness import audit
from harness.cluster import Cluster
from harness.gateways import apply_gateway, reconcile_latency, wait_condition
from harness.operator import SYSTEM_NAMESPACE, OperatorProcess, RELEASE, gateway_deployment
from harness.wait import until

from gateway_operator.clients.kube import Kube, load_config
from gateway_operator.core.shards import selector, shard_of

SHARDS = 4
LEASE = (6, 3, 1)   # duration, renew deadline, retry period: the margin of 3 s bounds each write to 2.4 s
GATEWAYS = [f"g{i}" for i in range(8)]
HELD = re.compile(r'^gateway_operator_shard_held\{shard="(\d+)"\} 1\.0$', re.M)


def held(operator: OperatorProcess) -> set[int]:
    return {int(s) for s in HELD.findall(operator.metrics())}


def holders(cluster: Cluster) -> dict[int, str]:
    leases = cluster.get_json("-n", SYSTEM_NAMESPACE, "leases")["items"]
    return {int(m.group(1)): lease["spec"].get("holderIdentity") or "" for lease in leases
            if (m := re.fullmatch(rf"{RELEASE}-shard-(\d+)", lease["metadata"]["name"]))}


def test_two_replicas_share_the_shards_hand_them_over_and_never_write_one_object_at_once(
        own_cluster: Cluster) -> None:
    cluster = own_cluster
    since = audit.now()
    first = OperatorProcess(cluster, lease=LEASE, shards=SHARDS).start()
    second: OperatorProcess | None = None
    try:
        until(lambda: held(first) == set(range(SHARDS)), timeout=30, what="the first replica to hold every shard")
        namespace = cluster.new_namespace()
        for name in GATEWAYS:
            apply_gateway(cluster, namespace, gateway_deployment(name))
        for name in GATEWAYS:
            wait_condition(cluster, namespace, name, "Ready", "True")
        uids = {name: cluster.get_json("-n", namespace, "gatewaydeployment", name)["metadata"]["uid"]
                for name in GATEWAYS}
        shard = {name: shard_of(uid, SHARDS) for name, uid in uids.items()}
        # the API server's sharded list (1.37, gate on) answers the same assignment as shard_of
        kube = Kube(load_config(str(cluster.kubeconfig)))
        for s in range(SHARDS):
            listed = kube.gateway_deployments((namespace,), selector([s], SHARDS), page=3)
            assert sorted(o["metadata"]["name"] for o in listed) == sorted(n for n in GATEWAYS if shard[n] == s), \
                (s, shard)

        second = OperatorProcess(cluster, lease=LEASE, shards=SHARDS).start()
        until(lambda: len(held(first)) == len(held(second)) == SHARDS // 2 and not held(first) & held(second),
              timeout=60, interval=0.5, what="the shards split two and two")
        first_shards, second_shards = held(first), held(second)
        # what the second took was listed by the API server already filtered (1.37, gate on)
        took = re.findall(r"shards \[[\d, ]*\]: (\d+) GatewayDeployments started of (\d+) listed", second.log_text())
        assert took and all(a == b for a, b in took), (took, second.log_tail())
        print(f"\nshards: first {sorted(first_shards)}, second {sorted(second_shards)}; "
              f"gateways by shard {dict(sorted(shard.items()))}")
        ids = {h for h in holders(cluster).values()}
        assert len(ids) == 2 and all(first.leader_identity in h or second.leader_identity in h for h in ids), ids

        # each replica reconciles its own shards' changes
        for name in GATEWAYS:
            if shard[name] in second_shards:
                reconcile_latency(cluster, namespace, name, "on the second")
                break
        on_first = next((n for n in GATEWAYS if shard[n] in first_shards), None)
        assert on_first is not None, shard  # 8 uids on 2 of 4 shards: none is a 1-in-128 draw

        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        moved = reconcile_latency(cluster, namespace, on_first, "after the kill")
        print(f"the holder SIGKILLed -> its shard's GatewayDeployment reconciled by the other in {moved:.1f} s "
              f"(lease {LEASE[0]} s, retry {LEASE[2]} s)")
        assert moved < LEASE[0] + LEASE[2] + 10, moved
        until(lambda: held(second) == set(range(SHARDS)), timeout=30, what="the survivor to hold every shard")
        for name in GATEWAYS:
            wait_condition(cluster, namespace, name, "Ready", "True")
        for log in (first.log_text(), second.log_text()):
            assert "Traceback" not in log and "step failed" not in log, log[-3000:]

        # the audit log: per GatewayDeployment, its objects' writes by replica, in time order. The
        # first replica may write until it handed over (or died), the second only from then on:
        # one switch at most, and never back.
        writes = [w for w in audit.writes(cluster, first.identity, since)
                  if w.namespace == namespace and "gateway-operator (" in w.user_agent]
        for name in GATEWAYS:
            mine = sorted((w for w in writes if w.name == name or w.name.startswith(f"{name}-")),
                          key=lambda w: w.time)
            writers = [first.leader_identity in w.user_agent for w in mine]
            assert writers, f"{name}: no write in the audit log"
            switches = sum(1 for a, b in zip(writers, writers[1:]) if a != b)
            assert switches <= 1 and writers[0], (name, shard[name], [(w.time, w.verb, w.resource, w.user_agent)
                                                                       for w in mine])
    finally:
        if second is not None:
            second.stop()
        first.stop()
