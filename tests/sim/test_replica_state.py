"""What each replica keeps that the operator cannot share (docs/replica-state.md), as a user sees it
on the resource: a channel bot that every replica would run is named in ``ReplicaSafeChannels`` with
a Warning Event, by the operator's real loop on the session's control plane (SIMULATED node: kwok
reports the gateway pods Running; the condition is read from the spec, not from the pods)."""
from __future__ import annotations

import json

from gateway_operator.api import reasons
from harness.cluster import Cluster
from harness.gateways import apply_gateway, wait_condition, wait_event
from harness.operator import OperatorProcess, gateway_deployment


def test_a_telegram_bot_on_two_replicas_is_warned_and_the_warning_goes_with_one_replica(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    token = [{"name": "TELEGRAM_BOT_TOKEN", "valueFrom": {"secretKeyRef": {"name": "bot", "key": "token"}}}]
    apply_gateway(cluster, namespace, gateway_deployment("bots", replicas=2, replicaPolicy="Warn", env=token))
    c = wait_condition(cluster, namespace, "bots", "ReplicaSafeChannels", "False", reasons.CHANNEL_ON_EVERY_REPLICA)
    assert c["message"].startswith("2 replicas each run the channel bots") and "telegram polls getUpdates" in c["message"]
    event = wait_event(cluster, namespace, "bots", reasons.CHANNEL_ON_EVERY_REPLICA, "Warning")
    assert event["message"] == c["message"]
    cluster.kubectl("-n", namespace, "patch", "gatewaydeployment", "bots", "--type=merge",
                    "-p", json.dumps({"spec": {"replicas": 1}}))
    wait_condition(cluster, namespace, "bots", "ReplicaSafeChannels", "True", reasons.NO_CHANNEL_ON_EVERY_REPLICA)
