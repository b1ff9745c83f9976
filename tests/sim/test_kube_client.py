"""The operator's own API client (clients/kube.py) against a real API server, where the loop relies
on what the server answers: a generated Secret's create answers the Secret as stored, so that a
first pass does not read it back.

Real parts: the control plane (its node is simulated; nothing here runs a pod)."""
from __future__ import annotations

import pytest

from gateway_operator.api import GatewaySpec
from gateway_operator.clients.kube import Kube, NotOwned, load_config
from gateway_operator.core import render
from harness.cluster import Cluster
from harness.gateways import apply_gateway
from harness.operator import gateway_deployment, install_crd


def test_a_generated_secret_is_created_once_and_its_create_answers_what_a_read_would(cluster: Cluster,
                                                                                     namespace: str) -> None:
    # a real owner, so that the garbage collector keeps what it owns for the length of the test
    install_crd(cluster)
    apply_gateway(cluster, namespace, gateway_deployment("made"))
    uid = cluster.get_json("-n", namespace, "gatewaydeployment", "made")["metadata"]["uid"]
    owner = render.Owner("made", namespace, uid)
    # the auth token's kind of generated Secret, under a name no operator running beside this test
    # would create for "made"
    generated = render.generated_secrets(owner, GatewaySpec.parse(gateway_deployment("made")["spec"]))[0]
    generated = generated._replace(name="made-client-test")
    kube = Kube(load_config(str(cluster.kubeconfig)))

    sent = generated.manifest(owner)
    made, answered = kube.create_if_absent(sent, uid)
    assert made and answered is not None
    # the answer is the Secret as stored: its value decodes as sent, at the version a read shows
    value, version = kube.secret_value(namespace, generated.name, generated.key, answered)
    assert value == sent["stringData"][generated.key]
    assert (value, version) == kube.secret_value(namespace, generated.name, generated.key)

    # once there, it is kept: a second create sends nothing and answers the Secret as read
    again, read = kube.create_if_absent(generated.manifest(owner), uid)
    assert not again and read is not None
    assert kube.secret_value(namespace, generated.name, generated.key, read) == (value, version)

    # a same-named Secret of someone else's is refused, never taken
    with pytest.raises(NotOwned):
        kube.create_if_absent(generated.manifest(owner), "another-owner-uid")
