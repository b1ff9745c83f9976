"""Offline tools for GitOps users: check a GatewayDeployment against the CRD (structural
schema, defaults, and the CEL rules' Python twins, worded as the API server words them)
and render the objects it would produce."""
from __future__ import annotations

import copy
from typing import Any, Mapping

from . import render
from .api import GatewaySpec
from .crd import spec_schema
from .redis_target import InvalidRedisURL, resolve
from .replicas import replicas_to_run
from .validation import RULES, Subject, limit_violations

_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,),
                                       "integer": (int,), "boolean": (bool,), "number": (int, float)}


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number"}.get(type(value), type(value).__name__)


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """The API server's defaulting: fill absent properties that declare a default."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


def structural_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    expected = schema.get("type")
    if expected and not (isinstance(value, _TYPES[expected]) and
                         not (expected in ("integer", "number") and isinstance(value, bool))):
        kind = _type_name(value)
        return [f'{path}: Invalid value: "{kind}": {path} in body must be of type {expected}: "{kind}"']
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(f'{path}: Unsupported value: "{value}": supported values: {supported}')
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: Invalid value: {value}: {path} in body should be greater than or equal to "
                      f"{schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: Invalid value: {value}: {path} in body should be less than or equal to "
                      f"{schema['maximum']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f'{path}: Invalid value: "{value}": {path} in body should be at least '
                      f'{schema["minLength"]} chars long')
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: Too long: may not be more than {schema['maxLength']} bytes")
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if key not in value:
                errors.append(f"{path}.{key}: Required value")
        props = schema.get("properties") or {}
        for key, sub_value in value.items():
            if key in props:
                errors += structural_errors(sub_value, props[key], f"{path}.{key}")
            elif "additionalProperties" in schema:
                errors += structural_errors(sub_value, schema["additionalProperties"], f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f'{path}.{key}: unknown field "{path}.{key}"')
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += structural_errors(item, schema["items"], f"{path}[{i}]")
    return errors


class Refused(ValueError):
    """``render`` of an object ``check`` refuses: carries the same messages."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def check(doc: Mapping[str, Any]) -> list[str]:
    """Everything the API server would refuse, with its wording, then the operator's own
    limits; empty when the operator would act on the object."""
    spec_raw = doc.get("spec")
    if spec_raw is None:
        return ["spec: Required value"]
    name = str((doc.get("metadata") or {}).get("name") or "")
    schema = spec_schema()
    spec = apply_defaults(copy.deepcopy(spec_raw), schema) if not limit_violations({"config": _config(spec_raw)}) \
        else spec_raw
    errors = structural_errors(spec, schema, "spec")
    if errors:
        return errors  # the API server runs CEL rules only on a structurally valid object
    subject = Subject(name, spec)
    errors = [f'{_where(rule.at)}: Invalid value: "object": {rule.message}' for rule in RULES
              if not rule.holds(subject)]
    return errors or [f"spec.config: {m}" for m in limit_violations(spec)]


def _config(spec: Any) -> Any:
    return spec.get("config") if isinstance(spec, Mapping) else None


def _where(at: str) -> str:
    return "<root>" if at == "root" else at


def render_objects(doc: Mapping[str, Any], default_namespace: str = "default",
                   operator: render.OperatorIdentity = render.OperatorIdentity()) -> list[dict[str, Any]]:
    """The objects the operator would apply (uid is a placeholder until the object exists).
    Raises Refused, with ``check``'s messages, for an object the operator would not act on."""
    errors = check(doc)
    if errors:
        raise Refused(errors)
    meta = doc.get("metadata") or {}
    owner = render.Owner(meta.get("name", "gateway"), meta.get("namespace") or default_namespace,
                         meta.get("uid") or "00000000-0000-0000-0000-000000000000")
    spec = GatewaySpec.parse(apply_defaults(copy.deepcopy(doc["spec"]), spec_schema()))
    try:
        target = resolve(spec.redis, owner.namespace, owner.name)
    except InvalidRedisURL as e:
        raise Refused([str(e)]) from None
    # once the Redis probe passes: what the spec asks for, within the replica policy
    replicas = replicas_to_run(spec, probe_ok=True, running=spec.replicas)
    return render.desired_objects(owner, spec, target, replicas, operator=operator)
