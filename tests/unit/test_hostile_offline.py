"""Hostile input without a cluster (issue 7): the probe's allowlist against a real
redis-server, the operator's own limits, and the offline CLI's refusals."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator.api import reasons, validation
from gateway_operator.api import replica_state
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_guard import Allowlist
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core.probe_result import ProbeResult
from harness.cluster import REPO
from harness.operator import gateway_deployment, redis_store
from harness.redis_server import RedisServer


def connections(server: RedisServer) -> int:
    return int(server.client().info("stats")["total_connections_received"])


def probe(prober: Prober, target: RedisTarget, password: str) -> ProbeResult:
    return asyncio.run(prober.probe("tenant", target, password, 2))


def test_the_allowlist_is_enforced_before_any_connection(redis_server: RedisServer) -> None:
    target = RedisTarget("127.0.0.1", redis_server.port, 0, False, "gwop:t:g:", None)
    before = connections(redis_server)
    refused = probe(Prober(Allowlist.parse(["10.0.0.0/8", "redis.prod.svc", ".cache.internal"])), target,
                    redis_server.password)
    assert (refused.ok, refused.reason) == (False, reasons.TARGET_NOT_ALLOWED)
    assert connections(redis_server) == before + 1  # only this test's own INFO: the probe never connected
    allowed = probe(Prober(Allowlist.parse(["127.0.0.0/8"])), target, redis_server.password)
    assert allowed.ok
    named = RedisTarget("localhost", redis_server.port, 0, False, "gwop:t:g:", None)
    assert probe(Prober(Allowlist.parse([".localhost", "localhost"])), named, redis_server.password).ok


def test_allowlist_matching() -> None:
    allow = Allowlist.parse(["10.1.0.0/16", "fd00::/8", "redis.prod.svc", ".svc.cluster.local"])
    assert allow.permits_addresses(["10.1.2.3"]) and allow.permits_addresses(["fd00::1"])
    assert not allow.permits_addresses(["10.1.2.3", "10.2.0.1"])  # every address must be inside
    assert not allow.permits_addresses([])
    assert allow.permits_name("redis.prod.svc") and allow.permits_name("r.ns.svc.cluster.local")
    assert not allow.permits_name("evil-redis.prod.svc") and not allow.permits_name("svc.cluster.local.evil")
    assert Allowlist.parse([]).open


def test_nesting_is_measured_without_recursion() -> None:
    node: dict = {}
    for _ in range(100_000):  # far deeper than any recursion limit
        node = {"x": node}
    measure = validation.nesting_depth(node)
    assert measure.too_deep and measure.depth == validation.MAX_CONFIG_DEPTH + 1
    assert validation.nesting_depth({"a": [{"b": 1}]}) == validation.Measure(3, False)
    assert validation.limit_violations({"config": {"pad": "x" * (validation.MAX_CONFIG_BYTES + 1)}})


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway_operator.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_render_refuses_what_check_refuses_with_the_same_messages(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**gateway_deployment("a", replicas=3, config={
        **redis_store(), "hooks_idempotency": {"store_backend": "sqlite"}}, redis={"url": "redis://r:99999"}),
        "metadata": {"name": "Bad.Name"}}))
    checked, rendered = cli("check", "-f", str(bad)), cli("render", "-f", str(bad))
    assert checked.returncode == rendered.returncode == 1 and rendered.stdout == ""
    assert checked.stderr == rendered.stderr
    for message in (validation.MSG_NAME, validation.MSG_REDIS_URL_SCHEME, validation.MSG_IDEMPOTENCY_FORMS):
        assert message in rendered.stderr


def test_repeated_files_are_all_checked(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(gateway_deployment("good")))
    bad.write_text(yaml.safe_dump(gateway_deployment("bad", replicas=3)))
    result = cli("check", "-f", str(bad), "-f", str(good))
    assert result.returncode == 1 and "'good': valid" in result.stdout and validation.MSG_REPLICAS_NEED_REDIS \
        in result.stderr


@pytest.mark.parametrize("content, expected", [
    (None, "No such file"),
    ("dir", "no GatewayDeployment found"),
    ("key: [unclosed", "not valid YAML"),
    ("[" * 5000 + "]" * 5000, "nests too deeply"),
    ("kind: ConfigMap\n", "no GatewayDeployment found"),
])
@pytest.mark.parametrize("command", ["check", "render"])
def test_bad_files_get_one_line_and_no_traceback(tmp_path: Path, command: str, content: str | None,
                                                 expected: str) -> None:
    path = tmp_path / "input.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    result = cli(command, "-f", str(path))
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_deep_config_is_refused_offline_too(tmp_path: Path) -> None:
    doc = gateway_deployment("deep")
    node: dict = {}
    for _ in range(200):
        node = {"x": node}
    doc["spec"]["config"]["extra"] = node
    path = tmp_path / "deep.json"
    path.write_text(__import__("json").dumps(doc))
    for command in ("check", "render"):
        result = cli(command, "-f", str(path))
        assert result.returncode == 1 and "deeper than 32 levels" in result.stderr and "Traceback" not in result.stderr


def test_every_reason_is_documented_and_in_the_crd() -> None:
    """Reasons are named once (reasons.py); docs/concepts.md and `kubectl explain` list them all."""
    from gateway_operator.api.crd import crd
    from gateway_operator.core.health import Idempotency
    readme = (REPO / "docs/concepts.md").read_text()
    described = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "conditions"]["items"]["properties"]["reason"]["description"]
    assert {s.value for s in Idempotency} - {"Healthy", "Unreachable"} <= set(reasons.ALL)
    for reason in reasons.ALL:
        assert f"`{reason}`" in readme, reason
        assert reason in described, reason


def test_check_takes_directories_and_prints_the_warn_warning(tmp_path: Path) -> None:
    (tmp_path / "warned.yaml").write_text(yaml.safe_dump(gateway_deployment("canary", replicas=2,
                                                                            replicaPolicy="Warn")))
    (tmp_path / "notes.txt").write_text("not a manifest")
    result = cli("check", "-f", str(tmp_path))
    assert result.returncode == 0 and "'canary': valid" in result.stdout
    assert f"Warning: {validation.warn_message(2)}" in result.stderr


def test_the_chart_warns_in_the_same_words() -> None:
    template = (REPO / "charts/gateway-operator/templates/admission-policy.yaml")
    text = " ".join(template.read_text().split())
    head, tail = validation.warn_message(7).split(" 7 ", 1)
    assert f"'{head} ' + string(object.spec.replicas) + ' {tail}'" in text


def test_render_writes_gateway_yaml_as_a_block(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_deployment("gw")))
    out = cli("render", "-f", str(path)).stdout
    assert "gateway.yaml: |" in out and "\n    agents:\n" in out
    config_map = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ConfigMap")
    assert yaml.safe_load(config_map["data"]["gateway.yaml"])["gateway"]["port"] == 8765


def test_check_warns_of_a_polling_channel_that_every_replica_would_run(tmp_path: Path) -> None:
    """praisonai-bot runs its Telegram poller (and Discord's, Slack's socket, ...) on every replica: a
    token the pods will have is warned about with more than one replica; the examples' placeholder
    (``${TELEGRAM_BOT_TOKEN}`` that no env sets: the gateway skips the channel) and one replica are not."""
    def manifest(name: str, replicas: int, env: list[str], channels: dict) -> dict:
        doc = gateway_deployment(name, replicas=replicas, config=redis_store(), redis={"url": "redis://r:6379/0"})
        doc["spec"]["config"]["channels"] = channels
        if env:
            doc["spec"]["env"] = [{"name": n, "valueFrom": {"secretKeyRef": {"name": "bot", "key": n}}} for n in env]
        return doc

    telegram = {"telegram": {"token": "${TELEGRAM_BOT_TOKEN}"}}
    cases = {"placeholder": manifest("placeholder", 3, [], telegram),
             "one": manifest("one", 1, ["TELEGRAM_BOT_TOKEN"], telegram),
             "polling": manifest("polling", 3, ["TELEGRAM_BOT_TOKEN"], telegram),
             "webhook-mode": manifest("webhook-mode", 3, [], {"wa": {"platform": "whatsapp", "mode": "cloud",
                                                                     "token": "${WA}"}})}
    warned = {}
    for name, doc in cases.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        result = cli("check", "-f", str(tmp_path / f"{name}.yaml"))
        assert result.returncode == 0, result.stderr
        warned[name] = [line for line in result.stderr.splitlines() if "channel bots" in line]
    assert {name for name, lines in warned.items() if lines} == {"polling"}, warned
    assert warned["polling"] == [
        "Warning: " + replica_state.channel_warning(3, [("telegram", replica_state.RECEIVING_CHANNELS["telegram"].how)])]


def test_check_refuses_what_the_charts_tenancy_policy_refuses_and_reads_the_clusters_values(tmp_path: Path) -> None:
    """``check`` knew no tenancy rule, so it passed a wildcard host or a Traefik priority annotation that
    ``kubectl apply`` then refused. It applies the chart's default policy, and the cluster's own values
    files when given (``--values``, later files winning as with helm -f), with the policy's messages."""
    from gateway_operator import offline
    from gateway_operator.api import tenancy
    chart_values = yaml.safe_load((REPO / "charts/gateway-operator/values.yaml").read_text())
    assert tenancy.TenancyPolicy.parse(chart_values["tenancy"]) == tenancy.TenancyPolicy()  # the default is the chart's

    def manifest(name: str, namespace: str | None, **fields: Any) -> Path:
        doc = gateway_deployment(name, **fields)
        if namespace:
            doc["metadata"]["namespace"] = namespace
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    wildcard = manifest("wild", "team-a", expose={"ingress": {"host": "*.a.bots.example.com"}})
    priority = manifest("prio", "team-a", expose={"ingress": {"host": "bot.a.bots.example.com", "annotations": {
        "traefik.ingress.kubernetes.io/router.priority": "1000000"}}})
    other_ns = manifest("elsewhere", None, expose={"ingress": {"host": "bot.a.bots.example.com"}})
    (tmp_path / "admin.yaml").write_text(yaml.safe_dump({"replicaCount": 2, "tenancy": {
        "allowedHosts": {"team-a": ["*.a.bots.example.com"]}, "allowWildcardHosts": True}}))
    (tmp_path / "override.yaml").write_text(yaml.safe_dump({"tenancy": {
        "ingressAnnotations": ["traefik.ingress.kubernetes.io/router.priority"]}}))

    def refusal(path: Path, *extra: str) -> list[str]:
        result = cli("check", "-f", str(path), *extra)
        assert result.returncode == (1 if "* " in result.stderr else 0), result.stderr
        return [line for line in result.stderr.splitlines() if line.startswith("* ")]

    denied = "* " + offline.TENANCY_DENIED
    assert refusal(wildcard) == [denied + tenancy.MSG_WILDCARD_HOST]
    assert refusal(priority) == [denied + tenancy.MSG_INGRESS_ANNOTATIONS]
    assert refusal(other_ns) == []  # no host policy by default
    admin = ("--values", str(tmp_path / "admin.yaml"))
    assert refusal(wildcard, *admin) == []
    assert refusal(other_ns, *admin) == [denied + tenancy.MSG_HOST_NOT_ALLOWED]  # namespace default
    assert refusal(other_ns, *admin, "--namespace", "team-a") == []
    assert refusal(priority, *admin) == [denied + tenancy.MSG_INGRESS_ANNOTATIONS]
    assert refusal(priority, *admin, "--values", str(tmp_path / "override.yaml")) == []
    rendered = cli("render", "-f", str(wildcard))  # render acts as the operator would: nothing
    assert rendered.returncode == 1 and rendered.stdout == "" and tenancy.MSG_WILDCARD_HOST in rendered.stderr
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({"tenancy": {"allowedHosts": ["not", "a", "map"]}}))
    broken = cli("check", "-f", str(wildcard), "--values", str(tmp_path / "broken.yaml"))
    assert broken.returncode != 0 and "tenancy" in broken.stderr and "Traceback" not in broken.stderr
