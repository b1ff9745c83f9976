"""Smoke tests of the local control plane: what the operator relies on the API server for.

Runs against the real kube-apiserver, etcd and kube-controller-manager built by
hack/build-binaries.sh (or GWOP_TEST_KUBECONFIG). Pods land on the SIMULATED node
(kwok, hack/cluster.sh), which reports them Running with loopback IPs and runs nothing; the
real node is tests/node/test_node.py's.
"""
from __future__ import annotations

import ipaddress
import json
import textwrap

import pytest

from harness.cluster import Cluster
from harness.redis_server import RedisServer
from harness.wait import until


WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.smoke.gateway-operator.dev}
spec:
  group: smoke.gateway-operator.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.replicas <= 1 || self.shared"
              message: "replicas > 1 needs shared: true"
            properties:
              replicas: {type: integer}
              shared: {type: boolean}
"""


def test_server_reports_real_version(cluster: Cluster) -> None:
    if not cluster.owned:
        pytest.skip("version pin applies to the local control plane only")
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"].startswith("v1.37.")
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_crd_cel_rule_rejects_bad_object_with_its_message(cluster: Cluster, namespace: str) -> None:
    cluster.apply(WIDGET_CRD)
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.smoke.gateway-operator.dev")
    good = "apiVersion: smoke.gateway-operator.dev/v1\nkind: Widget\nmetadata: {name: ok}\nspec: {replicas: 2, shared: true}\n"
    bad = "apiVersion: smoke.gateway-operator.dev/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {replicas: 2, shared: false}\n"
    assert cluster.apply(good, "-n", namespace).returncode == 0
    refused = cluster.apply(bad, "-n", namespace, check=False)
    assert refused.returncode != 0
    assert "replicas > 1 needs shared: true" in refused.stderr


def test_validating_admission_policy_warn_reaches_the_client(cluster: Cluster, namespace: str) -> None:
    policy = textwrap.dedent(f"""
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingAdmissionPolicy
        metadata: {{name: smoke-warn-{namespace}}}
        spec:
          failurePolicy: Fail
          matchConstraints:
            resourceRules:
            - apiGroups: [""]
              apiVersions: [v1]
              operations: [CREATE, UPDATE]
              resources: [configmaps]
          validations:
          - expression: "!has(object.data) || !('danger' in object.data)"
            message: "configmap carries a danger key"
        ---
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingAdmissionPolicyBinding
        metadata: {{name: smoke-warn-{namespace}}}
        spec:
          policyName: smoke-warn-{namespace}
          validationActions: [Warn]
          matchResources:
            namespaceSelector:
              matchLabels: {{kubernetes.io/metadata.name: {namespace}}}
        """)
    cluster.apply(policy)
    try:
        def warned() -> bool:
            name = "cm-" + str(abs(hash(until)))[:6]
            out = cluster.kubectl("-n", namespace, "create", "configmap", name,
                                  "--from-literal=danger=1", check=True)
            cluster.kubectl("-n", namespace, "delete", "configmap", name)
            return "configmap carries a danger key" in out.stderr
        # policies take a moment to be loaded by the API server's admission plugin
        until(warned, timeout=30, what="a Warn-action policy warning")
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        f"smoke-warn-{namespace}", check=False)


def test_rbac_forbids_a_service_account_without_permission(cluster: Cluster, namespace: str, tmp_path) -> None:
    cluster.kubectl("-n", namespace, "create", "serviceaccount", "nobody")
    token = cluster.kubectl("-n", namespace, "create", "token", "nobody").stdout.strip()
    server = cluster.kubectl("config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}").stdout
    kubeconfig = tmp_path / "sa.kubeconfig"
    cluster.kubectl("config", "set-cluster", "c", f"--server={server}", "--insecure-skip-tls-verify=true",
                    kubeconfig=kubeconfig)
    cluster.kubectl("config", "set-credentials", "u", f"--token={token}", kubeconfig=kubeconfig)
    cluster.kubectl("config", "set-context", "x", "--cluster=c", "--user=u", kubeconfig=kubeconfig)
    cluster.kubectl("config", "use-context", "x", kubeconfig=kubeconfig)
    denied = cluster.kubectl("-n", namespace, "get", "secrets", kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert f'"system:serviceaccount:{namespace}:nobody" cannot list resource "secrets"' in denied.stderr
    # and the same token works once RBAC grants it
    cluster.kubectl("-n", namespace, "create", "role", "read-secrets", "--verb=list", "--resource=secrets")
    cluster.kubectl("-n", namespace, "create", "rolebinding", "nobody-reads", "--role=read-secrets",
                    f"--serviceaccount={namespace}:nobody")
    until(lambda: cluster.kubectl("-n", namespace, "get", "secrets", kubeconfig=kubeconfig,
                                  check=False).returncode == 0, timeout=20, what="RBAC grant")


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: example.invalid/web:1}]
"""


def test_deployment_reaches_ready_replicas_with_distinct_loopback_ips(cluster: Cluster, namespace: str) -> None:
    cluster.apply(DEPLOYMENT, "-n", namespace)
    until(lambda: cluster.get_json("-n", namespace, "deployment/web")["status"].get("readyReplicas") == 3,
          timeout=60, what="3 ready replicas")
    pods = cluster.get_json("-n", namespace, "pods", "-l", "app=web")["items"]
    ips = [p["status"]["podIP"] for p in pods]
    assert len(ips) == 3 and len(set(ips)) == 3
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8") for ip in ips)
    # a rollout replaces the pods and completes
    cluster.kubectl("-n", namespace, "set", "image", "deployment/web", "web=example.invalid/web:2")
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/web", "--timeout=90s")
    images = {p["spec"]["containers"][0]["image"]
              for p in cluster.get_json("-n", namespace, "pods", "-l", "app=web")["items"]
              if "deletionTimestamp" not in p["metadata"]}
    assert images == {"example.invalid/web:2"}


def test_deleting_an_owner_garbage_collects_its_dependents(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("-n", namespace, "create", "configmap", "owner")
    uid = cluster.get_json("-n", namespace, "configmap/owner")["metadata"]["uid"]
    dependent = json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]},
    })
    cluster.apply(dependent, "-n", namespace)
    cluster.kubectl("-n", namespace, "delete", "configmap", "owner")
    until(lambda: cluster.kubectl("-n", namespace, "get", "configmap", "dependent", check=False).returncode != 0,
          timeout=60, what="garbage collection of the dependent")


def test_redis_can_be_stopped_and_restarted(redis_server: RedisServer) -> None:
    import redis
    c = redis_server.client()
    assert c.set("k", "v")
    redis_server.stop()
    with pytest.raises(redis.ConnectionError):
        redis_server.client().ping()
    redis_server.start()
    assert redis_server.client().ping()
