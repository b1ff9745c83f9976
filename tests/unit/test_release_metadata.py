"""What a release says about itself (issue 55): ``gateway-operator version`` (text and JSON, through
cli.main), one version everywhere (``gateway_operator.__version__``, pyproject.toml, the chart's
``version`` and ``appVersion``, CHANGELOG.md's newest release), CHANGELOG.md in Keep a Changelog
1.1.0's form, and the chart's Artifact Hub annotations in the shapes Artifact Hub documents, with
an example GatewayDeployment that ``gateway-operator check`` accepts; and ``make release``
(hack/release.sh) refusing, before it builds anything, a version that is not the tree's and
arguments it cannot use.

The operator image ships no chart, so the chart's version is the constant the chart is tied to
here, not read from charts/ at run time."""
from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_operator import __version__, cli
from gateway_operator.core.compat import TESTED_RELEASES
from harness.cluster import REPO

CHART = REPO / "charts/gateway-operator"
CHANGELOG = REPO / "CHANGELOG.md"
SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
RELEASE = re.compile(rf"^## \[(?P<version>{SEMVER})\] - (?P<date>\d{{4}}-\d{{2}}-\d{{2}})$")
GROUPS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")  # Keep a Changelog's, in its order
CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}  # artifacthub.io/changes
CAPABILITIES = {"basic install", "seamless upgrades", "full lifecycle", "deep insights", "auto pilot"}


def chart() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def annotation(key: str) -> Any:
    """An Artifact Hub annotation: a string (Helm's annotations are strings) holding YAML."""
    value = chart()["annotations"][key]
    assert isinstance(value, str), f"{key} must be a string"
    return yaml.safe_load(value)


def releases() -> list[tuple[str, list[str]]]:
    """CHANGELOG.md's ``## `` sections, newest first: (heading, the section's lines)."""
    sections: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.read_text().splitlines():
        if line.startswith("## "):
            sections.append((line, []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def groups(lines: list[str]) -> dict[str, list[str]]:
    """A section's ``### `` groups and their bullets."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("### "):
            current = line[4:].strip()
            assert current not in found, f"### {current} twice in one release"
            found[current] = []
        elif current and line.startswith("- "):
            found[current].append(line)
    return found


def semver_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.match(SEMVER, version).groups())  # type: ignore[union-attr]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


# -- gateway-operator version ------------------------------------------------------------------

def test_version_says_the_release_the_chart_and_the_tested_gateway_releases(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "version").splitlines()
    assert out == [f"gateway-operator {cli.operator_version()}", f"chart gateway-operator {__version__}",
                   f"tested with praisonai-bot {', '.join(TESTED_RELEASES)}"]


@pytest.mark.parametrize("flag", ["--output", "-o"])
def test_version_as_json(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert json.loads(run(capsys, "version", flag, "json")) == {
        "operator": cli.operator_version(), "chart": __version__,
        "testedGatewayReleases": {"praisonai-bot": list(TESTED_RELEASES)}}


def test_installed_version_is_the_distributions(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed operator says what pip installed; the chart's stays the constant."""
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "7.8.9" if name == "gateway-operator" else pytest.fail(name))
    assert json.loads(run(capsys, "version", "-o", "json"))["operator"] == "7.8.9"
    assert run(capsys, "version").splitlines()[:2] == ["gateway-operator 7.8.9", f"chart gateway-operator {__version__}"]


def test_version_from_a_checkout_that_is_not_installed(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", missing)
    found = json.loads(run(capsys, "version", "-o", "json"))
    assert found["operator"] == found["chart"] == __version__


def test_version_refuses_an_unknown_output(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["version", "-o", "xml"])
    assert e.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err


def test_the_newest_tested_release_is_the_one_make_test_runs() -> None:
    """requirements-dev.txt pins the praisonai-bot the test suite runs against; ``version`` names
    it last."""
    pin = re.search(r"^praisonai-bot(?:\[[^\]]*\])?==(\S+)", (REPO / "requirements-dev.txt").read_text(), re.M)
    assert pin and TESTED_RELEASES[-1] == pin.group(1)
    assert list(TESTED_RELEASES) == sorted(TESTED_RELEASES, key=semver_key)


# -- one version ---------------------------------------------------------------------------------

def test_one_version_everywhere() -> None:
    assert re.fullmatch(SEMVER, __version__), __version__
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    meta = chart()
    newest = next(RELEASE.match(h) for h, _ in releases() if RELEASE.match(h))
    assert {"pyproject.toml": pyproject, "Chart.yaml version": meta["version"],
            "Chart.yaml appVersion": meta["appVersion"], "CHANGELOG.md": newest["version"]} == dict.fromkeys(
        ("pyproject.toml", "Chart.yaml version", "Chart.yaml appVersion", "CHANGELOG.md"), __version__)


# -- CHANGELOG.md ----------------------------------------------------------------------------------

def test_changelog_follows_keep_a_changelog() -> None:
    text = CHANGELOG.read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text and "https://semver.org/spec/v2.0.0.html" in text
    sections = releases()
    assert sections[0][0] == "## [Unreleased]", "the first section is Unreleased"
    assert all(RELEASE.match(h) for h, _ in sections[1:]), [h for h, _ in sections[1:] if not RELEASE.match(h)]
    assert len(sections) > 1, "no release yet"
    for heading, lines in sections:
        found = groups(lines)
        assert set(found) <= set(GROUPS), (heading, set(found) - set(GROUPS))
        assert list(found) == [g for g in GROUPS if g in found], f"{heading}: groups out of Keep a Changelog's order"
        assert all(found.values()), f"{heading}: an empty group"
    if not groups(sections[0][1]):
        assert "Nothing yet." in sections[0][1]


def test_releases_newest_first_with_iso_dates() -> None:
    found = [RELEASE.match(h) for h, _ in releases()[1:]]
    versions = [m["version"] for m in found]  # type: ignore[index]
    dates = [date.fromisoformat(m["date"]) for m in found]  # type: ignore[index]  # a real day, not 2026-13-40
    assert versions == sorted(versions, key=semver_key, reverse=True) and len(set(versions)) == len(versions)
    assert dates == sorted(dates, reverse=True)


def test_changelog_compare_links_if_any_name_every_section() -> None:
    """Keep a Changelog's link references at the bottom are optional; where there are any, every
    section has one and nothing else does."""
    refs = dict(re.findall(r"^\[([^\]]+)\]:\s*(\S+)\s*$", CHANGELOG.read_text(), re.M))
    if refs:
        names = ["Unreleased"] + [RELEASE.match(h)["version"] for h, _ in releases()[1:]]  # type: ignore[index]
        assert sorted(refs) == sorted(names)
        assert all(url.startswith("https://") for url in refs.values())


def test_changelog_links_to_the_upgrade_notes_of_each_release() -> None:
    from test_doc_links import anchors, links, slug
    text = CHANGELOG.read_text()
    assert "docs/upgrades.md#upgrade-notes-per-version" in text
    upgrade_anchors = anchors(REPO / "docs/upgrades.md")
    for heading, _ in releases()[1:]:
        version = RELEASE.match(heading)["version"]  # type: ignore[index]
        assert slug(version) in upgrade_anchors, f"docs/upgrades.md has no section {version}"
        assert f"docs/upgrades.md#{slug(version)}" in text
    assert any(target.startswith("docs/upgrades.md") for _, target in links(CHANGELOG))


# -- the chart's Artifact Hub annotations ----------------------------------------------------------

def test_annotations_are_strings() -> None:
    assert all(isinstance(v, str) for v in chart()["annotations"].values()), "Helm's annotations are strings"


def test_changes_list_this_versions_changelog_groups() -> None:
    changes = annotation("artifacthub.io/changes")
    assert isinstance(changes, list) and changes
    for change in changes:
        assert isinstance(change, dict) and set(change) <= {"kind", "description", "links"}, change
        assert change["kind"] in CHANGE_KINDS and isinstance(change["description"], str) and change["description"]
        for link in change.get("links") or []:
            assert set(link) == {"name", "url"} and link["url"].startswith("https://"), link
    heading, lines = releases()[1]
    assert RELEASE.match(heading)["version"] == chart()["version"]  # type: ignore[index]
    assert {c["kind"] for c in changes} == {g.lower() for g in groups(lines)}


def test_operator_annotations() -> None:
    assert chart()["annotations"]["artifacthub.io/operator"] == "true"
    assert chart()["annotations"]["artifacthub.io/operatorCapabilities"].lower() in CAPABILITIES


def test_crds_annotation_names_the_charts_crd() -> None:
    crd = yaml.safe_load((CHART / "crds/gatewaydeployments.yaml").read_text())
    listed = annotation("artifacthub.io/crds")
    assert isinstance(listed, list) and len(listed) == 1
    entry = listed[0]
    assert set(entry) == {"kind", "version", "name", "displayName", "description"}
    assert entry["kind"] == crd["spec"]["names"]["kind"] == "GatewayDeployment"
    assert entry["name"] == crd["metadata"]["name"]
    assert entry["version"] in [v["name"] for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    assert entry["description"].strip() and entry["displayName"].strip()


def test_crds_example_is_an_example_the_operator_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crd = annotation("artifacthub.io/crds")[0]
    examples = annotation("artifacthub.io/crdsExamples")
    assert isinstance(examples, list) and len(examples) == 1
    example = examples[0]
    assert example["kind"] == crd["kind"]
    assert example["apiVersion"] == f"{crd['name'].split('.', 1)[1]}/{crd['version']}"
    shipped = [d for p in sorted((REPO / "examples").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    assert example in shipped, "the example is one of examples/*.yaml, as it is there"
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(example))
    assert run(capsys, "check", "-f", str(path)) == f"GatewayDeployment {example['metadata']['name']!r}: valid\n"


def test_no_made_up_metadata() -> None:
    """A license is claimed only where a LICENSE file grants it, and every URL of the chart's
    metadata is a real https address, not a placeholder."""
    meta = chart()
    has_license = any((d / name).is_file() for d in (REPO, CHART) for name in ("LICENSE", "LICENSE.md", "LICENSE.txt"))
    assert ("artifacthub.io/license" in meta["annotations"]) == has_license
    urls = [meta.get("home"), meta.get("icon"), *(meta.get("sources") or []),
            *(m.get("url") for m in meta.get("maintainers") or []),
            *(link["url"] for link in yaml.safe_load(meta["annotations"].get("artifacthub.io/links", "[]")))]
    for url in filter(None, urls):
        assert url.startswith("https://") and not re.search(r"example|<|>|your[ -]", url), url


def release(*args: str) -> subprocess.CompletedProcess[str]:
    """``hack/release.sh`` with arguments it must refuse before it builds or pushes anything."""
    return subprocess.run([str(REPO / "hack/release.sh"), *args], capture_output=True, text=True, timeout=60)


def test_a_release_of_another_version_than_the_trees_is_refused_with_what_to_bump() -> None:
    refused = release("9.9.9", "127.0.0.1:1")
    assert refused.returncode == 1
    assert f"VERSION 9.9.9 is not this tree's version ({__version__})" in refused.stderr
    assert "bump pyproject.toml" in refused.stderr and "CHANGELOG.md" in refused.stderr


@pytest.mark.parametrize("args, says", [
    ((), "usage: make release VERSION=x.y.z REGISTRY="),
    (("v1.0", "127.0.0.1:1"), "VERSION 'v1.0' is not a semantic version"),
    ((__version__, "https://127.0.0.1:1"), "without a scheme or a trailing slash"),
])
def test_release_arguments_are_checked_first(args: tuple[str, ...], says: str) -> None:
    refused = release(*args)
    assert refused.returncode == 2 and says in refused.stderr, refused.stderr
