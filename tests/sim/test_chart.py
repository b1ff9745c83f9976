"""The Helm chart, with the real ``helm`` against the real local control plane.

The chart's ServiceMonitor and PrometheusRule are checked against prometheus-operator's own
CRDs (from its Go module, hack/build-binaries.sh --monitoring) installed on the control plane.
Simulated: these installs run on the session's control plane, whose node is SIMULATED (kwok:
it only reports the operator's pod Running); test_node.py installs the chart on the real node,
where the operator runs from its image and `helm test` runs its pod.
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from gateway_operator.api.tenancy import TenancyPolicy
from harness.cluster import REPO, Cluster, tool
from harness.gateways import apply_gateway, replica_warning, wait_condition, wait_ready_pods
from harness.monitoring import install_prometheus_operator_crds
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.wait import until

CHART = str(REPO / "charts/gateway-operator")
CHART_README = REPO / "charts/gateway-operator/README.md"
REPOSITORY = "ghcr.io/gateway-operator/gateway-operator"
DIGEST = "sha256:" + "0123456789abcdef" * 4
# every knob of issue 11 at once (values of the kind a user sets)
KNOBS: dict[str, Any] = {
    "image": {"digest": DIGEST, "tag": "9.9.9"},
    "priorityClassName": "gwop-chart-test",
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"team": "a"}}, "matchLabelKeys": ["pod-template-hash"]}],
    "podLabels": {"azure.workload.identity/use": "true", "team": "a"},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gwop",
                                       "azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000000"}},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"},
                 {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                 {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}}],
    "extraArgs": ["--redis-allow=10.0.0.0/8"],
    "logLevel": "debug",
}
ALL_FEATURES = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
                "--set", "metrics.grafanaDashboard.enabled=true", "--set", "networkPolicy.enabled=true",
                "--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
                "--set", "networkPolicy.apiServer.cidrs={198.18.0.1/32}"]


def helm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return cluster.helm(*args, check=check)


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(json.dumps(values))  # JSON is YAML
    return str(path)


def template(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([tool("helm"), "template", *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return proc


@dataclass
class Rendered:
    docs: list[dict[str, Any]]

    def one(self, kind: str) -> dict[str, Any]:
        [doc] = [d for d in self.docs if d["kind"] == kind]
        return doc

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def container(self) -> dict[str, Any]:
        return self.pod["containers"][0]


def render(*args: str, chart: str = CHART) -> Rendered:
    return Rendered([d for d in yaml.safe_load_all(template("r", chart, "-n", "ops", *args).stdout) if d])


def readme_example_values() -> str:
    """The production values file shown in the chart README (the first ```yaml block)."""
    return re.search(r"```yaml\n(.*?)```", CHART_README.read_text(), re.S).group(1)


@pytest.fixture
def release(cluster: Cluster) -> Iterator[tuple[str, str]]:
    name = f"chart-{uuid.uuid4().hex[:6]}"
    namespace = cluster.new_namespace()
    yield name, namespace
    helm(cluster, "uninstall", name, "-n", namespace, "--wait", check=False)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_helm_lint_strict() -> None:
    result = subprocess.run([tool("helm"), "lint", "--strict", CHART], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_readme_values_table_is_generated_and_fresh() -> None:
    """charts/gateway-operator/README.md's values table is hack/chart-readme.py's output
    (values.schema.json + values.yaml): a value added without `make chart-readme` fails here,
    and so does a value without a description or a default."""
    result = subprocess.run([sys.executable, str(REPO / "hack/chart-readme.py"), "--check"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    readme = CHART_README.read_text()
    schema = json.loads((REPO / CHART / "values.schema.json").read_text())
    for key in ("image.digest", "priorityClassName", "topologySpreadConstraints", "podLabels",
                "serviceAccount.annotations", "extraEnv", "extraArgs", "logLevel", "metrics.port"):
        assert f"| `{key}` |" in readme, key
    assert set(schema["properties"]) == set(yaml.safe_load((REPO / CHART / "values.yaml").read_text()))
    version = yaml.safe_load((REPO / CHART / "Chart.yaml").read_text())["version"]
    # the verify and install lines name this version
    assert f"--version {version}" in readme and f"charts/gateway-operator:{version}" in readme


def test_helm_package_archive_is_the_chart_a_user_pulls(tmp_path: Path) -> None:
    """`helm package` output, as pushed to an OCI registry (`helm push <tgz> oci://...`): it
    carries the CRD, the schema, the dashboard and the README, and renders exactly like the
    source directory."""
    out = subprocess.run([tool("helm"), "package", CHART, "-d", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    meta = yaml.safe_load((REPO / CHART / "Chart.yaml").read_text())
    archive = tmp_path / f"{meta['name']}-{meta['version']}.tgz"
    assert str(archive) in out and archive.exists()
    with tarfile.open(archive) as tar:
        members = {m.name for m in tar.getmembers() if m.isfile()}
    for name in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", "crds/gatewaydeployments.yaml",
                 "dashboards/gateway-operator.json", "templates/NOTES.txt", "templates/deployment.yaml"):
        assert f"gateway-operator/{name}" in members, name
    assert not [m for m in members if re.search(r"(~|\.orig|\.rej|\.swp)$|/\.git/", m)]

    def show(what: str) -> str:
        return subprocess.run([tool("helm"), "show", what, str(archive)], capture_output=True, text=True,
                              check=True).stdout
    assert yaml.safe_load(show("values")) == yaml.safe_load((REPO / CHART / "values.yaml").read_text())
    assert show("readme").strip() == CHART_README.read_text().strip()
    assert (yaml.safe_load(show("chart"))["name"], yaml.safe_load(show("chart"))["version"]) == (meta["name"], meta["version"])
    assert yaml.safe_load(show("crds"))["metadata"]["name"] == "gatewaydeployments.gateway-operator.dev"

    lint = subprocess.run([tool("helm"), "lint", "--strict", str(archive)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    knobs = values_file(tmp_path, KNOBS)
    for args in ([], ["-f", knobs], ["--set", "watchNamespaces={a,b}", *ALL_FEATURES]):
        assert template("r", str(archive), *args).stdout == template("r", CHART, *args).stdout
    refused = template("r", str(archive), "--set", "priorityClassName=3", check=False)  # the schema travels too
    assert refused.returncode != 0 and "/priorityClassName" in refused.stderr


@pytest.mark.parametrize("values, message", [
    (["--set", "logFormat=xml"], "logFormat"),
    (["--set", "watchNamespaces[0]=Not_A_Namespace"], "does not match pattern"),
    (["--set", "metrics.port=70000"], "metrics/port"),
    (["--set", "replicaCount=9"], "at '/replicaCount': maximum: got 9, want 5"),
    # the knobs of issue 11: typed, and a typo'd key is still refused
    (["--set", "priorityClassName=3"], "at '/priorityClassName': got number, want string"),
    (["--set", "priorityClassName=Not_A_Name"], "at '/priorityClassName': 'Not_A_Name' does not match pattern"),
    (["--set", "priorityClasName=high"], "additional properties 'priorityClasName' not allowed"),
    (["--set", "image.digest=latest"], "at '/image/digest': 'latest' does not match pattern"),
    (["--set", "image.digets=" + DIGEST], "additional properties 'digets' not allowed"),
    (["--set", "topologySpreadConstraints[0].maxSkew=1,topologySpreadConstraints[0].topologyKey=zone,"
               "topologySpreadConstraints[0].whenUnsatisfiable=Never"],
     "at '/topologySpreadConstraints/0/whenUnsatisfiable': value must be one of 'DoNotSchedule', 'ScheduleAnyway'"),
    (["--set", "topologySpreadConstraints[0].maxSkew=1,topologySpreadConstraints[0].topologykey=zone,"
               "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"],
     "additional properties 'topologykey' not allowed"),
    (["--set", "topologySpreadConstraints[0].maxSkew=0,topologySpreadConstraints[0].topologyKey=zone,"
               "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"],
     "at '/topologySpreadConstraints/0/maxSkew': minimum"),
    (["--set", "podLabels.team=3"], "at '/podLabels/team': got number, want string"),
    (["--set", "podLabels.app\\.kubernetes\\.io/instance=other"], "invalid propertyName 'app.kubernetes.io/instance'"),
    (["--set", "serviceAccount.annotations.role=3"], "at '/serviceAccount/annotations/role': got number, want string"),
    (["--set", "serviceAccount.anotations.role=x"], "additional properties 'anotations' not allowed"),
    (["--set", "extraEnv[0].nmae=HTTPS_PROXY"], "additional properties 'nmae' not allowed"),
    (["--set", "extraEnv[0].name=A,extraEnv[0].value=3"], "at '/extraEnv/0/value': got number, want string"),
    (["--set", "extraEnv[0].name=POD_NAMESPACE,extraEnv[0].value=x"], "at '/extraEnv/0/name'"),
    (["--set", "extraEnv[0].name=A,extraEnv[0].valueFrom.secretKeyRef.name=s"], "missing property 'key'"),
    (["--set", "extraArgs[0]=3"], "at '/extraArgs/0': got number, want string"),
    (["--set", "extraArgs=--verbose"], "at '/extraArgs': got string, want array"),
    (["--set", "logLevel=verbose"], "at '/logLevel': value must be one of 'debug', 'info', 'warning', 'error'"),
    # the operator's PodDisruptionBudget and NetworkPolicy (issue 34)
    (["--set", "podDisruptionBudget.minAvailable=0"], "at '/podDisruptionBudget/minAvailable'"),
    (["--set", "podDisruptionBudget.minAvailable=half"], "at '/podDisruptionBudget/minAvailable'"),
    (["--set", "podDisruptionBudget.minAvaliable=1"], "additional properties 'minAvaliable' not allowed"),
    (["--set", "networkPolicy.enabled=yes"], "at '/networkPolicy/enabled': got string, want boolean"),
    (["--set", "networkPolicy.apiServer.cidrs={10.0.0.1}"], "at '/networkPolicy/apiServer/cidrs/0'"),
    (["--set", "networkPolicy.redisPorts={70000}"], "at '/networkPolicy/redisPorts/0': maximum"),
    (["--set", "networkPolicy.metricsFrom[0].namespaceSelectr.matchLabels.a=b"],
     "additional properties 'namespaceSelectr' not allowed"),
])
def test_values_schema_rejects_bad_values(values: list[str], message: str) -> None:
    result = subprocess.run([tool("helm"), "template", "x", CHART, *values], capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_the_commands_of_the_issue_now_pass_the_schema() -> None:
    """`--set priorityClassName=...` and `--set image.digest=...` failed with `additional
    properties not allowed` (issue 11)."""
    rendered = render("--set", "priorityClassName=high", "--set", f"image.digest={DIGEST}")
    assert rendered.pod["priorityClassName"] == "high"
    assert rendered.container["image"] == f"{REPOSITORY}@{DIGEST}"


def test_defaults_render_no_new_field_and_keep_the_restricted_profile() -> None:
    r = render()
    assert r.container["image"] == f"{REPOSITORY}:0.1.0"  # the chart's appVersion
    for absent in ("priorityClassName", "topologySpreadConstraints"):
        assert absent not in r.pod
    assert r.deployment["spec"]["template"]["metadata"]["labels"] == r.deployment["spec"]["selector"]["matchLabels"]
    assert "annotations" not in r.one("ServiceAccount")["metadata"]
    assert [e["name"] for e in r.container["env"]] == ["POD_NAMESPACE", "POD_NAME"]
    assert "--operator-instance=r" in r.container["args"] and "--log-level=info" in r.container["args"]
    tenancy = [a for a in r.container["args"] if a.startswith("--tenancy-policy=")]
    assert len(tenancy) == 1 and TenancyPolicy.from_json(tenancy[0].split("=", 1)[1]) == TenancyPolicy()  # defaults
    args = [a for a in r.container["args"] if a not in tenancy]
    assert args[-4:] == ["--leader-election", "--lease-duration=15", "--renew-deadline=10", "--retry-period=2"]
    assert r.deployment["spec"]["replicas"] == 2  # a leader and a standby
    assert r.pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                        "seccompProfile": {"type": "RuntimeDefault"}}
    assert r.container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}}


SELECTOR = {"app.kubernetes.io/name": "gateway-operator", "app.kubernetes.io/instance": "r"}
Check = Callable[[Rendered, dict[str, Any]], None]
KNOB_CHECKS: dict[str, tuple[dict[str, Any], Check]] = {}


def knob(name: str, values: dict[str, Any]) -> Callable[[Check], Check]:
    """A knob's check of the rendered chart, given the values it was rendered with."""
    def register(check: Check) -> Check:
        KNOB_CHECKS[name] = (values, check)
        return check
    return register


@knob("image.digest", {"image": {"digest": DIGEST, "tag": "9.9.9"}})
def _digest(r: Rendered, v: dict[str, Any]) -> None:
    image = v["image"]
    assert r.container["image"] == f"{image.get('repository', REPOSITORY)}@{image['digest']}"  # the tag is ignored


@knob("priorityClassName", {"priorityClassName": "platform-critical"})
def _priority(r: Rendered, v: dict[str, Any]) -> None:
    assert r.pod["priorityClassName"] == v["priorityClassName"]


@knob("topologySpreadConstraints", {"topologySpreadConstraints": KNOBS["topologySpreadConstraints"]})
def _spread(r: Rendered, v: dict[str, Any]) -> None:
    zone, host = r.pod["topologySpreadConstraints"]
    assert zone == {**v["topologySpreadConstraints"][0], "labelSelector": {"matchLabels": SELECTOR}}
    assert host == v["topologySpreadConstraints"][1]  # an explicit labelSelector is kept


@knob("podLabels", {"podLabels": KNOBS["podLabels"]})
def _pod_labels(r: Rendered, v: dict[str, Any]) -> None:
    assert r.deployment["spec"]["template"]["metadata"]["labels"] == {**SELECTOR, **v["podLabels"]}
    assert r.deployment["spec"]["selector"]["matchLabels"] == SELECTOR  # the selector never changes
    assert not set(v["podLabels"]) & set(r.deployment["metadata"]["labels"])


@knob("serviceAccount.annotations", {"serviceAccount": KNOBS["serviceAccount"]})
def _sa_annotations(r: Rendered, v: dict[str, Any]) -> None:
    assert r.one("ServiceAccount")["metadata"]["annotations"] == v["serviceAccount"]["annotations"]


@knob("extraEnv", {"extraEnv": KNOBS["extraEnv"]})
def _extra_env(r: Rendered, v: dict[str, Any]) -> None:
    assert r.container["env"][0]["name"] == "POD_NAMESPACE"
    assert r.container["env"][2:] == v["extraEnv"]


@knob("extraArgs", {"extraArgs": ["--redis-allow=10.0.0.0/8", "--namespace", "team-a"]})
def _extra_args(r: Rendered, v: dict[str, Any]) -> None:
    args = r.container["args"]
    assert args[0] == "run" and args[-len(v["extraArgs"]):] == v["extraArgs"]  # appended, in order


@knob("logLevel", {"logLevel": "warning"})
def _log_level(r: Rendered, v: dict[str, Any]) -> None:
    assert [a for a in r.container["args"] if a.startswith("--log-level")] == [f"--log-level={v['logLevel']}"]


@knob("readinessProbe", {"livenessPort": 9441})
def _readiness(r: Rendered, v: dict[str, Any]) -> None:
    port = v.get("livenessPort", 8081)
    # kopf serves only /healthz, on the liveness port
    assert r.container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert r.container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert {"name": "liveness", "containerPort": port, "protocol": "TCP"} in r.container["ports"]
    assert f"--liveness-port={port}" in r.container["args"]


@pytest.mark.parametrize("name", list(KNOB_CHECKS))
def test_each_new_knob_renders_its_field(name: str, tmp_path: Path) -> None:
    values, check = KNOB_CHECKS[name]
    check(render("-f", values_file(tmp_path, values)), values)


def test_every_knob_at_once_and_the_readme_example_render(tmp_path: Path) -> None:
    r = render("-f", values_file(tmp_path, KNOBS))
    for _, check in KNOB_CHECKS.values():
        check(r, KNOBS)
    example = yaml.safe_load(readme_example_values())
    r = render("-f", values_file(tmp_path, example))
    for name in ("image.digest", "priorityClassName", "podLabels", "serviceAccount.annotations", "extraEnv"):
        KNOB_CHECKS[name][1](r, example)


def test_rendered_operator_args_are_what_the_operator_cli_accepts(tmp_path: Path) -> None:
    """The chart's command line (every knob, namespaced, Redis allow-list) parses with the
    operator's own argument parser, and every log level the schema allows is one the CLI takes."""
    from gateway_operator.cli import parser
    values = {**KNOBS, "watchNamespaces": ["team-a", "team-b"], "redisProbe": {"allow": [".svc.cluster.local"]}}
    args = render("-f", values_file(tmp_path, values)).container["args"]
    try:
        parsed = parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"gateway-operator refuses the chart's arguments: {args}")
    assert (parsed.log_level, parsed.log_format, parsed.namespace) == ("debug", "json", ["team-a", "team-b"])
    assert parsed.redis_allow == [".svc.cluster.local", "10.0.0.0/8"]  # extraArgs come last
    schema = json.loads((REPO / CHART / "values.schema.json").read_text())
    for level in schema["properties"]["logLevel"]["enum"]:
        assert parser().parse_args(["run", f"--log-level={level}"]).log_level == level


def test_the_operator_pdb_keeps_one_of_two_replicas_and_is_absent_with_one() -> None:
    """The defaults (2 replicas) render a policy/v1 PDB with minAvailable 1 on the operator pods'
    selector; with one replica (replicaCount 1, or no leader election) none, since minAvailable 1
    would then refuse every eviction and block a node drain forever."""
    r = render()
    pdb = r.one("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["name"] == "r"
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}
    assert pdb["spec"]["selector"] == r.deployment["spec"]["selector"]
    for single in (["--set", "replicaCount=1"], ["--set", "leaderElection.enabled=false"],
                   ["--set", "podDisruptionBudget.enabled=false"]):
        assert "PodDisruptionBudget" not in {d["kind"] for d in render(*single).docs}, single
    three = render("--set", "replicaCount=3", "--set", "podDisruptionBudget.maxUnavailable=1").one("PodDisruptionBudget")
    assert three["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}
    assert render("--set", "podDisruptionBudget.minAvailable=50%").one("PodDisruptionBudget")["spec"]["minAvailable"] \
        == "50%"


def test_sharding_runs_every_replica_on_its_shards_instead_of_a_leader() -> None:
    """sharding.shards: --shards on every replica (no --leader-election), the lease timings kept,
    the replicas and the PDB as with leader election, and the Lease Role's list and delete (the
    holder lists every shard Lease each tick and deletes its member Lease at shutdown). The CLI
    accepts what the chart renders, and refuses --shards beside --leader-election or with a lease
    margin too short to bound its writes."""
    from gateway_operator.cli import InputError, cmd_run, parser
    r = render("--set", "sharding.shards=8", "--set", "replicaCount=3")
    args = r.container["args"]
    assert "--shards=8" in args and "--leader-election" not in args and "--lease-duration=15" in args
    assert r.deployment["spec"]["replicas"] == 3 and "PodDisruptionBudget" in {d["kind"] for d in r.docs}
    [lease_rule] = [rule for d in r.docs if d["kind"] == "Role" for rule in d["rules"] if "leases" in rule["resources"]]
    assert lease_rule["verbs"] == ["get", "list", "create", "update", "delete"]
    parsed = parser().parse_args(args)
    assert parsed.shards == 8 and not parsed.leader_election
    default = render().container["args"]
    assert "--leader-election" in default and not any(a.startswith("--shards") for a in default)
    with pytest.raises(InputError, match="exclude each other"):
        cmd_run(parser().parse_args(["run", "--shards", "4", "--leader-election", "--metrics-port", "0"]))
    # the margin bounds every write (core/shards.Timing.write_timeout): 1 s would fail ordinary writes
    with pytest.raises(InputError, match="at least 2 s above --renew-deadline"):
        cmd_run(parser().parse_args(["run", "--shards", "4", "--lease-duration", "11", "--metrics-port", "0"]))


def test_the_operator_network_policy_admits_its_ports_and_lets_out_what_it_connects_to() -> None:
    """Off by default. On: in, the liveness port and the metrics port (from metricsFrom, else any);
    out, DNS, the API server's ports (to apiServer.cidrs, else any), the gateway pods' 8765 (/health)
    and 8766 (the launcher's long-poll /health) in the watched namespaces, the Redis ports and extraEgress."""
    assert "NetworkPolicy" not in {d["kind"] for d in render().docs}
    policy = render("--set", "networkPolicy.enabled=true").one("NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": SELECTOR} and spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"ports": [{"port": 8081, "protocol": "TCP"}]},
                               {"ports": [{"port": 8080, "protocol": "TCP"}]}]
    assert spec["egress"] == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
        {"ports": [{"port": 8765, "protocol": "TCP"}, {"port": 8766, "protocol": "TCP"}],
         "to": [{"namespaceSelector": {}}]},
        {"ports": [{"port": 6379, "protocol": "TCP"}]}]
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    extra = {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"port": 26379, "protocol": "TCP"}]}
    narrowed = render("--set", "networkPolicy.enabled=true", "--set", "watchNamespaces={team-a,team-b}",
                      "--set", "metrics.port=9090", "--set", "livenessPort=9091",
                      "--set-json", f"networkPolicy.metricsFrom={json.dumps([prometheus])}",
                      "--set", "networkPolicy.apiServer.cidrs={198.18.0.1/32}",
                      "--set", "networkPolicy.apiServer.ports={6443}", "--set", "networkPolicy.redisPorts={6380}",
                      "--set-json", f"networkPolicy.extraEgress={json.dumps([extra])}").one("NetworkPolicy")["spec"]
    assert narrowed["ingress"] == [{"ports": [{"port": 9091, "protocol": "TCP"}]},
                                   {"ports": [{"port": 9090, "protocol": "TCP"}], "from": [prometheus]}]
    assert narrowed["egress"][1:] == [
        {"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "198.18.0.1/32"}}]},
        {"ports": [{"port": 8765, "protocol": "TCP"}, {"port": 8766, "protocol": "TCP"}],
         "to": [{"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]}}]},
        {"ports": [{"port": 6380, "protocol": "TCP"}]}, extra]
    # metrics off: no metrics rule; no Redis ports: no Redis rule
    bare = render("--set", "networkPolicy.enabled=true", "--set", "metrics.port=0",
                  "--set", "networkPolicy.redisPorts=null").one("NetworkPolicy")["spec"]
    assert bare["ingress"] == [{"ports": [{"port": 8081, "protocol": "TCP"}]}] and len(bare["egress"]) == 3


@pytest.mark.parametrize("mode", [[], ["--set", "watchNamespaces={team-a,team-b}"]], ids=["cluster-wide", "namespaced"])
def test_every_template_passes_a_server_side_dry_run(cluster: Cluster, mode: list[str]) -> None:
    install_prometheus_operator_crds(cluster)
    ns = cluster.new_namespace()
    for extra in ("team-a", "team-b"):
        cluster.kubectl("create", "namespace", extra, check=False)
    rendered = helm(cluster, "template", "dry", CHART, "-n", ns, *ALL_FEATURES, *mode).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert {"Deployment", "ServiceAccount", "ValidatingAdmissionPolicy", "ServiceMonitor", "PrometheusRule",
            "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    # the ServiceAccount for real first: admission of the test pod looks it up
    accounts = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ServiceAccount"]
    cluster.apply(json.dumps(accounts[0]))
    result = cluster.apply(rendered, "--dry-run=server", check=False)  # every object names its namespace
    assert result.returncode == 0, result.stderr
    if mode:
        assert {"Role", "RoleBinding"} <= kinds and "ClusterRoleBinding" in kinds  # discovery only
        roles = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Role"
                 and not d["metadata"]["name"].endswith("-leader")]  # the Lease's Role lives in the release's
        assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]


@pytest.mark.parametrize("kind, mutate, message", [
    ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(honorLabel=True),
     ".honorLabel: field not declared in schema"),
    ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="30 seconds"),
     "spec.endpoints[0].interval: Invalid value"),
    ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update({"for": "2 minutes"}),
     "spec.groups[0].rules[0].for: Invalid value"),
    ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(severity="warning"),
     "rules[0].severity: field not declared in schema"),
], ids=["ServiceMonitor-typo", "ServiceMonitor-interval", "PrometheusRule-for", "PrometheusRule-misplaced-label"])
def test_prometheus_operator_crds_refuse_a_bad_monitoring_object(cluster: Cluster, kind: str,
                                                                 mutate: Callable[[dict[str, Any]], None],
                                                                 message: str) -> None:
    """The chart's object passes prometheus-operator's real schema (server-side dry run);
    the same object with one field wrong is refused, naming the field."""
    install_prometheus_operator_crds(cluster)
    ns = cluster.new_namespace()
    try:
        good = render(*ALL_FEATURES).one(kind)
        good["metadata"]["namespace"] = ns
        accepted = cluster.apply(json.dumps(good), "--server-side", "--dry-run=server", check=False)
        assert accepted.returncode == 0, accepted.stderr
        bad = json.loads(json.dumps(good))
        mutate(bad)
        refused = cluster.apply(json.dumps(bad), "--server-side", "--dry-run=server", check=False)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_new_knobs_pass_a_server_side_dry_run(cluster: Cluster, tmp_path: Path) -> None:
    """The Deployment and ServiceAccount rendered with every knob of issue 11 (and the README's
    example values) are accepted by the real API server's validation."""
    ns = cluster.new_namespace()
    try:
        for values in (KNOBS, yaml.safe_load(readme_example_values())):
            rendered = helm(cluster, "template", "knobs", CHART, "-n", ns, "-f", values_file(tmp_path, values),
                            "--show-only", "templates/deployment.yaml", "--show-only", "templates/serviceaccount.yaml").stdout
            result = cluster.apply(rendered, "--server-side", "--dry-run=server", "-o", "json", check=False)
            assert result.returncode == 0, result.stderr
            items = {i["kind"]: i for i in json.loads(result.stdout)["items"]}
            pod = items["Deployment"]["spec"]["template"]["spec"]
            assert pod["priorityClassName"] == values["priorityClassName"]  # as the server stored it
            assert pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/healthz"
            assert items["ServiceAccount"]["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
            if "topologySpreadConstraints" in values:
                assert len(pod["topologySpreadConstraints"]) == len(values["topologySpreadConstraints"])
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_install_with_every_knob_in_a_restricted_namespace(cluster: Cluster, release: tuple[str, str],
                                                         tmp_path: Path) -> None:
    """A real install: the operator pod the controller creates carries the knobs, is admitted
    under `pod-security.kubernetes.io/enforce: restricted` and gets its PriorityClass's value."""
    name, ns = release
    cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    priority_class = f"gwop-chart-{uuid.uuid4().hex[:6]}"
    cluster.apply(json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                              "metadata": {"name": priority_class}, "value": 100000}))
    try:
        values = {**KNOBS, "priorityClassName": priority_class}
        helm(cluster, "install", name, CHART, "-n", ns, "-f", values_file(tmp_path, values), "--wait", "--timeout", "120s")
        pods = cluster.get_json("-n", ns, "pods", "-l", f"app.kubernetes.io/instance={name}")["items"]
        assert len(pods) == 2  # a leader and a standby
        pod = pods[0]
        assert pod["spec"]["priorityClassName"] == priority_class and pod["spec"]["priority"] == 100000
        assert {k: pod["metadata"]["labels"][k] for k in KNOBS["podLabels"]} == KNOBS["podLabels"]
        c = pod["spec"]["containers"][0]
        assert c["image"] == f"{REPOSITORY}@{DIGEST}"
        assert [e["name"] for e in c["env"]] == ["POD_NAMESPACE", "POD_NAME", "HTTPS_PROXY", "NODE_NAME", "TOKEN"]
        assert c["args"][-1] == "--redis-allow=10.0.0.0/8" and "--log-level=debug" in c["args"]
        assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/healthz", "liveness")
        assert len(pod["spec"]["topologySpreadConstraints"]) == 2
        sa = cluster.get_json("-n", ns, f"serviceaccount/{name}")
        assert KNOBS["serviceAccount"]["annotations"].items() <= sa["metadata"]["annotations"].items()  # + Helm's own
    finally:
        helm(cluster, "uninstall", name, "-n", ns, "--wait", check=False)
        cluster.kubectl("delete", "priorityclass", priority_class, "--wait=false", check=False)


def notes_commands(notes: str) -> list[str]:
    """The shell commands NOTES.txt shows (lines starting with kubectl/helm; a heredoc runs to EOF)."""
    commands: list[str] = []
    lines = iter(notes.splitlines())
    for line in lines:
        if line.startswith(("kubectl ", "helm ")):
            if "<<'EOF'" in line:
                body = []
                for more in lines:
                    body.append(more)
                    if more == "EOF":
                        break
                line = "\n".join([line, *body])
            commands.append(line)
    return commands


def test_notes_commands_work(cluster: Cluster, release: tuple[str, str], operator: OperatorProcess) -> None:
    """Every command NOTES.txt prints runs as printed (with CHART replaced by the chart path):
    the chart README it points to, the operator's pod, kubectl explain, the first
    GatewayDeployment (made Ready by the session's operator), its conditions."""
    name, ns = release
    helm(cluster, "install", name, CHART, "-n", ns)
    notes = helm(cluster, "get", "notes", name, "-n", ns).stdout
    commands = notes_commands(notes)
    assert [c.split()[:2] for c in commands] == [
        ["helm", "show"], ["kubectl", "get"], ["kubectl", "logs"], ["kubectl", "explain"], ["kubectl", "create"],
        ["kubectl", "apply"],
        ["kubectl", "wait"], ["kubectl", "get"], ["kubectl", "describe"], ["kubectl", "get"]], notes
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig),
               PATH=f"{Path(tool('kubectl')).parent}:{os.environ['PATH']}")
    try:
        for command in commands:
            command = command.replace(" CHART ", f" {CHART} ")
            result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=330)
            if command.startswith("kubectl logs"):
                # no container runs on the SIMULATED node: the API server resolves the
                # Deployment to its pod's `operator` container and asks kwok, which has no logs
                assert result.returncode == 0 or re.search(rf"containerLogs/{ns}/{name}-[a-z0-9]+-[a-z0-9]+/operator\b",
                                                           result.stderr), result.stderr
                continue
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            if command.startswith("helm show readme"):
                assert result.stdout.strip() == CHART_README.read_text().strip()
            if command.startswith("kubectl get pods"):
                assert name in result.stdout
        describe = next(c for c in commands if c.startswith("kubectl describe"))
        described = subprocess.run(["bash", "-c", describe], capture_output=True, text=True, env=env).stdout
        assert "Ready" in described and "ExactlyOnceAdmission" in described
    finally:
        cluster.kubectl("-n", ns, "delete", "gatewaydeployment", "my-gateway", "--wait=false", check=False)


def test_install_upgrade_uninstall(cluster: Cluster, release: tuple[str, str]) -> None:
    name, ns = release
    out = helm(cluster, "install", name, CHART, "-n", ns, "--wait", "--timeout", "120s").stdout
    assert f"kubectl wait -n {ns} --for=condition=Ready gatewaydeployment/my-gateway" in out  # NOTES.txt
    cluster.kubectl("get", "crd", "gatewaydeployments.gateway-operator.dev")
    deployment = cluster.get_json("-n", ns, f"deployment/{name}")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/healthz", "liveness")
    cluster.kubectl("get", "clusterrole", name)
    cluster.kubectl("get", "validatingadmissionpolicy", f"{name}-replica-warning")

    helm(cluster, "upgrade", name, CHART, "-n", ns, "--set", "resyncSeconds=120", "--set",
         "admissionPolicy.enabled=false", "--wait", "--timeout", "120s")
    args = cluster.get_json("-n", ns, f"deployment/{name}")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--resync-seconds=120" in args
    assert cluster.kubectl("get", "validatingadmissionpolicy", f"{name}-replica-warning", check=False).returncode != 0
    assert json.loads(helm(cluster, "history", name, "-n", ns, "-o", "json").stdout)[-1]["revision"] == 2

    helm(cluster, "uninstall", name, "-n", ns, "--wait")
    assert cluster.kubectl("-n", ns, "get", f"deployment/{name}", check=False).returncode != 0
    assert cluster.kubectl("get", "clusterrole", name, check=False).returncode != 0
    # Helm never deletes CRDs (documented): the GatewayDeployments of users survive
    cluster.kubectl("get", "crd", "gatewaydeployments.gateway-operator.dev")


def can_i(cluster: Cluster, user: str, *args: str) -> bool:
    return cluster.kubectl("auth", "can-i", *args, "--as", user, check=False).stdout.strip() == "yes"


def test_chart_rbac_grants_what_the_operator_uses_and_no_more(cluster: Cluster, release: tuple[str, str]) -> None:
    name, ns = release
    helm(cluster, "install", name, CHART, "-n", ns, "--set", "watchNamespaces={" + ns + "}")
    sa = f"system:serviceaccount:{ns}:{name}"
    other = cluster.new_namespace()
    for verb_resource in (["patch", "gatewaydeployments.gateway-operator.dev", "--subresource=status"],
                          ["watch", "gatewaydeployments.gateway-operator.dev"], ["create", "deployments.apps"],
                          ["patch", "configmaps"], ["delete", "pods"], ["get", "secrets"], ["create", "secrets"],
                          ["list", "secrets"], ["watch", "secrets"],   # rbac.watchSecrets (the default)
                          ["create", "events"], ["create", "poddisruptionbudgets.policy"]):
        assert can_i(cluster, sa, *verb_resource, "-n", ns), verb_resource
    for verb_resource in (["delete", "secrets"], ["update", "gatewaydeployments.gateway-operator.dev"],
                          ["delete", "gatewaydeployments.gateway-operator.dev"], ["create", "pods"],
                          ["create", "roles.rbac.authorization.k8s.io"], ["create", "deployments.apps", "--all-namespaces"]):
        assert not can_i(cluster, sa, *verb_resource, "-n", ns), verb_resource
    # namespaced mode: nothing outside the listed namespaces
    assert not can_i(cluster, sa, "create", "deployments.apps", "-n", other)
    assert not can_i(cluster, sa, "get", "secrets", "-n", other)
    # rbac.watchSecrets=false: Secrets are got and created, never listed, and the operator is told so
    helm(cluster, "upgrade", name, CHART, "-n", ns, "--set", "watchNamespaces={" + ns + "}",
         "--set", "rbac.watchSecrets=false")
    assert not can_i(cluster, sa, "list", "secrets", "-n", ns) and not can_i(cluster, sa, "watch", "secrets", "-n", ns)
    assert can_i(cluster, sa, "get", "secrets", "-n", ns)
    args = cluster.get_json("-n", ns, f"deployment/{name}")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-watch-secrets" in args
    cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_the_session_operator_runs_under_the_chart_service_account(operator: OperatorProcess) -> None:
    """Every other operator test already runs the operator with the chart's RBAC; this one
    proves the identity is really that ServiceAccount (not the admin)."""
    from harness.operator import IDENTITY
    kubeconfig = yaml.safe_load((operator.dir / "operator.kubeconfig").read_text())
    token = kubeconfig["users"][0]["user"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == IDENTITY


def test_admission_policy_warns_at_kubectl_apply(cluster: Cluster, release: tuple[str, str], namespace: str) -> None:
    name, ns = release
    helm(cluster, "install", name, CHART, "-n", ns)
    stderr = replica_warning(cluster, namespace)
    assert "Warning:" in stderr and "3 replicas" in stderr
    quiet = apply_gateway(cluster, namespace, gateway_deployment("fine"))
    assert "Warning" not in quiet.stderr


def test_gateway_pods_pass_the_restricted_pod_security_profile(cluster: Cluster, operator: OperatorProcess) -> None:
    """Gateway and managed-Redis pods are admitted in a namespace enforcing `restricted`;
    a real redis-server at the managed Redis pod's IP takes the generated password."""
    ns = cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        # without persistence: the simulated node has no provisioner for its PVC (on by default for 2
        # replicas; test_node's demo runs it with persistence on the real node)
        apply_gateway(cluster, ns, gateway_deployment("strict", replicas=2, config=redis_store(), redis={
            "managed": {"enabled": True, "persistence": {"enabled": False}}}))
        redis_pod = until(lambda: next((p for p in cluster.get_json("-n", ns, "pods", "-l",
                                        "app.kubernetes.io/component=redis")["items"] if p["status"].get("podIP")), None),
                          timeout=60, what="the managed Redis pod")
        password = base64.b64decode(cluster.get_json("-n", ns, "secret/strict-redis")["data"]["password"]).decode()
        server = RedisServer(password=password, host=redis_pod["status"]["podIP"], port=6379).start()
        try:
            wait_condition(cluster, ns, "strict", "RedisReachable", "True", "ProbeSucceeded")
            wait_ready_pods(cluster, ns, "strict", 2)
            policy = cluster.get_json("-n", ns, "networkpolicy/strict-redis")["spec"]
            assert policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "strict"
            status = cluster.get_json("-n", ns, "gatewaydeployment/strict")["status"]
            assert status["redis"]["endpoint"] == f"strict-redis.{ns}.svc:6379/0"
            assert password not in json.dumps(status)
        finally:
            server.close()
        # a non-compliant pod is really refused there (the profile is enforced)
        bad = cluster.kubectl("-n", ns, "run", "root", "--image=example.invalid/x", "--restart=Never", check=False)
        assert bad.returncode != 0 and "violates PodSecurity" in bad.stderr
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
