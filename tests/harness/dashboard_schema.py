"""A Grafana dashboard checked against Grafana's dashboard schema, as the maintained
``grafana-foundation-sdk`` (Grafana Labs; types generated from Grafana's own schema) models it.

The SDK decodes JSON leniently (an unknown key is dropped, a wrong type kept as is), so the
check is made of what it does know:

1. **round trip**: decoded into the SDK's models (with its panel and data-query plugins, so a
   stat panel's field config, a Prometheus target ... are typed too) and encoded back, every
   key and value of the file must survive: a key the schema does not have is lost, and named;
2. **types**: every value the models hold matches the type the SDK declares for it (int, str,
   list of ..., the enums, the unions such as ValueMapping, Literal["h", "v"] ...);
3. the panel types and data-source types are ones the SDK has a plugin for;
4. what the schema states in its comments but the types cannot: ids unique, refIds unique in
   a panel, a panel inside the 24-column grid.
"""
from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any, Mapping

from grafana_foundation_sdk.cog import runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

register_default_plugins()


def _type_problems(value: Any, hint: Any, path: str) -> list[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (typing.Any, object):
        return []
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        alternatives = [_type_problems(value, a, path) for a in args if a is not type(None)]
        if any(not p for p in alternatives):
            return []
        # the alternative of the right shape, whose problems lie deeper, names them
        deeper = [p for p in alternatives if not any(line.startswith(f"{path}:") for line in p)]
        return min(deeper, key=len) if deeper else \
            [f"{path}: {value!r} is none of {[getattr(a, '__name__', str(a)) for a in args]}"]
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, want a list"]
        return [p for i, v in enumerate(value) for p in _type_problems(v, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, want a mapping"]
        return [p for k, v in value.items() for p in _type_problems(v, args[1], f"{path}.{k}")]
    if not isinstance(hint, type):
        return []
    if issubclass(hint, enum.Enum):
        return [] if isinstance(value, hint) or value in {m.value for m in hint} else \
            [f"{path}: {value!r} is not a {hint.__name__} ({[m.value for m in hint]})"]
    if hint is bool or hint is str:
        return [] if isinstance(value, hint) else [f"{path}: {value!r} is not a {hint.__name__}"]
    if hint in (int, float):
        ok = isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not a {hint.__name__}"]
    if not isinstance(value, hint):
        return [f"{path}: {type(value).__name__}, want {hint.__name__}"]
    if isinstance(value, runtime.UnknownDataquery):
        return [f"{path}: a data query of no known data-source type"]
    return _model_problems(value, path)


def _model_problems(model: Any, path: str) -> list[str]:
    hints = typing.get_type_hints(type(model))
    return [p for name, hint in hints.items() for p in _type_problems(getattr(model, name), hint, f"{path}.{name}")]


def _lost(original: Any, encoded: Any, path: str) -> list[str]:
    if isinstance(original, dict):
        if not isinstance(encoded, dict):
            return [f"{path}: became {encoded!r}"]
        return [p for k, v in original.items()
                for p in ([f"{path}.{k}: not in the schema"] if k not in encoded else _lost(v, encoded[k], f"{path}.{k}"))]
    if isinstance(original, list):
        if not isinstance(encoded, list) or len(encoded) != len(original):
            return [f"{path}: became {encoded!r}"]
        return [p for i, (a, b) in enumerate(zip(original, encoded)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if original == encoded else [f"{path}: {original!r} became {encoded!r}"]


def dashboard_problems(board: Mapping[str, Any]) -> list[str]:
    """Every way ``board`` departs from the schema; empty when it conforms."""
    try:
        model = Dashboard.from_json(dict(board))
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a union's tag it has no type for ...
        return [f"dashboard: does not decode: {type(e).__name__} {e}"]
    encoded = json.loads(json.dumps(model, cls=JSONEncoder))
    problems = _lost(board, encoded, "dashboard") + _model_problems(model, "dashboard")
    known_panels = set(runtime.Runtime().panelcfg_variants) | {"row"}
    known_sources = set(runtime.Runtime().dataquery_variants)
    ids: set[int] = set()
    for panel in board.get("panels", []):
        where = f"panel {panel.get('id')} ({panel.get('title')!r})"
        if panel.get("type") not in known_panels:
            problems.append(f"{where}: panel type {panel.get('type')!r} is not a Grafana panel plugin")
        if panel.get("id") in ids:
            problems.append(f"{where}: id used twice")
        ids.add(panel.get("id"))
        source = (panel.get("datasource") or {}).get("type")
        if source is not None and source not in known_sources:
            problems.append(f"{where}: data source type {source!r} unknown")
        ref_ids = [t.get("refId") for t in panel.get("targets", [])]
        if len(set(ref_ids)) != len(ref_ids):
            problems.append(f"{where}: refIds {ref_ids} not unique")
        grid = panel.get("gridPos") or {}
        if not (isinstance(grid.get("w"), int) and isinstance(grid.get("x"), int)
                and 0 < grid["w"] and 0 <= grid["x"] and grid["x"] + grid["w"] <= 24):
            problems.append(f"{where}: gridPos {grid} is outside the 24-column grid")
    return problems
