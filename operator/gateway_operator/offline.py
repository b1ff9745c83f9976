"""Offline tools for GitOps users: check a GatewayDeployment against the CRD (structural
schema, defaults, and the CEL rules' Python twins, worded as the API server words them) and
against the chart's tenancy policy (its defaults, or the values a cluster installed it with),
and render the objects it would produce."""
from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any, Mapping, NamedTuple

from gateway_operator.api import GatewaySpec
from gateway_operator.api.crd import spec_schema
from gateway_operator.api.redis_target import InvalidRedisURL, resolve
from gateway_operator.api.tenancy import TenancyPolicy, violations as tenancy_violations
from gateway_operator.api.validation import RULES, Subject, limit_violations
from gateway_operator.core.render.names import OperatorIdentity, Owner
from gateway_operator.core.render.objects import desired_objects
from gateway_operator.core.replicas import replicas_to_run
from gateway_operator.pod import pod_code

_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,),
                                       "integer": (int,), "boolean": (bool,), "number": (int, float)}
# field.ErrorTypes after which the API server skips the CEL rules (customresource strategy's hasBlockingErr)
_BLOCKING = frozenset({"Required", "Unsupported", "TooLong", "TooMany", "TypeInvalid"})
MSG_CEL_SKIPPED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
                   "invalid; correct the existing errors to complete validation")


class FieldError(NamedTuple):
    """One error as the API server reports it: its field.ErrorType and its text."""

    kind: str
    text: str

    @property
    def blocking(self) -> bool:
        return self.kind in _BLOCKING


def _json_number(value: Any) -> Any:
    """A number as the API server holds it: JSON decoding makes an integral float an int64."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _type_name(value: Any) -> str:
    value = _json_number(value)
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number"}.get(type(value), type(value).__name__)


def _go_quote(text: str) -> str:
    """Go's %q (strconv.Quote)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _go_json(value: Any) -> str:
    """Go's json.Marshal: compact, sorted keys, UTF-8, <, > and & escaped."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _go_value(value: Any) -> str:
    """How field.Error prints a bad value."""
    value = _json_number(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _go_quote(value)
    return _go_json(value)


def _is_type(value: Any, expected: str) -> bool:
    value = _json_number(value)
    if isinstance(value, bool):
        return expected == "boolean"
    return isinstance(value, _TYPES[expected])


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """The API server's decoding after pruning: drop null map values the schema declares
    without a default (PruneNonNullableNullsWithoutDefaults), then fill absent or null
    properties that declare a default."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in [k for k, v in value.items() if v is None]:
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is not None and not sub.get("nullable") and "default" not in sub:
                del value[key]
        for key, sub in props.items():
            if value.get(key) is None and "default" in sub and not sub.get("nullable"):
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(value[key], sub)
        if isinstance(extra, Mapping):
            for key in [k for k in value if k not in props]:
                value[key] = apply_defaults(value[key], extra)
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


def _go_v(value: Any) -> str:
    """Go's %v of a decoded JSON value."""
    value = _json_number(value)
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + " ".join(_go_v(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_v(v)}" for k, v in sorted(value.items())) + "]"
    return str(value) if not isinstance(value, float) else repr(value)


def _go_type(value: Any) -> str:
    """Go's %T of a decoded JSON value."""
    value = _json_number(value)
    return {type(None): "<nil>", bool: "bool", int: "int64", float: "float64", str: "string",
            list: "[]interface {}", dict: "map[string]interface {}"}.get(type(value), type(value).__name__)


@functools.lru_cache(maxsize=1)
def _spec_replicas_path() -> str | None:
    from gateway_operator.api.crd import crd
    scale = crd()["spec"]["versions"][0].get("subresources", {}).get("scale")
    return scale["specReplicasPath"] if scale else None


def scale_errors(spec: Any) -> list[FieldError]:
    """The /scale subresource's own check of specReplicasPath (customResourceValidator.ValidateScaleSpec)."""
    path = _spec_replicas_path()
    if path is None:
        return []
    fields = path.lstrip(".").split(".")
    node: Any = {"spec": spec}
    for i, key in enumerate(fields):
        if node is None:
            return []
        if not isinstance(node, dict):
            where = "." + ".".join(fields[:i + 1])
            return [FieldError("Invalid", f"{path}: Invalid value: 0: {where} accessor error: {_go_v(node)} is of "
                                          f"the type {_go_type(node)}, expected map[string]interface{{}}")]
        if key not in node:
            return []
        node = node[key]
    replicas = _json_number(node)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        return [FieldError("Invalid", f"{path}: Invalid value: 0: {path} accessor error: {_go_v(replicas)} is of the "
                                      f"type {_go_type(replicas)}, expected int64")]
    if replicas < 0:
        return [FieldError("Invalid", f"{path}: Invalid value: {replicas}: should be a non-negative integer")]
    if replicas > 2**31 - 1:
        return [FieldError("Invalid", f"{path}: Invalid value: {replicas}: should be less than or equal to "
                                      f"{2**31 - 1}")]
    return []


def unknown_fields(value: Any, schema: Mapping[str, Any] | None, path: str) -> list[str]:
    """The paths the API server prunes (and, under kubectl's default strict field validation,
    refuses as 'unknown field'), sorted as it sorts them: its pruning walk (apiextensions
    pruning.prune/skipPrune), which follows the schema whatever the value's types."""
    found: list[str] = []
    # (keep, node, schema, path): keep is skipPrune, under x-kubernetes-preserve-unknown-fields
    stack: list[tuple[bool, Any, Mapping[str, Any] | None, str]] = [(False, value, schema, path)]
    while stack:  # no recursion: a hostile object may nest thousands of levels
        keep, node, sub, where = stack.pop()
        if not keep and sub is not None and sub.get("x-kubernetes-preserve-unknown-fields"):
            keep = True
        if keep and sub is None:
            continue
        if isinstance(node, dict):
            if sub is None:
                found.extend(f"{where}.{key}" for key in node)
                continue
            props = sub.get("properties") or {}
            extra = sub.get("additionalProperties")
            for key, child in node.items():
                if key in props:
                    stack.append((False, child, props[key], f"{where}.{key}"))
                elif extra is not None and extra is not False:
                    stack.append((False, child, extra if isinstance(extra, Mapping) else None, f"{where}.{key}"))
                elif not keep:
                    found.append(f"{where}.{key}")
        elif isinstance(node, list):
            items = sub.get("items") if sub is not None else None
            stack.extend((keep, child, items, f"{where}[{i}]") for i, child in enumerate(node))
    return sorted(found)


def schema_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[FieldError]:
    """The OpenAPI validation of the API server (kube-openapi), worded as it words it."""
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is_type(value, "integer") or isinstance(value, str)):
            kind = _type_name(value)
            return [FieldError("TypeInvalid", f'{path}: Invalid value: "{kind}": {path} in body must be of type '
                                              f'integer,string: "{kind}"')]
    expected = schema.get("type")
    if expected and not _is_type(value, expected):
        kind = _type_name(value)
        return [FieldError("TypeInvalid",
                           f'{path}: Invalid value: "{kind}": {path} in body must be of type {expected}: "{kind}"')]
    value = _json_number(value)
    errors: list[FieldError] = []
    shown = _go_value(value)
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(FieldError("Unsupported", f"{path}: Unsupported value: {shown}: supported values: {supported}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            bound = _go_value(schema["minimum"])
            if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
                errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should be "
                                                    f"greater than {bound}"))
            elif value < schema["minimum"]:
                errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should be "
                                                    f"greater than or equal to {bound}"))
        if "maximum" in schema:
            bound = _go_value(schema["maximum"])
            if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
                errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should be "
                                                    f"less than {bound}"))
            elif value > schema["maximum"]:
                errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should be "
                                                    f"less than or equal to {bound}"))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should be at least "
                                                f"{schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(FieldError("TooLong", f"{path}: Too long: may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(FieldError("Invalid", f"{path}: Invalid value: {shown}: {path} in body should match "
                                                f"'{schema['pattern']}'"))
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if key not in value:
                errors.append(FieldError("Required", f"{path}.{key}: Required value"))
        props = schema.get("properties") or {}
        for key, sub_value in value.items():
            if key in props:
                errors += schema_errors(sub_value, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), Mapping):
                errors += schema_errors(sub_value, schema["additionalProperties"], f"{path}.{key}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(FieldError("TooMany", f"{path}: Too many: {len(value)}: must have at most "
                                                f"{schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(FieldError("Invalid", f"{path}: Invalid value: {len(value)}: {path} in body should have "
                                                f"at least {schema['minItems']} items"))
        if "items" in schema:
            for i, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{path}[{i}]")
    return errors


def _scalar_key(value: Any) -> Any:
    """Go compares interface values with their types: "1" != 1 and 1 != 1.5."""
    value = _json_number(value)
    return (type(value).__name__, value) if not isinstance(value, (dict, list)) else ("json", _go_json(value))


def _repeated(keys: list[Any]) -> list[int]:
    """Indexes of the second appearance of each repeated key (listtype.validateListSet)."""
    seen: dict[Any, int] = {}
    out = []
    for i, key in enumerate(keys):
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            out.append(i)
    return out


def list_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[FieldError]:
    """x-kubernetes-list-type set and map: no repeated item or key (apiextensions listtype)."""
    errors: list[FieldError] = []
    if isinstance(value, dict):
        extra = schema.get("additionalProperties")
        props = schema.get("properties") or {}
        for key, sub_value in value.items():
            if isinstance(extra, Mapping):
                errors += list_errors(sub_value, extra, f"{path}.{key}")
            if key in props:
                errors += list_errors(sub_value, props[key], f"{path}.{key}")
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            errors += [FieldError("Duplicate", f"{path}[{i}]: Duplicate value: {_go_value(value[i])}")
                       for i in _repeated([_scalar_key(v) for v in value])]
        elif list_type == "map":
            not_objects = [i for i, v in enumerate(value) if v is not None and not isinstance(v, dict)]
            if not_objects:
                i = not_objects[0]
                errors.append(FieldError("Invalid", f"{path}[{i}]: Invalid value: {_go_value(value[i])}: must be an "
                                                    "object for an array of list-type map"))
            else:
                names = schema.get("x-kubernetes-list-map-keys") or []
                keys = [{k: v[k] for k in names if k in v} if isinstance(v, dict) else {} for v in value]
                errors += [FieldError("Duplicate", f"{path}[{i}]: Duplicate value: {_go_json(keys[i])}")
                           for i in _repeated([_go_json({k: _json_number(x) for k, x in key.items()})
                                               for key in keys])]
        if "items" in schema:
            for i, item in enumerate(value):
                errors += list_errors(item, schema["items"], f"{path}[{i}]")
    return errors


def structural_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    """What the API server refuses before any CEL rule: unknown fields (alone, as strict field
    validation refuses the object before validating it), else schema and list-type errors."""
    unknown = unknown_fields(value, schema, path)
    if unknown:
        return [f'{p}: unknown field "{p}"' for p in unknown]
    return [e.text for e in schema_errors(value, schema, path) + list_errors(value, schema, path)]


class Refused(ValueError):
    """``render`` of an object ``check`` refuses: carries the same messages."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


#: how a refusal of the chart's tenancy ValidatingAdmissionPolicy starts (kubectl prints the policy's
#: and binding's names, which depend on the release, then "denied request: " and the rule's message)
TENANCY_DENIED = "ValidatingAdmissionPolicy '<release>-tenancy' with binding '<release>-tenancy' denied request: "


def check(doc: Mapping[str, Any], policy: TenancyPolicy | None = None,
          default_namespace: str = "default") -> list[str]:
    """Everything the API server would refuse, with its wording: the CRD, then the chart's tenancy
    policy (``policy``: its values, ``TenancyPolicy()`` the chart's defaults; None: a cluster without
    it), then the operator's own limits; empty when the operator would act on the object."""
    errors = _crd_check(doc)
    if errors:
        return errors
    namespace = str((doc.get("metadata") or {}).get("namespace") or default_namespace)
    spec = apply_defaults(copy.deepcopy(doc["spec"]), spec_schema())
    denied = tenancy_violations(namespace, spec, policy) if policy is not None else []
    return [TENANCY_DENIED + m for m in denied] or \
        [f"spec.config: {m}" for m in limit_violations(spec)]


def _crd_check(doc: Mapping[str, Any]) -> list[str]:
    spec_raw = doc.get("spec")
    if spec_raw is None:
        return ["spec: Required value"]
    name = str((doc.get("metadata") or {}).get("name") or "")
    schema = spec_schema()
    spec = apply_defaults(copy.deepcopy(spec_raw), schema) if not limit_violations({"config": _config(spec_raw)}) \
        else spec_raw
    unknown = unknown_fields(spec, schema, "spec")
    if unknown:  # kubectl's strict field validation: refused while decoding, before any validation
        return [f'{p}: unknown field "{p}"' for p in unknown]
    found = schema_errors(spec, schema, "spec") + scale_errors(spec) + list_errors(spec, schema, "spec")
    if any(e.blocking for e in found):  # the API server then skips the CEL rules, and says so
        return [e.text for e in found] + [MSG_CEL_SKIPPED]
    subject = Subject(name, spec)
    # kube-apiserver >= 1.37 prints a failed CEL rule without the value (before: Invalid value: "object")
    return [e.text for e in found] + [f"{_where(rule.at)}: Invalid value: {rule.message}"
                                      for rule in RULES if not rule.holds(subject)]


def _config(spec: Any) -> Any:
    return spec.get("config") if isinstance(spec, Mapping) else None


def _where(at: str) -> str:
    return "<nil>" if at == "root" else at  # the API server prints the root path as <nil>


def render_objects(doc: Mapping[str, Any], default_namespace: str = "default",
                   operator: OperatorIdentity = OperatorIdentity(),
                   policy: TenancyPolicy | None = None) -> list[dict[str, Any]]:
    """The objects the operator would apply (uid is a placeholder until the object exists).
    Raises Refused, with ``check``'s messages, for an object the operator would not act on."""
    errors = check(doc, policy, default_namespace)
    if errors:
        raise Refused(errors)
    meta = doc.get("metadata") or {}
    owner = Owner(meta.get("name", "gateway"), meta.get("namespace") or default_namespace,
                  meta.get("uid") or "00000000-0000-0000-0000-000000000000")
    spec = GatewaySpec.parse(apply_defaults(copy.deepcopy(doc["spec"]), spec_schema()))
    try:
        target = resolve(spec.redis, owner.namespace, owner.name)
    except InvalidRedisURL as e:
        raise Refused([str(e)]) from None
    # once the Redis probe passes: what the spec asks for, within the replica policy
    replicas = replicas_to_run(spec, probe_ok=True, running=spec.replicas)
    return desired_objects(owner, spec, target, replicas, operator=operator, pod_code=pod_code())  # read once, cached
