"""The operator's own API client (clients/kube.py) against a real API server, where the loop relies
on what the server answers: a generated Secret's create answers the Secret as stored, so that a
first pass does not read it back; a status the server moved leaves the object as the apply left it.

Real parts: the control plane (its node is simulated; nothing here runs a pod)."""
from __future__ import annotations

import pytest

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.clients.kube import Kube, NotOwned, load_config
from gateway_operator.core.render.names import Owner
from gateway_operator.core.render.secrets import generated_secrets
from harness.cluster import Cluster
from harness.gateways import apply_gateway
from harness.operator import gateway_deployment, install_crd


def test_a_generated_secret_is_created_once_and_its_create_answers_what_a_read_would(cluster: Cluster,
                                                                                     namespace: str) -> None:
    # a real owner, so that the garbage collector keeps what it owns for the length of the test
    install_crd(cluster)
    apply_gateway(cluster, namespace, gateway_deployment("made"))
    uid = cluster.get_json("-n", namespace, "gatewaydeployment", "made")["metadata"]["uid"]
    owner = Owner("made", namespace, uid)
    # the auth token's kind of generated Secret, under a name no operator running beside this test
    # would create for "made"
    generated = generated_secrets(owner, GatewaySpec.parse(gateway_deployment("made")["spec"]))[0]
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


def test_an_object_whose_status_alone_moved_is_not_read_back_and_one_that_drifted_is(cluster: Cluster,
                                                                                   namespace: str) -> None:
    """A Deployment's status moves several times while its pods start, a PodDisruptionBudget's as
    they turn Ready: each move was a new resourceVersion, so the next pass read the object back
    (3 Deployment and 2 PodDisruptionBudget reads per GatewayDeployment created, where one each
    is the apply's own). A watch event at the generation and with the metadata the object was
    verified at carries the verification over; a change of what the apply sets does not."""
    install_crd(cluster)
    apply_gateway(cluster, namespace, gateway_deployment("moved"))
    uid = cluster.get_json("-n", namespace, "gatewaydeployment", "moved")["metadata"]["uid"]
    delivered: dict[tuple[str, str, str], int] = {}   # what the watch delivered: this test's events
    kube = Kube(load_config(str(cluster.kubeconfig)), lambda *key: delivered.get(key))
    reads: list[str] = []
    get = kube.get
    kube.get = lambda *a: reads.append(a[1]) or get(*a)  # type: ignore[method-assign]
    key = ("PodDisruptionBudget", namespace, "moved-test")
    manifest = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": key[2], "namespace": namespace, "labels": {"example.dev/owned": "yes"},
                             "annotations": {"example.dev/ours": "1"},
                             "ownerReferences": [{"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND,
                                                  "name": "moved", "uid": uid, "controller": True}]},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"example.dev/app": "moved-test"}}}}

    def event() -> None:
        """The watch delivers the object as it is now."""
        body = cluster.get_json("-n", namespace, "poddisruptionbudget", key[2])
        kube.status_moved(body)
        delivered[key] = int(body["metadata"]["resourceVersion"])

    def applied() -> bool:
        reads.clear()
        result = kube.apply(manifest, uid)
        return result.written

    assert kube.apply(manifest, uid).written
    event()
    assert not applied() and reads == []
    cluster.kubectl("-n", namespace, "patch", "poddisruptionbudget", key[2], "--subresource=status", "--type=merge",
                    "-p", '{"status": {"currentHealthy": 7, "desiredHealthy": 0, "disruptionsAllowed": 7, '
                          '"expectedPods": 7}}')
    cluster.kubectl("-n", namespace, "annotate", "poddisruptionbudget", key[2], "example.dev/theirs=x")
    event()   # its status moved, and someone else's annotation came: nothing the apply sets
    assert not applied() and reads == [], reads
    cluster.kubectl("-n", namespace, "annotate", "--overwrite", "poddisruptionbudget", key[2], "example.dev/ours=2")
    event()   # what the apply sets drifted: read, and put back
    assert applied() and reads == ["PodDisruptionBudget"]
    assert cluster.get_json("-n", namespace, "poddisruptionbudget", key[2])["metadata"]["annotations"][
        "example.dev/ours"] == "1"
    event()
    cluster.kubectl("-n", namespace, "patch", "poddisruptionbudget", key[2], "--type=merge",
                    "-p", '{"spec": {"maxUnavailable": 2}}')
    event()   # the spec drifted: a new generation
    assert applied() and reads == ["PodDisruptionBudget"]
    assert cluster.get_json("-n", namespace, "poddisruptionbudget", key[2])["spec"]["maxUnavailable"] == 1
