"""What a webhook delivery must be before the gateway reads it: a body within a bound, and, where the
hook keys deliveries by an ``idempotency_key`` template, the payload fields that template names.

Why the second: praisonaiagents 1.7.17 renders a missing field as an empty string and keys the
delivery on what is left (``compute_idempotency_key``); only a render that is empty altogether falls
back to a hash of the whole payload. So ``evt-{id}`` keys every delivery without ``id`` as ``evt-``,
and ``{repo}:{id}`` keys every id-less delivery of one repository alike: the first runs, and every
later one is answered ``deduplicated`` and never runs. Such a delivery is answered 400 naming the
missing field (never echoing the payload), which a provider reports as a failed delivery instead of a
message silently dropped. A template that renders empty (``{id}`` alone, ``id`` absent) is left to
the gateway's whole-payload hash, which cannot collapse distinct deliveries.

``refusal`` runs at the top of the ``/hooks/`` endpoint wrapper (gwop_claims), so before the
gateway's own checks: the hook's signature and event filter are asked first (HookConfig's public
``verify_signature`` and ``event_allowed``, so a bad signature keeps its 401 and a filtered event its
200 ``skipped``), but its bearer ``auth`` is the gateway's, so an unauthenticated caller can learn the
name of a field the template needs (never a value). Standard library and starlette only.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List, Mapping, Optional

from starlette.responses import JSONResponse

# praisonaiagents.gateway.hooks._PLACEHOLDER (1.7.17): ``{{ payload.a.b }}`` and ``{a.b}``, the
# double-brace form first; tests/unit/test_pod_limits.py checks this agrees with the installed one
_PLACEHOLDER = re.compile(r"\{\{\s*([^}]+?)\s*\}\}|\{\s*([^{}]+?)\s*\}")


class GatewayHooks:
    """``hooks_by_path`` over the gateway's public ``get_hook(path)`` (hot reloads included)."""

    def __init__(self, get_hook: Callable[[str], Any]) -> None:
        self._get_hook = get_hook

    def get(self, path: str, default: Any = None) -> Any:
        found = self._get_hook(path)
        return default if found is None else found


def _lookup(path: str, payload: Mapping[str, Any]) -> Any:
    """praisonaiagents' ``_lookup``: a dotted path into the payload, ``payload.`` optional; None when absent."""
    key = path.strip()
    if key.startswith("payload."):
        key = key[len("payload."):]
    elif key == "payload":
        return payload
    current: Any = payload
    for part in key.split("."):
        part = part.strip()
        if not part:
            continue
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return None
    return current


def missing_fields(template: Optional[str], payload: Mapping[str, Any]) -> List[str]:
    """The fields of ``template`` that render empty for ``payload`` when what the template still renders
    is not empty (the gateway would key the delivery on that rest, shared by every delivery lacking
    them); [] when every field is there, or when the whole render is empty (the gateway then hashes the
    whole payload)."""
    if not template:
        return []
    missing: List[str] = []

    def render(match: "re.Match[str]") -> str:
        expr = match.group(1) if match.group(1) is not None else match.group(2)
        value = _lookup(expr, payload)
        text = "" if value is None else str(value)
        if not text.strip():
            missing.append(expr.strip())
        return text

    rendered = _PLACEHOLDER.sub(render, template)
    return list(dict.fromkeys(missing)) if missing and rendered.strip() else []


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"ok": False, "error": f"request body larger than {limit} bytes"}, status_code=413)


async def _bounded_body(request: Any, limit: int) -> Optional[bytes]:
    """The request's body, or None once it is past ``limit`` (what arrived past it is never kept).
    Starlette caches ``request.body()`` for the gateway's own read; a body read in chunks here (no
    Content-Length: chunked) is cached where ``body()`` caches it."""
    if hasattr(request, "_body"):
        body: bytes = request._body
        return body if len(body) <= limit else None
    if request.headers.get("content-length") is not None:
        body = await request.body()  # the server delivers no more than the Content-Length said
        return body if len(body) <= limit else None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    request._body = b"".join(chunks)
    return request._body


async def refusal(request: Any, hooks_by_path: Any, max_body_bytes: int) -> Optional[JSONResponse]:
    """The answer to a delivery to ``POST /hooks/<path>`` the gateway must not see, or None: 413 for a
    body over ``max_body_bytes`` (by its Content-Length, or once that many bytes arrived), 400 naming
    the fields its hook's ``idempotency_key`` template needs and the payload lacks (see the module).
    ``hooks_by_path``: ``.get(path)`` gives the hook (praisonaiagents' HookConfig, e.g.
    ``GatewayHooks(gateway.get_hook)``) or its template (a str; None: no template), None for no hook."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_body_bytes:
        return _too_large(max_body_bytes)
    body = await _bounded_body(request, max_body_bytes)
    if body is None:
        return _too_large(max_body_bytes)
    hook = hooks_by_path.get(str(request.path_params.get("path", "")).strip().strip("/"))
    if hook is None or getattr(hook, "enabled", True) is False:
        return None  # the gateway's own 404
    template = hook if isinstance(hook, str) else getattr(hook, "idempotency_key", None)
    if not template:
        return None
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        return None  # the gateway's own 400
    if not isinstance(payload, dict):
        payload = {"value": payload}  # as the gateway wraps it
    headers = dict(request.headers)
    verify, allowed = getattr(hook, "verify_signature", None), getattr(hook, "event_allowed", None)
    if callable(verify) and getattr(hook, "secret", None) and not verify(body, headers):
        return None  # the gateway's own 401
    if callable(allowed) and not allowed(payload, headers):
        return None  # the gateway's own 200 skipped
    missing = missing_fields(template, payload)
    if not missing:
        return None
    return JSONResponse({"ok": False, "error": (
        f"the payload lacks {', '.join(missing)}, which this hook's idempotency_key template needs: without "
        f"{'it' if len(missing) == 1 else 'them'} every such delivery would share one dedup key and only the "
        "first would run")}, status_code=400)
