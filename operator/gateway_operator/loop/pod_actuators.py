"""The loop's two writes on the gateway's pods, beside the pass: each pod's readiness gate (a
replica cut off from Redis while others reach it leaves the traffic) and the restart of a replica
stuck on the build-time SQLite fallback.

Apart from the controller (controller.py, which only drives) so that each actuator is read as one
job: it takes what it decides from (the pods, the spec, the replicas' answers or the facts, what
was written before) and returns what it did; it keeps no memory of its own. The decisions are
the pure core's (core.replicas: out_of_traffic, stale_replica); the cooldown is the schedule's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from gateway_operator.api import GatewaySpec
from gateway_operator.clients.kube import Kube
from gateway_operator.core import health
from gateway_operator.core.conditions import Facts
from gateway_operator.core.pods import PodView, gate_condition
from gateway_operator.core.render.deployment import gated
from gateway_operator.core.replicas import out_of_traffic, stale_replica
from gateway_operator.core.schedule import Schedule
from gateway_operator.loop import metrics, threads
from gateway_operator.loop.publish import ObjectLog, now_iso, post_event
from gateway_operator.pod import gwop_contract as contract

GATE_LAG_S = 5.0  # a readiness gate just written is not written again while the pod index may still lag

#: readiness gates written, by pod uid: (the value written, when: monotonic)
Gates = dict[str, tuple[bool, float]]


@dataclass(frozen=True)
class PodActuators:
    """Where the actuators act: one GatewayDeployment's pods (its name for metrics and the log)."""

    kube: Kube
    namespace: str
    name: str
    log: ObjectLog

    async def gate(self, body: Mapping[str, Any], spec: GatewaySpec, pods: Sequence[PodView],
                   replicas: Sequence[health.ReplicaHealth], written: Gates) -> Gates:
        """The readiness gate of each polled pod that carries it (render.deployment.gated): False for the
        replicas out_of_traffic says are cut off from Redis, True for the others, each written
        only when it changes (the pod index shows what was written once its watch event comes).
        ``written``: the gates written before, each one written now added as it is (a step that fails
        midway remembers those it wrote); returns them, of the pods still there."""
        if not gated(spec):
            return written
        polled = [p for p in pods if p.polled]
        gated_pods = [p for p in polled if p.gated]
        answered = {h.pod for h in replicas}
        # a replica that reaches Redis counts once its containers are ready: its own gate is set
        # True in this same round, so a fresh replica cut off from its start never takes traffic
        out = out_of_traffic(replicas, {p.name for p in polled})
        now, taken_out = time.monotonic(), 0
        for pod in gated_pods:
            if pod.name not in answered:
                continue  # not polled yet: its gate waits for its first answer
            want = pod.name not in out
            last = written.get(pod.uid)
            if pod.gate is want or (last is not None and last[0] is want and now - last[1] < GATE_LAG_S):
                continue
            # the replicas that reach Redis (the first three named): what says this one is cut off
            reachers = ", ".join(sorted(h.pod for h in replicas
                                        if h.redis == contract.ANSWERS and h.pod != pod.name)[:3])
            if not await self._set_gate(pod, want, reachers, now):
                continue
            written[pod.uid] = (want, now)
            if not want:
                taken_out += 1
                self.log.warning("pod %s cannot reach Redis while %s can: taken out of the traffic", pod.name, reachers)
                post_event(body, "Warning", "ReplicaCutOffFromRedis",
                           f"pod {pod.name} cannot reach Redis while {reachers} can: it leaves "
                           "the Service and the edge (readiness gate) until it reaches Redis again")
            elif pod.gate is False:
                self.log.info("pod %s reaches Redis again: back in the traffic", pod.name)
                post_event(body, "Normal", "ReplicaBackInTraffic",
                           f"pod {pod.name} reaches Redis again: back in the Service and the edge")
        metrics.traffic_gated(self.namespace, self.name, taken_out, sum(1 for p in gated_pods if p.name in out))
        live = {p.uid for p in gated_pods}
        return {uid: w for uid, w in written.items() if uid in live}

    async def _set_gate(self, pod: PodView, want: bool, reachers: str, now: float) -> bool:
        """Writes one pod's gate; False when it was not written (the pod gone, or refused)."""
        reason, message = (("RedisReachable", "this replica reaches Redis (or does not say otherwise)") if want else
                           ("CutOffFromRedis", f"this replica cannot reach Redis while {reachers} can: "
                            "out of the Service and the edge until it reaches Redis again"))
        try:
            await threads.run(self.kube.set_pod_condition, self.namespace, pod.name, pod.uid,
                              gate_condition(want, reason, message, now_iso()))
        except ApiException as e:
            # gone or replaced meanwhile (404, 409: its uid): nothing to gate; anything else (403:
            # the chart's RBAC not upgraded with the operator) is said, and the step goes on:
            # a 404 must never reach the loop, which reads it as the GatewayDeployment gone
            if e.status not in (404, 409):
                self.log.warning("setting pod %s's readiness gate failed: %s %s", pod.name, e.status, e.reason)
            return False
        return True

    async def restart_stale(self, body: Mapping[str, Any], spec: GatewaySpec, pods: Sequence[PodView],
                            facts: Facts, schedule: Schedule) -> str | None:
        """Deletes the replica replicas.stale_replica names, when the schedule allows (its cooldown,
        counted from now on); returns the pod restarted, if any."""
        name = stale_replica(spec.health.restart_stale_replicas, facts.health, facts.ready_replicas,
                             facts.running_replicas)
        pod = next((p for p in pods if p.name == name), None) if name else None
        if pod is None or not schedule.restart_allowed(time.monotonic(), spec.health.restart_cooldown_seconds):
            return None
        schedule.restarted(time.monotonic())
        await threads.run(self.kube.delete_pod, self.namespace, pod.name, pod.uid)
        metrics.restarted_stale_replica(self.namespace, self.name)
        self.log.info("restarted pod %s: it kept the build-time SQLite fallback", pod.name)
        post_event(body, "Normal", "RestartedStaleReplica",
                   f"restarted pod {pod.name}: it kept the per-replica SQLite fallback after Redis "
                   "came back (the gateway rebuilds its store only on restart)")
        return pod.name
