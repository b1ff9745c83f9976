"""gwop_limits (operator/gateway_operator/pod/gwop_limits.py) in a real starlette app shaped like the gateway's
``/hooks/{path}`` route: a body over the bound is answered 413 before the endpoint reads it, a delivery
lacking a field of its hook's ``idempotency_key`` template is answered 400 naming the field (and never
the payload), and everything else reaches the endpoint with its body intact. The collapse it prevents is
shown on the installed praisonaiagents: ``evt-{id}`` gives every id-less delivery one key."""
from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from praisonaiagents.gateway import hooks as upstream_hooks
from praisonaiagents.gateway.hooks import HookConfig, compute_idempotency_key
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from harness import pod_code

pod_code.importable()
import gwop_limits as limits  # noqa: E402

BOUND = 4096


def app(hooks_by_path: Any) -> TestClient:
    """The gateway's route with the endpoint wrapper's first call: the endpoint echoes what it read."""
    async def endpoint(request: Any) -> JSONResponse:
        refused = await limits.refusal(request, hooks_by_path, BOUND)
        if refused is not None:
            return refused
        body = await request.body()  # as the gateway's handler reads it, after the refusal did
        return JSONResponse({"ok": True, "read": len(body), "echo": body.decode()})

    return TestClient(Starlette(routes=[Route("/hooks/{path:path}", endpoint, methods=["POST"])]))


def test_evt_id_collapses_every_delivery_without_id_in_the_installed_gateway() -> None:
    """What the 400 is for: 1.7.17 renders a missing field empty and keys on the rest."""
    assert limits._PLACEHOLDER.pattern == upstream_hooks._PLACEHOLDER.pattern  # the copy is the gateway's
    a, b = {"text": "deploy failed"}, {"text": "a different event"}
    assert compute_idempotency_key("evt-{id}", a, path="ci") == compute_idempotency_key("evt-{id}", b, path="ci")
    # a template that renders empty falls back to the whole payload: distinct deliveries stay distinct
    assert compute_idempotency_key("{id}", a, path="ci") != compute_idempotency_key("{id}", b, path="ci")
    assert limits.missing_fields("evt-{id}", a) == ["id"] and limits.missing_fields("{id}", a) == []
    assert limits.missing_fields("{repo}:{{ payload.pr.number }}", {"repo": "r", "pr": {}}) == ["payload.pr.number"]
    assert limits.missing_fields("evt-{id}", {"id": 0}) == []  # 0 renders "0", a key of its own


@pytest.mark.parametrize("hooks_by_path", [
    {"ci": "evt-{id}"},                                                      # a template alone
    {"ci": HookConfig(path="ci", idempotency_key="evt-{id}")},                # the gateway's own hook
    limits.GatewayHooks({"ci": HookConfig(path="ci", idempotency_key="evt-{id}")}.get),  # gateway.get_hook
], ids=["template", "hook", "get_hook"])
def test_a_delivery_lacking_its_id_field_is_answered_400_naming_the_field_not_the_payload(hooks_by_path) -> None:
    client = app(hooks_by_path)
    refused = client.post("/hooks/ci", json={"text": "secret-ish content"})
    assert refused.status_code == 400
    assert "lacks id" in refused.json()["error"] and "secret-ish" not in refused.text
    ran = client.post("/hooks//ci/", json={"id": "42", "text": "x"})
    assert ran.status_code == 200 and json.loads(ran.json()["echo"]) == {"id": "42", "text": "x"}


def test_what_the_gateway_answers_itself_is_left_to_it() -> None:
    hooks = {"ci": HookConfig(path="ci", idempotency_key="evt-{id}", events=["push"], event_header="X-Event"),
             "signed": HookConfig(path="signed", idempotency_key="evt-{id}", secret="s3cret"),
             "off": HookConfig(path="off", idempotency_key="evt-{id}", enabled=False),
             "whole": HookConfig(path="whole")}
    client = app(hooks)
    assert client.post("/hooks/ci", json={}, headers={"X-Event": "ping"}).status_code == 200  # filtered: 200 skipped
    assert client.post("/hooks/ci", json={}, headers={"X-Event": "push"}).status_code == 400
    assert client.post("/hooks/signed", json={}).status_code == 200   # bad signature: the gateway's 401
    assert client.post("/hooks/off", json={}).status_code == 200      # disabled: the gateway's 404
    assert client.post("/hooks/whole", json={}).status_code == 200    # no template: whole-payload hash
    assert client.post("/hooks/none", json={}).status_code == 200     # no such hook: the gateway's 404
    assert client.post("/hooks/ci", content=b"{not json", headers={"X-Event": "push"}).status_code == 200


def test_a_body_over_the_bound_is_answered_413_by_its_length_or_as_it_arrives() -> None:
    client = app({"ci": None})
    assert client.post("/hooks/ci", content=b"x" * BOUND).json()["read"] == BOUND  # at the bound: read whole
    too_big = client.post("/hooks/ci", content=b"x" * (BOUND + 1))
    assert too_big.status_code == 413 and str(BOUND) in too_big.json()["error"]

    def chunks(total: int) -> Iterator[bytes]:  # no Content-Length: chunked
        for _ in range(total // 1024):
            yield b"y" * 1024

    assert client.post("/hooks/ci", content=chunks(BOUND * 4)).status_code == 413
    small = client.post("/hooks/ci", content=chunks(2048))
    assert small.status_code == 200 and small.json()["read"] == 2048  # the endpoint reads what was streamed
