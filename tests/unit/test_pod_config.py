"""The pods' configuration code without the gateway installed: the translation of the documented
``gateway.yaml`` (operator/gateway_operator/pod/gwop_config.py), the launcher's log redaction, and
the names the pod code shares with the operator, written twice (the pods import nothing of the
operator) and kept equal here."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from harness import pod_code

pod_code.importable()
import gwop_config as config  # noqa: E402
import gwop_log as pod_log  # noqa: E402
import launch as entry  # noqa: E402

documented_config = pod_code.documented_config


def test_translate_config_flattens_nested_hooks_and_drops_python_only_sections() -> None:
    documented = documented_config()
    documented["push"] = {"redis": {"url": "redis://r:6379/0", "password": "${GATEWAY_REDIS_PASSWORD}"}}
    before = json.dumps(documented, sort_keys=True)

    out = config.translate_config(documented)

    assert out["hooks"] == documented["hooks"]["hooks"]
    assert out["hooks_idempotency"] == {"store_backend": "redis"}
    assert "push" not in out and "turn_lock" not in out
    assert out["agents"] == documented["agents"] and out["channels"] == documented["channels"]
    assert out["channels"]["telegram"]["token"] == "${TEST_UNSET_TELEGRAM_TOKEN}"  # left for the gateway
    assert json.dumps(documented, sort_keys=True) == before  # input untouched


def test_translate_config_keeps_list_hooks() -> None:
    assert config.translate_config({"hooks": [{"path": "a"}]}) == {"hooks": [{"path": "a"}]}


@pytest.mark.parametrize("other", [{"hooks_idempotency": {"store_backend": "sqlite"}}, {"idempotency": "sqlite"},
                                   {"gateway": {"hooks_idempotency": "sqlite"}}, {"gateway": {"hooks": []}}])
def test_translate_config_refuses_a_second_idempotency_form(other: Dict[str, Any]) -> None:
    """Only hooks.idempotency counts: a second form beside it (which 0.1.16 would read
    instead) is a fatal config error, never a silent switch back to per-replica SQLite."""
    with pytest.raises(config.ConfigError, match="only as hooks.idempotency"):
        config.translate_config({"hooks": {"idempotency": {"store_backend": "redis"}}, **other})


@pytest.mark.parametrize("hooks", [{"idempotency": "redis", "hook": []}, {"hooks": {"path": "a"}}])
def test_translate_config_rejects_malformed_nested_hooks(hooks: Dict[str, Any]) -> None:
    with pytest.raises(config.ConfigError):
        config.translate_config({"hooks": hooks})


def test_apply_bind_overrides_gateway_host_and_port() -> None:
    cfg = config.apply_bind({"gateway": {"host": "0.0.0.0", "port": 8765}}, "127.0.0.1", 9000)
    assert cfg["gateway"] == {"host": "127.0.0.1", "port": 9000}
    assert config.apply_bind({}, None, None) == {"gateway": {}}


def test_redis_settings_url_form_embeds_quoted_password() -> None:
    documented = {"push": {"redis": {"url": "redis://redis.ns:6379/2", "password": "${PW}", "prefix": "gwop:ns:n:"}}}

    settings = config.redis_settings(documented, {"PW": "a/b@c:d"})

    assert settings["url"] == "redis://:a%2Fb%40c%3Ad@redis.ns:6379/2"
    assert settings["prefix"] == "gwop:ns:n:" and settings["password"] == "a/b@c:d"
    assert config.describe_redis(settings) == "redis://redis.ns:6379/2 prefix=gwop:ns:n:"


def test_redis_settings_url_form_without_password_or_with_url_credentials() -> None:
    plain = {"push": {"redis": {"url": "redis://r:6379/0", "password": "${UNSET}"}}}
    assert config.redis_settings(plain, {}) == {"url": "redis://r:6379/0"}

    own = {"push": {"redis": {"url": "rediss://u:mine@r:6380/0", "password": "other"}}}
    assert config.redis_settings(own, {})["url"] == "rediss://u:mine@r:6380/0"


def test_redis_settings_host_form_coerces_numbers_from_env() -> None:
    documented = {"push": {"redis": {"host": "redis.ns", "port": "${RP}", "db": 3, "password": "${PW}"}}}
    settings = config.redis_settings(documented, {"RP": "6390", "PW": "pw"})
    assert settings == {"host": "redis.ns", "port": 6390, "db": 3, "password": "pw"}


def test_redis_settings_absent_and_invalid() -> None:
    assert config.redis_settings({}, {}) is None
    assert config.redis_settings({"push": {}}, {}) is None
    for bad in ({"push": "x"}, {"push": {"redis": 1}}, {"push": {"redis": {"host": "h", "hots": 1}}},
                {"push": {"redis": {"url": "http://h:1/0"}}}, {"push": {"redis": {"host": "h", "port": "x"}}},
                {"push": {"redis": {"prefix": "p"}}}):
        with pytest.raises(config.ConfigError):
            config.redis_settings(bad, {})


def test_turn_lock_settings_top_level_then_gateway_block() -> None:
    assert config.turn_lock_settings({"turn_lock": {"backend": "redis"}}, {}) == {"backend": "redis"}
    nested = {"gateway": {"turn_lock": {"url": "${U}"}}}
    assert config.turn_lock_settings(nested, {"U": "redis://x"}) == {"url": "redis://x"}
    assert config.turn_lock_settings({}, {}) is None


def test_config_warnings_flags_redis_backend_without_redis() -> None:
    translated = config.translate_config(documented_config())
    assert config.config_warnings(translated, None)
    assert config.config_warnings(translated, {"host": "r"}) == []
    assert config.config_warnings({"hooks_idempotency": "sqlite"}, None) == []


def test_redact_strips_pydantic_input_and_secrets() -> None:
    msg = ("Invalid config:\nhooks\n  Input should be a valid list "
           "[type=list_type, input_value={'pw': 'hunter22'}, input_type=dict]\ntoken hunter22")
    assert pod_log.redact(msg, ["hunter22"]) == "Invalid config: | hooks | Input should be a valid list | token ***"



def test_the_launcher_and_the_operator_agree_on_what_they_still_spell_apart() -> None:
    """The launcher runs in the pods and imports nothing of the operator: the names they share are
    gwop_contract's (tests/unit/test_contract.py); the config forms and push.redis keys each spells
    on its own, this test keeps equal."""
    from gateway_operator import api
    from gateway_operator.api import validation
    from gateway_operator.core.render.gateway_config import gateway_config
    from gateway_operator.core.render.names import Owner
    assert config._OTHER_IDEMPOTENCY_FORMS == validation.OTHER_IDEMPOTENCY_FORMS
    # whatever the operator writes into push.redis, the launcher takes (the fullest spec.redis there is)
    spec = spec_of({"redis": {"host": "10.0.0.5", "passwordSecretRef": {"name": "l"},
                                    "usernameSecretRef": {"name": "l"},
                                    "tls": {"enabled": True, "caSecretRef": {"name": "c"}, "serverName": "r.x"}}})
    from gateway_operator.api.redis_target import resolve
    pushed = gateway_config(Owner("g", "n", "u"), spec, resolve(spec.redis, "n", "g"))["push"]["redis"]
    assert set(pushed) <= config._REDIS_KEYS and {"username", "tls_server_name"} <= set(pushed)
    # the env vars it renders as ${VAR} are the ones the launcher keeps out of its log lines
    names = {api.AUTH_TOKEN_ENV, api.REDIS_PASSWORD_ENV, api.REDIS_USERNAME_ENV}
    assert names <= set(config.env_refs({"push": {"redis": pushed}})) | {api.AUTH_TOKEN_ENV}
    os.environ.update({name: f"value-of-{name}" for name in names})
    try:
        assert all(f"value-of-{name}" in entry._secrets({}, None) for name in names)
    finally:
        for name in names:
            os.environ.pop(name)


def spec_of(extra: Dict[str, Any]) -> Any:
    """A GatewaySpec from a partial spec."""
    from gateway_operator.api import GatewaySpec
    return GatewaySpec.parse({"image": "x", "config": {}, **extra})


def test_the_last_words_go_where_the_kubelet_keeps_them_and_nowhere_else(tmp_path: Path, capsys) -> None:
    """The exit line also goes to the termination-message file the kubelet made (the operator reads
    it from the pod's lastState); outside a pod no such file is created."""
    made = tmp_path / "termination-log"
    made.write_text("")
    pod_log.last_words("unsupported gateway: lacks X", str(made))
    assert made.read_text() == "gateway-launcher: unsupported gateway: lacks X"
    absent = tmp_path / "absent"
    pod_log.last_words("fatal config error: y", str(absent))
    assert not absent.exists()
    assert capsys.readouterr().err.splitlines() == ["gateway-launcher: unsupported gateway: lacks X",
                                                    "gateway-launcher: fatal config error: y"]
