"""The API declared once (fields.py): the CRD, parse's defaults, docs/reference.md's table and
the launcher's copies all say what the field declarations of api.py say."""
from __future__ import annotations

import copy
import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway_operator import api
from gateway_operator.api import fields
from gateway_operator.api import GatewaySpec
from gateway_operator.api.crd import spec_schema
from gateway_operator.offline import apply_defaults

REPO = Path(__file__).resolve().parents[2]
SECTIONS = (api.GatewaySpec, api.RedisSpec, api.RedisTLSSpec, api.ManagedRedisSpec, api.ManagedPersistenceSpec, api.HealthSpec,
            api.PersistenceSpec, api.SessionsSpec, api.ServiceSpec, api.NetworkPolicySpec)


def test_reference_table_is_generated_and_fresh() -> None:
    """docs/reference.md's GatewayDeployment reference is hack/api-reference.py's output (the CRD's spec
    schema): a field added or a description changed without `make api-reference` fails here."""
    result = subprocess.run([sys.executable, str(REPO / "hack/api-reference.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("spec", [
    {},
    {"redis": {}, "health": {}, "persistence": {}, "sessions": {}, "service": {}, "networkPolicy": {}},
    {"replicas": 3, "redis": {"host": "r", "tls": {}, "managed": {"persistence": {}}}},
    {"redis": {"managed": {"enabled": True, "persistence": {"enabled": False}}}},
], ids=["bare", "empty-sections", "nested-empty", "managed-opt-out"])
def test_the_api_servers_defaults_and_parses_agree(spec: dict[str, Any]) -> None:
    """What the API server stores (the CRD's defaults applied) reads as what parse makes of the spec
    as written: both defaults come from the one declaration."""
    spec = {"image": "x", "config": {"agents": {}, "channels": {}}, **spec}
    assert GatewaySpec.parse(apply_defaults(copy.deepcopy(spec), spec_schema())) == GatewaySpec.parse(spec)


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_section_field_is_declared_and_said(cls: type) -> None:
    """Each field of a declared section carries its declaration (but what parse derives), and its
    description fills in: no {placeholder} left, a default stated where one applies."""
    derived = {"managed_persistence"}  # RedisSpec.parse's, from the replica count
    assert {f.name for f in dataclasses.fields(cls)} - derived == {name for name, _ in fields.declared(cls)}
    for prop in (member for prop in fields.props(cls) for member in (prop.members or (prop,))):
        text = prop.text
        assert not re.search(r"\{(default|range|max_length)\}|None", text), (cls.__name__, prop.name, text)
        if prop.default is not fields.NO_DEFAULT:
            assert fields.shown(prop.default) in text, (cls.__name__, prop.name, text)


def _launcher() -> Any:
    """The pods' configuration module (gwop_config), imported as the pod imports it."""
    from harness import pod_code
    pod_code.importable()
    import gwop_config
    return gwop_config


def test_the_launchers_session_defaults_are_the_apis() -> None:
    """The pod code runs alone in the pods (it cannot import the operator): its fallbacks for the
    session_history section the operator writes from spec.sessions are the API's defaults."""
    launcher = _launcher()
    sessions = api.SessionsSpec()
    store = next(p for p in fields.props(api.SessionsSpec) if p.name == "store")
    for value in store.keywords["enum"]:
        assert launcher.session_settings({launcher.SESSION_HISTORY_KEY: {"store": value}}) == {
            "store": value, "max_messages": sessions.max_messages, "ttl_seconds": sessions.ttl_seconds,
            "max_sessions": sessions.max_sessions}
    import gwop_sessions
    assert gwop_sessions.DEFAULT_MAX_SESSIONS == sessions.max_sessions
    with pytest.raises(launcher.ConfigError):
        launcher.session_settings({launcher.SESSION_HISTORY_KEY: {"store": "elsewhere"}})
