"""api/workloads.py: the reads of pods, Deployments and routes the core makes, on what another
controller or a hostile tenant may leave in those objects (a field of another type, a list of
strings, a missing section): read as absent, never raised."""
from __future__ import annotations

from gateway_operator import api
from gateway_operator.api import workloads
from gateway_operator.core import expose, pods
from gateway_operator.api import ExposeSpec


def test_a_deployment_read_is_what_its_fields_say_and_nothing_where_they_are_of_another_shape() -> None:
    body = {"metadata": {"generation": 3, "annotations": {"a": "1"},
                         "ownerReferences": ["junk", {"uid": "u1", "controller": True}]},
            "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"b": "2"}}}},
            "status": {"observedGeneration": 3, "readyReplicas": 1, "updatedReplicas": 2, "replicas": 3,
                       "conditions": ["junk", {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]}}
    read = workloads.deployment(body)
    assert read == workloads.DeploymentRead(2, 3, 3, 1, 2, 3, {"a": "1"}, {"b": "2"}, "FailedCreate")
    assert workloads.controller_uid(body) == "u1"
    live = pods.live_deployment(body)
    assert live.controller_uid == "u1" and live.observed.running == 2 and live.observed.failure == "FailedCreate"
    odd = {"metadata": "x", "spec": {"replicas": "2", "template": []}, "status": {"conditions": {"type": "Ready"}}}
    assert workloads.deployment(odd) == workloads.DeploymentRead(0, 0, 0, 0, 0, 0, {}, {}, "")
    assert workloads.controller_uid(odd) is None and pods.live_deployment(odd).observed == pods.Observed(
        rollout_observed=True)


def test_a_pod_is_serving_only_ready_with_an_ip_and_not_leaving() -> None:
    pod = {"metadata": {}, "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pods.serving(pod)
    assert not pods.serving({**pod, "metadata": {"deletionTimestamp": "2026-12-08T00:00:00Z"}})
    assert not pods.serving({**pod, "status": {**pod["status"], "podIP": ""}})
    assert not pods.serving({"status": {"podIP": "10.0.0.1", "conditions": "Ready"}})
    assert pods.gate({"conditions": [{"type": api.READINESS_GATE}]}) is None   # set without a status: not yet
    assert pods.gate({"conditions": [{"type": api.READINESS_GATE, "status": "True"}]}) is True
    assert pods.gate({"conditions": [{"type": api.READINESS_GATE, "status": "False"}]}) is False
    assert not pods.gated({"readinessGates": ["x", {"conditionType": "other"}]})
    assert pods.gated({"readinessGates": ["x", {"conditionType": api.READINESS_GATE}]})


def test_the_published_address_is_read_from_each_kind_and_a_malformed_status_publishes_none() -> None:
    spec = ExposeSpec.parse({"ingress": {"className": "edge", "host": "bot.gateway.test"}})
    ingress = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}, "junk", {"ip": "198.18.0.9"}]}}}
    assert workloads.ingress_addresses(ingress) == ["lb.example", "198.18.0.9"]
    assert expose.exposure(spec, ingress, None, {}).address == "lb.example"
    assert expose.exposure(spec, {"status": {"loadBalancer": "x"}}, None, {}).address == ""
    route = {"metadata": {"namespace": "ns"},
             "status": {"parents": [{"parentRef": {"name": "edge"}, "conditions": [{"type": "Accepted", "status": "True"}]},
                                    {"parentRef": {"name": "other", "namespace": "infra"},
                                     "conditions": [{"type": "Accepted", "status": "False"}]},
                                    "junk"]}}
    assert workloads.accepted_parents(route) == [("ns", "edge")]
    assert workloads.gateway_addresses({"status": {"addresses": [{"value": "198.18.0.10"}, {"type": "x"}]}}) == [
        "198.18.0.10"]
