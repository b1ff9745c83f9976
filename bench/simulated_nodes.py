"""SIMULATED NODES for the scale benchmark: kube-scheduler plus kwok on the local control plane.

kwok (sigs.k8s.io/kwok, built by ``hack/build-binaries.sh --bench``) plays the kubelets of
fake nodes: it marks scheduled pods Running and Ready with IPs from the node's podCIDR, a
loopback range where bench/health_farm.py answers ``/health``. Thousands of pods fit on
2 cores this way; functional tests use the real node instead. The stage files (which status
a pod gets, how fast) are kwok's own "fast" stages, read from the pinned module.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POD_CIDR = "127.40.0.0/16"  # loopback, apart from the stand-in kubelet's (127.1/16) and the demo's (127.2/16)
_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
           "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")


def binaries() -> Path:
    out = subprocess.run([str(REPO / "hack/build-binaries.sh"), "--bench"], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    return Path(out.strip().splitlines()[-1])


def _kwok_stages() -> str:
    """kwok's own stage definitions, from the module the binary was built from."""
    listing = subprocess.run(["go", "list", "-m", "-json", "sigs.k8s.io/kwok"], cwd=REPO / "hack/kwok",
                             check=True, text=True, stdout=subprocess.PIPE,
                             env={**os.environ, "GOFLAGS": "-mod=mod"}).stdout
    root = Path(json.loads(listing)["Dir"]) / "kustomize/stage"
    return "\n---\n".join((root / stage).read_text() for stage in _STAGES)


def node_manifest(name: str, pod_cidr: str = POD_CIDR, pods: int = 10000) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                     "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"podCIDR": pod_cidr},
        "status": {"allocatable": {"cpu": "1000", "memory": "1Ti", "pods": str(pods)},
                   "capacity": {"cpu": "1000", "memory": "1Ti", "pods": str(pods)}},
    }


@dataclass
class SimulatedNodes:
    kubeconfig: Path
    directory: Path                      # logs and generated config go here
    pod_cidr: str = POD_CIDR
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, kubectl: str) -> "SimulatedNodes":
        bin_dir = binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        stages = self.directory / "kwok-stages.yaml"
        stages.write_text(_kwok_stages())
        scheduler = self.directory / "scheduler.yaml"
        # a generous client rate: the scheduler's binding speed is not what is measured
        scheduler.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 500, "burst": 1000},
            "leaderElection": {"leaderElect": False}}))
        self._spawn("kube-scheduler", [str(bin_dir / "kube-scheduler"), "--config", str(scheduler),
                                       "--secure-port", "0", "--v", "1"])
        self._spawn("kwok", [str(bin_dir / "kwok"), "--kubeconfig", str(self.kubeconfig), "-c", str(stages),
                             "--manage-all-nodes=false", "--manage-nodes-with-label-selector=type=kwok",
                             "--cidr", self.pod_cidr, "--node-ip", "127.0.0.1", "--server-address", "127.0.0.1:0",
                             "--node-lease-duration-seconds", "40", "-v", "WARN"])  # heartbeats by Lease
        subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig), "apply", "-f", "-"], check=True,
                       input=json.dumps(node_manifest("kwok-0", self.pod_cidr)).encode(), stdout=subprocess.DEVNULL)
        subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig), "wait", "--for=condition=Ready",
                        "node/kwok-0", "--timeout=60s"], check=True, stdout=subprocess.DEVNULL)
        return self

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.directory / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()
