"""The REAL node, end to end. `make demo` (hack/demo.sh, its own directory .cluster/node-demo)
builds the images, starts the control plane with a real node (containerd, kubelet, kube-proxy,
CoreDNS), helm-installs the operator from the local image and applies the examples; the tests
below then work on its real pods: webhooks to gateway pods by pod IP and through their Service,
a Redis outage, the kubelet's own waiting reasons, a PVC from the node's provisioner surviving a
pod restart, the managed Redis's NetworkPolicy enforced on the node (kube-router) against real
connections. Last, `make demo` again reuses everything and `make demo-down` leaves nothing.

The LLM is the one stand-in (harness.llm_pod, a pod, counting agent turns at GET /stats).
Traffic goes only to loopback and to the 198.18.0.0/15 addresses of the node's own bridge.
Needs root (one node per host); without it the module skips in one line, and under CI it fails.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import pytest
import yaml

from gateway_operator import api
from gateway_operator.core.render.names import OPERATOR_APP_NAME

from harness import exactly_once, exactly_once_run, llm_pod, node
from harness.cluster import REPO, Cluster
from harness.gateways import (conditions, events, hostile_health, is_ready, ready_pods, reconcile_latency,
                              wait_condition, wait_ready_pods)
from harness.node import unavailable
from harness.operator import gateway_deployment
from harness.standins import HealthStandIns
from harness.wait import stays, until


DIR = REPO / ".cluster/node-demo"
NS = "gateway-demo"  # hack/demo.py's namespace
POD_RANGE = ipaddress.ip_network("198.18.0.0/16")
SERVICE_RANGE = ipaddress.ip_network("198.19.0.0/16")
BRIDGE = "gwop0"


def demo(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([str(REPO / "hack/demo.sh"), *args], env={**env, "GWOP_CLUSTER_DIR": str(DIR)}, cwd=REPO,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


class Sandbox(NamedTuple):
    cluster: Cluster
    output: str


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    missing = node.why_no_real_node()
    if missing:
        unavailable(f"the real node cannot run here ({missing}): tests/node/test_node.py needs root and overlayfs")
    demo("down", timeout=300)  # whatever an earlier run left
    try:
        first = demo(timeout=3600)  # a cold machine builds the images here
        assert first.returncode == 0, first.stdout[-6000:]
        yield Sandbox(Cluster(DIR / "kubeconfig", owned=False, real_node=True), first.stdout)
    finally:
        demo("down", timeout=300)


def block(output: str, heading: str) -> str:
    """The paragraph of ``output`` that starts with ``heading`` (e.g. a conditions table)."""
    for paragraph in output.split("\n\n"):
        if paragraph.lstrip().startswith(heading):
            return paragraph
    raise AssertionError(f"no paragraph starting with {heading!r} in:\n{output}")


def pod_ips(cluster: Cluster, name: str) -> list[str]:
    return [p["status"]["podIP"] for p in ready_pods(cluster, NS, name)]


def deliver(cluster: Cluster, name: str, addresses: list[str], delivery: str) -> node.Delivery:
    """node.deliver in the demo's namespace; every send answered 200."""
    sent = node.deliver(cluster, NS, name, addresses, delivery)
    assert all(a.status == 200 for a in sent.answers), sent.answers
    return sent


# -- the demo ------------------------------------------------------------------------------

def test_make_demo_runs_the_examples_in_real_containers(sandbox: Sandbox) -> None:
    out, cluster = sandbox.output, sandbox.cluster
    # the examples, as kubectl showed them
    assert "gatewaydeployment.gateway-operator.dev/ops-bot created" in out, out
    refused = block(out, "# examples/gateway-refused.yaml")
    assert 'The GatewayDeployment "risky-bot" is invalid' in refused and "can run the agent twice" in refused, out
    warned = block(out, "# examples/gateway-warned.yaml")
    assert re.search(r"^\s*Warning: .*exactly-once admission is NOT held", warned, re.M), out
    # the conditions, from the operator running as a pod
    ops = block(out, "ops-bot:")
    assert re.search(r"ExactlyOnceAdmission\s+True\s+SharedRedisStore\s+every polled replica \(2\)", ops), out
    assert re.search(r"RedisReachable\s+True\s+ProbeSucceeded", ops), out
    assert re.search(r"ExactlyOnceAdmission\s+False\s+PerReplicaStores", block(out, "canary-bot:")), out
    assert re.search(r"ExactlyOnceAdmission\s+True\s+SingleReplicaDurableStore", block(out, "solo-bot:")), out
    assert re.search(r"agent turns counted at the LLM stand-in: 1 for 2 deliveries \(admitted exactly once\)", out), out
    assert f"export KUBECONFIG={DIR / 'kubeconfig'}" in out and "Timings:" in out, out

    # every pod is a container on the one real node, none restarted, at a pod-range IP
    nodes = cluster.get_json("nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["gwop-node-0"]
    info = nodes[0]["status"]["nodeInfo"]  # containerd 2 and the kubelet, both built here
    assert re.match(r"containerd://v?2\.", info["containerRuntimeVersion"]), info
    assert info["kubeletVersion"] == json.loads(cluster.kubectl("get", "--raw", "/version").stdout)["gitVersion"], info
    pods = cluster.get_json("pods", "-A")["items"]
    by_ns: dict[str, int] = {}
    for pod in pods:
        by_ns[pod["metadata"]["namespace"]] = by_ns.get(pod["metadata"]["namespace"], 0) + 1
        statuses = pod["status"]["containerStatuses"]
        assert all(s["containerID"].startswith("containerd://") and s["restartCount"] == 0 and s["ready"]
                   for s in statuses), (pod["metadata"]["name"], statuses)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in POD_RANGE
    # 2 operator replicas; ops-bot 2 + its Redis, canary-bot 2, solo-bot 1, the LLM stand-in
    assert by_ns == {node.SYSTEM_NAMESPACE: 2, NS: 7}, by_ns
    images = node.images()
    operator_pods = cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE)["items"]
    assert {p["spec"]["containers"][0]["image"] for p in operator_pods} == {images.operator}
    assert operator_pods[0]["spec"]["serviceAccountName"] == node.RELEASE
    redis_pod = cluster.get_json("pods", "-n", NS, "-l", "app.kubernetes.io/component=redis")["items"][0]
    assert redis_pod["spec"]["containers"][0]["image"] == images.redis

    # the operator's namespace enforces the restricted profile; helm test runs its pod for real
    for namespace in (node.SYSTEM_NAMESPACE, NS):  # gateways and the managed Redis included
        labels = cluster.get_json("namespace", namespace)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted", namespace
    tested = cluster.helm("test", node.RELEASE, "-n", node.SYSTEM_NAMESPACE, "--logs")
    assert "Phase:          Succeeded" in tested.stdout and f"GatewayDeployments served in {node.SYSTEM_NAMESPACE}" \
        in tested.stdout, tested.stdout
    # kubectl logs reaches the kubelet: the operator's own log
    logs = cluster.kubectl("logs", "-n", node.SYSTEM_NAMESPACE, "deploy/" + node.RELEASE).stdout
    assert logs.strip(), "no operator log through kubectl logs"


# -- webhooks ------------------------------------------------------------------------------

def test_a_webhook_fanned_to_every_ops_bot_pod_is_admitted_once(sandbox: Sandbox) -> None:
    cluster = sandbox.cluster
    cluster.kubectl("patch", "gatewaydeployment", "ops-bot", "-n", NS, "--type", "merge", "-p",
                    '{"spec": {"replicas": 3}}')
    wait_ready_pods(cluster, NS, "ops-bot", 3, timeout=120)
    ips, token = pod_ips(cluster, "ops-bot"), node.gateway_token(cluster, NS, "ops-bot")
    for ip in ips:  # 0.1.16 builds a replica's store on its first webhook
        node.webhook(ip, token, f"warm-up-{uuid.uuid4().hex[:8]}", "warm-up")
    until(lambda: "every polled replica (3)" in conditions(cluster, NS, "ops-bot")["ExactlyOnceAdmission"]["message"],
          timeout=60, what="ExactlyOnceAdmission over 3 polled replicas")
    for ip in ips:  # what the operator polls: the gateway image answering /health as a pod
        answer = node.health(ip)
        assert answer.status == 200 and answer.body["status"] == "healthy", answer
        assert not [o for o in answer.body.get("degraded_owners") or [] if o["owner_id"] == "durability:idempotency"]

    # the hook has no auth of its own: the gateway's token guards it
    assert node.webhook(ips[0], None, "no-token").status == 401
    assert node.webhook(ips[0], "not-the-token", "wrong-token").status == 403

    delivery = f"deploy-{uuid.uuid4().hex[:8]}"
    turns, answers = deliver(cluster, "ops-bot", ips, delivery)
    assert turns == 1, answers
    assert answers[0].body.get("action") == "agent" and not answers[0].body.get("deduplicated"), answers
    assert [a.body for a in answers[1:]] == [{"ok": True, "deduplicated": True}] * 2, answers

    # the records sit in the managed Redis under the operator's per-gateway prefix
    keys = redis_cli(cluster, "--scan", "--pattern", f"gwop:{NS}:ops-bot:hookidem:*").split()
    assert len(keys) >= 1 + 2 + len(ips), keys  # this delivery, the demo's fan-out and warm-ups, ours
    # no secret reached a replica's log
    password = node.secret_value(cluster, NS, "ops-bot-redis", "password")
    for pod in ready_pods(cluster, NS, "ops-bot"):
        logs = cluster.kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
        assert password not in logs and token not in logs


def redis_cli(cluster: Cluster, *args: str) -> str:
    """redis-cli in the managed Redis pod of ops-bot (kubectl exec), authenticated from its env."""
    command = 'REDISCLI_AUTH="$REDIS_PASSWORD" exec redis-cli "$@"'
    return cluster.kubectl("exec", "-n", NS, "deploy/ops-bot-redis", "--", "sh", "-c", command, "redis-cli",
                           *args).stdout


def test_warn_policy_runs_the_duplicate_and_the_service_keeps_one_client_on_one_replica(sandbox: Sandbox) -> None:
    """canary-bot: 2 replicas, each with its own SQLite store (replicaPolicy Warn)."""
    cluster = sandbox.cluster
    ips = pod_ips(cluster, "canary-bot")
    assert len(ips) == 2
    turns, _ = deliver(cluster, "canary-bot", ips, f"deploy-{uuid.uuid4().hex[:8]}")
    assert turns == 2  # the duplicate run the Warn condition warns about

    # through the Service (ClientIP affinity for > 1 replica): one client's retries reach one
    # replica, so even its own SQLite store dedups them. 8 sends spread at random over 2
    # replicas would all land on one with probability 1/128.
    service = cluster.get_json("service", "canary-bot", "-n", NS)
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    cluster_ip = service["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in SERVICE_RANGE
    assert service["spec"]["ports"][0]["port"] == node.GATEWAY_PORT  # the default spec.service.port
    turns, answers = deliver(cluster, "canary-bot", [cluster_ip] * 8, f"retry-{uuid.uuid4().hex[:8]}")
    assert turns == 1, answers


# -- NetworkPolicy, enforced on the node (kube-router) ---------------------------------------
CONNECT_BOUND = 3.0  # s: kube-router REJECTs (refused at once); a connection dropped instead times out here

# run in a pod: one TCP connect to host:port and a first line (PING for Redis, a GET for HTTP); the
# first reply line or the error's name
PING = r"""
import json, socket, sys, time
start = time.monotonic()
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as s:
        s.sendall(b"PING\r\n" if sys.argv[2] == "6379" else b"GET /health HTTP/1.0\r\n\r\n")
        reply = s.recv(128).decode(errors="replace").strip() or "(closed)"
except OSError as e:
    reply = type(e).__name__
print(json.dumps({"reply": reply, "seconds": round(time.monotonic() - start, 3)}))
"""


class Try(NamedTuple):
    reply: str      # "-NOAUTH ..." or "+PONG": Redis answered; else the error (ConnectionRefusedError, TimeoutError)
    seconds: float  # connect to reply or error, measured in the pod


def connect_try(cluster: Cluster, namespace: str, pod: str, address: str, python: str = "python3",
              port: int = 6379) -> Try:
    """One connection from inside ``pod`` (kubectl exec) to ``address``:``port``."""
    out = cluster.kubectl("exec", "-n", namespace, pod, "--", python, "-c", PING, address, str(port),
                          str(CONNECT_BOUND)).stdout
    answer = json.loads(out.strip().splitlines()[-1])
    return Try(answer["reply"], answer["seconds"])


def admitted(tried: Try) -> bool:
    return tried.reply.startswith(("-NOAUTH", "+PONG"))


def answered_http(tried: Try) -> bool:
    return tried.reply.startswith("HTTP/1.")


def refused(tried: Try) -> bool:
    return tried.reply in ("ConnectionRefusedError", "TimeoutError") and tried.seconds <= CONNECT_BOUND + 0.5


def expect(check: Callable[[Try], bool], tried: Try) -> Try:
    """``tried`` if it passes ``check``; else an AssertionError naming it (what `until` reports last)."""
    if not check(tried):
        raise AssertionError(f"{check.__name__}: no, {tried}")
    return tried


def probe_pod(namespace: str, name: str, labels: dict[str, str]) -> dict[str, object]:
    """A pod that only waits (the TEST IMAGE's Debian base: /usr/bin/python3), under the restricted profile."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "probe", "image": node.images().health_standin, "imagePullPolicy": "Never",
                                     "command": ["sleep", "infinity"],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "readOnlyRootFilesystem": True,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def test_the_managed_redis_admits_only_its_gateways_and_the_operator(sandbox: Sandbox) -> None:
    """ops-bot's managed Redis behind the NetworkPolicy the operator renders for it, enforced on the
    node by kube-router: real TCP connections from real pods to its Service (ClusterIP:6379). Its
    gateway pods and the operator's pods get Redis's answer to PING; a plain pod in another
    namespace, one there wearing ops-bot's gateway labels, a pod of the tenant's namespace with other
    labels and one there wearing the operator's pod labels are refused, each within CONNECT_BOUND.
    Without an enforcer every one of them gets the answer, and this test fails."""
    cluster = sandbox.cluster
    policy = cluster.get_json("networkpolicy", "ops-bot-redis", "-n", NS)
    assert policy["spec"]["policyTypes"] == ["Ingress"], policy["spec"]
    assert policy["metadata"]["ownerReferences"][0]["name"] == "ops-bot"
    address = cluster.get_json("service", "ops-bot-redis", "-n", NS)["spec"]["clusterIP"]
    other = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    operator_labels = {api.LABEL_NAME: OPERATOR_APP_NAME, api.LABEL_INSTANCE: node.RELEASE}
    strangers = {
        (other, "plain"): {"app": "netpol-probe"},
        (other, "gateway-lookalike"): api.selector_for("ops-bot"),  # a label alone, in another namespace
        (NS, "netpol-probe"): {"app": "netpol-probe"},
        (NS, "operator-lookalike"): operator_labels,  # the operator's labels, in the tenant's namespace
    }
    try:
        for (namespace, name), labels in strangers.items():
            cluster.apply(json.dumps(probe_pod(namespace, name, labels)))
        until(lambda: all(is_ready(cluster.get_json("pod", name, "-n", namespace)) for namespace, name in strangers),
              timeout=120, what="the probe pods Ready")
        gateways = [(NS, p["metadata"]["name"]) for p in ready_pods(cluster, NS, "ops-bot")]
        selector = ",".join(f"{k}={v}" for k, v in operator_labels.items())
        operators = [(node.SYSTEM_NAMESPACE, p["metadata"]["name"]) for p in
                     cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE, "-l", selector)["items"] if is_ready(p)]
        assert gateways and len(operators) == 2, (gateways, operators)

        # admitted (a pod that just started is, once kube-router's next sync put its IP in the policy's set)
        print()
        for namespace, pod in gateways + operators:
            tried = until(lambda: expect(admitted, connect_try(cluster, namespace, pod, address)),
                          timeout=30, what=f"{namespace}/{pod} answered by ops-bot's Redis")
            print(f"{namespace}/{pod} -> ops-bot-redis: {tried.reply!r} in {tried.seconds:.3f} s")
        # refused, each within the bound (bounded waits: a sync in progress is not a failure yet)
        for namespace, pod in strangers:  # their image's python3 on PATH is the stand-in: /usr/bin's
            tried = until(lambda: expect(refused, connect_try(cluster, namespace, pod, address, "/usr/bin/python3")),
                          timeout=30, what=f"{namespace}/{pod} refused by ops-bot's Redis within {CONNECT_BOUND} s")
            print(f"{namespace}/{pod} -> ops-bot-redis: {tried.reply} in {tried.seconds:.3f} s")
        # and Redis answered all along: a gateway still gets in
        assert admitted(connect_try(cluster, *gateways[0], address))
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        cluster.kubectl("delete", "pod", "-n", NS, *[name for namespace, name in strangers if namespace == NS],
                        "--wait=false", check=False)


def test_the_optional_gateway_network_policy_admits_its_namespace_the_operator_and_the_listed_ones(
        sandbox: Sandbox) -> None:
    """spec.networkPolicy on a GatewayDeployment of its own (replicas: the HEALTH ENDPOINT STAND-IN
    image, a TEST IMAGE serving :8765), enforced by kube-router: real connections to a replica's
    port 8765 from a pod of its namespace, the operator's pods and a pod of a listed namespace get
    an HTTP answer; a pod of another namespace is refused within CONNECT_BOUND. The edge (Traefik,
    a host process) and the kubelet's probes come from the node itself, which kube-router admits."""
    cluster = sandbox.cluster
    fenced, listed, other = (cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
                             for _ in range(3))
    try:
        manifest = gateway_deployment("fenced", networkPolicy={"enabled": True, "fromNamespaces": [listed]})
        manifest["spec"].update(image=node.images().health_standin, imagePullPolicy="Never")
        cluster.apply(json.dumps(manifest), "-n", fenced)
        replica = wait_ready_pods(cluster, fenced, "fenced", 1, timeout=120)[0]["status"]["podIP"]
        probes = {(fenced, "neighbour"), (listed, "edge-like"), (other, "stranger")}
        for namespace, name in probes:
            cluster.apply(json.dumps(probe_pod(namespace, name, {"app": "netpol-probe"})))
        until(lambda: all(is_ready(cluster.get_json("pod", name, "-n", namespace)) for namespace, name in probes),
              timeout=120, what="the probe pods Ready")
        selector = ",".join(f"{k}={v}" for k, v in {api.LABEL_NAME: OPERATOR_APP_NAME,
                                                    api.LABEL_INSTANCE: node.RELEASE}.items())
        operators = [(node.SYSTEM_NAMESPACE, p["metadata"]["name"]) for p in
                     cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE, "-l", selector)["items"] if is_ready(p)]
        assert operators
        print()
        for namespace, pod in [(fenced, "neighbour"), (listed, "edge-like"), *operators]:
            python = "python3" if namespace == node.SYSTEM_NAMESPACE else "/usr/bin/python3"
            tried = until(lambda: expect(answered_http, connect_try(cluster, namespace, pod, replica, python,
                                                                  api.GATEWAY_PORT)),
                          timeout=30, what=f"{namespace}/{pod} answered by the fenced replica")
            print(f"{namespace}/{pod} -> fenced:{api.GATEWAY_PORT}: {tried.reply.splitlines()[0]!r} in "
                  f"{tried.seconds:.3f} s")
        tried = until(lambda: expect(refused, connect_try(cluster, other, "stranger", replica, "/usr/bin/python3",
                                                        api.GATEWAY_PORT)),
                      timeout=30, what=f"{other}/stranger refused by the fenced replica within {CONNECT_BOUND} s")
        print(f"{other}/stranger -> fenced:{api.GATEWAY_PORT}: {tried.reply} in {tried.seconds:.3f} s")
        # the operator's /health polls get through: its one replica answered
        until(lambda: "(1 of 1 polled replicas answered)" in conditions(cluster, fenced, "fenced")[
            "IdempotencyDegraded"]["message"], timeout=30, what="the operator's poll of the fenced replica")
    finally:
        for namespace in (fenced, listed, other):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def operator_pods(cluster: Cluster) -> list[dict]:
    selector = f"{api.LABEL_NAME}={OPERATOR_APP_NAME},{api.LABEL_INSTANCE}={node.RELEASE}"
    return [p for p in cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE, "-l", selector)["items"] if is_ready(p)]


def test_the_operators_own_network_policy_admits_what_it_needs_and_nothing_else(sandbox: Sandbox) -> None:
    """The chart's networkPolicy (off by default, issue 34) on the helm-installed operator, enforced by
    kube-router. In: a pod of the namespace metricsFrom lists gets the metrics port's answer, a pod of
    another namespace is refused within CONNECT_BOUND. Out: the operator still reaches the API server (a
    new GatewayDeployment is reconciled to Ready), a replica's /health (its poll answered) and its Redis
    probe (ops-bot's RedisReachable stays True), while its own connection to a port the policy does not
    list (the LLM stand-in's) is refused, and answered once the chart's defaults are back."""
    cluster = sandbox.cluster
    endpoint = cluster.get_json("endpointslice", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes")[
        "items"][0]
    api_address, api_port = endpoint["endpoints"][0]["addresses"][0], endpoint["ports"][0]["port"]
    assert api_port != llm_pod.PORT
    monitoring, other, tenant = (cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
                                 for _ in range(3))
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring}}}
    llm = llm_pod.pod_ip(cluster, NS)
    metrics_port = 8080  # the chart's metrics.port
    try:
        node.install_operator(cluster, "--set", "networkPolicy.enabled=true",
                              "--set", f"networkPolicy.apiServer.cidrs[0]={api_address}/32",
                              "--set", f"networkPolicy.apiServer.ports[0]={api_port}",
                              "--set-json", f"networkPolicy.metricsFrom=[{json.dumps(peer)}]")
        policy = cluster.get_json("networkpolicy", node.RELEASE, "-n", node.SYSTEM_NAMESPACE)
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], policy["spec"]
        operators = operator_pods(cluster)
        assert len(operators) == 2, [p["metadata"]["name"] for p in operators]
        probes = {(monitoring, "prometheus-like"), (other, "stranger")}
        for namespace, name in probes:
            cluster.apply(json.dumps(probe_pod(namespace, name, {"app": "netpol-probe"})))
        until(lambda: all(is_ready(cluster.get_json("pod", name, "-n", namespace)) for namespace, name in probes),
              timeout=120, what="the probe pods Ready")
        print()
        for pod in operators:
            name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
            tried = until(lambda: expect(answered_http, connect_try(cluster, monitoring, "prometheus-like", ip,
                                                                  "/usr/bin/python3", metrics_port)),
                          timeout=30, what=f"{monitoring}/prometheus-like answered by {name}'s metrics port")
            print(f"{monitoring}/prometheus-like -> {name}:{metrics_port}: {tried.reply.splitlines()[0]!r}")
            tried = until(lambda: expect(refused, connect_try(cluster, other, "stranger", ip, "/usr/bin/python3",
                                                            metrics_port)),
                          timeout=30, what=f"{other}/stranger refused by {name}'s metrics port")
            print(f"{other}/stranger -> {name}:{metrics_port}: {tried.reply} in {tried.seconds:.3f} s")
            tried = until(lambda: expect(refused, connect_try(cluster, node.SYSTEM_NAMESPACE, name, llm,
                                                            port=llm_pod.PORT)),
                          timeout=30, what=f"{name}'s own connection to the LLM stand-in refused")
            print(f"{name} -> llm stand-in {llm}:{llm_pod.PORT}: {tried.reply} in {tried.seconds:.3f} s")

        # what the operator needs still gets through: the API server, a replica's /health, Redis
        manifest = gateway_deployment("behind-policy")
        manifest["spec"].update(image=node.images().health_standin, imagePullPolicy="Never")
        cluster.apply(json.dumps(manifest), "-n", tenant)
        wait_condition(cluster, tenant, "behind-policy", "Ready", "True", timeout=120)
        until(lambda: "(1 of 1 polled replicas answered)" in conditions(cluster, tenant, "behind-policy")[
            "IdempotencyDegraded"]["message"], timeout=30, what="the operator's poll of the new replica")
        stays(lambda: conditions(cluster, NS, "ops-bot")["RedisReachable"]["status"] == "True", seconds=25,
              what="ops-bot's RedisReachable True through the policy (the operator's Redis probe)")
    finally:
        node.install_operator(cluster)  # the chart's defaults: no policy
        for namespace in (monitoring, other, tenant):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert cluster.kubectl("get", "networkpolicy", node.RELEASE, "-n", node.SYSTEM_NAMESPACE,
                           check=False).returncode != 0
    # the refusal was the policy's: without it the same connection is answered
    name = operator_pods(cluster)[0]["metadata"]["name"]
    until(lambda: expect(answered_http, connect_try(cluster, node.SYSTEM_NAMESPACE, name, llm, port=llm_pod.PORT)),
          timeout=30, what=f"{name}'s connection to the LLM stand-in answered without the policy")


# -- from outside: through the node's edge (Traefik) -----------------------------------------
OPS_HOST, CANARY_HOST = "ops-bot.gateway.test", "canary-bot.gateway.test"  # the examples' spec.expose


def test_the_edge_publishes_an_address_that_the_resource_and_kubectl_show(sandbox: Sandbox) -> None:
    cluster = sandbox.cluster
    for name, url in (("ops-bot", f"http://{OPS_HOST}/"), ("canary-bot", f"http://{CANARY_HOST}/")):
        until(lambda: cluster.get_json("gatewaydeployment", name, "-n", NS)["status"].get("expose", {}).get("address")
              == node.EDGE, timeout=60, what=f"{name}'s status.expose.address")
        assert cluster.get_json("gatewaydeployment", name, "-n", NS)["status"]["expose"]["url"] == url
    wide = cluster.kubectl("get", "gwd", "-n", NS, "-o", "wide").stdout
    header, *rows = wide.splitlines()
    at = header.index("ADDRESS")  # kubectl's columns are fixed-width; REDIS may be empty
    assert {r.split()[0]: r[at:].split()[0] for r in rows if not r.startswith("solo-bot")} == \
        {"ops-bot": node.EDGE, "canary-bot": node.EDGE}, wide
    # the controller accepted what the operator rendered: the route by its Gateway, the Ingress by its class
    route = cluster.get_json("httproute", "ops-bot", "-n", NS)
    accepted = {c["type"]: c["status"] for c in route["status"]["parents"][0]["conditions"]}
    assert accepted == {"Accepted": "True", "ResolvedRefs": "True"}, route["status"]
    assert route["metadata"]["ownerReferences"][0]["name"] == "ops-bot"
    ingress = cluster.get_json("ingress", "canary-bot", "-n", NS)
    assert ingress["status"]["loadBalancer"]["ingress"][0]["ip"] == node.EDGE, ingress["status"]


def test_a_redelivery_through_the_httproute_reaches_every_replica_and_runs_once(sandbox: Sandbox) -> None:
    """ops-bot (3 replicas, managed Redis) behind its HTTPRoute: a provider's retries, sent
    without cookies as providers do, spread over every replica and run the agent once."""
    cluster = sandbox.cluster
    wait_ready_pods(cluster, NS, "ops-bot", 3, timeout=120)
    ips = set(pod_ips(cluster, "ops-bot"))
    since = len(node.edge_log(cluster))
    turns, answers = deliver(cluster, "ops-bot", [OPS_HOST] * 6, f"edge-{uuid.uuid4().hex[:8]}")
    assert turns == 1, answers
    assert answers[0].body.get("action") == "agent", answers
    assert [a.body for a in answers[1:]] == [{"ok": True, "deduplicated": True}] * 5, answers
    assert set(node.edge_backends(cluster, OPS_HOST, since)) == ips  # the edge sent them to all 3


def test_through_the_ingress_warn_runs_the_duplicate_and_a_websocket_client_keeps_its_replica(sandbox: Sandbox) -> None:
    """canary-bot (2 replicas, each its own SQLite store, replicaPolicy Warn) behind its Ingress."""
    cluster = sandbox.cluster
    ips = set(pod_ips(cluster, "canary-bot"))
    since = len(node.edge_log(cluster))
    turns, answers = deliver(cluster, "canary-bot", [CANARY_HOST] * 4, f"edge-{uuid.uuid4().hex[:8]}")
    assert set(node.edge_backends(cluster, CANARY_HOST, since)) == ips, answers
    assert turns == 2, answers  # each replica ran it once: the duplicate the Warn condition warns about

    # WebSocket clients: the edge pins one that keeps its cookie to one replica (each replica's
    # /health counts its open connections); one without the cookie is balanced afresh each time
    token = node.gateway_token(cluster, NS, "canary-bot")
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in ready_pods(cluster, NS, "canary-bot")}
    fresh = [node.websocket_replica(CANARY_HOST, token, pods) for _ in range(4)]
    assert {f.replica for f in fresh} == set(pods), fresh
    cookie = fresh[0].cookie
    assert cookie.startswith("gateway-replica="), fresh[0]
    pinned = [node.websocket_replica(CANARY_HOST, token, pods, cookie).replica for _ in range(4)]
    assert pinned == [fresh[0].replica] * 4, (fresh, pinned)
    # no secret in the edge's access log (a WebSocket's token rides in its query string)
    assert token not in "\n".join(node.edge_log(cluster))


# -- faults from real kubelet status --------------------------------------------------------

def test_a_redis_outage_on_the_managed_redis_pod_shows_and_clears(sandbox: Sandbox) -> None:
    cluster = sandbox.cluster
    # scaled away, the operator puts its managed Redis back (drift correction on a real pod)
    cluster.kubectl("scale", "deployment", "ops-bot-redis", "-n", NS, "--replicas=0")
    until(lambda: cluster.get_json("deployment", "ops-bot-redis", "-n", NS)["spec"]["replicas"] == 1,
          timeout=30, what="the operator to restore ops-bot-redis to 1 replica")
    until(lambda: cluster.get_json("deployment", "ops-bot-redis", "-n", NS)["status"].get("readyReplicas") == 1,
          timeout=60, what="the managed Redis pod Ready again")
    wait_condition(cluster, NS, "ops-bot", "RedisReachable", "True", "ProbeSucceeded", timeout=60)

    # an outage the operator cannot undo: Redis stops answering clients for 45 s (kubectl exec),
    # longer than the replicas' fail-closed window (spec.redis.failClosedSeconds, 30 s by default)
    ips, token = pod_ips(cluster, "ops-bot"), node.gateway_token(cluster, NS, "ops-bot")
    redis_cli(cluster, "CLIENT", "PAUSE", "45000", "ALL")
    first = time.monotonic()
    for i, ip in enumerate(ips):  # each replica notices on its next webhook and holds it: 503, retry
        answer = node.webhook(ip, token, f"during-outage-{i}-{uuid.uuid4().hex[:6]}", timeout=20)
        assert answer.status == 503 and answer.body.get("retry") is True, answer
    for ip in ips:  # each replica says so itself, in the /health the operator polls
        answer = node.health(ip, timeout=20)
        # the whole body on failure (the launcher's own section says why it held the delivery)
        assert [o for o in answer.body.get("degraded_owners") or [] if o["owner_id"] == "durability:idempotency"], \
            json.dumps(answer.body, indent=1)

    def degraded() -> bool:
        """The operator says it; its message counts the replicas it polls at that moment (one whose
        containers are not ready is not polled), so each replica's own word is checked above."""
        said = conditions(cluster, NS, "ops-bot")["IdempotencyDegraded"]
        assert said["status"] == "True" and said["reason"] == "RuntimeOutage", said
        return True
    until(degraded, timeout=20, what="IdempotencyDegraded True RuntimeOutage")
    now = conditions(cluster, NS, "ops-bot")
    assert now["ExactlyOnceAdmission"]["status"] == "False", now
    # the operator's own probe says it too, at its next probe: a pass of its own, not the one the
    # replicas' word started (within the checker's lag bound, 4 s)
    wait_condition(cluster, NS, "ops-bot", "RedisReachable", "False", "ConnectionFailed", timeout=10)
    # past the window each replica fails open, as the gateway documents (announced all along)
    until(lambda: time.monotonic() - first > 31, timeout=40, interval=0.5, what="the fail-closed window over")
    for i, ip in enumerate(ips):
        answer = node.webhook(ip, token, f"past-the-window-{i}-{uuid.uuid4().hex[:6]}", timeout=20)
        assert answer.status == 200 and answer.body.get("ok") is True, answer

    until(lambda: redis_cli(cluster, "PING").strip() == "PONG", timeout=45, interval=2, what="the pause to end")
    for i, ip in enumerate(ips):  # the next Redis operation clears the degradation
        answer = node.webhook(ip, token, f"after-outage-{i}-{uuid.uuid4().hex[:6]}")
        assert (answer.status, answer.body.get("action")) == (200, "agent"), answer
    wait_condition(cluster, NS, "ops-bot", "IdempotencyDegraded", "False", "NoDegradedReplicas", timeout=30)
    wait_condition(cluster, NS, "ops-bot", "RedisReachable", "True", "ProbeSucceeded", timeout=30)
    wait_condition(cluster, NS, "ops-bot", "ExactlyOnceAdmission", "True", "SharedRedisStore", timeout=30)
    reasons = {(e["type"], e["reason"]) for e in events(cluster, NS, "ops-bot")}
    assert {("Warning", "IdempotencyDegraded"), ("Normal", "IdempotencyRecovered"),
            ("Warning", "RedisUnreachable"), ("Normal", "RedisReachable")} <= reasons, reasons


@pytest.mark.parametrize("name, image, policy, reason", [
    ("crashy", "redis", "IfNotPresent", "CrashLoop"),  # the Redis image has no python3: the container cannot start
    # any registry: the node's containerd sends every pull to 127.0.0.1:1, never outside
    ("unpullable", "registry.example.invalid/praisonai-gateway:0.1.16", "IfNotPresent", "ImagePullBackOff"),
    ("not-on-node", "localhost/gateway-operator/missing:0", "Never", "ErrImageNeverPull"),
])
def test_the_kubelets_waiting_reasons_are_stalled_reasons(sandbox: Sandbox, name: str, image: str, policy: str,
                                                          reason: str) -> None:
    cluster = sandbox.cluster
    image = node.images().redis if image == "redis" else image
    cluster.apply(json.dumps(gateway_deployment(name, image=image, imagePullPolicy=policy)), "-n", NS)
    try:
        stalled = wait_condition(cluster, NS, name, "Stalled", "True", reason, timeout=120)
        assert stalled["message"].startswith(f"pod {name}-"), stalled
        assert conditions(cluster, NS, name)["Ready"]["status"] == "False"
        if reason == "ImagePullBackOff":  # the kubelet's own account of the pull
            failed = [e["message"] for e in cluster.get_json("events", "-n", NS, "--field-selector",
                                                             "involvedObject.kind=Pod,reason=Failed")["items"]
                      if e["involvedObject"]["name"].startswith(f"{name}-")]
            assert any("127.0.0.1:1" in m for m in failed), failed
            print(f"\nthe kubelet on a pull from {image.split('/')[0]}: {failed[0][:300]}")
    finally:
        cluster.kubectl("delete", "gatewaydeployment", name, "-n", NS, "--timeout=60s")


# -- a hostile tenant's image behind /health ----------------------------------------------

def operator_restarts(cluster: Cluster) -> dict[str, int]:
    """Each operator pod's container restarts (an OOM kill under the chart's limit is one)."""
    return {p["metadata"]["name"]: sum(s["restartCount"] for s in p["status"]["containerStatuses"])
            for p in cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE)["items"]}


def test_a_tenant_image_answering_hostile_health_costs_the_operator_pod_nothing(sandbox: Sandbox) -> None:
    """The image behind /health is the tenant's. Three real pods of the HEALTH ENDPOINT
    STAND-IN image (a TEST IMAGE) answer the operator pod's polls with an endless body, 100 MiB and 60 KiB of nested JSON: the operator
    (under the chart's 256 MiB limit) reads each only up to its cap, reports the unanswered
    polls on that resource alone, is not restarted, and keeps serving another tenant."""
    cluster = sandbox.cluster
    restarts = operator_restarts(cluster)
    hostile = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    calm = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        cluster.apply(json.dumps(gateway_deployment("calm", replicas=0)), "-n", calm)
        cluster.apply(json.dumps(gateway_deployment("loud", image=node.images().health_standin, imagePullPolicy="Never",
                                                    replicas=3, replicaPolicy="Warn")), "-n", hostile)
        pods = wait_ready_pods(cluster, hostile, "loud", 3, timeout=120)
        standins = HealthStandIns(local=not cluster.real_node)  # a real node: the pods are the stand-ins
        hostile_health(cluster, standins, hostile, "loud", pods, timeout=60)
        latency = reconcile_latency(cluster, calm, "calm", "during-hostile-health")
        print(f"\nanother tenant's reconcile latency while 3 pods answer hostile /health: {latency:.2f} s")
        assert latency < 10
        assert conditions(cluster, hostile, "loud")["Stalled"]["status"] == "False"
        assert operator_restarts(cluster) == restarts, "the operator pod restarted (OOM-killed?)"
        for pod in pods:  # the hostile pods were polled from the operator pod, over the pod network
            assert ipaddress.ip_address(pod["status"]["podIP"]) in POD_RANGE
    finally:
        for namespace in (hostile, calm):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_solo_bots_sqlite_state_on_its_pvc_survives_a_pod_restart(sandbox: Sandbox) -> None:
    cluster = sandbox.cluster
    claim = cluster.get_json("pvc", "-n", NS, "-l", "app.kubernetes.io/instance=solo-bot")["items"][0]
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "gwop-hostpath"
    volume = cluster.get_json("pv", claim["spec"]["volumeName"])
    assert volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "gateway-operator.dev/node-hostpath"
    assert Path(volume["spec"]["hostPath"]["path"]).is_relative_to(DIR / "node/volumes")

    delivery = f"deploy-{uuid.uuid4().hex[:8]}"
    first_pod = ready_pods(cluster, NS, "solo-bot")[0]
    turns, _ = deliver(cluster, "solo-bot", [first_pod["status"]["podIP"]], delivery)
    assert turns == 1
    cluster.kubectl("delete", "pod", first_pod["metadata"]["name"], "-n", NS)
    pods = until(lambda: [p for p in ready_pods(cluster, NS, "solo-bot")
                          if p["metadata"]["uid"] != first_pod["metadata"]["uid"]], timeout=120,
                 what="solo-bot's new pod Ready")
    turns, answers = deliver(cluster, "solo-bot", [pods[0]["status"]["podIP"]], delivery)
    assert turns == 0, answers  # the new pod's store remembers the delivery


def test_the_switch_from_one_sqlite_replica_to_three_on_redis_carries_its_records_over(sandbox: Sandbox) -> None:
    """1 (SQLite on its PVC) -> 3 (Redis): a webhook the single replica admitted is answered
    deduplicated by every replica after the switch, and the agent never runs it again. The operator
    held one replica on the old PVC while its launcher copied the records (MigratingDedupRecords)."""
    cluster = sandbox.cluster
    solo = yaml.safe_load((REPO / "examples/gateway-single.yaml").read_text())
    solo["metadata"]["name"] = "switch-bot"
    solo["spec"]["env"] = [{"name": k, "value": v} for k, v in llm_pod.deploy(cluster, NS, node.images().gateway).items()]
    cluster.apply(json.dumps(solo), "-n", NS)
    wait_ready_pods(cluster, NS, "switch-bot", 1, timeout=180)
    delivery = f"before-switch-{uuid.uuid4().hex[:8]}"
    turns, _ = deliver(cluster, "switch-bot", pod_ips(cluster, "switch-bot"), delivery)
    assert turns == 1
    config = solo["spec"]["config"]
    config["hooks"]["idempotency"] = {"store_backend": "redis"}
    cluster.kubectl("patch", "gatewaydeployment", "switch-bot", "-n", NS, "--type", "merge", "-p", json.dumps(
        {"spec": {"replicas": 3, "redis": {"managed": {"enabled": True}}, "config": config}}))
    until(lambda: (cluster.get_json("gatewaydeployment", "switch-bot", "-n", NS).get("status") or {})
          .get("sqliteMigration", {}).get("state") == "Done", timeout=240, what="the migration Done")
    wait_ready_pods(cluster, NS, "switch-bot", 3, timeout=240)
    turns, answers = deliver(cluster, "switch-bot", pod_ips(cluster, "switch-bot"), delivery)
    assert turns == 0 and all(a.body == {"ok": True, "deduplicated": True} for a in answers), answers
    cluster.kubectl("delete", "gatewaydeployment", "switch-bot", "-n", NS, "--wait=true", "--timeout=180s")


# -- your own Redis (issue 20): TLS-only with a private CA, an ACL user -----------------------

OWN_REDIS, OWN_NAME, OWN_USER = "own-redis", "redis.own.internal", "tls-bot"


def own_redis_manifests(image: str) -> list[dict]:
    """A TLS-only Redis from our Redis image: the server's certificate in Secret own-redis-tls,
    the default user's password and the gateway's ACL user (its rules, password included) in
    Secret own-redis-users, as a Redis of your own would be run by someone else."""
    labels = {"app.kubernetes.io/name": OWN_REDIS}
    command = ('set -f; exec redis-server --port 0 --tls-port 6380 --tls-cert-file /tls/tls.crt '
               '--tls-key-file /tls/tls.key --tls-ca-cert-file /tls/ca.crt --tls-auth-clients no '
               '--requirepass "$ADMIN_PASSWORD" --save "" --appendonly no --maxmemory-policy noeviction '
               f'--user {OWN_USER} $ACL_RULES')
    users = {"secretKeyRef": {"name": "own-redis-users"}}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": OWN_REDIS, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels}, "spec": {
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "automountServiceAccountToken": False,
                 "containers": [{
                     "name": "redis", "image": image, "command": ["sh", "-c", command],
                     "env": [{"name": "ADMIN_PASSWORD", "valueFrom": {"secretKeyRef": {**users["secretKeyRef"],
                                                                                      "key": "admin"}}},
                             {"name": "ACL_RULES", "valueFrom": {"secretKeyRef": {**users["secretKeyRef"],
                                                                                 "key": "rules"}}}],
                     "ports": [{"name": "redis", "containerPort": 6380}],
                     "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 2},
                     "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                         "capabilities": {"drop": ["ALL"]}},
                     "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True},
                                      {"name": "data", "mountPath": "/data"}]}],
                 "volumes": [{"name": "tls", "secret": {"secretName": "own-redis-tls"}},
                             {"name": "data", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": OWN_REDIS, "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "redis", "port": 6380, "targetPort": "redis"}]}},
    ]


def own_redis_cli(cluster: Cluster, *args: str) -> str:
    """redis-cli in the own Redis's pod, as its administrator (the default user)."""
    command = 'REDISCLI_AUTH="$ADMIN_PASSWORD" exec redis-cli --tls --insecure -p 6380 "$@"'
    return cluster.kubectl("exec", "-n", NS, f"deploy/{OWN_REDIS}", "--", "sh", "-c", command, "redis-cli",
                           *args).stdout


def test_a_webhook_to_every_replica_runs_once_over_tls_as_the_least_privilege_acl_user(
        sandbox: Sandbox, tmp_path: Path) -> None:
    """Three replicas of the real gateway on a TLS-only Redis pod with a private CA, reached by its
    Service's ClusterIP (which its certificate does not carry: tls.serverName does), signed in as
    the ACL user with exactly `gateway-operator redis-acl`'s rules. One webhook sent to every
    replica runs the agent once (counted at the LLM stand-in); nothing is refused to the user."""
    import base64
    import secrets as token_source

    from gateway_operator.api import redis_acl
    from harness.tls import make_ca, server_cert
    cluster = sandbox.cluster
    ca = make_ca(tmp_path / "ca")
    cert = server_cert(ca, tmp_path / "cert", dns=(OWN_NAME,), ips=())
    password, admin = token_source.token_urlsafe(24), token_source.token_urlsafe(24)
    prefix = api.default_prefix(NS, OWN_USER)

    def secret(name: str, **data: str) -> dict:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}

    objects = [secret("own-redis-tls", **{"tls.crt": cert.cert_path.read_text(), "tls.key": cert.key_path.read_text(),
                                          "ca.crt": ca.pem}),
               secret("own-redis-users", admin=admin, rules=redis_acl.rules(prefix, password=password)),
               secret("tls-bot-redis-login", username=OWN_USER, password=password),
               secret("tls-bot-redis-ca", **{"ca.crt": ca.pem}),
               *own_redis_manifests(node.images().redis)]
    try:
        cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), "-n", NS)
        cluster.kubectl("-n", NS, "rollout", "status", f"deploy/{OWN_REDIS}", "--timeout=120s")
        address = cluster.get_json("-n", NS, f"service/{OWN_REDIS}")["spec"]["clusterIP"]
        bot = yaml.safe_load((REPO / "examples/gateway-redis.yaml").read_text())
        bot["metadata"]["name"] = OWN_USER
        bot["spec"]["image"] = node.images().gateway
        bot["spec"]["imagePullPolicy"] = "Never"
        bot["spec"]["env"] = [{"name": k, "value": v} for k, v in llm_pod.deploy(cluster, NS, node.images().gateway).items()]
        bot["spec"]["redis"] = {"host": address, "port": 6380,
                                "usernameSecretRef": {"name": "tls-bot-redis-login"},
                                "passwordSecretRef": {"name": "tls-bot-redis-login"},
                                "tls": {"enabled": True, "caSecretRef": {"name": "tls-bot-redis-ca"},
                                        "serverName": OWN_NAME}}
        cluster.apply(json.dumps(bot), "-n", NS)
        cluster.kubectl("-n", NS, "wait", "--for=condition=Ready", f"gatewaydeployment/{OWN_USER}", "--timeout=240s")
        found = conditions(cluster, NS, OWN_USER)
        assert found["RedisReachable"]["reason"] == "ProbeSucceeded", found
        assert found["RedisTLSVerified"]["reason"] == "ServerCertificateVerified", found
        ips, token = pod_ips(cluster, OWN_USER), node.gateway_token(cluster, NS, OWN_USER)
        assert len(ips) == 3
        for ip in ips:  # 0.1.16 builds a replica's store on its first webhook
            assert node.webhook(ip, token, f"warm-up-{uuid.uuid4().hex[:8]}", "warm-up").status == 200
        until(lambda: "every polled replica (3)" in conditions(cluster, NS, OWN_USER)["ExactlyOnceAdmission"][
            "message"], timeout=60, what="ExactlyOnceAdmission over 3 polled replicas, over TLS")
        turns, answers = deliver(cluster, OWN_USER, ips, f"tls-{uuid.uuid4().hex[:8]}")
        assert turns == 1, answers
        assert [a.body for a in answers[1:]] == [{"ok": True, "deduplicated": True}] * 2, answers
        for ip in ips:
            assert not [o for o in node.health(ip).body.get("degraded_owners") or []
                        if o["owner_id"] == "durability:idempotency"]
        # the records are under the prefix, and nothing the gateways ran was refused to the user
        # (the operator's probe may log its refused INFO and CONFIG GET: not in the least-privilege ACL)
        assert own_redis_cli(cluster, "--scan", "--pattern", f"{prefix}hookidem:*").split()
        refused = {line for line in own_redis_cli(cluster, "ACL", "LOG").splitlines()}
        assert not refused & {c for c in redis_acl.COMMANDS}, refused
        for pod in ready_pods(cluster, NS, OWN_USER):
            logs = cluster.kubectl("logs", "-n", NS, pod["metadata"]["name"]).stdout
            assert password not in logs and token not in logs and "rediss://" in logs
    finally:
        cluster.kubectl("-n", NS, "delete", "gatewaydeployment", OWN_USER, "--wait=true", "--timeout=180s",
                        "--ignore-not-found")
        cluster.kubectl("-n", NS, "delete", "deploy,service", OWN_REDIS, "--ignore-not-found")
        cluster.kubectl("-n", NS, "delete", "secret", "own-redis-tls", "own-redis-users", "tls-bot-redis-login",
                        "tls-bot-redis-ca", "--ignore-not-found")


# -- again, then down ----------------------------------------------------------------------

KUBE_ROUTER_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
KUBE_ROUTER_IPSETS = ("KUBE-SRC-", "KUBE-DST-", "TMP-")  # its policies' sets; TMP-: an interrupted restore's


def kube_router_state() -> list[str]:
    """What the node's NetworkPolicy enforcer holds on the host: kube-router processes, its
    iptables chains (any table) and its ipsets."""
    state = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if Path(argv[0].decode(errors="replace")).name.startswith("kube-router"):
                state.append(f"process {p.name} {b' '.join(argv).decode(errors='replace')[:120]}")
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    state += [f"iptables chain {line.split()[0][1:]}" for line in saved.splitlines()
              if line.startswith(":") and line[1:].split()[0].startswith(KUBE_ROUTER_CHAINS)]
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout
    state += [f"ipset {name}" for name in sets.split() if name.startswith(KUBE_ROUTER_IPSETS)]
    return state


def leftovers() -> list[str]:
    """What a node could leave on the host: bridge, chains, ipsets, routes, mounts, netns, cgroups,
    processes (kube-router's included)."""
    left = []
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
        left.append(f"bridge {BRIDGE}")
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    left += [f"iptables chain {line.split()[0][1:]}" for line in saved.splitlines()
             if line.startswith(":") and line[1:].split()[0].startswith(("KUBE-", "GWOP-", "CNI-"))]
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    left += [f"route {line}" for line in routes.splitlines() if "198.18." in line or "198.19." in line]
    left += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
             if str(DIR) in line.split()[1]]
    netns = Path("/run/netns")
    left += [f"netns {p.name}" for p in netns.iterdir() if p.name.startswith("cni-")] if netns.exists() else []
    left += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/gwop-node")]
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(DIR) in cmd:
                left.append(f"process {p.name} {cmd[:120]}")
    for directory in (DIR / "node", Path("/run/gwop-node")):  # the node's files, its shims' sockets
        if directory.exists():
            left.append(f"directory {directory}")
    left += [thing for thing in kube_router_state() if thing not in left]
    return left


def test_the_exactly_once_checker_slice_finds_no_silent_duplicate_no_lost_message_and_no_split(
        sandbox: Sandbox) -> None:
    """`make verify-exactly-once`'s short seeded slice (issues 18 and 35): 3 replicas of the real
    gateway on a managed Redis, 80 messages of 50 conversations delivered 3 times each (pod IPs, the
    Service, the edge) while Redis is flushed, the pods roll, Redis stalls for a blip and a pod is
    force-deleted mid-turn. The flush is announced (DedupHistoryLost) within the health interval +
    timeout + 1 s, so the duplicates it causes are announced ones; a blip re-runs nothing Redis had
    recorded (the fail-closed window); nothing is lost in the rollout (the drain) nor to the force
    delete (the claim's lease); every turn's history holds its conversation's earlier turns (shared
    sessions) and no other conversation's."""
    report = exactly_once_run.run(sandbox.cluster, exactly_once_run.Settings(
        seed=int(os.environ.get("VERIFY_SEED", "3")), messages=80, copies=3, spread_s=120, redeliver_max_s=30,
        long_share=0.05, long_s=(3.0, 8.0), fault_gap_s=12,
        faults=("redis_flush", "rolling_update", "redis_latency", "force_delete")))
    print(exactly_once.table(report))
    assert report["deliveries"] >= 240 and report["unique"] == 80, report
    assert {f["kind"] for f in report["faults"]} == {"redis_flush", "rolling_update", "redis_latency", "force_delete"}, \
        exactly_once.table(report)
    assert (report["silent_duplicates"], report["avoidable_duplicates"], report["lost"], report["splits"],
            report["crossed"]) == (0, 0, 0, 0, 0), exactly_once.table(report)
    flushes = [f for f in report["faults"] if f["kind"] == "redis_flush"]
    assert flushes and all(f["announced_after_s"] is not None and f["announced_after_s"] <= report["lag_bound_s"]
                           for f in flushes), exactly_once.table(report)
    cluster = sandbox.cluster
    cluster.kubectl("delete", "namespace", exactly_once_run.NAMESPACE, "--wait=true", "--timeout=180s")


def test_a_node_drain_keeps_one_operator_replica_by_its_pod_disruption_budget(sandbox: Sandbox) -> None:
    """The chart's defaults (2 replicas, podDisruptionBudget on) render a PDB with minAvailable 1: a
    drain of the one node evicts one operator pod and is refused the other, which keeps running."""
    cluster = sandbox.cluster
    selector = "app.kubernetes.io/name=gateway-operator,app.kubernetes.io/instance=" + node.RELEASE

    def healthy_pdb() -> dict | None:
        pdb = cluster.get_json("pdb", "-n", node.SYSTEM_NAMESPACE, node.RELEASE)
        return pdb if pdb["status"].get("currentHealthy") == 2 else None

    # an earlier test may have killed the operator's leader (the checker's operator_kill): both up first
    pdb = until(healthy_pdb, timeout=180, what="both operator replicas healthy on the PDB")
    assert pdb["spec"]["minAvailable"] == 1, pdb

    def running() -> list[str]:
        pods = cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE, "-l", selector)["items"]
        return [p["metadata"]["name"] for p in pods
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    before = running()
    assert len(before) == 2, before
    node_name = cluster.get_json("nodes")["items"][0]["metadata"]["name"]
    try:
        drain = cluster.kubectl("drain", node_name, "--pod-selector", selector, "--ignore-daemonsets",
                                "--delete-emptydir-data", "--timeout=30s", check=False)
        output = drain.stdout + drain.stderr
        assert drain.returncode != 0, output  # the second eviction never gets through
        assert "would violate the pod's disruption budget" in output, output
        # the refused pod is named; the other's eviction was accepted (kubectl may still be waiting for
        # it to stop when its timeout ends, a leader takes a while: it is terminating or gone)
        refused = set(re.findall(r'error when evicting pods/"([^"]+)".*would violate', output))
        assert len(refused) == 1 and refused <= set(before), output
        [kept] = refused
        [evicted] = [name for name in before if name != kept]
        # the replacement cannot schedule on the cordoned node: the kept replica runs alone
        assert kept in running() and evicted not in running(), (kept, evicted, running())
    finally:
        cluster.kubectl("uncordon", node_name)
    until(lambda: len(running()) == 2 and healthy_pdb(), timeout=180, what="two Ready operator replicas again")


def test_make_demo_again_reuses_it_and_demo_down_leaves_nothing(sandbox: Sandbox) -> None:
    again = demo(timeout=600)
    assert again.returncode == 0, again.stdout[-6000:]
    assert "[cluster] already up" in again.stdout, again.stdout
    assert re.search(r"agent turns counted at the LLM stand-in: 1 for \d deliveries", again.stdout), again.stdout
    enforcing = kube_router_state()  # what down must remove: the enforcer, its chains and its policies' ipsets
    for kind in ("process", "iptables chain KUBE-ROUTER-FORWARD", "iptables chain KUBE-POD-FW-", "ipset KUBE-DST-"):
        assert any(thing.startswith(kind) for thing in enforcing), (kind, enforcing)
    down = demo("down", timeout=300)
    assert down.returncode == 0, down.stdout
    assert leftovers() == [], down.stdout
