"""Tenancy (issue 19): what one tenant - anyone who may write a GatewayDeployment - can make the
operator do for it, and what it can no longer make it do to another tenant.

- The administrator's policy (chart values ``tenancy``): each rule once as CEL + Python + one
  message; the chart's ValidatingAdmissionPolicy refuses at ``kubectl apply`` with the message
  the operator stalls with (TenancyPolicyViolation) when the policy was bypassed.
- Host claims: the oldest claimant of a host keeps it; a younger GatewayDeployment gets
  HostClaimed, and no route; an Ingress the operator did not write counts as a claim.
- The Redis probe reaches no other GatewayDeployment's managed Redis, says nothing that tells
  foreign services apart, backs off, and survives a server that answers +OK to everything.
- A pod the API server refuses to create (here: a quota) reaches the resource as FailedCreate.

The cluster tests run the real operator CLI under the chart's RBAC on the control plane with a
SIMULATED node (its pods run nothing, which none of these needs).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import threading
import time
from typing import Any

import pytest
import yaml

from gateway_operator.api import crd, reasons, tenancy
from gateway_operator.api import ExposeSpec, IngressExpose
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.api.tenancy import Claim, TenancyPolicy
from gateway_operator.clients import redis_probe, redis_protocol
from gateway_operator.core import expose, probe_wording
from gateway_operator.core.probe_result import ProbeResult
from harness.cluster import REPO, Cluster, tool
from harness.gateways import apply_gateway, conditions, wait_condition
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.wait import until

ADMIN = TenancyPolicy.parse({
    "allowedHosts": {"team-a": ["*.a.bots.example.com", "exact.example.com"], "*": ["*.shared.example.com"]},
    "allowWildcardHosts": True, "ingressAnnotations": ["nginx.ingress.kubernetes.io/proxy-body-size"],
    "httpRouteAnnotations": ["example.com/owner"], "priorityClassNames": ["bots-high"],
    "serviceTypes": ["ClusterIP", "LoadBalancer"], "allowTolerationsWithoutKey": True})


def ingress(host: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"ingress": {"host": host, **({"annotations": annotations} if annotations else {})}}


# (namespace, spec fields) -> the message under the default policy, and under ADMIN (None: allowed)
CASES: dict[str, tuple[str, dict[str, Any], str | None, str | None]] = {
    "plain": ("team-a", {}, None, None),
    "a host anywhere, no host policy": ("team-b", {"expose": ingress("bot.example.org")}, None,
                                        tenancy.MSG_HOST_NOT_ALLOWED),
    "a host the namespace may claim": ("team-a", {"expose": ingress("x.a.bots.example.com")}, None, None),
    "another namespace's domain": ("team-b", {"expose": ingress("x.a.bots.example.com")}, None,
                                   tenancy.MSG_HOST_NOT_ALLOWED),
    "the shared domain": ("team-b", {"expose": ingress("x.shared.example.com")}, None, None),
    "a wildcard host": ("team-a", {"expose": ingress("*.a.bots.example.com")}, tenancy.MSG_WILDCARD_HOST, None),
    "a wildcard route hostname": ("team-a", {"expose": {"httpRoute": {"parentRefs": [{"name": "edge"}],
                                                                      "hostnames": ["*.gateway.test"]}}},
                                  tenancy.MSG_WILDCARD_HOST, tenancy.MSG_HOST_NOT_ALLOWED),
    "traefik router priority": ("team-a", {"expose": ingress("exact.example.com", {
        "traefik.ingress.kubernetes.io/router.priority": "1000000"})}, tenancy.MSG_INGRESS_ANNOTATIONS,
        tenancy.MSG_INGRESS_ANNOTATIONS),
    "ingress-nginx snippet": ("team-a", {"expose": ingress("exact.example.com", {
        "nginx.ingress.kubernetes.io/configuration-snippet": "x"})}, tenancy.MSG_INGRESS_ANNOTATIONS,
        tenancy.MSG_INGRESS_ANNOTATIONS),
    "another namespace's TLS secret": ("team-a", {"expose": ingress("exact.example.com", {
        "nginx.ingress.kubernetes.io/auth-tls-secret": "other-ns/secret"})}, tenancy.MSG_INGRESS_ANNOTATIONS,
        tenancy.MSG_INGRESS_ANNOTATIONS),
    "server-alias": ("team-a", {"expose": ingress("exact.example.com", {
        "nginx.ingress.kubernetes.io/server-alias": "canary-bot.gateway.test"})}, tenancy.MSG_INGRESS_ANNOTATIONS,
        tenancy.MSG_INGRESS_ANNOTATIONS),
    "an allowed annotation": ("team-a", {"expose": ingress("exact.example.com", {
        "nginx.ingress.kubernetes.io/proxy-body-size": "1m"})}, tenancy.MSG_INGRESS_ANNOTATIONS, None),
    "the operator's own annotation": ("team-a", {"expose": ingress("exact.example.com", {
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "90"})}, None, None),
    "a route annotation": ("team-a", {"expose": {"httpRoute": {"parentRefs": [{"name": "edge"}],
                                                               "annotations": {"example.com/owner": "me"}}}},
                           tenancy.MSG_ROUTE_ANNOTATIONS, None),
    "system-node-critical": ("team-a", {"priorityClassName": "system-node-critical"}, tenancy.MSG_PRIORITY_CLASS,
                             tenancy.MSG_PRIORITY_CLASS),
    "an ordinary priority class": ("team-a", {"priorityClassName": "bots"}, None, tenancy.MSG_PRIORITY_CLASS),
    "a listed priority class": ("team-a", {"priorityClassName": "bots-high"}, None, None),
    "NodePort": ("team-a", {"service": {"type": "NodePort"}}, tenancy.MSG_SERVICE_TYPE, tenancy.MSG_SERVICE_TYPE),
    "LoadBalancer": ("team-a", {"service": {"type": "LoadBalancer"}}, tenancy.MSG_SERVICE_TYPE, None),
    "toleration without a key": ("team-a", {"tolerations": [{"operator": "Exists"}]},
                                 tenancy.MSG_TOLERATION_WITHOUT_KEY, None),
    "toleration with a key": ("team-a", {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, None, None),
}


@pytest.mark.parametrize("case", CASES)
def test_each_rule_under_the_default_and_an_administrators_policy(case: str) -> None:
    namespace, fields, default, admin = CASES[case]
    spec = gateway_deployment("a", **fields)["spec"]
    for policy, expected in ((TenancyPolicy(), default), (ADMIN, admin)):
        found = tenancy.violations(namespace, spec, policy)
        assert found == ([expected] if expected else []), (policy, found)


def test_the_operator_may_always_write_its_own_ingress_annotations() -> None:
    written = expose.ingress_annotations(ExposeSpec(ingress=IngressExpose(host="h")), replicas=3)
    assert set(written) <= set(tenancy.OPERATOR_INGRESS_ANNOTATIONS)
    assert set(written) == set(tenancy.OPERATOR_INGRESS_ANNOTATIONS)  # none allowed that it never writes


def test_the_committed_policy_template_is_generated_from_the_rules() -> None:
    committed = (REPO / "charts/gateway-operator/templates/tenancy-policy.yaml").read_text()
    assert committed == crd.tenancy_policy_template(), "regenerate: make crds"


def test_the_chart_passes_the_same_values_to_the_operator_and_the_policy(tmp_path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"tenancy": ADMIN.variables()}))
    docs = list(yaml.safe_load_all(subprocess.run(
        [tool("helm"), "template", "t", str(REPO / "charts/gateway-operator"), "-f", str(values)],
        check=True, capture_output=True, text=True).stdout))
    operator = next(d for d in docs if d and d["kind"] == "Deployment")
    arg = next(a for a in operator["spec"]["template"]["spec"]["containers"][0]["args"]
               if a.startswith("--tenancy-policy="))
    assert TenancyPolicy.from_json(arg.split("=", 1)[1]) == ADMIN
    policy = next(d for d in docs if d and d["kind"] == "ValidatingAdmissionPolicy" and "tenancy" in
                  d["metadata"]["name"])
    assert {v["name"]: json.loads(v["expression"]) for v in policy["spec"]["variables"]} == ADMIN.variables()


def test_the_oldest_claim_wins_by_creation_time_then_uid() -> None:
    old, new = Claim("2026-12-01T10:00:00Z", "b"), Claim("2026-12-01T10:00:05Z", "a")
    same_second = Claim("2026-12-01T10:00:00Z", "c")
    claims = {"h": (old, new, same_second)}
    assert tenancy.claimed_elsewhere(old, ["h"], claims) == []
    assert tenancy.claimed_elsewhere(new, ["h"], claims) == ["h"]
    assert tenancy.claimed_elsewhere(same_second, ["h"], claims) == ["h"]  # same second: the smaller uid
    assert tenancy.claimed_elsewhere(new, ["other"], claims) == []


# -- the probe -------------------------------------------------------------------------------

def target(port: int, host: str = "127.0.0.1") -> RedisTarget:
    return RedisTarget(host=host, port=port, db=0, tls=False, prefix="gwop:t:a:", password_ref=None)


async def _serve(reply: bytes | None, per_command: bool = False) -> tuple[asyncio.AbstractServer, int]:
    """A TCP server on loopback that answers every read with ``reply`` (None: never answers), or
    (``per_command``) every RESP command it reads, as a server that says the same to everything."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(4096):
            if reply is not None:
                commands = (data.startswith(b"*") + data.count(b"\r\n*")) if per_command else 1
                writer.write(reply * commands)
                await writer.drain()
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_server_that_says_ok_to_everything_is_a_probe_failure_not_a_crash() -> None:
    async def run() -> ProbeResult:
        server, port = await _serve(b"+OK\r\n", per_command=True)
        async with server:
            return await redis_probe.Prober().probe("t", target(port), "pw", 1.0)
    result = asyncio.run(run())
    assert not result.ok and result.reason == reasons.PROBE_FAILED, result


def test_failures_of_foreign_services_are_told_in_fixed_words() -> None:
    """A closed port, a silent server and something that is not Redis: under the open allowlist
    (unprivileged) only 'unreachable' or 'not a usable Redis', with nothing of what answered."""
    async def run() -> tuple[list[ProbeResult], int, int]:
        silent, silent_port = await _serve(None)
        http, http_port = await _serve(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        async with silent, http:
            closed = await redis_probe.Prober().probe("a", target(1), None, 0.5)
            quiet = await redis_probe.Prober().probe("b", target(silent_port), None, 0.5)
            other = await redis_probe.Prober().probe("c", target(http_port), None, 0.5)
        return [closed, quiet, other], silent_port, http_port
    (closed, quiet, other), silent_port, http_port = asyncio.run(run())
    assert closed == probe_wording.unreachable("127.0.0.1:1/0", 0.5)
    assert quiet == probe_wording.unreachable(f"127.0.0.1:{silent_port}/0", 0.5)
    assert other == probe_wording.unusable(f"127.0.0.1:{http_port}/0")


def test_a_namespace_whose_probes_keep_failing_is_probed_with_a_backoff() -> None:
    now = [0.0]
    attempts = []

    async def run() -> None:
        server, port = await _serve(None)
        real = redis_protocol.exchange

        async def counted(*args: Any) -> ProbeResult:
            attempts.append(now[0])
            return await real(*args)
        redis_protocol.exchange = counted  # type: ignore[assignment]
        try:
            async with server:
                prober = redis_probe.Prober(clock=lambda: now[0])
                for second in range(0, 200):
                    now[0] = float(second)
                    await prober.probe("scanner", target(port), None, 0.1)
                # a new target in that namespace waits too: the backoff is the namespace's
                await prober.probe("scanner", target(port + 1), None, 0.1)
                # another namespace is not held back
                await prober.probe("bystander", target(port), None, 0.1)
        finally:
            redis_protocol.exchange = real  # type: ignore[assignment]
    asyncio.run(run())
    # one probe a second was asked for; from the third failure in a row on, they wait 10, 20, 40,
    # 80 s ...
    assert attempts[:7] == [0.0, 1.0, 2.0, 12.0, 32.0, 72.0, 152.0], attempts
    assert len(attempts) == 8  # the seven above and the bystander's


def test_one_failed_probe_is_not_an_outage_for_every_gateway_sharing_that_redis() -> None:
    """Many GatewayDeployments of one namespace share one Redis (a real redis-server). One probe
    fails (the server stopped for it), the others, right after, reach it: each reports its own
    result, not the one failure; the namespace backs off only once failures come in a row."""
    server = RedisServer(password="shared-redis-password").start()
    try:
        shared = RedisTarget("127.0.0.1", server.port, 0, False, "gwop:ns:bot:", None)

        async def run() -> list[ProbeResult]:
            prober = redis_probe.Prober()
            server.pause()
            try:
                first = await prober.probe("shop", shared, server.password, 0.3)
            finally:
                server.resume()
            return [first] + [await prober.probe("shop", shared, server.password, 1.0) for _ in range(20)]

        first, *others = asyncio.run(run())
    finally:
        server.close()
    assert first is not None and first.reason == reasons.CONNECTION_FAILED, first
    assert all(r is not None and r.ok for r in others), [r.reason for r in others if r is not None]


def test_another_gateways_managed_redis_is_never_connected_to() -> None:
    """Asked by name first, then by every address the name resolves to; a yes at either stops the
    probe before it connects (the server here would have said NOAUTH)."""
    async def run() -> tuple[ProbeResult, list[tuple[str, ...]], int]:
        connections = []
        server = await asyncio.start_server(lambda r, w: (connections.append(1), w.close()), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        asked: list[tuple[str, ...]] = []

        def foreign(namespace: str, owner: str, host: str, addresses: Any) -> bool:
            asked.append((namespace, owner, host, *addresses))
            return bool(addresses)  # only its address is known to belong to another one's Redis
        async with server:
            result = await redis_probe.Prober(foreign=foreign).probe("t", target(port, "localhost"), "x", 1.0,
                                                                     owner="mine")
        return result, asked, len(connections)
    result, asked, connections = asyncio.run(run())
    assert result.reason == reasons.CONNECTION_FAILED
    assert result.message.startswith("cannot reach a Redis this GatewayDeployment may use at localhost:"), result
    assert asked[0] == ("t", "mine", "localhost") and "127.0.0.1" in asked[1]
    assert connections == 0


# -- on the control plane ------------------------------------------------------------------------

def _after_creation_second(cluster: Cluster, namespace: str, kind: str, name: str) -> None:
    """Wait until the second ``name`` was created in has passed: creation times count whole
    seconds, and two claims of one second are ordered by uid, not by which came first."""
    created = cluster.get_json(kind, name, "-n", namespace)["metadata"]["creationTimestamp"]
    until(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > created, timeout=5, interval=0.05,
          what=f"a second after {kind} {name} was created")


def _ingress_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl("get", "ingress", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def test_the_older_claim_keeps_its_host_and_the_younger_gets_none(
        cluster: Cluster, operator: OperatorProcess) -> None:
    first, second = cluster.new_namespace(), cluster.new_namespace()
    try:
        host = f"claims-{secrets.token_hex(4)}.gateway.test"  # names neither namespace
        apply_gateway(cluster, first, gateway_deployment("victim", expose=ingress(host)))
        until(lambda: _ingress_of(cluster, first, "victim"), timeout=60, what="the victim's Ingress")
        _after_creation_second(cluster, first, "gatewaydeployment", "victim")
        apply_gateway(cluster, second, gateway_deployment("hijack", expose=ingress(host)))
        stalled = wait_condition(cluster, second, "hijack", "Stalled", "True", reasons.HOST_CLAIMED)
        assert host in stalled["message"] and first not in stalled["message"], stalled
        assert _ingress_of(cluster, second, "hijack") is None
        until(lambda: cluster.get_json("gatewaydeployment", "hijack", "-n", second)["status"].get("expose") ==
              {"message": stalled["message"]}, timeout=30, what="status.expose saying why there is no route")
        assert conditions(cluster, first, "victim")["Stalled"]["status"] == "False"
        # the older claim goes: the younger one gets its host within a reconcile
        cluster.kubectl("delete", "gatewaydeployment", "victim", "-n", first)
        until(lambda: _ingress_of(cluster, second, "hijack"), timeout=30, what="the Ingress of the claim that is left")
        wait_condition(cluster, second, "hijack", "Stalled", "False", reasons.NO_PROBLEMS)
    finally:
        for ns in (first, second):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_an_ingress_the_operator_did_not_write_holds_its_host(cluster: Cluster, operator: OperatorProcess,
                                                              namespace: str) -> None:
    host = f"{namespace}.foreign.gateway.test"
    cluster.apply(json.dumps({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "theirs"},
        "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
            "service": {"name": "theirs", "port": {"number": 80}}}}]}}]}}), "-n", namespace)
    _after_creation_second(cluster, namespace, "ingress", "theirs")
    apply_gateway(cluster, namespace, gateway_deployment("mine", expose=ingress(host)))
    wait_condition(cluster, namespace, "mine", "Stalled", "True", reasons.HOST_CLAIMED)
    assert _ingress_of(cluster, namespace, "mine") is None
    cluster.kubectl("delete", "ingress", "theirs", "-n", namespace)
    until(lambda: _ingress_of(cluster, namespace, "mine"), timeout=30, what="the Ingress once the host is free")


RACE_ROUNDS = int(os.environ.get("TENANCY_RACE_ROUNDS", "3"))


def test_two_tenants_claiming_one_host_at_once_the_older_wins_every_time(
        cluster: Cluster, operator: OperatorProcess) -> None:
    """TENANCY_RACE_ROUNDS rounds (3 in make test; 20 for the issue's figure)."""
    for round_ in range(RACE_ROUNDS):
        namespaces = [cluster.new_namespace(), cluster.new_namespace()]
        host = f"race-{namespaces[0]}.gateway.test"
        try:
            threads = [threading.Thread(target=apply_gateway, args=(cluster, ns, gateway_deployment(
                "racer", expose=ingress(host)))) for ns in namespaces]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            bodies = {ns: cluster.get_json("gatewaydeployment", "racer", "-n", ns) for ns in namespaces}
            older = min(namespaces, key=lambda ns: (bodies[ns]["metadata"]["creationTimestamp"],
                                                    bodies[ns]["metadata"]["uid"]))
            younger = next(ns for ns in namespaces if ns != older)
            wait_condition(cluster, younger, "racer", "Stalled", "True", reasons.HOST_CLAIMED)
            until(lambda: _ingress_of(cluster, older, "racer"), timeout=30, what=f"round {round_}: older's Ingress")
            until(lambda: _ingress_of(cluster, younger, "racer") is None, timeout=30,
                  what=f"round {round_}: no Ingress for the younger claim")
            tie = bodies[older]["metadata"]["creationTimestamp"] == bodies[younger]["metadata"]["creationTimestamp"]
            print(f"race round {round_}: the older claim ({'same second, smaller uid' if tie else 'earlier second'}) "
                  "kept the host; the younger is HostClaimed with no Ingress")
        finally:
            for ns in namespaces:
                cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_operator_stalls_on_what_the_policy_forbids_when_admission_let_it_in(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    apply_gateway(cluster, namespace, gateway_deployment("greedy", priorityClassName="system-node-critical"))
    stalled = wait_condition(cluster, namespace, "greedy", "Stalled", "True", reasons.TENANCY_POLICY_VIOLATION)
    assert stalled["message"] == tenancy.MSG_PRIORITY_CLASS
    assert cluster.kubectl("get", "deployment", "greedy", "-n", namespace, check=False).returncode != 0


def test_a_pod_the_api_server_refuses_reaches_the_resource(cluster: Cluster, operator: OperatorProcess,
                                                           namespace: str) -> None:
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                              "spec": {"hard": {"pods": "0"}}}), "-n", namespace)
    apply_gateway(cluster, namespace, gateway_deployment("quota"))
    stalled = wait_condition(cluster, namespace, "quota", "Stalled", "True", reasons.FAILED_CREATE, timeout=90)
    assert "exceeded quota" in stalled["message"], stalled


def test_a_gateway_pointed_at_another_ones_managed_redis_is_never_probed_there(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    """By Service name or by its pod's address: never connected to, and told like any target that
    cannot be reached. A real redis-server stands at the owner's pod address with the owner's
    password (the SIMULATED node's pod IPs are on loopback), so a probe of the others that went
    there would be refused and logged."""
    apply_gateway(cluster, namespace, gateway_deployment("owner", config=redis_store(),
                                                         redis={"managed": {"enabled": True}}))
    selector = "app.kubernetes.io/instance=owner,app.kubernetes.io/component=redis"
    pod = until(lambda: next((p for p in cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
                              if (p.get("status") or {}).get("podIP")), None), timeout=60, what="the owner's Redis pod")
    ip = pod["status"]["podIP"]
    if not ip.startswith("127."):
        pytest.skip(f"the node's pod IPs are not on this host's loopback ({ip})")
    secret = until(lambda: cluster.get_json("secret", "owner-redis", "-n", namespace), timeout=30,
                   what="the managed Redis password")
    password = base64.b64decode(secret["data"]["password"]).decode()
    # the owner's Redis, as far as the probe can tell: its address and its password
    server = RedisServer(password=password, host=ip, port=6379).start()
    borrowers: list[str] = []
    try:
        wait_condition(cluster, namespace, "owner", "RedisReachable", "True", reasons.PROBE_SUCCEEDED)
        # one namespace each: a failed probe backs off the next one of its namespace
        for name, host in (("by-address", ip), ("by-name", f"owner-redis.{namespace}.svc")):
            borrower = cluster.new_namespace()
            borrowers.append(borrower)
            cluster.kubectl("create", "secret", "generic", "guess", "-n", borrower, "--from-literal=password=guess")
            apply_gateway(cluster, borrower, gateway_deployment(name, config=redis_store(), redis={
                "host": host, "passwordSecretRef": {"name": "guess"}}))
            reachable = wait_condition(cluster, borrower, name, "RedisReachable", "False", reasons.CONNECTION_FAILED)
            # worded as any target that cannot be reached: nothing says what is there
            assert reachable["message"].startswith(probe_wording.unreachable(f"{host}:6379/0", 1).message[:-3]), \
                reachable
        # no other password was ever tried there (Redis logs each refused AUTH in ACL LOG)
        assert server.client().acl_log() == []
    finally:
        server.close()
        for borrower in borrowers:
            cluster.kubectl("delete", "namespace", borrower, "--wait=false", check=False)


def _render_policy(namespace: str, policy: TenancyPolicy) -> list[dict[str, Any]]:
    """The chart's tenancy policy with ``policy`` as values, bound to ``namespace`` alone (the
    session's other tests share the control plane)."""
    values = {"tenancy": policy.variables(), "fullnameOverride": f"t-{namespace}"}
    out = subprocess.run([tool("helm"), "template", "t", str(REPO / "charts/gateway-operator"), "--show-only",
                          "templates/tenancy-policy.yaml", "-f", "-"], input=yaml.safe_dump(values),
                         check=True, capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}
    return docs


def test_the_admission_policy_refuses_with_the_operators_message(cluster: Cluster, namespace: str) -> None:
    from harness.operator import install_crd
    install_crd(cluster)
    docs = _render_policy(namespace, TenancyPolicy())
    cluster.apply("\n---\n".join(json.dumps(d) for d in docs))
    try:
        def refused(fields: dict[str, Any]) -> str:
            result = cluster.apply(json.dumps(gateway_deployment("a", **fields)), "-n", namespace,
                                   "--dry-run=server", check=False)
            return "" if result.returncode == 0 else result.stderr
        # the binding takes effect within a few seconds of its creation
        until(lambda: tenancy.MSG_PRIORITY_CLASS in refused({"priorityClassName": "system-node-critical"}),
              timeout=30, what="the tenancy policy to take effect")
        for case, (case_namespace, fields, expected, _) in CASES.items():
            if case_namespace != "team-a":
                continue  # the namespace is this test's; the host rules need no namespace under the default
            stderr = refused(fields)
            if expected is None:
                assert stderr == "", (case, stderr)
            else:
                assert expected in stderr.replace("\\", ""), (case, stderr)
    finally:
        for d in docs:
            cluster.kubectl("delete", d["kind"], d["metadata"]["name"], check=False)


def test_the_gateway_network_policy_is_written_and_goes_with_the_field(
        cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    """What it admits is proven where a plugin enforces it (tests/node/test_node.py); here: it is the
    resource's, said in status, and removed when the field goes."""
    apply_gateway(cluster, namespace, gateway_deployment("fenced", networkPolicy={
        "enabled": True, "fromNamespaces": ["gwop-edge"]}))
    policy = until(lambda: cluster.get_json("networkpolicy", "fenced-gateway", "-n", namespace), timeout=60,
                   what="the gateway NetworkPolicy")
    assert policy["metadata"]["ownerReferences"][0]["name"] == "fenced"
    until(lambda: cluster.get_json("gatewaydeployment", "fenced", "-n", namespace).get("status", {})
          .get("networkPolicy") == {"name": "fenced-gateway"}, timeout=30, what="status.networkPolicy")
    apply_gateway(cluster, namespace, gateway_deployment("fenced"))
    until(lambda: cluster.kubectl("get", "networkpolicy", "fenced-gateway", "-n", namespace,
                                  check=False).returncode != 0, timeout=60, what="the policy to go with the field")
    until(lambda: "networkPolicy" not in cluster.get_json("gatewaydeployment", "fenced", "-n", namespace)["status"],
          timeout=30, what="status.networkPolicy to go")
