"""spec.expose where no edge answers: the control plane with a SIMULATED node (kwok), which
serves Ingress but not the Gateway API. The operator CLI runs under the chart's RBAC. What a
user sees: an HTTPRoute the cluster cannot hold is a clear Stalled reason while the replicas
run; an Ingress without an address says so in status.expose until its controller publishes one
(written here as an ingress controller writes it: the Ingress's status subresource), and the
route goes with the field. The real edge (Traefik on the real node) is tests/node/test_node.py's.
"""
from __future__ import annotations

import json

import pytest

from gateway_operator.api import reasons
from harness.cluster import Cluster
from harness.gateways import apply_gateway, conditions, wait_condition
from harness.operator import OperatorProcess, gateway_deployment
from harness.wait import until


INGRESS = {"ingress": {"className": "edge", "host": "bot.gateway.test"}}


def expose_status(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    return (cluster.get_json("gatewaydeployment", name, "-n", namespace).get("status") or {}).get("expose") or {}


def test_an_httproute_without_the_gateway_api_is_a_clear_stall_and_the_replicas_run(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    if cluster.kubectl("get", "crd", "httproutes.gateway.networking.k8s.io", check=False).returncode == 0:
        pytest.skip("this cluster serves the Gateway API")
    route = {"httpRoute": {"parentRefs": [{"name": "public", "namespace": "gateway-system"}]}}
    apply_gateway(cluster, namespace, gateway_deployment("routed", expose=route))
    stalled = wait_condition(cluster, namespace, "routed", "Stalled", "True", reasons.EXPOSE_NOT_SERVED)
    assert "HTTPRoute" in stalled["message"] and "spec.expose.httpRoute" in stalled["message"], stalled
    deployment = cluster.get_json("deployment", "routed", "-n", namespace)  # applied before the route
    assert deployment["metadata"]["ownerReferences"][0]["name"] == "routed"
    # fixed by dropping the field: the stall clears
    apply_gateway(cluster, namespace, gateway_deployment("routed"))
    wait_condition(cluster, namespace, "routed", "Stalled", "False", reasons.NO_PROBLEMS)


def test_an_ingress_address_reaches_status_once_published_and_the_ingress_goes_with_the_field(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("exposed", replicas=1, expose=INGRESS))
    ingress = until(lambda: cluster.get_json("ingress", "exposed", "-n", namespace), timeout=60, what="the Ingress")
    assert ingress["spec"]["ingressClassName"] == "edge"
    assert ingress["metadata"]["ownerReferences"][0]["name"] == "exposed"
    until(lambda: "no address yet" in expose_status(cluster, namespace, "exposed").get("message", ""),
          timeout=60, what="status.expose.message")
    assert "Stalled" not in {t for t, c in conditions(cluster, namespace, "exposed").items() if c["status"] == "True"}

    # the ingress controller publishes its address: the resource shows it within a health interval
    published = {"status": {"loadBalancer": {"ingress": [{"ip": "127.0.80.1"}]}}}
    cluster.kubectl("patch", "ingress", "exposed", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(published))
    until(lambda: expose_status(cluster, namespace, "exposed") == {"address": "127.0.80.1",
                                                                   "url": "http://bot.gateway.test/"},
          timeout=30, what="status.expose.address")
    wide = cluster.kubectl("get", "gwd", "exposed", "-n", namespace, "-o", "wide").stdout
    assert "ADDRESS" in wide and "127.0.80.1" in wide, wide

    apply_gateway(cluster, namespace, gateway_deployment("exposed", replicas=1))
    until(lambda: cluster.kubectl("get", "ingress", "exposed", "-n", namespace, check=False).returncode != 0,
          timeout=60, what="the Ingress to be deleted")
    until(lambda: not expose_status(cluster, namespace, "exposed"), timeout=30, what="status.expose to go")
