"""kubeconform's schemas, made from a real API server (issue 55, item 3): what a chart pipeline's
``kubeconform -strict`` checks a manifest against, for the Kubernetes version that server runs.

kubeconform's usual schemas are downloaded from GitHub, which this machine cannot reach; the
schemas are the server's own OpenAPI v3 (``/openapi/v3``), so a field the server's version does
not have is refused here exactly as that version's published schemas would. One JSON file per
kind, named as kubeconform's registry names them (``<kind><-group's first label>-<version>.json``,
lower case), each holding the kind's schema and every schema it refers to (pruned to those),
made strict (``additionalProperties: false`` on every object that lists its properties and does
not keep unknown fields) as kubeconform's ``-strict`` schemas are. The only rewrite: ``IntOrString``,
published as a string with the format ``int-or-string``, becomes "a string or an integer".

Custom resources' schemas (the prometheus-operator kinds the chart renders, the chart's own CRD)
come from their CRD files, with the same strictness: a CRD is the same for every server version.
Kept in ``.cache/kube-schemas/<server gitVersion>`` (made once per version)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from .cluster import CACHE_BIN, Cluster, tool

CACHE = CACHE_BIN.parent / "kube-schemas"
REF_PREFIX = "#/components/schemas/"


def file_name(group: str, version: str, kind: str) -> str:
    """kubeconform's name for a kind's schema (pkg/registry's KindSuffix: the group's first label)."""
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def strict(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to others (kubeconform's
    ``-strict`` variant), and ``IntOrString`` as what it means."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("format") == "int-or-string":
        return {k: v for k, v in schema.items() if k not in ("type", "format")} | {
            "oneOf": [{"type": "string"}, {"type": "integer"}]}
    out = {k: (strict(v) if k not in ("enum", "default", "example") else v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            yield ref[len(REF_PREFIX):]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _reachable(root: str, schemas: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in schemas:
            raise KeyError(f"the OpenAPI document refers to {name}, which it does not define")
        seen[name] = schemas[name]
        todo.extend(_refs(schemas[name]))
    return seen


def from_openapi(document: dict[str, Any]) -> dict[str, Any]:
    """One group-version's OpenAPI v3 document -> {file name: schema} for each kind it defines."""
    schemas = document.get("components", {}).get("schemas", {})
    out: dict[str, Any] = {}
    for name, schema in schemas.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            kept = _reachable(name, schemas)
            out[file_name(gvk["group"], gvk["version"], gvk["kind"])] = {
                "$ref": REF_PREFIX + name, "components": {"schemas": strict(kept)}}
    return out


def from_crds(paths: Iterable[Path]) -> dict[str, Any]:
    """CRD files -> {file name: schema} for each version they serve."""
    out: dict[str, Any] = {}
    for path in paths:
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                out[file_name(group, version["name"], kind)] = strict(version["schema"]["openAPIV3Schema"])
    return out


def generate(cluster: Cluster, crds: Iterable[Path]) -> Path:
    """The directory of kubeconform schemas for ``cluster``'s server version and ``crds`` (made
    once per server version and kept)."""
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    directory = CACHE / version
    if not (directory / ".complete").exists():
        shutil.rmtree(directory, ignore_errors=True)
        made = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(made, ignore_errors=True)
        made.mkdir(parents=True)
        paths = cluster.get_json_raw("/openapi/v3")["paths"]
        for path, entry in sorted(paths.items()):
            if not (path == "api/v1" or (path.startswith("apis/") and path.count("/") == 2)):
                continue  # the discovery documents list no kinds
            document = cluster.get_json_raw(entry["serverRelativeURL"])
            for name, schema in from_openapi(document).items():
                (made / name).write_text(json.dumps(schema))
        (made / ".complete").write_text(version)
        made.rename(directory)
    for name, schema in from_crds(crds).items():  # the CRDs as they are now (cheap; never stale)
        (directory / name).write_text(json.dumps(schema))
    return directory


def kubeconform(manifests: str, schemas: Path) -> subprocess.CompletedProcess[str]:
    """``kubeconform -strict`` over ``manifests`` with ``schemas`` alone (no download, and no kind
    without a schema let through)."""
    return subprocess.run(
        [tool("kubeconform"), "-strict", "-summary", "-output", "text",
         "-schema-location", str(schemas / "{{ .ResourceKind }}{{ .KindSuffix }}.json"), "-"],
        input=manifests, capture_output=True, text=True, timeout=120)
