"""What the operator knows of a gateway's pods (``PodView``) and its Deployment
(``LiveDeployment``), as the watches deliver them (kept in kopf indices; pure), and the one
pod-ready check: the operator's pod index, its managed-Redis lookup, the benchmark and the test
harness all read a pod's readiness here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from gateway_operator import api
from gateway_operator.api import workloads
from gateway_operator.pod import gwop_contract as contract


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one gateway pod (kept in a kopf index)."""

    name: str
    uid: str
    ip: str | None
    ready: bool
    deleting: bool
    waiting_reason: str | None = None
    waiting_message: str = ""   # the kubelet's, for the POD_WAITING reasons only (bounded)
    last_exit_code: int | None = None
    # the launcher's last words when it refused the gateway release (exit 78, "unsupported gateway"), bounded
    refused_gateway: str = ""
    containers_ready: bool = False  # the kubelet's probes pass (Ready but for readiness gates)
    gated: bool = False             # its spec lists the operator's readiness gate (api.READINESS_GATE)
    gate: bool | None = None        # that condition as set (None: not set yet)

    @property
    def serving(self) -> bool:
        """As ``serving`` below: ready and not being deleted."""
        return self.ready and not self.deleting

    @property
    def polled(self) -> bool:
        """Its /health is read: its containers are ready (a pod the operator's readiness gate keeps
        out of the traffic is still asked, or it could never come back), with an IP, not being deleted."""
        return (self.containers_ready or self.ready) and bool(self.ip) and not self.deleting


# the launcher's exit-78 line (pod/launch.py)
REFUSED_GATEWAY = f"{contract.LINE_PREFIX}{contract.UNSUPPORTED_GATEWAY}: "
REFUSED_GATEWAY_LIMIT = 600  # characters kept


def refused_gateway(exit_code: Any, message: Any) -> str:
    """What the launcher said when it refused the gateway release in the image (exit 78 with its
    one line in the kubelet's termination message), else "". Only that line, bounded."""
    if exit_code != contract.EXIT_FATAL_CONFIG or not isinstance(message, str):
        return ""
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line[len(REFUSED_GATEWAY):][:REFUSED_GATEWAY_LIMIT] if line.startswith(REFUSED_GATEWAY) else ""


def ready(status: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (the kubelet's readiness probe passes)."""
    return workloads.condition_status(status, "Ready") == "True"


def containers_ready(status: Mapping[str, Any]) -> bool:
    """The pod's ContainersReady condition is True: every container's readiness probe passes
    (Ready also waits for the pod's readiness gates)."""
    return workloads.condition_status(status, "ContainersReady") == "True"


def gated(spec: Mapping[str, Any]) -> bool:
    """The pod's spec lists the operator's readiness gate."""
    return api.READINESS_GATE in workloads.readiness_gates(spec)


def gate(status: Mapping[str, Any]) -> bool | None:
    """The operator's readiness gate condition as last set: True, False, or None when not set."""
    found = workloads.condition_status(status, api.READINESS_GATE)
    return None if found is None else found == "True"


def gate_condition(value: bool, reason: str, message: str, now: str) -> dict[str, str]:
    """The condition the operator writes (a strategic merge patch of the pod's status merges
    conditions by type)."""
    return {"type": api.READINESS_GATE, "status": "True" if value else "False", "reason": reason,
            "message": message, "lastTransitionTime": now}


def serving(pod: Mapping[str, Any]) -> bool:
    """Ready, with an IP, and not being deleted: a pod that takes traffic (and is polled)."""
    return ready(workloads.status(pod)) and bool(workloads.pod_ip(pod)) and not workloads.deleting(pod)


# -- the gateway Deployment, as watched ------------------------------------------------------------

class Observed(NamedTuple):
    """The live Deployment, as far as it is ours."""

    running: int = 0
    ready: int = 0
    updated: int = 0
    rollout_observed: bool = False
    failure: str = ""   # the Deployment's ReplicaFailure message (a pod the API server refused to create)
    generation: int = 0  # the Deployment's status.observedGeneration
    current: int = 0     # status.replicas: pods of every template, not being deleted (old ones too, mid-rollout)

    @property
    def rolled_out(self) -> bool:
        """Every replica updated to the latest template and ready, and no old one left (as
        ``kubectl rollout status`` says complete)."""
        return (self.rollout_observed and self.updated >= self.running and self.ready >= self.running
                and self.current <= self.running)


class LiveDeployment(NamedTuple):
    """A gateway Deployment as the watch last delivered it (kept in a kopf index), so that
    observation passes read no API object at all."""

    controller_uid: str | None
    observed: Observed
    template_hash: str = ""     # the operator's fingerprint of its pod template ("" : an older operator wrote it)
    secrets_revision: str = ""  # the template's: the Secrets its pods read
    config_hash: str = ""       # the template's: the ConfigMap its pods read


#: the Deployment index's answer when it holds none by that name (handlers.Indices.deployment_of)
NONE_WATCHED = LiveDeployment(None, Observed())


def live_deployment(deployment: Mapping[str, Any]) -> LiveDeployment:
    read = workloads.deployment(deployment)
    return LiveDeployment(workloads.controller_uid(deployment), Observed(
        running=read.replicas, ready=read.ready, updated=read.updated,
        rollout_observed=read.observed_generation >= read.generation,
        failure=read.replica_failure[:FAILURE_MESSAGE_LIMIT], generation=read.observed_generation,
        current=read.current),
        template_hash=str(read.annotations.get(api.ANNOTATION_TEMPLATE_HASH, "")),
        secrets_revision=str(read.template_annotations.get(api.ANNOTATION_SECRETS_REVISION, "")),
        config_hash=str(read.template_annotations.get(api.ANNOTATION_CONFIG_HASH, "")))


FAILURE_MESSAGE_LIMIT = 500  # characters of the API server's refusal kept (it names the pod and the rule)
