"""The Helm chart's RBAC grants exactly what the operator uses: every granted verb is used
by a scenario that walks every code path needing a permission, and the API server refuses
none of the operator's requests.

Real parts: the local control plane (its RBAC, and its audit log, which records every
request - reads too - of the operator's test identities: hack/cluster.sh), the operator CLI
under the chart's ServiceAccount and rendered RBAC, a real redis-server. The pods run on the
real node: the HEALTH ENDPOINT STAND-IN image (a TEST IMAGE), steered at the pod IPs.
"""
from __future__ import annotations

import pytest
import yaml

from harness import audit
from harness.cluster import Cluster
from harness.monitoring import install_prometheus_operator_crds
from harness.gateways import apply_gateway, create_password_secret, wait_event, wait_ready_pods
from harness.operator import OperatorProcess, gateway_deployment, redis_store, render_rbac
from harness.redis_server import RedisServer
from harness.standins import BUILD_TIME, HealthStandIns, idempotency_owner
from harness.wait import WaitTimeout, until


Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def granted(rendered: str, kinds: tuple[str, ...] = ("ClusterRole", "Role")) -> set[Grant]:
    return {(group, resource, verb)
            for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] in kinds
            for rule in doc["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


def used(requests: list[audit.Request]) -> set[Grant]:
    out: set[Grant] = set()
    for r in requests:
        if r.resource and not r.denied:
            out.add((r.group, r.resource, r.verb))
            if r.verb == "patch" and r.created:  # server-side apply of a missing object: `create` is checked too
                out.add((r.group, r.resource, "create"))
    return out


def listing(grants: set[Grant]) -> str:
    return ", ".join(f"{verb} {group or 'core'}/{resource}" for group, resource, verb in sorted(grants))


def operator_requests(cluster: Cluster, operator: OperatorProcess) -> list[audit.Request]:
    requests = audit.requests(cluster, operator.identity, operator.started_at)
    assert any(r.verb in ("list", "watch") for r in requests), (
        "the audit log holds no reads by the operator: this control plane was started with an older "
        "audit policy; restart it (GWOP_CLUSTER_DIR=<dir> hack/cluster.sh down)")
    return requests


def assert_none_denied(requests: list[audit.Request]) -> None:
    denied = sorted({r.message for r in requests if r.denied})
    assert not denied, "the API server refused the operator:\n" + "\n".join(denied)


def exercise_every_permission(cluster: Cluster, namespace: str, redis: RedisServer,
                              standins: HealthStandIns) -> None:
    """Every operator code path that needs a permission, each visible to a user."""
    ns = ["-n", namespace]
    # a PVC; generated Secrets; a managed Redis (Deployment, Service, NetworkPolicy, its pod looked up)
    apply_gateway(cluster, namespace, gateway_deployment("stateful", persistence={"enabled": True}))
    apply_gateway(cluster, namespace, gateway_deployment("managed", config=redis_store(),
                                                         redis={"managed": {"enabled": True}}))
    # a named Secret read; a PDB with three replicas; a stale replica restarted (pod delete, Events)
    create_password_secret(cluster, namespace, "redis-auth", redis.password)
    shared = {"config": redis_store(), "redis": {"url": redis.url, "passwordSecretRef": {"name": "redis-auth"}}}
    apply_gateway(cluster, namespace, gateway_deployment("shared", replicas=3, **shared))
    for obj in ("pvc/stateful-gateway-state", "secret/managed-redis", "networkpolicy/managed-redis",
                "service/managed-redis", "pdb/shared"):
        until(lambda: cluster.kubectl(*ns, "get", obj, check=False).returncode == 0, timeout=60, what=obj)
    pods = wait_ready_pods(cluster, namespace, "shared", 3)
    replicas = {p["metadata"]["name"]: standins.at(p["status"]["podIP"]) for p in pods}
    replicas[sorted(replicas)[0]].degraded_owners = [idempotency_owner(BUILD_TIME)]
    wait_event(cluster, namespace, "shared", "RestartedStaleReplica", "Normal")
    # scaled to one replica: the PDB is deleted
    apply_gateway(cluster, namespace, gateway_deployment("shared", replicas=1, **shared))
    until(lambda: cluster.kubectl(*ns, "get", "pdb/shared", check=False).returncode != 0,
          timeout=60, what="the PDB to be deleted")
    # spec.expose: an Ingress and an HTTPRoute, the address of the node's edge read back (the
    # Gateway that accepted the route is read too); dropped from the spec, both are deleted
    edge = {"ingress": {"className": "traefik", "host": "exposed.rbac.test"},
            "httpRoute": {"parentRefs": [{"name": "edge", "namespace": "gwop-edge"}]}}
    apply_gateway(cluster, namespace, gateway_deployment("exposed", expose=edge))
    until(lambda: cluster.get_json("gatewaydeployment", "exposed", *ns)["status"].get("expose", {}).get("address"),
          timeout=60, what="status.expose.address")
    # spec.networkPolicy: the gateway pods' NetworkPolicy, written, then deleted with the field
    apply_gateway(cluster, namespace, gateway_deployment("fenced", networkPolicy={"enabled": True}))
    until(lambda: cluster.kubectl(*ns, "get", "networkpolicy/fenced-gateway", check=False).returncode == 0,
          timeout=60, what="the gateway NetworkPolicy")
    until(lambda: cluster.get_json("gatewaydeployment", "fenced", *ns).get("status", {}).get("networkPolicy"),
          timeout=60, what="status.networkPolicy")
    # spec.autoscaling: the HorizontalPodAutoscaler and (prometheus-operator's CRD installed) the
    # PodMonitor of the gateway pods' /metrics, written, then deleted with the field
    install_prometheus_operator_crds(cluster)
    apply_gateway(cluster, namespace, gateway_deployment("scaled", autoscaling={"enabled": True, "maxReplicas": 2},
                                                         **shared))
    for obj, what in (("hpa/scaled", "the gateway's HorizontalPodAutoscaler"),
                      ("podmonitor/scaled", "the gateway's PodMonitor")):
        until(lambda: cluster.kubectl(*ns, "get", obj, check=False).returncode == 0, timeout=60, what=what)
    until(lambda: cluster.get_json("gatewaydeployment", "scaled", *ns).get("status", {}).get("autoscaling"),
          timeout=60, what="status.autoscaling")
    apply_gateway(cluster, namespace, gateway_deployment("scaled", **shared))
    apply_gateway(cluster, namespace, gateway_deployment("fenced"))
    apply_gateway(cluster, namespace, gateway_deployment("exposed"))
    for obj in ("ingress/exposed", "httproute/exposed", "networkpolicy/fenced-gateway", "hpa/scaled",
                "podmonitor/scaled"):
        until(lambda: cluster.kubectl(*ns, "get", obj, check=False).returncode != 0, timeout=60,
              what=f"{obj} to be deleted")


def test_every_granted_verb_is_used_and_nothing_is_refused(cluster: Cluster, operator: OperatorProcess,
                                                           namespace: str, redis_server: RedisServer,
                                                           standins: HealthStandIns) -> None:
    if not cluster.owned:
        pytest.skip("reads the local control plane's audit log")
    try:
        exercise_every_permission(cluster, namespace, redis_server, standins)
    except WaitTimeout:  # a missing permission stalls the scenario: name it
        assert_none_denied(operator_requests(cluster, operator))
        raise
    requests = operator_requests(cluster, operator)
    assert_none_denied(requests)
    unused = granted(render_rbac()) - used(requests)
    assert not unused, f"the chart grants what the operator never used: {listing(unused)}"


def test_an_operator_watching_one_namespace_needs_only_its_roles_and_discovery(cluster: Cluster,
                                                                               namespace: str) -> None:
    """``watchNamespaces``: kopf watches the resources inside the namespace (the chart's Role
    there) and, cluster-wide, only CRDs and namespaces (the discovery ClusterRole)."""
    if not cluster.owned:
        pytest.skip("reads the local control plane's audit log")
    rendered = render_rbac("gwop-test-ns", [namespace])
    discovery = granted(rendered, ("ClusterRole",))
    watched = {(g, r, v) for g, r in [("gateway-operator.dev", "gatewaydeployments"), ("", "pods"),
                                      ("apps", "deployments"), ("", "configmaps"), ("", "services"), ("", "secrets")]
               for v in ("list", "watch")}
    op = OperatorProcess(cluster, namespaces=[namespace]).start()
    try:
        until(lambda: discovery | watched <= used(operator_requests(cluster, op)), timeout=60,
              what="kopf's discovery and watches in the namespace")
    finally:
        op.stop()
    requests = operator_requests(cluster, op)
    assert_none_denied(requests)
    leader = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}  # its own namespace
    outside = {(r.group, r.resource, r.verb) for r in requests
               if r.resource and r.namespace != namespace} - discovery - leader
    assert not outside, f"requests outside the watched namespace: {listing(outside)}"


def test_rendered_rules_grant_no_deletes_of_applied_objects_and_no_wildcards() -> None:
    for rendered in (render_rbac(), render_rbac("gwop-test-ns", ["team-a"])):
        grants = granted(rendered)
        # (the gateway pods' NetworkPolicy is deleted with spec.networkPolicy, owner-checked like the PDB)
        deletes = {(g, r, v) for g, r, v in grants if v in ("delete", "deletecollection")
                   and r in ("deployments", "configmaps", "services", "secrets")}
        assert not deletes, listing(deletes)
        assert not {g for g in grants if "*" in g}, "wildcard in the chart's RBAC"
    assert not {g for g in granted(render_rbac()) if g[1] == "namespaces"}  # cluster-wide kopf never reads them
