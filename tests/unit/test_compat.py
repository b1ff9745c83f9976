"""GatewayCompatible (issue 32): which gateway the replicas run, said in status and a condition, and
scale-out held under Refuse while it is not known compatible."""
from __future__ import annotations

from gateway_operator.api import GatewaySpec
from gateway_operator.core import compat, conditions, replicas
from gateway_operator.core.conditions import Facts
from gateway_operator.core.health import Idempotency, ReplicaHealth
from gateway_operator.core.probe_result import ProbeResult
from harness.operator import gateway_deployment, redis_store

TESTED = compat.TESTED_RELEASES[-1]
REFUSED_LINE = ("the gateway lacks what the launcher relies on: WebSocketGateway._hook_reserve "
                "(praisonai-bot 0.1.99, praisonaiagents 1.7.17)")


def spec(**overrides) -> GatewaySpec:
    return GatewaySpec.parse(gateway_deployment("gw", replicas=3, config=redis_store(),
                                                redis={"managed": {"enabled": True}}, **overrides)["spec"])


def replica(pod: str, bot: str, agents: str = "1.7.17") -> ReplicaHealth:
    return ReplicaHealth(pod, Idempotency.HEALTHY, redis="answers", versions=(bot, agents))


def compatible(health=(), refused=()) -> conditions.Condition:
    f = Facts(generation=1, desired_replicas=3, store_backend="redis", policy="Refuse", persistence=False,
              redis_configured=True, probe=ProbeResult(True, "ProbeSucceeded", "ok"), health=tuple(health),
              refused=tuple(refused))
    return next(c for c in conditions.compute(f) if c.type == "GatewayCompatible")


def test_replicas_on_a_tested_release_are_compatible_and_say_which() -> None:
    c = compatible([replica("a", TESTED), replica("b", TESTED)])
    assert (c.status, c.reason) == ("True", "TestedGatewayRelease")
    assert f"praisonai-bot {TESTED} with praisonaiagents 1.7.17 on 2" in c.message


def test_a_release_outside_the_tested_ones_is_named_and_nobody_has_told_is_unknown() -> None:
    c = compatible([replica("a", TESTED), replica("b", "0.1.99")])
    assert (c.status, c.reason) == ("False", "UntestedGatewayRelease")
    assert "praisonai-bot 0.1.99 is not among the releases" in c.message and TESTED in c.message
    unknown = compatible([ReplicaHealth("a", Idempotency.HEALTHY)])  # an image whose launcher says nothing
    assert (unknown.status, unknown.reason) == ("Unknown", "GatewayVersionsUnknown")


def test_a_pod_that_refused_the_gateway_makes_it_incompatible_with_the_launchers_line() -> None:
    c = compatible([replica("a", TESTED)], refused=[("gw-new-1", REFUSED_LINE)])
    assert (c.status, c.reason) == ("False", "GatewayIncompatible")
    assert "gw-new-1 refused to start (exit 78)" in c.message and "_hook_reserve" in c.message


def test_scale_out_is_held_under_refuse_while_not_compatible_and_only_reported_under_warn() -> None:
    untested = compat.assess(compat.releases({"versions": [{"praisonaiBot": "0.1.99", "praisonaiagents": "1.7.17",
                                                            "replicas": 1}]}), [])
    assert not untested.compatible
    assert replicas.replicas_to_run(spec(), True, 1, compatible=untested.compatible) == 1   # held at what runs
    assert replicas.replicas_to_run(spec(replicaPolicy="Warn"), True, 1, compatible=False) == 3
    assert replicas.replicas_to_run(spec(), True, 1, compatible=True) == 3
    assert replicas.replicas_to_run(spec(), True, 3, compatible=False) == 3   # nothing is scaled in
    unknown = compat.assess(compat.releases(None), [])
    assert unknown.compatible  # nobody told yet is no reason to hold


def test_status_versions_are_read_back_and_malformed_rows_are_left_out() -> None:
    rows = compat.releases({"versions": [{"praisonaiBot": TESTED, "praisonaiagents": "1.7.17", "replicas": 2}]})
    assert rows == [(TESTED, "1.7.17", 2)]
    assert compat.releases({"versions": [{"praisonaiBot": 7}, "junk"]}) == []
    assert compat.releases(None) == []
