"""The GatewayDeployment API's fields, each declared once.

As kubebuilder markers on a Go struct feed controller-gen, the metadata of a spec dataclass's
field in api.py says everything about it: its JSON name, OpenAPI type, default, bounds or
allowed values and its description. From that one declaration come

* the typed view and its defaults: ``parse`` (and the dataclass's own defaults),
* the CRD's schema and descriptions: crd.py's ``object_schema``,
* docs/reference.md's table: hack/api-reference.py, from the CRD crd.py generates.

A description says ``{default}``, ``{range}`` and ``{max_length}`` where the declaration's
default and bounds belong, so "Default 10." and "1-3600" are never written by hand beside them.

Pure: imports nothing of the package (api.py imports it).
"""
from __future__ import annotations

import builtins
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

NO_DEFAULT: Any = type("NoDefault", (), {"__repr__": lambda self: "NO_DEFAULT"})()
_KEY = "gateway_operator.api"
# the OpenAPI keywords of a scalar, in the order the CRD writes them (after type and description)
SCALAR_KEYWORDS = ("format", "enum", "minimum", "exclusiveMinimum", "maximum", "minLength", "maxLength",
                   "pattern")


def as_written(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Prop:
    """One field of the API: what the CRD declares and what ``parse`` reads."""

    name: str                      # its JSON name in the spec
    type: str                      # OpenAPI type: boolean, integer, number, string, array, object ("": built)
    description: str               # may say {default}, {range} and {max_length}
    default: Any = NO_DEFAULT      # what an absent key reads as, and the CRD's default
    convert: Callable[[Any], Any] = as_written  # the typed value of the raw one (default applied)
    keywords: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # SCALAR_KEYWORDS, maxItems
    items: "Prop | None" = None    # an array's element
    section: builtins.type[Section] | None = None  # an object declared by a spec dataclass of its own (builtins: ``type`` is the field above)
    validations: str | None = None  # a section's validation.RULES (their ``at``)
    kind: str | None = None        # a schema crd.py builds: "secret", "map", "config", a pod field's name...
    secret_key: str = ""           # kind "secret": the key's default
    secret_default: str = "none"   # kind "secret": what applies without one
    required: bool = False
    members: "tuple[Prop, ...]" = ()  # a group: one attribute holding the fields below that are set

    @property
    def text(self) -> str:
        """The description with its {default}, {range} and {max_length} filled in."""
        return (self.description.replace("{default}", shown(self.default))
                .replace("{range}", _range(self.keywords))
                .replace("{max_length}", str(self.keywords.get("maxLength"))))

    def read(self, raw: Mapping[str, Any]) -> Any:
        if self.section is not None:
            return self.section.parse(raw.get(self.name))
        if self.members:
            return self.convert({m.name: raw[m.name] for m in self.members if raw.get(m.name)})
        return self.convert(raw.get(self.name) if self.default is NO_DEFAULT else raw.get(self.name, self.default))

    def initial(self) -> Any:
        """The value of a spec nobody wrote (the dataclass default)."""
        if self.section is not None:
            return self.section.parse(None)
        if self.members:
            return self.convert({})
        return self.convert(None if self.default is NO_DEFAULT else self.default)


def shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _range(keywords: Mapping[str, Any]) -> str:
    low, high = keywords.get("minimum"), keywords.get("maximum")
    if low is not None and high is not None:
        return f"{low}-{high}"
    return f"{low} or more" if low is not None else ""


def api(prop: Prop) -> Any:
    """A dataclass field declared by ``prop``."""
    return dataclasses.field(default_factory=prop.initial, metadata={_KEY: prop})


def scalar(name: str, type_: str, description: str, default: Any = NO_DEFAULT, *,
           convert: Callable[[Any], Any] = as_written, required: bool = False, **keywords: Any) -> Prop:
    """``keywords``: SCALAR_KEYWORDS spelt as Python names (exclusive_minimum, min_length, ...)."""
    keywords = {_camel(k): v for k, v in keywords.items()}
    unknown = set(keywords) - set(SCALAR_KEYWORDS)
    if unknown:
        raise TypeError(f"{name}: unknown schema keywords {sorted(unknown)}")
    return Prop(name, type_, description, default, convert, keywords, required=required)


def section(name: str, cls: type[Section], description: str, validations: str | None = None) -> Prop:
    return Prop(name, "object", description, section=cls, validations=validations)


def array(name: str, description: str, items: Prop, convert: Callable[[Any], Any], max_items: int) -> Prop:
    return Prop(name, "array", description, convert=convert, keywords={"maxItems": max_items}, items=items)


def built(name: str, kind: str, description: str, convert: Callable[[Any], Any], **extra: Any) -> Prop:
    """A field whose schema crd.py builds (``kind``): a Secret reference ("secret"), a string map
    ("map"), a pod field as the pinned Kubernetes publishes it (its name), or one that owns its
    description too ("config", "expose", "env": they state validation.py's limits, which this
    layer cannot import)."""
    return Prop(name, "", description, convert=convert, kind=kind, **extra)


def group(convert: Callable[[Any], Any], *members: Prop) -> Prop:
    """One attribute for several sibling fields: the mapping of those of ``members`` that are set."""
    return Prop("", "object", "", convert=convert, kind="group", members=members)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def declared(cls: type) -> Iterator[tuple[str, Prop]]:
    """The API fields of a spec dataclass (attribute, declaration), in its declaration order (the CRD's)."""
    for f in dataclasses.fields(cls):
        if _KEY in f.metadata:
            yield f.name, f.metadata[_KEY]


def props(cls: type) -> Iterator[Prop]:
    return (prop for _, prop in declared(cls))


def prop_of(cls: type, attribute: str) -> Prop:
    """The declaration of one field (for a rule that states its bound)."""
    return dict(declared(cls))[attribute]


def parse(cls: type, raw: Mapping[str, Any] | None) -> Any:
    """The typed, defaulted view of one section of the spec."""
    raw = raw or {}
    return cls(**{attribute: prop.read(raw) for attribute, prop in declared(cls)})


class Section:
    """A spec dataclass whose every field is declared with ``api``: ``parse`` comes from them."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> Any:
        return parse(cls, raw)
