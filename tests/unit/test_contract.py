"""The operator-pod contract (operator/gateway_operator/pod/gwop_contract.py), as a user would notice
it broken: what the launcher writes is what the operator reads. The launcher's /health section, built
by the real pod code for a replica cut off from Redis and for one that reaches it, read back through
core.health.parse_answer field by field; the word a stopping launcher leaves in Redis, found by the
operator's probe; the pod template's command, env and config sections, taken by the launcher; the
launcher's exit-78 line, read from the pod's termination message. And the contract itself: shipped
with the pod code, and importing nothing but the standard library (the pods have no operator)."""
from __future__ import annotations

import ast
import asyncio
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import resolve
from gateway_operator.clients import redis_protocol
from gateway_operator.core import pods
from gateway_operator.core.health import ReplicaHealth, parse_answer
from gateway_operator.core.render.deployment import deployment
from gateway_operator.core.render.gateway_config import gateway_config
from gateway_operator.core.render.names import Owner
from gateway_operator.pod import gwop_contract as contract
from gateway_operator.pod import pod_code as shipped_pod_code
from harness import pod_code
from harness.operator import gateway_deployment, redis_store

pod_code.importable()
import gwop_config  # noqa: E402 - the pod code, as the pods import it
import gwop_health  # noqa: E402
import gwop_journal  # noqa: E402
import gwop_leases  # noqa: E402
import gwop_log  # noqa: E402
import gwop_reach  # noqa: E402
import gwop_serve  # noqa: E402
import gwop_upstream  # noqa: E402
import gwop_watch  # noqa: E402
import launch  # noqa: E402

CONTRACT = pod_code.POD_CODE / "gwop_contract.py"
OWNER = Owner("gw", "prod", "uid-1")
PREFIX = "gwop:prod:gw:"


def test_the_contract_ships_with_the_pod_code_and_imports_the_standard_library_alone() -> None:
    assert shipped_pod_code()["gwop_contract.py"] == CONTRACT.read_text()
    tree = ast.parse(CONTRACT.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level], "a relative import"
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


# -- the launcher's section of GET /health --------------------------------------------------------

def replica(cut_off: bool) -> tuple[dict[str, Any], ReplicaHealth]:
    """A replica's /health answer as the launcher builds it (gwop_health over the real journal,
    leases and probe; the gateway's own body a stand-in), and what the operator reads of it."""
    from praisonai_bot.bots._idempotency import RedisIdempotencyStore
    now = time.monotonic()
    gateway = types.SimpleNamespace(_hook_idem=RedisIdempotencyStore(object(), prefix=contract.store_key(PREFIX)),
                                    health=lambda: {"status": "healthy", "degraded_owners": []})
    journal = gwop_journal.OutageJournal(gateway, fail_closed_seconds=30)
    leases = gwop_leases.Leases(gateway, 30, "gw-0", clock=lambda: now)
    reach = gwop_reach.Reach({"prefix": PREFIX}, clock=lambda: now)
    leases.hold("a", leases.new_token(), now - 10)
    leases.hold("b", leases.new_token(), now - 3)
    leases.held["b"].unrenewed = True
    leases.fenced, leases.lost, leases.lost_at = 4, 1, time.time() - 60
    if cut_off:
        journal.broken, journal.broken_since, journal.failed_at = True, now - 12, now
        journal.refusal = gwop_journal.REFUSALS[0][1]
        journal.admitted["k1"] = journal.done["k2"] = journal.contested["k3"] = time.time()
        journal.dropped, journal.dropped_at, journal.best_effort = 2, time.time() - 5, 6
        leases.failing_since = now - 7.5
    else:
        journal.answers_since, reach.ok, reach.since = now - 40, True, now - 60
    gwop_health.extend(gateway, journal, leases, gwop_upstream.versions(), reach)
    body = gateway.health()
    return body, parse_answer("gw-0", 200, json.dumps(body).encode())


def read(health: ReplicaHealth) -> dict[str, Any]:
    """Each field the operator reads, as it reads it (JOURNAL_DROPPED and LEASES_LOST: their sum)."""
    c = health.claims
    return {contract.REDIS: health.redis, contract.UNUSABLE_FOR_S: health.unusable_for_s,
            contract.ANSWERS_FOR_S: health.answers_for_s, contract.JOURNALLED: health.journalled,
            contract.LAST_UNRECORDED_AT: health.last_unrecorded_at, contract.CLAIMS_HELD: c.held,
            contract.CLAIMS_UNRENEWED: c.unrenewed, contract.CLAIMS_EXPIRE_IN_S: c.expire_in_s,
            contract.RENEW_FAILING_FOR_S: c.renew_failing_for_s, contract.FENCED: c.fenced,
            contract.CLAIM_LEASE_S: c.lease_s}


@pytest.mark.parametrize("cut_off", [True, False], ids=["cut-off", "answers"])
def test_every_field_the_launcher_writes_in_health_is_declared_and_the_operator_reads_it_back(cut_off: bool) -> None:
    body, health = replica(cut_off)
    section = body[contract.SECTION]
    written = section[contract.IDEMPOTENCY]
    fields = {f.name: f for f in contract.IDEMPOTENCY_FIELDS}
    assert len(fields) == len(contract.IDEMPOTENCY_FIELDS)
    # the launcher writes the declared fields, each with a declared type (ANSWERS_FOR_S only while it reaches Redis)
    assert set(written) == {n for n, f in fields.items() if not f.optional or not cut_off}, set(written) ^ set(fields)
    assert all(isinstance(written[n], fields[n].types) for n in written), written
    assert written[contract.REDIS] == (contract.REFUSING if cut_off else contract.ANSWERS)
    # the operator reads each field it declares it reads, to the value written
    seen = read(health)
    assert set(seen) | {contract.JOURNAL_DROPPED, contract.LEASES_LOST} == {n for n, f in fields.items() if f.read}
    assert health.unrecorded == written[contract.JOURNAL_DROPPED] + written[contract.LEASES_LOST] > 0
    for name, value in seen.items():
        if name == contract.UNUSABLE_FOR_S and not cut_off:   # read only while Redis is unusable to it
            assert value is None
        else:
            assert value == written.get(name), (name, value, written.get(name))
    if cut_off:
        assert (health.journalled, health.claims.held, health.claims.unrenewed) == (3, 2, 1)
        assert health.claims.renew_failing_for_s == 7.5 and health.claims.expire_in_s == 20.0
    else:
        assert health.answers_for_s == 40.0
    # the versions the launcher found, the ones status shows
    assert health.versions == tuple(section[contract.VERSIONS][p] for p in contract.VERSIONED)
    assert health.versions and all(health.versions)


def test_the_health_watch_tag_changes_with_what_the_section_says_not_with_its_clocks() -> None:
    """gwop_watch tags the same section: a clock moving is no change the operator is woken for; a
    claim taken is one."""
    body, _ = replica(cut_off=True)
    tag = gwop_watch.tag_of(body)

    def changed(**fields: Any) -> str:
        moved = json.loads(json.dumps(body))
        moved[contract.SECTION][contract.IDEMPOTENCY].update(fields)
        return gwop_watch.tag_of(moved)
    assert changed(**{contract.UNUSABLE_FOR_S: 99.0, contract.CLAIMS_EXPIRE_IN_S: 1.0,
                      contract.RENEW_FAILING_FOR_S: 50.0, contract.ANSWERS_FOR_S: 3.0}) == tag
    assert changed(**{contract.CLAIMS_HELD: 3}) != tag


# -- Redis keys ---------------------------------------------------------------------------------

class _Redis:
    """One key space: the launcher's sync client and the operator's pipelined connection on it."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    def set(self, key: str, value: str, **_: Any) -> bool:
        self.keys[key] = value
        return True

    async def execute(self, commands: list[tuple[str, ...]]) -> list[Any]:
        assert all(c[0] == "GET" for c in commands), commands
        return [self.keys.get(c[1]) for c in commands]


def test_the_word_a_stopping_launcher_leaves_is_the_one_the_operators_probe_reads(monkeypatch) -> None:
    redis = _Redis()
    monkeypatch.setattr(gwop_serve, "redis_client", lambda settings, timeout: redis)
    gwop_serve.say_carried({"host": "r", "prefix": PREFIX}, "gw-1")
    assert list(redis.keys) == [f"{PREFIX}gwop-carried:gw-1"]
    kept = types.SimpleNamespace(client=redis)
    assert asyncio.run(redis_protocol.carried(kept, PREFIX, ["gw-0", "gw-1"], 1.0)) == {"gw-1"}


# -- the pod template, the config, the last words --------------------------------------------------

def full_spec() -> GatewaySpec:
    return GatewaySpec.parse(gateway_deployment("gw", replicas=3, config=redis_store(), redis={
        "host": "10.0.0.5", "passwordSecretRef": {"name": "l"}, "usernameSecretRef": {"name": "l"}})["spec"])


def test_the_pod_template_starts_the_launcher_on_the_contracts_ports_with_its_env(monkeypatch) -> None:
    spec = full_spec()
    target = resolve(spec.redis, OWNER.namespace, OWNER.name)
    container = deployment(OWNER, spec, target, 3, "h", migration="tok")["spec"]["template"]["spec"][
        "containers"][0]
    args = launch.parse_args(container["command"][2:])
    assert (args.port, args.watch_port) == (contract.GATEWAY_PORT, contract.WATCH_PORT)
    assert [p["containerPort"] for p in container["ports"]] == [contract.GATEWAY_PORT, contract.WATCH_PORT]
    env = {e["name"]: e for e in container["env"]}
    assert env[contract.SQLITE_MIGRATION_ENV]["value"] == "tok"
    secret = (contract.AUTH_TOKEN_ENV, contract.REDIS_PASSWORD_ENV, contract.REDIS_USERNAME_ENV,
              contract.SESSION_KEY_ENV)
    assert all("secretKeyRef" in env[name]["valueFrom"] for name in secret)
    # the launcher keeps each of them out of its log lines
    for name in secret:
        monkeypatch.setenv(name, f"value-of-{name}")
    assert {f"value-of-{name}" for name in secret} <= set(launch._secrets({}, None))


def test_the_launcher_reads_its_sections_of_the_config_the_operator_writes() -> None:
    spec = full_spec()
    written = gateway_config(OWNER, spec, resolve(spec.redis, OWNER.namespace, OWNER.name))
    assert gwop_config.session_settings(written) == written[contract.SESSION_HISTORY_KEY]
    assert gwop_config.guard_settings(written) == written[contract.GUARD_KEY]


def test_the_launchers_exit_line_for_an_unsupported_gateway_is_what_the_operator_reads(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(pod_code.documented_config()))
    message = tmp_path / "termination-log"
    message.write_text("")

    def refused() -> None:
        raise gwop_upstream.UpstreamMismatch("praisonai-bot 9.9 lacks WebSocketGateway._hook_idem")
    monkeypatch.setattr(gwop_upstream, "check", refused)
    monkeypatch.setattr(launch, "last_words", lambda text: gwop_log.last_words(text, str(message)))
    code = launch.main(["--config", str(config), "--workdir", str(tmp_path / "work")])
    assert code == contract.EXIT_FATAL_CONFIG
    assert pods.refused_gateway(code, message.read_text()) == "praisonai-bot 9.9 lacks WebSocketGateway._hook_idem"


class _Clock:
    """A monotonic clock the test moves (the journal's ``time``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def test_unusable_for_s_counts_the_whole_outage_while_the_window_may_start_again(monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    """``unusable_for_s`` ("for how long", the contract says) is what the operator reads to take a
    cut-off replica out of the traffic after CUT_OFF_AFTER_S. Under a partition the journal's calls
    queue behind the reach probe's on one thread, each waiting out a connect timeout, so its
    failures can come more than EVIDENCE_S apart; the fail-closed window then starts again (held
    deliveries stay held), but the outage's length must not: the checker (seed 182) saw a cut-off
    replica's gate go True again 9 s into the cut, and the replica take traffic until 13.9 s."""
    from gateway_operator.core.replicas import CUT_OFF_AFTER_S
    clock = _Clock()
    monkeypatch.setattr(gwop_journal, "time", clock)
    journal = gwop_journal.OutageJournal(types.SimpleNamespace(_hook_idem=None), fail_closed_seconds=30.0)
    said: list[float] = []
    for gap in (0.0, 2.0, 2.5, journal.EVIDENCE_S + 0.8, 1.0, 2.0):   # one stretch longer than EVIDENCE_S
        clock.now += gap
        journal.note_unusable()
        said.append(journal.view()[contract.UNUSABLE_FOR_S])
    assert said == sorted(said) and said[-1] == pytest.approx(sum((0.0, 2.0, 2.5, journal.EVIDENCE_S + 0.8, 1.0, 2.0)))
    assert said[-1] >= CUT_OFF_AFTER_S
    # ... while the window started again at the failure after the silence: still holding 30 s on
    assert journal.view()[contract.HOLDING] is True
    clock.now += 30.0 - 3.0 - 0.5   # 30 s after the window's new start, less the 3 s since: still in it
    journal.note_unusable()
    assert journal.view()[contract.HOLDING] is True
