#!/usr/bin/env python3
"""`make demo`: the gateway operator on a local cluster with a REAL node.

    hack/demo.py up      build the images, start (or reuse) the cluster, helm install the
                         operator, apply the examples, print their conditions; leaves it running
    hack/demo.py down    stop the cluster and its node, removing what they created

What runs (GWOP_CLUSTER_DIR, default <repo>/.cluster/sandbox; root, one node per host):

* REAL: the control plane (etcd, kube-apiserver, kube-controller-manager) and one node
  (containerd + runc, CNI bridge, kubelet, kube-scheduler, kube-proxy, CoreDNS), see
  hack/cluster.sh and hack/node.sh; the images of `make images` (operator, gateway
  praisonai-bot 0.1.16, Redis from Debian's redis-server, pause); the operator installed by
  `helm install` of charts/gateway-operator, running as a pod under the chart's ServiceAccount
  in a namespace that enforces the restricted Pod Security profile; the managed Redis and
  every gateway replica as pods.
* STOOD IN: only the LLM (tests/harness/llm_standin.py, offline, OpenAI-compatible) - itself a
  pod; the examples are applied with env entries that point the gateways at it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from harness import llm_pod, node, wait  # the harness: tests/harness (tests/pyproject.toml)
from harness.cluster import REPO, Cluster, tool
from harness.gateways import ready_pods

NAMESPACE = "gateway-demo"
EXAMPLES = [  # (file, what is expected at kubectl apply)
    ("examples/gateway-managed-redis.yaml", "accepted: 2 replicas on an operator-managed Redis"),
    ("examples/gateway-refused.yaml", "REFUSED: 3 replicas without a shared store (replicaPolicy Refuse)"),
    ("examples/gateway-warned.yaml", "accepted WITH A WARNING: replicaPolicy Warn, 2 replicas, no shared store"),
    ("examples/gateway-single.yaml", "accepted: one replica on a persistent SQLite store"),
]
SHOWCASE = "ops-bot"  # the GatewayDeployment that must reach ExactlyOnceAdmission=True
WARNING_TEXT = "exactly-once admission is NOT held"
SETTLE_TIMEOUT = 180.0


def say(text: str = "") -> None:
    print(text, flush=True)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


def cluster_dir() -> Path:
    return Path(os.environ.get("GWOP_CLUSTER_DIR") or REPO / ".cluster/sandbox").resolve()


class Timer:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.steps: list[tuple[str, float]] = []
        # hack/demo.sh installed packages, the venv and the binaries before this process ran
        started = os.environ.get("GWOP_DEMO_STARTED")
        if started:
            setup = max(0.0, time.time() - float(started))
            self.steps.append(("setup (apt, venv, binaries, images)", setup))
            self.start -= setup

    @contextlib.contextmanager
    def step(self, label: str, title: str) -> Iterator[None]:
        say(f"\n==> {title}")
        t = time.monotonic()
        yield
        took = time.monotonic() - t
        self.steps.append((label, took))
        say(f"    ({took:.1f}s)")

    def summary(self) -> str:
        width = max(len(t) for t, _ in self.steps)
        lines = [f"  {t:<{width}}  {s:6.1f}s" for t, s in self.steps]
        lines.append(f"  {'total':<{width}}  {time.monotonic() - self.start:6.1f}s")
        return "\n".join(lines)


def until(what: str, condition: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
    return wait.until(condition, timeout=timeout, interval=interval, what=what, tolerate=(AssertionError, OSError))


def run_shown(*cmd: str) -> None:
    """A hack/ script whose progress lines the user should see."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    say(indent(proc.stdout))
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode})")


def kubectl_shown(cluster: Cluster, *args: str, input: str | None = None, note: str = "") -> subprocess.CompletedProcess[str]:
    say(f"  $ kubectl {' '.join(args)}{note}")
    proc = cluster.kubectl(*args, input=input, check=False)
    text = (proc.stdout + proc.stderr).strip()
    if text:
        say(indent(text))
    return proc


# -- the examples ----------------------------------------------------------------------------

def with_llm(example: Path, llm_env: dict[str, str]) -> str:
    """The example as written, plus env entries pointing its gateways at the LLM stand-in."""
    body = yaml.safe_load(example.read_text())
    env = [e for e in body["spec"].get("env") or [] if e["name"] not in llm_env]
    body["spec"]["env"] = env + [{"name": k, "value": v} for k, v in llm_env.items()]
    return json.dumps(body)


def wait_for_admission_policy(cluster: Cluster, manifest: str) -> None:
    """A new ValidatingAdmissionPolicy takes a moment to be enforced: dry-run CREATE a renamed
    copy of the example until the warning comes back, so the real apply shows it."""
    body = json.loads(manifest)
    body["metadata"]["name"] = "admission-policy-probe"

    def warns() -> bool:
        p = cluster.kubectl("create", "-n", NAMESPACE, "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
        return WARNING_TEXT in p.stderr
    with contextlib.suppress(TimeoutError):
        until("the admission policy's warning", warns, 30, 0.3)


def apply_examples(cluster: Cluster, llm_env: dict[str, str]) -> None:
    kubectl_shown(cluster, "apply", "-n", NAMESPACE, "-f", str(REPO / "examples/bot-tokens.yaml"))
    for example, expected in EXAMPLES:
        manifest = with_llm(REPO / example, llm_env)
        if "warned" in example:
            wait_for_admission_policy(cluster, manifest)
        say(f"\n  # {example}: {expected}")
        proc = kubectl_shown(cluster, "apply", "-n", NAMESPACE, "-f", "-", input=manifest,
                             note=f"   # {example} + env OPENAI_BASE_URL/OPENAI_API_KEY of the LLM stand-in")
        if "warned" in example and proc.returncode == 0 and "Warning:" not in proc.stderr:
            # unchanged since an earlier `make demo`: apply sent nothing, so nothing was admitted
            say("  # unchanged, so apply sent no request; a server-side dry-run update goes through admission:")
            kubectl_shown(cluster, "replace", "-n", NAMESPACE, "--dry-run=server", "-f", "-", input=manifest)


# -- what the user sees --------------------------------------------------------------------

def gateway_deployments(cluster: Cluster) -> list[dict[str, Any]]:
    return sorted(cluster.get_json("gatewaydeployments", "-n", NAMESPACE)["items"], key=lambda g: g["metadata"]["name"])


def condition(gd: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (gd.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def all_answered(gd: dict[str, Any]) -> bool:
    """IdempotencyDegraded says "(N of M polled replicas answered)": every replica answered."""
    message = condition(gd, "IdempotencyDegraded").get("message", "")
    found = re.search(r"\((\d+) of (\d+) polled replicas answered\)", message)
    return not found or found.group(1) == found.group(2)


def every_replica_ready(cluster: Cluster) -> bool:
    gds = gateway_deployments(cluster)
    return bool(gds) and all(len(ready_pods(cluster, NAMESPACE, g["metadata"]["name"])) == int(g["spec"].get("replicas", 1))
                             for g in gds)


def warm_up(cluster: Cluster) -> None:
    """0.1.16 builds a replica's idempotency store on its first webhook: one per replica."""
    for gd in gateway_deployments(cluster):
        name = gd["metadata"]["name"]
        token = node.gateway_token(cluster, NAMESPACE, name)
        for pod in ready_pods(cluster, NAMESPACE, name):
            answer = node.webhook(pod["status"]["podIP"], token, f"warm-up-{uuid.uuid4().hex[:8]}", "warm-up")
            say(f"    {name} {pod['metadata']['name']} ({pod['status']['podIP']}): HTTP {answer.status} "
                f"action={answer.body.get('action')}")


def fan_out(cluster: Cluster) -> None:
    """The duplicate a webhook provider's retry makes: the same delivery to every replica."""
    ips = [pod["status"]["podIP"] for pod in ready_pods(cluster, NAMESPACE, SHOWCASE)]
    delivery = f"deploy-{uuid.uuid4().hex[:8]}"
    sent = node.deliver(cluster, NAMESPACE, SHOWCASE, ips, delivery)
    for ip, answer in zip(ips, sent.answers):
        say(f"    POST http://{ip}:{node.GATEWAY_PORT}/hooks/{node.HOOK} id={delivery} "
            f"-> HTTP {answer.status} action={answer.body.get('action')}")
    say(f"    agent turns counted at the LLM stand-in: {sent.turns} for {len(ips)} deliveries "
        f"({'admitted exactly once' if sent.turns == 1 else 'NOT exactly once'})")


def condition_table(gd: dict[str, Any]) -> str:
    rows = [("TYPE", "STATUS", "REASON", "MESSAGE")]
    rows += [(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
             for c in (gd.get("status") or {}).get("conditions") or []]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"    {a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}" for a, b, c, d in rows)


def show_status(cluster: Cluster) -> None:
    say()
    kubectl_shown(cluster, "get", "gatewaydeployments", "-n", NAMESPACE, "-o", "wide")
    say()
    kubectl_shown(cluster, "get", "ingresses,httproutes", "-n", NAMESPACE)
    for gd in gateway_deployments(cluster):
        spec = gd["spec"]
        store = "Redis (operator-managed)" if ((spec.get("redis") or {}).get("managed") or {}).get("enabled") \
            else ("Redis" if spec.get("redis") else "per-replica SQLite")
        say(f"\n  {gd['metadata']['name']}: {spec.get('replicas', 1)} replica(s), store {store}, "
            f"replicaPolicy {spec.get('replicaPolicy', 'Refuse')}")
        say(condition_table(gd))
    say()
    kubectl_shown(cluster, "get", "pods", "-A", "-o", "wide")


def show_usage(cluster: Cluster) -> None:
    bin_dir = Path(tool("kubectl")).parent
    selector = f"app.kubernetes.io/instance={SHOWCASE},app.kubernetes.io/component=gateway"
    say(f"""
  kubeconfig: {cluster.kubeconfig}
  binaries:   kubectl {bin_dir / 'kubectl'}
              helm    {bin_dir / 'helm'}

  export KUBECONFIG={cluster.kubeconfig}
  export PATH={bin_dir}:$PATH

  Try:
    kubectl get gatewaydeployments -n {NAMESPACE} -o wide   # ADDRESS: where spec.expose is served
    curl -H 'Host: canary-bot.gateway.test' http://{node.EDGE}/health   # through the edge (Traefik)
    kubectl describe gatewaydeployment {SHOWCASE} -n {NAMESPACE}
    kubectl logs -n {node.SYSTEM_NAMESPACE} deploy/{node.RELEASE}
    kubectl delete pod -n {NAMESPACE} -l app.kubernetes.io/instance={SHOWCASE},app.kubernetes.io/component=redis
    kubectl get gatewaydeployment {SHOWCASE} -n {NAMESPACE} -w   # RedisReachable, then Ready again
    kubectl delete pod -n {NAMESPACE} -l {selector}
    helm test {node.RELEASE} -n {node.SYSTEM_NAMESPACE}
  Stop everything: {down_command()}""")


def down_command() -> str:
    return "make demo-down" if cluster_dir() == (REPO / ".cluster/sandbox").resolve() \
        else f"GWOP_CLUSTER_DIR={cluster_dir()} make demo-down"


# -- up / down -----------------------------------------------------------------------------

def up() -> int:
    if os.geteuid() != 0:
        say("make demo runs a real node (containerd, a bridge, iptables, cgroups): it needs root")
        return 1
    timer = Timer()
    say(f"gateway-operator sandbox in {cluster_dir()} (a real node: pods 198.18.0.0/16, Services 198.19.0.0/16)")
    with timer.step("images", "images (hack/images.sh: mmdebstrap + buildah; reused while their inputs are unchanged)"):
        run_shown(str(REPO / "hack/images.sh"))
    with timer.step("cluster up", "cluster (hack/cluster.sh up, GWOP_NODE=1): control plane + a real node"):
        cluster = node.cluster_up(cluster_dir())
        say(f"    node: {cluster.kubectl('get', 'nodes', '-o', 'wide').stdout.splitlines()[-1]}")
    with timer.step("helm install", "operator: helm upgrade --install charts/gateway-operator (the local images)"):
        say(indent(node.install_operator(cluster).stdout.split("NOTES:")[0].strip()))
    with timer.step("LLM stand-in", f"the LLM STAND-IN (offline, OpenAI-compatible) as a pod in {NAMESPACE}"):
        # the gateways, their managed Redis and the stand-in must pass the restricted profile too
        cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
        llm_env = llm_pod.deploy(cluster, NAMESPACE, node.images().gateway)
        say(f"    {llm_env['OPENAI_BASE_URL']}")
    with timer.step("examples applied", f"examples, applied with kubectl in namespace {NAMESPACE}"):
        apply_examples(cluster, llm_env)
    healthy = True
    with timer.step("examples Ready", f"every replica Ready, warmed up, {SHOWCASE} ExactlyOnceAdmission=True, "
                    "every replica's /health polled"):
        try:
            until("every gateway replica Ready", lambda: every_replica_ready(cluster), SETTLE_TIMEOUT)
            warm_up(cluster)
            until(f"{SHOWCASE} ExactlyOnceAdmission=True", lambda: condition(
                next(g for g in gateway_deployments(cluster) if g["metadata"]["name"] == SHOWCASE),
                "ExactlyOnceAdmission").get("status") == "True", 90)
            until("every GatewayDeployment Ready, every replica polled", lambda: all(
                condition(g, "Ready").get("status") == "True" and all_answered(g)
                for g in gateway_deployments(cluster)), 60)
        except TimeoutError as e:
            healthy = False
            say(f"    WARNING: {e}; see kubectl logs -n {node.SYSTEM_NAMESPACE} deploy/{node.RELEASE}")
    if healthy:
        with timer.step("webhook fan-out", f"one webhook delivered to every {SHOWCASE} replica"):
            fan_out(cluster)
    show_status(cluster)
    show_usage(cluster)
    say("\nTimings:\n" + timer.summary())
    return 0 if healthy else 1


def down() -> int:
    t = time.monotonic()
    env = dict(os.environ, GWOP_CLUSTER_DIR=str(cluster_dir()))
    subprocess.run([str(REPO / "hack/cluster.sh"), "down"], env=env, check=False, stderr=sys.stdout)
    say(f"demo down ({cluster_dir()}) in {time.monotonic() - t:.1f}s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["up", "down"], default="up")
    return down() if parser.parse_args().command == "down" else up()


if __name__ == "__main__":
    sys.exit(main())
