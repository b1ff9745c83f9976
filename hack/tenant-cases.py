#!/usr/bin/env python3
"""The hostile-tenant cases of issue 19, re-run against a running sandbox (`make demo`) as a tenant
that may write GatewayDeployments only (impersonated ServiceAccount tenant-x:tenant).

    .venv/bin/python hack/tenant-cases.py [--kubeconfig .cluster/sandbox/kubeconfig]

Prints one line per case: what was asked, and what the API server or the operator answered. It
creates the namespace tenant-x (and tenant-quota) and deletes them at the end.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from harness.cluster import REPO
from harness.operator import gateway_deployment, redis_store
from harness.wait import WaitTimeout, until

TENANT_NS, TENANT = "tenant-x", "system:serviceaccount:tenant-x:tenant"
VICTIM_HOST = "canary-bot.gateway.test"   # the demo's canary-bot Ingress (namespace gateway-demo)
ROUTE_HOST = "ops-bot.gateway.test"       # the demo's ops-bot HTTPRoute


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", default=str(REPO / ".cluster/sandbox/kubeconfig"))
    p.add_argument("--image", default="localhost/gateway-operator/gateway:0.1.16")
    args = p.parse_args()

    def kubectl(*a: str, tenant: bool = False, body: Any = None, check: bool = False) -> subprocess.CompletedProcess:
        cmd = ["kubectl", "--kubeconfig", args.kubeconfig, *(["--as", TENANT] if tenant else []), *a]
        return subprocess.run(cmd, input=json.dumps(body) if body is not None else None, capture_output=True,
                              text=True, check=check)

    def status(name: str, type_: str, ns: str = TENANT_NS) -> dict[str, Any]:
        out = kubectl("get", "gatewaydeployment", name, "-n", ns, "-o", "json")
        if out.returncode:
            return {}
        return next((c for c in (json.loads(out.stdout).get("status") or {}).get("conditions") or []
                     if c["type"] == type_), {})

    def settle(name: str, type_: str, status_: str, timeout: float = 60) -> dict[str, Any]:
        try:
            return until(lambda: (lambda c: c if c.get("status") == status_ else None)(status(name, type_)),
                         timeout=timeout, interval=0.5, what=f"{type_}={status_} on {name}")
        except WaitTimeout:
            return status(name, type_)

    def exists(kind: str, name: str, ns: str = TENANT_NS) -> bool:
        return kubectl("get", kind, name, "-n", ns).returncode == 0

    def apply(name: str, ns: str = TENANT_NS, **spec: Any) -> str:
        doc = gateway_deployment(name, **{"image": args.image, **spec})
        out = kubectl("apply", "-n", ns, "-f", "-", tenant=True, body=doc)
        return "admitted" if out.returncode == 0 else "REFUSED at admission: " + out.stderr.strip().splitlines()[-1]

    kubectl("create", "namespace", TENANT_NS)
    kubectl("label", "namespace", TENANT_NS, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    kubectl("create", "serviceaccount", "tenant", "-n", TENANT_NS)
    kubectl("apply", "-n", TENANT_NS, "-f", "-", body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "tenant"},
        "rules": [{"apiGroups": ["gateway-operator.dev"], "resources": ["gatewaydeployments"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]})
    kubectl("create", "rolebinding", "tenant", "-n", TENANT_NS, "--role=tenant", f"--serviceaccount={TENANT_NS}:tenant")
    rows: list[tuple[str, str]] = []

    def row(case: str, outcome: str) -> None:
        rows.append((case, outcome))
        print(f"- {case}: {outcome}", flush=True)

    try:
        can = kubectl("auth", "can-i", "create", "ingresses", "-n", TENANT_NS, tenant=True).stdout.strip()
        row("the tenant may create Ingresses itself", can)
        # 1. host hijack with a router priority, and with a wildcard
        row(f"Ingress host {VICTIM_HOST} + traefik router.priority 1000000",
            apply("hijack", expose={"ingress": {"className": "traefik", "host": VICTIM_HOST, "annotations": {
                "traefik.ingress.kubernetes.io/router.priority": "1000000"}}}))
        row("Ingress host *.gateway.test", apply("wild", expose={"ingress": {"className": "traefik",
                                                                             "host": "*.gateway.test"}}))
        # ... and the same host with no annotation: admitted, but the older claim keeps it
        row(f"Ingress host {VICTIM_HOST}, no annotation",
            apply("hijack", expose={"ingress": {"className": "traefik", "host": VICTIM_HOST}}))
        c = settle("hijack", "Stalled", "True")
        row("  -> its Stalled condition", f"{c.get('status')} {c.get('reason')}: {c.get('message')}")
        row("  -> an Ingress written for it", str(exists("ingress", "hijack")))
        row("  -> the victim canary-bot", "Ready " + status("canary-bot", "Ready", "gateway-demo").get("reason", "?"))
        row(f"HTTPRoute hostname {ROUTE_HOST} on gwop-edge/edge",
            apply("routejack", expose={"httpRoute": {"parentRefs": [{"name": "edge", "namespace": "gwop-edge"}],
                                                     "hostnames": [ROUTE_HOST]}}))
        c = settle("routejack", "Stalled", "True")
        row("  -> its Stalled condition", f"{c.get('status')} {c.get('reason')}")
        row("  -> an HTTPRoute written for it", str(exists("httproute", "routejack")))
        # 2. the probe at another tenant's managed Redis
        row("redis.host ops-bot-redis.gateway-demo.svc (another tenant's managed Redis)",
            apply("oracle", config=redis_store(), redis={"host": "ops-bot-redis.gateway-demo.svc"}))
        c = settle("oracle", "RedisReachable", "False")
        row("  -> RedisReachable", f"{c.get('status')} {c.get('reason')}: {c.get('message')}")
        for port, what in ((22, "a closed port"), (443, "the API server's Service port")):
            name = f"scan-{port}"
            apply(name, config=redis_store(), redis={"host": "kubernetes.default.svc" if port == 443 else
                                                     "198.18.0.1", "port": port})
            c = settle(name, "RedisReachable", "False")
            row(f"redis at {what} ({port})", f"{c.get('reason')}: {c.get('message')}")
        # 4. pod and Service knobs
        row("priorityClassName system-node-critical", apply("prio", priorityClassName="system-node-critical"))
        row("tolerations [{operator: Exists}]", apply("tol", tolerations=[{"operator": "Exists"}]))
        row("service.type NodePort", apply("np", service={"type": "NodePort"}))
        row("ingress-nginx auth-tls-secret other-ns/secret", apply("tls", expose={"ingress": {
            "host": "tls.tenant-x.gateway.test", "annotations": {
                "nginx.ingress.kubernetes.io/auth-tls-secret": "gateway-demo/secret"}}}))
        row("ingress-nginx server-alias", apply("alias", expose={"ingress": {
            "host": "alias.tenant-x.gateway.test", "annotations": {
                "nginx.ingress.kubernetes.io/server-alias": VICTIM_HOST}}}))
        row('image "   "', apply("blank", image="   "))
        # a pod the API server refuses (here a quota the administrator set): the reason reaches the resource
        kubectl("apply", "-n", TENANT_NS, "-f", "-", body={"apiVersion": "v1", "kind": "ResourceQuota",
                                                           "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
        apply("quota")
        c = settle("quota", "Stalled", "True", timeout=90)
        row("a pod refused by a ResourceQuota", f"{c.get('status')} {c.get('reason')}: {c.get('message')}")
    finally:
        kubectl("delete", "namespace", TENANT_NS, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
