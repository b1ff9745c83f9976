#!/usr/bin/env python3
"""Generate operator/gateway_operator/api/pod_schemas.json: the pod fields of a GatewayDeployment
(resources, env, affinity, tolerations, nodeSelector, imagePullSecrets,
topologySpreadConstraints, priorityClassName) as STRUCTURAL CRD schemas, converted from the
OpenAPI v3 that a running kube-apiserver of the pinned version (hack/versions.env
KUBE_VERSION) publishes for core/v1. Nothing here is written by hand: the field schemas are
PodSpec's and Container's own, with every $ref resolved. The output is JSON data (shipped
as package data); pod_schemas.py reads it.

Invocation (no Makefile needed), against the local control plane:

    kubeconfig=$(GWOP_CLUSTER_DIR=$PWD/.cluster/schema hack/cluster.sh up | tail -n1)
    .venv/bin/python hack/gen-pod-schemas.py --kubeconfig "$kubeconfig"
    .venv/bin/gateway-operator crd > crds/gatewaydeployments.yaml
    cp crds/gatewaydeployments.yaml charts/gateway-operator/crds/gatewaydeployments.yaml
    GWOP_CLUSTER_DIR=$PWD/.cluster/schema hack/cluster.sh down      # when done

or from a saved document (``kubectl get --raw /openapi/v3/api/v1 > core-v1.json``):

    .venv/bin/python hack/gen-pod-schemas.py --openapi core-v1.json --server-version v1.37.2

``--check`` writes nothing and exits 1 when the committed module differs from what the
server publishes.

The conversion (every rule fails loudly on anything it does not know, so a new Kubernetes
version cannot slip an unstructural keyword into the CRD):

* ``$ref`` and the single-``$ref`` ``allOf`` wrappers are inlined (the referring
  property's description wins over the type's);
* ``Quantity`` (published as ``oneOf: [string, number]``) becomes ``x-kubernetes-int-or-string``
  with the quantity grammar as ``pattern`` (what controller-gen emits); ``IntOrString``
  becomes ``x-kubernetes-int-or-string``; no other ``oneOf``/``anyOf`` is accepted;
* ``default`` is dropped (the published defaults are Go zero values, which the API server
  would otherwise write into stored objects), as are the strategic-merge-patch extensions
  (``x-kubernetes-patch-*``), which CRDs do not have;
* ``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys`` and ``x-kubernetes-map-type``
  are kept; a CRD needs the keys of a ``map`` list to be required, so keys the type leaves
  optional (``imagePullSecrets[].name``, "effectively required" upstream) are made required;
* descriptions are cut to their first sentence and the ones stating a default (no "More info"
  links, no enum essays) so the CRD stays small while ``kubectl explain`` still answers.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "operator/gateway_operator/api/pod_schemas.json"
CORE = "io.k8s.api.core.v1."
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# The Quantity grammar (k8s.io/apimachinery/pkg/api/resource), as controller-gen writes it.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")

# GatewayDeployment spec field -> (core/v1 type, its field)
FIELDS = {
    "resources": ("Container", "resources"),
    "env": ("Container", "env"),
    "imagePullSecrets": ("PodSpec", "imagePullSecrets"),
    "nodeSelector": ("PodSpec", "nodeSelector"),
    "tolerations": ("PodSpec", "tolerations"),
    "affinity": ("PodSpec", "affinity"),
    "topologySpreadConstraints": ("PodSpec", "topologySpreadConstraints"),
    "priorityClassName": ("PodSpec", "priorityClassName"),
}

KEPT = {"type", "format", "enum", "required", "items", "properties", "additionalProperties", "description",
        "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
        "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern"}
DROPPED = {"default", "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy"}


def short(description: str) -> str:
    """The first sentence, plus the sentences that state a default; without links and enum essays."""
    text = " ".join(description.split("\n\n")[0].split())  # the first paragraph, on one line
    text = re.sub(r"\s*More info: \S+", "", text).strip()
    # a sentence ends at . or : before a capital (not "i.e. ..." nor "e.g. ...")
    sentences = [m.strip() for m in re.split(r"(?<=[.:])\s+(?=[A-Z`\"(])", text) if m.strip()]
    kept = sentences[:1] + [x for x in sentences[1:] if re.search(r"\b[Dd]efault", x)]
    out = []
    for sentence in kept:
        if sentence.endswith(":"):  # "... allowed values are:" introduces a list the enum already holds
            sentence = sentence[:-1] + "."
        out.append(sentence if sentence.endswith(".") else sentence + ".")
    return " ".join(out)


class Converter:
    def __init__(self, components: dict[str, Any], descriptions: str) -> None:
        self.components = components
        self.descriptions = descriptions
        self.used: set[str] = set()

    def _describe(self, out: dict[str, Any], description: str | None) -> None:
        if description and self.descriptions != "none":
            out["description"] = short(description) if self.descriptions == "short" else description

    def convert(self, node: dict[str, Any], where: str, stack: tuple[str, ...] = ()) -> dict[str, Any]:
        node = dict(node)
        own_description = node.pop("description", None)
        ref = node.pop("$ref", None)
        all_of = node.pop("allOf", None)
        if all_of is not None:
            if ref or len(all_of) != 1 or set(all_of[0]) != {"$ref"}:
                raise SystemExit(f"{where}: allOf other than one $ref: {all_of}")
            ref = all_of[0]["$ref"]
        for key in DROPPED:
            node.pop(key, None)
        if ref:
            if set(node) - {"description"}:
                raise SystemExit(f"{where}: $ref with siblings {sorted(node)}")
            name = ref.rsplit("/", 1)[-1]
            if name in stack:
                raise SystemExit(f"{where}: recursive type {name}: a structural schema cannot hold it")
            self.used.add(name)
            target = self.components[name]
            if name == QUANTITY:
                out: dict[str, Any] = {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}
                self._describe(out, own_description)
                return out
            if name == INT_OR_STRING:
                out = {"x-kubernetes-int-or-string": True}
                self._describe(out, own_description)
                return out
            out = self.convert(target, where, (*stack, name))
            if own_description:
                self._describe(out, own_description)
            return out
        if "oneOf" in node or "anyOf" in node or "not" in node:
            raise SystemExit(f"{where}: oneOf/anyOf/not outside Quantity and IntOrString: {node}")
        unknown = set(node) - KEPT
        if unknown:
            raise SystemExit(f"{where}: unhandled OpenAPI keywords {sorted(unknown)}")
        out = {}
        self._describe(out, own_description)
        for key, value in node.items():
            if key == "properties":
                out[key] = {p: self.convert(v, f"{where}.{p}", stack) for p, v in value.items()}
            elif key == "items":
                out[key] = self.convert(value, f"{where}[]", stack)
            elif key == "additionalProperties":
                if not isinstance(value, dict):
                    raise SystemExit(f"{where}: additionalProperties {value!r}")
                out[key] = self.convert(value, f"{where}.*", stack)
            elif key != "description":
                out[key] = value
        if out.get("x-kubernetes-list-type") == "map":
            items = out["items"]
            keys = out["x-kubernetes-list-map-keys"]
            missing = [k for k in keys if k not in items.get("required", [])]
            if missing:  # a CRD list map needs its keys required (or defaulted: we keep no defaults)
                items["required"] = [*items.get("required", []), *missing]
        if "type" not in out and not out.get("x-kubernetes-int-or-string"):
            raise SystemExit(f"{where}: no type: not structural")
        return out


def check_structural(node: Any, where: str) -> None:
    if isinstance(node, dict):
        for bad in ("$ref", "allOf", "oneOf", "anyOf", "not", "default"):
            if bad in node and where.rsplit(".", 1)[-1] != "properties":
                raise SystemExit(f"{where}: {bad} left after conversion")
        for key, value in node.items():
            check_structural(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            check_structural(value, f"{where}[{i}]")


def pinned_version() -> str:
    for line in (REPO / "hack/versions.env").read_text().splitlines():
        if line.startswith("KUBE_VERSION="):
            return line.split("=", 1)[1].strip()
    raise SystemExit("KUBE_VERSION missing from hack/versions.env")


def kubectl() -> str:
    cache = Path(os.environ.get("GWOP_CACHE", Path.home() / ".cache/gateway-operator"))
    return str(cache / "bin/kubectl")


def fetch(kubeconfig: str, path: str) -> Any:
    out = subprocess.run([kubectl(), "--kubeconfig", kubeconfig, "get", "--raw", path],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def generate(document: dict[str, Any], server_version: str, descriptions: str) -> dict[str, Any]:
    components = document["components"]["schemas"]
    converter = Converter(components, descriptions)
    fields = {}
    for field, (kind, prop) in FIELDS.items():
        fields[field] = converter.convert(components[CORE + kind]["properties"][prop], f"{kind}.{prop}")
    check_structural(fields, "fields")
    return {"kubernetesVersion": server_version, "source": "/openapi/v3/api/v1",
            "types": sorted(converter.used), "fields": fields}


def render_json(data: dict[str, Any]) -> str:
    """One key per line, sorted: readable diffs when Kubernetes changes a type."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", help="a running API server of the pinned version")
    source.add_argument("--openapi", help="a saved /openapi/v3/api/v1 document (needs --server-version)")
    parser.add_argument("--server-version", help="with --openapi: the version it came from")
    parser.add_argument("--descriptions", choices=("short", "full", "none"), default="short")
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--check", action="store_true", help="exit 1 when --output is stale; write nothing")
    args = parser.parse_args(argv)

    pinned = pinned_version()
    if args.kubeconfig:
        version = fetch(args.kubeconfig, "/version")["gitVersion"]
        document = fetch(args.kubeconfig, "/openapi/v3/api/v1")
    else:
        if not args.server_version:
            parser.error("--openapi needs --server-version")
        version = args.server_version
        document = json.loads(Path(args.openapi).read_text())
    if version != pinned:
        raise SystemExit(f"the API server is {version}; hack/versions.env pins {pinned}")
    text = render_json(generate(document, version, args.descriptions))
    output = Path(args.output)
    if args.check:
        if not output.exists() or output.read_text() != text:
            print(f"{output} is stale: regenerate with hack/gen-pod-schemas.py", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    print(f"wrote {output} ({len(text)} bytes) from kube-apiserver {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
