"""Issue 56, items 4 and 5, on the operator's side: ``coalesce`` refused with more than one replica under
replicaPolicy Refuse (warned, and said in ExactlyOnceAdmission, under Warn), the claim lease bounded so
that a dead holder's claim frees within 90 s, and a record TTL users set, carried from the spec to the
launcher and into the operator's own windows. tests/sim/test_crd_admission.py proves the CEL halves
say the same at a real API server."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway_operator import api, offline
from gateway_operator.api import GatewaySpec, validation
from gateway_operator.api import reasons as R
from gateway_operator.api.redis_target import resolve
from gateway_operator.core import conditions, facts
from gateway_operator.core.dedup_history import StoreFacts
from gateway_operator.core.health import Idempotency, ReplicaHealth
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.render.gateway_config import gateway_config
from gateway_operator.core.render.names import Owner
from harness import pod_code
from harness.cluster import REPO
from harness.operator import gateway_deployment, redis_store

pod_code.importable()
import gwop_config  # noqa: E402

REDIS = {"url": "redis://redis.example:6379/0"}
OWNER = Owner("gw", "prod", "uid-1")


def coalesced(enabled: bool = True) -> dict:
    hooks = [{"path": "github", "message": "{text}", "coalesce": {"group_key": "{repository.full_name}"},
              **({} if enabled else {"enabled": False})}, {"path": "plain"}]
    return {**redis_store(), "hooks": {"idempotency": {"store_backend": "redis"}, "hooks": hooks}}


def doc(**overrides: Any) -> dict:
    return gateway_deployment("gw", redis=REDIS, **{"config": coalesced(), **overrides})


@pytest.mark.parametrize("overrides, refused", [
    ({"replicas": 2}, True),
    ({"autoscaling": {"enabled": True, "maxReplicas": 3}}, True),   # the autoscaler may run three
    ({"autoscaling": {"enabled": True}}, True),                      # its default maxReplicas is 4
    ({"replicas": 1}, False),
    ({"autoscaling": {"enabled": True, "maxReplicas": 1}}, False),
    ({"replicas": 2, "replicaPolicy": "Warn"}, False),
    ({"replicas": 2, "config": coalesced(enabled=False)}, False),    # a disabled hook is never served
    ({"replicas": 2, "config": redis_store()}, False),               # no coalesce anywhere
], ids=["two", "autoscaling-3", "autoscaling-default", "one", "autoscaling-1", "warn", "disabled", "none"])
def test_coalesce_is_refused_only_when_more_than_one_replica_may_run_under_refuse(overrides: dict,
                                                                                 refused: bool) -> None:
    body = doc(**overrides)
    expected = [f"spec: Invalid value: {validation.MSG_COALESCE_ONE_REPLICA}"] if refused else []
    assert offline.check(body) == expected
    assert (validation.MSG_COALESCE_ONE_REPLICA in validation.violations("gw", body["spec"])) is refused


def test_the_refusal_says_why_and_what_to_do() -> None:
    message = validation.MSG_COALESCE_ONE_REPLICA
    for words in ("202", "deduplicated", "Remove coalesce", "keep one replica", "replicaPolicy: Warn"):
        assert words in message, words


def test_under_warn_it_is_warned_at_apply_in_the_charts_words_and_said_in_exactly_once() -> None:
    body = doc(replicas=2, replicaPolicy="Warn")
    assert validation.COALESCE_WARNING in validation.warnings(body["spec"])
    assert validation.COALESCE_WARNING not in validation.warnings(doc(replicas=1)["spec"])
    text = " ".join((REPO / "charts/gateway-operator/templates/admission-policy.yaml").read_text().split())
    assert f"message: >- {validation.COALESCE_WARNING}" in text

    spec = GatewaySpec.parse(body["spec"])
    assert spec.coalesced_hooks == ("github",)
    ok = ProbeResult(True, R.PROBE_SUCCEEDED, "ok")
    healthy = tuple(ReplicaHealth(f"gw-{i}", Idempotency.HEALTHY) for i in range(2))
    base = conditions.Facts(generation=1, desired_replicas=2, store_backend="redis", policy="Warn",
                            persistence=False, redis_configured=True, running_replicas=2, ready_replicas=2,
                            probe=ok, health=healthy, coalesced=spec.coalesced_hooks)
    [c] = [c for c in conditions.compute(base) if c.type == conditions.EXACTLY_ONCE]
    assert (c.status, c.reason) == ("False", R.COALESCED_HOOKS) and "github" in c.message and "202" in c.message
    # one replica running, or no coalesced hook: exactly-once holds as before
    for f in (replace(base, running_replicas=1), replace(base, coalesced=())):
        [c] = [c for c in conditions.compute(f) if c.type == conditions.EXACTLY_ONCE]
        assert (c.status, c.reason) == ("True", R.SHARED_REDIS_STORE)


@pytest.mark.parametrize("lease, refused", [(60, False), (61, True), (900, True), (10, False)])
def test_the_claim_lease_is_at_most_sixty_seconds(lease: int, refused: bool) -> None:
    body = gateway_deployment("gw", config=redis_store(), redis={**REDIS, "claimLeaseSeconds": lease})
    expected = [f"spec.redis: Invalid value: {validation.MSG_CLAIM_LEASE_BOUND}"] if refused else []
    assert offline.check(body) == expected
    assert "90 s" in validation.MSG_CLAIM_LEASE_BOUND


@pytest.mark.parametrize("ttl, error", [
    (3599, "spec.redis.recordTTLSeconds in body should be greater than or equal to 3600"),
    (604801, "spec.redis.recordTTLSeconds in body should be less than or equal to 604800"),
    (3600, None), (604800, None)])
def test_the_record_ttl_is_one_hour_to_seven_days(ttl: int, error: str | None) -> None:
    errors = offline.check(gateway_deployment("gw", config=redis_store(), redis={**REDIS, "recordTTLSeconds": ttl}))
    assert errors == [] if error is None else any(error in e for e in errors), errors


def test_the_spec_reaches_the_launcher_whose_guard_settings_read_it_and_refuse_what_is_out_of_bounds() -> None:
    default = GatewaySpec.parse(gateway_deployment("gw")["spec"])
    assert (default.redis.record_ttl_seconds, default.redis.claim_lease_seconds, default.max_request_body_bytes) == (
        72 * 3600, 60, 1024 * 1024)
    spec = GatewaySpec.parse(gateway_deployment("gw", maxRequestBodyBytes=4096, config=redis_store(), redis={
        **REDIS, "recordTTLSeconds": 7200, "claimLeaseSeconds": 30})["spec"])
    rendered = gateway_config(OWNER, spec, resolve(spec.redis, OWNER.namespace, OWNER.name))
    assert rendered["idempotency_guard"] == {"fail_closed_seconds": 30, "claim_lease_seconds": 30,
                                             "record_ttl_seconds": 7200, "max_body_bytes": 4096}
    assert gwop_config.guard_settings(rendered) == {"fail_closed_seconds": 30.0, "claim_lease_seconds": 30.0,
                                                    "record_ttl_seconds": 7200.0, "max_body_bytes": 4096}
    # an older operator's section (no TTL, no bound): the defaults, the operator's own
    assert gwop_config.guard_settings({"idempotency_guard": {"fail_closed_seconds": 5}})["record_ttl_seconds"] == \
        api.DEFAULT_RECORD_TTL_SECONDS
    assert gwop_config.guard_settings({})["max_body_bytes"] == api.DEFAULT_MAX_REQUEST_BODY_BYTES
    assert gwop_config.MAX_CLAIM_LEASE_SECONDS == api.MAX_CLAIM_LEASE_SECONDS
    for bad, words in (({"claim_lease_seconds": 900}, "at most 60, so that the claims of a replica killed"),
                       ({"record_ttl_seconds": 60}, "1 hour to 7 days"),
                       ({"record_ttl_seconds": 8 * 86400}, "1 hour to 7 days"),
                       ({"max_body_bytes": 10}, "max_body_bytes must be at least")):
        with pytest.raises(gwop_config.ConfigError, match=words):
            gwop_config.guard_settings({"idempotency_guard": bad})


def test_the_operators_windows_last_the_spec_record_ttl() -> None:
    """A canary that vanished opens DedupHistoryLost for one record TTL: the spec's, not 0.1.16's 24 h."""
    spec = GatewaySpec.parse(gateway_deployment("gw", config=redis_store(), redis={
        **REDIS, "recordTTLSeconds": 3 * 86400})["spec"])
    target = resolve(spec.redis, OWNER.namespace, OWNER.name)
    assert target is not None
    body = {"metadata": {"name": "gw", "namespace": "prod", "generation": 1}, "spec": {},
            "status": {"redis": {"endpoint": target.endpoint, "prefix": target.prefix, "canary": "c1"}}}
    probe = ProbeResult(True, R.PROBE_SUCCEEDED, "ok", store=StoreFacts("c2", True))
    f = facts.gather(body, spec, Outcome(target=target, probe=probe), (), 1000.0)
    assert (f.dedup.lost_at, f.dedup.lost_until) == (1000.0, 1000.0 + 3 * 86400)
    [c] = [c for c in conditions.compute(f) if c.type == conditions.IDEMPOTENCY_DEGRADED]
    assert c.reason == R.DEDUP_HISTORY_LOST and "259200s" in c.message
    gone = ReplicaHealth("gw-0", Idempotency.HEALTHY, unrecorded=2, last_unrecorded_at=2000.0)
    f = facts.gather(body, spec, Outcome(target=target), (gone,), 2000.0)
    assert f.unrecorded.until == 2000.0 + 3 * 86400


def test_the_launcher_sets_the_record_ttl_of_the_installed_gateway_before_its_store_is_built(tmp_path, monkeypatch) -> None:
    """gwop_upstream.set_record_ttl on the real praisonai-bot: the store it then builds (SQLite here, no
    backend named) keeps records for the spec's TTL, not 0.1.16's 24 h; once built, it is refused."""
    import gwop_upstream as upstream
    monkeypatch.setenv("HOME", str(tmp_path))  # the SQLite store lives under ~/.praisonai/state
    assert upstream.missing() == []
    gateway = upstream.build_gateway("127.0.0.1", 8799, [], "t" * 32, None, None)
    upstream.set_record_ttl(gateway, 3 * 86400)
    assert upstream.build_store(gateway).ttl_seconds == 3 * 86400
    with pytest.raises(RuntimeError, match="before the gateway's idempotency store is built"):
        upstream.set_record_ttl(gateway, 3600)
