"""Golden pod templates: what every example GatewayDeployment's pods are made of, kept in
tests/golden/. A change to a pod template rolls every GatewayDeployment like it when the new
operator is installed (in-flight turns cut, replicas back cold), so it must be seen in review:
this test fails until the golden files are written again (``make golden``), and docs/upgrades.md's
"Rollouts per release" says why the release rolls them.

The ConfigMap is in the golden file too (its hash is the template's config-hash annotation),
the launcher by its digest only.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator.offline import Refused, render_objects

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests/golden"
EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.yaml")
                  if any(d and d.get("kind") == "GatewayDeployment" for d in yaml.safe_load_all(p.read_text())))


class _Block(yaml.SafeDumper):
    """Multi-line strings (gateway.yaml) as block literals: a reviewable diff."""


_Block.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))


def golden(example: Path) -> dict[str, Any]:
    found = {}
    for doc in yaml.safe_load_all(example.read_text()):
        if not doc or doc.get("kind") != "GatewayDeployment":
            continue
        try:
            objects = {o["kind"]: o for o in render_objects(doc, "default")}
        except Refused as e:  # no pods at all: the refusal is what users see
            found[doc["metadata"]["name"]] = {"refused": e.errors}
            continue
        data = dict(objects["ConfigMap"]["data"])
        pod_code = {f"{key} (sha256)": hashlib.sha256(data.pop(key).encode()).hexdigest()
                    for key in sorted(data) if key.endswith(".py")}
        found[doc["metadata"]["name"]] = {
            "podTemplate": objects["Deployment"]["spec"]["template"],
            "configMap": {**data, **pod_code},
        }
    return found


def test_every_example_has_a_golden_file() -> None:
    assert EXAMPLES, "no example GatewayDeployment found"
    assert sorted(p.name for p in GOLDEN.glob("*.yaml")) == sorted(p.name for p in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_pod_template_is_the_golden_one(example: Path) -> None:
    path = GOLDEN / example.name
    rendered = golden(example)
    if os.environ.get("GOLDEN_UPDATE") == "1":
        path.write_text(yaml.dump(rendered, Dumper=_Block, sort_keys=True, width=120))
    assert path.exists(), f"{path.relative_to(REPO)} is missing: run `make golden`"
    assert yaml.safe_load(path.read_text()) == rendered, (
        f"the pods of {example.relative_to(REPO)} changed: an operator upgrade rolls every GatewayDeployment "
        f"like it. If that is intended, run `make golden`, review the diff of {path.relative_to(REPO)}, and say "
        "why in docs/upgrades.md's 'Rollouts per release'")
