"""spec.autoscaling and spec.podMonitor, offline: the replica guard that refuses an autoscaler past
one SQLite replica (the same words from the CRD's CEL, `gateway-operator check` and the operator),
the HPA the operator renders against the GatewayDeployment's /scale (its metric, bounds and a
scale-down no faster than a replica drains), the PodMonitor that names the token by reference only,
and the removal of both with the fields. The admission by the real API server is in
tests/sim/test_crd_admission.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator import api, offline
from gateway_operator.api import validation
from gateway_operator.api import GatewaySpec
from gateway_operator.clients import apply
from gateway_operator.clients.kube import NotServed
from gateway_operator.core import problems, replicas
from gateway_operator.core.render.autoscaling import (autoscaler, autoscaling_bounds, autoscaling_status,
                                                      canonical_quantity, pod_monitor)
from gateway_operator.core.render.deployment import deployment
from gateway_operator.core.render.managed_redis import managed_redis
from gateway_operator.core.render.names import OperatorIdentity, Owner
from gateway_operator.core.render.objects import desired_objects
from gateway_operator.pod import pod_code as shipped_pod_code
from harness.operator import gateway_deployment, redis_store

REPO = Path(__file__).resolve().parents[2]
OWNER = Owner("gw", "prod", "uid-1")
POD_CODE = shipped_pod_code()  # the pods' code, as the operator's entry points read it
AUTOSCALING = {"enabled": True, "minReplicas": 2, "maxReplicas": 6}


def spec(**overrides: Any) -> GatewaySpec:
    return GatewaySpec.parse(gateway_deployment("gw", **overrides)["spec"])


def check(**overrides: Any) -> list[str]:
    return offline.check(gateway_deployment("gw", **overrides))


# -- the guard: refused at apply as replicas > 1 is -------------------------------------------------

def test_an_autoscaler_past_one_sqlite_replica_is_refused_under_refuse_with_one_message() -> None:
    errors = check(autoscaling=AUTOSCALING)
    assert errors == [f"spec: Invalid value: {validation.MSG_AUTOSCALING_NEEDS_REDIS}"]
    # the defaults (maxReplicas 4) are past one too
    assert check(autoscaling={"enabled": True}) == errors
    # the operator says the same if the CRD's rule were missing, and runs one replica meanwhile
    problem = problems.policy_problem(spec(autoscaling=AUTOSCALING))
    assert problem is not None and problem.message == validation.MSG_AUTOSCALING_NEEDS_REDIS
    assert autoscaling_bounds(spec(autoscaling=AUTOSCALING)) == (1, 1)


@pytest.mark.parametrize("overrides", [
    {"autoscaling": AUTOSCALING, "config": redis_store(), "redis": {"managed": {"enabled": True}}},
    {"autoscaling": {"enabled": True, "maxReplicas": 1}},                      # one SQLite replica at most
    {"autoscaling": {**AUTOSCALING, "enabled": False}},                        # off: nothing to guard
], ids=["redis", "max-one", "disabled"])
def test_an_autoscaler_is_accepted_with_redis_with_one_replica_at_most_or_off(overrides: dict) -> None:
    assert check(**overrides) == []
    assert problems.policy_problem(spec(**overrides)) is None


def test_under_warn_it_is_accepted_with_the_warning_replicas_get() -> None:
    body = gateway_deployment("gw", replicaPolicy="Warn", autoscaling=AUTOSCALING)
    assert offline.check(body) == []
    assert validation.autoscaling_warn_message(6) in validation.warnings(body["spec"])
    assert autoscaling_bounds(GatewaySpec.parse(body["spec"])) == (2, 6)


def test_the_chart_warns_of_an_autoscaler_in_the_same_words() -> None:
    text = " ".join((REPO / "charts/gateway-operator/templates/admission-policy.yaml").read_text().split())
    head, tail = validation.autoscaling_warn_message(7).split(" 7 ", 1)
    assert f"'{head} ' + string(object.spec.autoscaling.maxReplicas) + ' {tail}'" in text


def test_min_above_max_a_drain_longer_than_an_hpa_period_and_a_shared_sqlite_pvc_are_refused() -> None:
    redis = {"config": redis_store(), "redis": {"managed": {"enabled": True}}}
    assert check(autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 3}, **redis) == [
        f"spec.autoscaling: Invalid value: {validation.MSG_AUTOSCALING_BOUNDS}"]
    assert check(autoscaling=AUTOSCALING, drainSeconds=api.MAX_AUTOSCALING_DRAIN_SECONDS + 1, **redis) == [
        f"spec: Invalid value: {validation.MSG_AUTOSCALING_DRAIN}"]
    assert check(autoscaling=AUTOSCALING, drainSeconds=api.MAX_AUTOSCALING_DRAIN_SECONDS, **redis) == []
    assert f"spec: Invalid value: {validation.MSG_AUTOSCALING_PERSISTENCE}" in check(
        replicaPolicy="Warn", autoscaling=AUTOSCALING, persistence={"enabled": True})
    assert check(autoscaling={"enabled": True, "maxReplicas": 101}, **redis)  # bounded by the schema


@pytest.mark.parametrize("value, accepted", [("3", True), ("1.5", True), ("0.25", True), ("0", False),
                                             ("-1", False), ("2Gi", False), ("1.2345", False)])
def test_the_target_is_a_positive_decimal(value: str, accepted: bool) -> None:
    errors = check(autoscaling={**AUTOSCALING, "target": {"averageValue": value}}, config=redis_store(),
                   redis={"managed": {"enabled": True}})
    assert (errors == []) is accepted, errors


# -- the HPA ---------------------------------------------------------------------------------------

def test_the_hpa_scales_the_gateway_deployment_on_turns_in_flight_within_its_bounds() -> None:
    s = spec(autoscaling={**AUTOSCALING, "target": {"averageValue": "1.5"}}, config=redis_store(),
             redis={"managed": {"enabled": True}})
    hpa = autoscaler(OWNER, s)
    assert (hpa["apiVersion"], hpa["kind"], hpa["metadata"]["name"]) == ("autoscaling/v2", "HorizontalPodAutoscaler",
                                                                           "gw")
    assert hpa["metadata"]["ownerReferences"] == [OWNER.reference()]
    # its target is the GatewayDeployment's own /scale: the CRD's rules judge every count it writes
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": api.API_VERSION, "kind": "GatewayDeployment", "name": "gw"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"] == [{"type": "Pods", "pods": {
        "metric": {"name": "gateway_turns_in_flight"},
        "target": {"type": "AverageValue", "averageValue": "1500m"}}}]  # as the API server writes it back


@pytest.mark.parametrize("drain, period, window", [(None, 145, 300), (600, 625, 625), (1775, 1800, 1800)])
def test_scale_in_stops_one_replica_per_grace_period(drain: int | None, period: int, window: int) -> None:
    """A stopping replica gets its whole grace period (drain + preStop + exit) before the autoscaler
    may stop the next one: never two replicas draining their turns at once."""
    s = spec(autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}},
             **({"drainSeconds": drain} if drain else {}))
    grace = deployment(OWNER, s, None, 2, "hash")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == period
    assert autoscaler(OWNER, s)["spec"]["behavior"] == {"scaleDown": {
        "stabilizationWindowSeconds": window,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": grace}]}}


def test_disabled_renders_no_hpa_and_no_pod_monitor() -> None:
    for s in (spec(), spec(autoscaling={"enabled": False, "maxReplicas": 6})):
        kinds = {o["kind"] for o in desired_objects(OWNER, s, None, 1, pod_code=POD_CODE)}
        assert not kinds & {"HorizontalPodAutoscaler", "PodMonitor"}
        assert autoscaling_status("gw", s) == {}


def test_the_operator_leaves_spec_replicas_to_the_autoscaler() -> None:
    """The HPA writes spec.replicas through /scale; the Deployment follows it, and nothing the
    operator applies is the GatewayDeployment itself (it never writes its spec)."""
    body = gateway_deployment("gw", autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}})
    body["spec"]["replicas"] = 5  # as the HPA left it
    s = GatewaySpec.parse(body["spec"])
    assert replicas.replicas_to_run(s, probe_ok=True, running=5) == 5
    objects = desired_objects(OWNER, s, None, replicas.replicas_to_run(s, True, 5), pod_code=POD_CODE)
    assert "GatewayDeployment" not in {o["kind"] for o in objects}
    assert next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gw")[
        "spec"]["replicas"] == 5


@pytest.mark.parametrize("max_replicas, persists", [(3, True), (1, False)])
def test_the_autoscalers_moves_never_restart_the_managed_redis(max_replicas: int, persists: bool) -> None:
    """A managed Redis persists by default when more than one replica may share it. Judged by
    spec.replicas alone, the HPA's first scale-out past one replica switched persistence on: a new
    Redis pod with an empty volume, every dedup record gone (DedupHistoryLost for a whole TTL).
    With autoscaling it is judged by maxReplicas, so the Redis is the same at every count."""
    def redis_deployment(count: int) -> dict[str, Any]:
        body = gateway_deployment("gw", autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": max_replicas},
                                  config=redis_store(), redis={"managed": {"enabled": True}})
        body["spec"]["replicas"] = count  # as the HPA left it
        s = GatewaySpec.parse(body["spec"])
        assert (s.redis.managed_persistence is not None) is persists
        return next(o for o in managed_redis(OWNER, s, OperatorIdentity()) if o["kind"] == "Deployment")
    assert all(redis_deployment(count) == redis_deployment(1) for count in range(2, max_replicas + 1))
    # without autoscaling, spec.replicas still decides; an explicit setting always wins
    assert GatewaySpec.parse(gateway_deployment("gw", redis={"managed": {"enabled": True}})["spec"]
                             ).redis.managed_persistence is None
    off = GatewaySpec.parse(gateway_deployment("gw", autoscaling=AUTOSCALING, config=redis_store(), redis={
        "managed": {"enabled": True, "persistence": {"enabled": False}}})["spec"])
    assert off.redis.managed_persistence is None


# -- the scrape ------------------------------------------------------------------------------------

def test_the_pod_monitor_scrapes_metrics_with_the_token_by_reference_only() -> None:
    s = spec(autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}},
             podMonitor={"labels": {"release": "prometheus"}})
    monitor = pod_monitor(OWNER, s)
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"] == {"matchLabels": api.selector_for("gw")}
    assert monitor["spec"]["podMetricsEndpoints"] == [{
        "port": "http", "path": "/metrics", "scheme": "http", "interval": "15s",
        "authorization": {"type": "Bearer", "credentials": {"name": "gw-gateway-auth", "key": "token"}}}]
    own = spec(autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}},
               authTokenSecretRef={"name": "my-token", "key": "t"})
    assert pod_monitor(OWNER, own)["spec"]["podMetricsEndpoints"][0]["authorization"]["credentials"] == {
        "name": "my-token", "key": "t"}


def test_the_token_never_appears_in_any_rendered_object() -> None:
    """The operator renders the auth Secret's name and key, never a value: the pods read it as
    env from the Secret, Prometheus as the PodMonitor's credentials."""
    body = gateway_deployment("gw", autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}})
    objects = offline.render_objects(body, "prod")
    text = json.dumps(objects)
    assert {"HorizontalPodAutoscaler", "PodMonitor"} <= {o["kind"] for o in objects}
    assert "Secret" not in {o["kind"] for o in objects}  # the generated token is created by the I/O side, once
    for word in ("bearerToken", "bearerTokenSecret", "Bearer ey", "stringData"):
        assert word not in text
    env = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gw")[
        "spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": api.AUTH_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": "gw-gateway-auth", "key": "token"}}} \
        in env


def test_the_pod_monitor_follows_autoscaling_unless_the_spec_says_otherwise() -> None:
    redis = {"config": redis_store(), "redis": {"managed": {"enabled": True}}}
    assert pod_monitor(OWNER, spec(autoscaling=AUTOSCALING, podMonitor={"enabled": False}, **redis)) is None
    alone = spec(podMonitor={"enabled": True})  # the scrape alone, no autoscaler
    assert pod_monitor(OWNER, alone) is not None and autoscaler(OWNER, alone) is None
    assert autoscaling_status("gw", alone) == {"podMonitor": "gw"}


def test_the_adapter_rule_serves_the_metric_the_hpa_asks_for() -> None:
    values = yaml.safe_load((REPO / "examples/autoscaling/prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    name, series = api.AUTOSCALING_METRICS["turnsInFlight"]
    assert rule["name"]["as"] == name
    assert all(f"{s}{{<<.LabelMatchers>>}}" in rule["metricsQuery"] for s in series)
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}


def test_the_metrics_chosen_are_the_gauges_the_installed_gateway_exports() -> None:
    """admission_in_flight and admission_queued are set at every scrape; the histograms a
    queue-wait target would need are declared by 0.1.16 but observed nowhere (docs/autoscaling.md)."""
    import praisonai_bot
    package = Path(praisonai_bot.__file__).parent
    server = (package / "gateway/server.py").read_text()
    for series in api.AUTOSCALING_METRICS["turnsInFlight"][1]:
        assert f'"{series}", float(pressure.{series})' in " ".join(server.split())
    sources = "".join(p.read_text() for p in package.rglob("*.py") if p.name != "_metrics.py")
    assert "gateway_queue_wait_seconds" not in sources and "gateway_turn_latency_seconds" not in sources


# -- applied, and removed with the fields -----------------------------------------------------------

class Kube:
    """What apply.apply calls, in memory; PodMonitor served or not."""

    def __init__(self, pod_monitors: bool) -> None:
        self.pod_monitors, self.objects, self.deleted = pod_monitors, {}, []

    def apply(self, manifest: dict, owner_uid: str) -> Any:
        from gateway_operator.clients.kube import ApplyResult
        if manifest["kind"] == "PodMonitor" and not self.pod_monitors:
            raise NotServed(manifest["apiVersion"], manifest["kind"])
        self.objects[(manifest["kind"], manifest["metadata"]["name"])] = manifest
        return ApplyResult(manifest["kind"], manifest["metadata"]["name"], True, manifest, 1)

    def delete_if_present(self, api_version: str, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        if kind == "PodMonitor" and not self.pod_monitors:
            raise NotServed(api_version, kind)
        self.deleted.append(kind)
        return self.objects.pop((kind, name), None) is not None


@pytest.mark.parametrize("served", [True, False])
def test_the_hpa_and_pod_monitor_are_applied_where_served_and_removed_with_the_fields(served: bool) -> None:
    kube = Kube(pod_monitors=served)
    on = spec(autoscaling=AUTOSCALING, config=redis_store(), redis={"managed": {"enabled": True}})
    apply.apply(kube, OWNER, on, desired_objects(OWNER, on, None, 2, pod_code=POD_CODE))  # type: ignore[arg-type]
    assert ("HorizontalPodAutoscaler", "gw") in kube.objects
    assert (("PodMonitor", "gw") in kube.objects) is served  # skipped without prometheus-operator's CRD
    off = spec(config=redis_store(), redis={"managed": {"enabled": True}})
    apply.apply(kube, OWNER, off, desired_objects(OWNER, off, None, 2, pod_code=POD_CODE),  # type: ignore[arg-type]
                autoscaling_before=autoscaling_status("gw", on))
    assert ("HorizontalPodAutoscaler", "gw") not in kube.objects and ("PodMonitor", "gw") not in kube.objects
    # nothing is looked for when status never said it was asked for
    kube.deleted.clear()
    apply.apply(kube, OWNER, off, desired_objects(OWNER, off, None, 2, pod_code=POD_CODE))  # type: ignore[arg-type]
    assert not {"HorizontalPodAutoscaler", "PodMonitor"} & set(kube.deleted)


def test_canonical_quantity() -> None:
    assert [canonical_quantity(v) for v in ("3", "3.0", "1.5", "0.25", "0.005", "12.125")] == [
        "3", "3", "1500m", "250m", "5m", "12125m"]
