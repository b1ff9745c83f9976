#!/usr/bin/env python3
"""A STAND-IN for the kubelet and the scheduler on the local control plane.

There are no kubelets and no container runtime here, so this process plays their part for
one node, ``local-node-0``:

* it registers the node, keeps it Ready and renews its Lease (so the node-lifecycle
  controller never evicts anything);
* it binds every unscheduled pod to that node (the scheduler's job);
* it gives each pod a distinct pod IP inside 127.0.0.0/8 (the whole range is loopback on
  Linux, so a real local process can later listen on it) and reports the pod Running and
  Ready, which makes Deployments, ReplicaSets, rollouts and ``readyReplicas`` behave as in a
  cluster;
* it finishes graceful deletions (the kubelet confirms them with a zero grace period).

What a pod "runs" is decided by a ``PodRuntime``. The default ``StatusOnlyRuntime`` runs
nothing; a later runtime can start a real local process bound to the pod IP (the IP is
handed to ``start`` before the pod is reported Ready) without changing the rest.
"""
from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

NODE_NAME = "local-node-0"
LEASE_NAMESPACE = "kube-node-lease"
# Overridable (--pod-network / GWOP_POD_NETWORK) so two local clusters on one host, e.g. the
# demo sandbox and the test session, never hand out the same pod IP.
POD_NETWORK = ipaddress.ip_network(os.environ.get("GWOP_POD_NETWORK", "127.1.0.0/16"))
log = logging.getLogger("kubelet-standin")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodRuntime(Protocol):
    """What runs a pod's containers. ``start`` returns once the pod may be reported Ready."""

    def start(self, pod: client.V1Pod, pod_ip: str) -> None: ...

    def stop(self, pod_uid: str) -> None: ...


class StatusOnlyRuntime:
    """Runs nothing: the pod is only a status in the API server."""

    def start(self, pod: client.V1Pod, pod_ip: str) -> None:
        return None

    def stop(self, pod_uid: str) -> None:
        return None


class PodIPPool:
    """Hands out distinct pod IPs from POD_NETWORK, persisted so a restart keeps them."""

    def __init__(self, state_file: Path) -> None:
        self._file = state_file
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = {}
        self._cursor = 0  # round robin, as CNI IPAM does: a new pod does not get a dead pod's IP
        if state_file.exists():
            state = json.loads(state_file.read_text())
            self._by_uid, self._cursor = state["pods"], state["cursor"]

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            used = set(self._by_uid.values())
            size = POD_NETWORK.num_addresses
            for step in range(1, size):
                offset = (self._cursor + step) % size
                ip = str(POD_NETWORK.network_address + offset)
                if offset % 256 in (0, 1, 255) or ip in used:
                    continue
                self._by_uid[uid], self._cursor = ip, offset
                self._save()
                return ip
            raise RuntimeError("pod IP pool exhausted")

    def release(self, uid: str) -> None:
        with self._lock:
            if self._by_uid.pop(uid, None) is not None:
                self._save()

    def known_uids(self) -> set[str]:
        with self._lock:
            return set(self._by_uid)

    def _save(self) -> None:
        tmp = self._file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pods": self._by_uid, "cursor": self._cursor}))
        tmp.replace(self._file)


class NodeAgent:
    def __init__(self, core: client.CoreV1Api, coord: client.CoordinationV1Api,
                 pool: PodIPPool, runtime: PodRuntime) -> None:
        self.core, self.coord, self.pool, self.runtime = core, coord, pool, runtime
        self.stopping = threading.Event()

    # -- node -------------------------------------------------------------------------
    def node_status(self) -> dict[str, Any]:
        ts = now()
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "500", "ephemeral-storage": "500Gi"}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet stand-in is posting ready status",
                 "lastHeartbeatTime": ts, "lastTransitionTime": ts}
        return {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [ready] + [
                {"type": t, "status": "False", "reason": "KubeletHasSufficient" + t[:-8],
                 "message": "stand-in", "lastHeartbeatTime": ts, "lastTransitionTime": ts}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"kubeletVersion": "v0.0.0-standin", "kubeProxyVersion": "",
                         "containerRuntimeVersion": "standin://0", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "kubelet stand-in",
                         "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        }

    def register_node(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE_NAME, "labels": {
                    "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "gateway-operator.dev/kubelet-standin": "true"}}}
        try:
            self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
        self.core.patch_node_status(NODE_NAME, {"status": self.node_status()})

    def heartbeat_forever(self) -> None:
        while not self.stopping.wait(10):
            try:
                self.renew_lease()
                self.core.patch_node_status(NODE_NAME, {"status": self.node_status()})
            except Exception:  # the API server may be restarting; try again next beat
                log.exception("heartbeat failed")

    def renew_lease(self) -> None:
        micro = dt.datetime.now(dt.timezone.utc)
        body = {"metadata": {"name": NODE_NAME, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": NODE_NAME, "leaseDurationSeconds": 40,
                         "renewTime": micro.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
        try:
            self.coord.patch_namespaced_lease(NODE_NAME, LEASE_NAMESPACE, body)
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease(LEASE_NAMESPACE, body)

    # -- pods -------------------------------------------------------------------------
    def handle(self, pod: client.V1Pod, deleted: bool = False) -> None:
        meta, spec = pod.metadata, pod.spec
        if deleted:
            self.runtime.stop(meta.uid)
            self.pool.release(meta.uid)
            return
        if not spec.node_name:
            if (spec.scheduler_name or "default-scheduler") == "default-scheduler":
                self.bind(pod)
            return
        if spec.node_name != NODE_NAME:
            return
        if meta.deletion_timestamp is not None:
            self.finish_deletion(pod)
            return
        if pod.status is None or pod.status.phase not in ("Running", "Succeeded", "Failed"):
            self.run(pod)

    def bind(self, pod: client.V1Pod) -> None:
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod.metadata.name),
                                target=client.V1ObjectReference(kind="Node", name=NODE_NAME))
        try:
            # _preload_content=False: the client cannot deserialize the Status this returns
            self.core.create_namespaced_binding(pod.metadata.namespace, body, _preload_content=False)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def run(self, pod: client.V1Pod) -> None:
        ip = self.pool.allocate(pod.metadata.uid)
        self.runtime.start(pod, ip)
        ts = now()
        conditions = [{"type": t, "status": "True", "lastTransitionTime": ts} for t in
                      ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                       "PodScheduled")]
        statuses = [{"name": c.name, "image": c.image, "imageID": f"standin://{c.image}",
                     "containerID": f"standin://{pod.metadata.uid}/{c.name}",
                     "ready": True, "started": True, "restartCount": 0,
                     "state": {"running": {"startedAt": ts}}} for c in pod.spec.containers]
        status = {"phase": "Running", "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                  "podIP": ip, "podIPs": [{"ip": ip}], "startTime": ts,
                  "conditions": conditions, "containerStatuses": statuses}
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace,
                                                  {"status": status})
            log.info("pod %s/%s running at %s", pod.metadata.namespace, pod.metadata.name, ip)
        except ApiException as e:
            if e.status != 404:
                raise

    def finish_deletion(self, pod: client.V1Pod) -> None:
        self.runtime.stop(pod.metadata.uid)
        try:
            self.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0,
                                            preconditions=client.V1Preconditions(uid=pod.metadata.uid)))
        except ApiException as e:
            if e.status not in (404, 409):
                raise
        self.pool.release(pod.metadata.uid)

    def resync(self) -> str:
        pods = self.core.list_pod_for_all_namespaces()
        live = set()
        for pod in pods.items:
            live.add(pod.metadata.uid)
            self.safe_handle(pod)
        for uid in self.pool.known_uids() - live:
            self.runtime.stop(uid)
            self.pool.release(uid)
        return pods.metadata.resource_version

    def safe_handle(self, pod: client.V1Pod, deleted: bool = False) -> None:
        try:
            self.handle(pod, deleted)
        except Exception:
            log.exception("handling pod %s/%s", pod.metadata.namespace, pod.metadata.name)

    def watch_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                rv = self.resync()
                w = watch.Watch()
                for event in w.stream(self.core.list_pod_for_all_namespaces, resource_version=rv,
                                      timeout_seconds=60, allow_watch_bookmarks=True):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.safe_handle(event["object"], deleted=event["type"] == "DELETED")
            except ApiException as e:
                if e.status != 410:  # 410: resource version too old, resync
                    log.warning("watch failed: %s", e.reason)
                    time.sleep(1)
            except Exception as e:  # connection reset while the API server restarts
                log.warning("watch failed: %s", e)
                time.sleep(1)


def main() -> None:
    global POD_NETWORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--ip-pool-file", required=True, type=Path)
    parser.add_argument("--pod-network", default=str(POD_NETWORK),
                        help="loopback range pod IPs come from (default: $GWOP_POD_NETWORK or 127.1.0.0/16)")
    args = parser.parse_args()
    POD_NETWORK = ipaddress.ip_network(args.pod_network)
    if not POD_NETWORK.subnet_of(ipaddress.ip_network("127.0.0.0/8")):
        parser.error("--pod-network must lie in 127.0.0.0/8 (loopback), so local processes can bind pod IPs")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config.load_kube_config(args.kubeconfig)
    agent = NodeAgent(client.CoreV1Api(), client.CoordinationV1Api(),
                      PodIPPool(args.ip_pool_file), StatusOnlyRuntime())
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    agent.register_node()
    agent.renew_lease()
    threading.Thread(target=agent.heartbeat_forever, daemon=True).start()
    agent.watch_forever()


if __name__ == "__main__":
    main()
