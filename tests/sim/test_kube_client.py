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
from gateway_operator.core.render.secrets import Generated, generated_secrets
from harness.cluster import Cluster
from harness.gateways import apply_gateway
from harness.operator import gateway_deployment, install_crd


def owned_secret(cluster: Cluster, namespace: str, name: str) -> tuple[str, Owner, Generated]:
    """A real GatewayDeployment ``name`` (so that the garbage collector keeps what it owns for the
    length of the test), its uid and owner, and the auth token's kind of generated Secret under a
    name no operator running beside this test would create for it."""
    install_crd(cluster)
    apply_gateway(cluster, namespace, gateway_deployment(name))
    uid = cluster.get_json("-n", namespace, "gatewaydeployment", name)["metadata"]["uid"]
    owner = Owner(name, namespace, uid)
    generated = generated_secrets(owner, GatewaySpec.parse(gateway_deployment(name)["spec"]))[0]
    return uid, owner, generated._replace(name=f"{name}-client-test")


def test_a_generated_secret_is_created_once_and_its_create_answers_what_a_read_would(cluster: Cluster,
                                                                                     namespace: str) -> None:
    uid, owner, generated = owned_secret(cluster, namespace, "made")
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


def test_an_object_the_watch_does_not_show_is_created_without_a_read_and_someone_elses_is_left_as_it_is(
        cluster: Cluster, namespace: str) -> None:
    """A new GatewayDeployment's first pass read each object before applying it (4 of its 21.9
    requests while creating, all of them 404s). The watch of our label shows none of ours by the
    name, so the apply is sent at once, as a create-only apply (Kube.CREATE_ONLY_VERSION): it
    creates the object, or changes nothing when one is there. Someone else's by that name is then
    read and refused, untouched, even one the apply would not conflict with (an empty ConfigMap,
    whose fields another manager holds nowhere the apply writes); ours, which the watch has not
    delivered yet (an operator that just started), is read and kept."""
    install_crd(cluster)
    apply_gateway(cluster, namespace, gateway_deployment("fresh"))
    uid = cluster.get_json("-n", namespace, "gatewaydeployment", "fresh")["metadata"]["uid"]
    kube = Kube(load_config(str(cluster.kubeconfig)))   # a watch that shows nothing
    reads: list[str] = []
    get = kube.get
    kube.get = lambda *a: reads.append(a[3]) or get(*a)  # type: ignore[method-assign]

    def config_map(name: str) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": {api.LABEL_MANAGED_BY: api.MANAGED_BY},
                             "ownerReferences": [{"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND,
                                                  "name": "fresh", "uid": uid, "controller": True}]},
                "data": {"gateway.yaml": "a: 1\n"}}

    made = kube.apply(config_map("fresh-new"), uid)
    assert made.written and reads == []
    stored = cluster.get_json("-n", namespace, "configmap", "fresh-new", "--show-managed-fields")
    assert stored["data"] == {"gateway.yaml": "a: 1\n"}
    # the apply's own field manager holds its fields (later applies drop what the render drops)
    assert [(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]] == [
        (api.FIELD_MANAGER, "Apply")], stored["metadata"]["managedFields"]

    # ours, not delivered yet: read, found as applied, nothing written
    again = kube.apply(config_map("fresh-new"), uid)
    assert not again.written and reads == ["fresh-new"]

    # someone else's, one with data and one empty: refused, and left exactly as it was
    cluster.kubectl("-n", namespace, "create", "configmap", "fresh-theirs", "--from-literal=gateway.yaml=b: 2")
    cluster.kubectl("-n", namespace, "create", "configmap", "fresh-empty")
    for name in ("fresh-theirs", "fresh-empty"):
        before = cluster.get_json("-n", namespace, "configmap", name)
        with pytest.raises(NotOwned):
            kube.apply(config_map(name), uid)
        after = cluster.get_json("-n", namespace, "configmap", name)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], after
        assert "ownerReferences" not in after["metadata"] and "labels" not in after["metadata"], after


def test_with_the_secret_watch_a_generated_secret_is_created_without_a_read_and_known_without_one(
        cluster: Cluster, namespace: str) -> None:
    """--watch-secrets: a generated Secret the watch does not show is created at once (a late watch
    makes the create answer 409: then it is read, as without the watch); one the watch shows as ours
    is neither read nor created; one it shows as someone else's is refused."""
    uid, owner, generated = owned_secret(cluster, namespace, "watched")
    shown: dict[tuple[str, str, str], tuple[int, str | None]] = {}   # what the Secret watch delivered
    kube = Kube(load_config(str(cluster.kubeconfig)), lambda *key: shown[key][0] if key in shown else None,
                controller=lambda *key: shown[key][1] if key in shown else None, secrets_watched=True)
    reads: list[str] = []
    get = kube.get
    kube.get = lambda *a: reads.append(a[3]) or get(*a)  # type: ignore[method-assign]
    key = ("Secret", namespace, generated.name)

    made, answered = kube.create_if_absent(generated.manifest(owner), uid)
    assert made and answered is not None and reads == []
    # the watch is late: the create answers 409, then it is read, ours
    again, read = kube.create_if_absent(generated.manifest(owner), uid)
    assert not again and read is not None and reads == [generated.name]
    shown[key] = (int(answered["metadata"]["resourceVersion"]), uid)
    reads.clear()
    assert kube.create_if_absent(generated.manifest(owner), uid) == (False, None) and reads == []
    with pytest.raises(NotOwned):
        kube.create_if_absent(generated.manifest(owner), "another-owner-uid")
