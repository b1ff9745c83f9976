"""Every relative link of the docs resolves (issue 22): README.md, CHANGELOG.md, docs/**/*.md and
charts/**/README.md. A link's file must exist (relative to the linking file; ``/path`` from the
repository's root) inside the repository, and its ``#anchor`` must be a heading of the target (or
of the same file) under GitHub's slug rules: the heading's text as rendered (code, emphasis and
link syntax gone), lowercased, every character that is not a letter, digit, ``-``, ``_`` or space
removed, each space turned into ``-``; a repeated slug gets ``-1``, ``-2`` ... in order. Explicit
``<a name=...>`` / ``id=...`` anchors count too. Links with a scheme (http, https, mailto) are not
fetched: no network. Links inside code blocks and code spans are not links.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness.cluster import REPO

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
INLINE = re.compile(r"\]\(\s*(<[^<>\n]*>|[^()\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^<>\n]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ANCHOR = re.compile(r"<[a-z][^>]*?\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")  # GitHub's line anchors of a file that is not markdown


def doc_files(root: Path = REPO) -> list[Path]:
    files = [root / "README.md", root / "CHANGELOG.md", *sorted(root.glob("docs/**/*.md")), *sorted(root.glob("charts/**/README.md"))]
    return [f for f in files if f.is_file()]


def _blank_code_blocks(text: str) -> list[str]:
    """The lines, with those of fenced code blocks blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):]:
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def _blank_code_spans(text: str) -> str:
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def heading_text(raw: str) -> str:
    """A heading's text as GitHub renders it (what its slug is made from)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)        # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)     # code: its content
    text = re.sub(r"(\*+|~~)", "", text)                         # emphasis, strike-through
    text = re.sub(r"(?<![\w])_{1,2}([^_]+?)_{1,2}(?![\w])", r"\1", text)  # _emphasis_ (not snake_case)
    return text.strip()


def slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading_text(text).lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file offers: its headings' slugs (duplicates numbered) and HTML ids."""
    lines = _blank_code_blocks(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}

    def add(text: str) -> None:
        base = slug(text)
        name, n = base, seen.get(base, 0)
        while name in found:  # github-slugger: the first free "<slug>-<n>"
            n += 1
            name = f"{base}-{n}"
        seen[base] = n
        found.add(name)

    previous = ""
    for line in lines:
        atx = ATX.match(line)
        if atx:
            add(atx.group(2) or "")
        elif SETEXT.match(line) and previous.strip() and not re.match(r"^ {0,3}([#>|*+-]|\d+[.)]\s)", previous):
            add(previous.strip())
        previous = "" if atx else line
    text = "\n".join(lines)
    found |= {a for a in HTML_ANCHOR.findall(_blank_code_spans(text))}
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image of a markdown file, outside code."""
    text = _blank_code_spans("\n".join(_blank_code_blocks(path.read_text(encoding="utf-8"))))
    out = []
    for pattern in (INLINE, REFERENCE, HTML_LINK):
        for m in pattern.finditer(text):
            out.append((text.count("\n", 0, m.start(1)) + 1, m.group(1).strip("<>")))
    return sorted(out)


def problems(path: Path, root: Path = REPO) -> list[str]:
    """What is broken among ``path``'s relative links."""
    out: list[str] = []
    where = path.relative_to(root)
    for line, target in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # external: not fetched
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part.split("?", 1)[0])
        if not file_part:
            resolved = path
        elif file_part.startswith("/"):
            resolved = (root / file_part.lstrip("/")).resolve()
        else:
            resolved = (path.parent / file_part).resolve()
        if not resolved.is_relative_to(root.resolve()):
            out.append(f"{where}:{line}: {target}: leaves the repository")
            continue
        if not resolved.exists():
            out.append(f"{where}:{line}: {target}: {resolved.relative_to(root.resolve())} does not exist")
            continue
        if not anchor:
            continue
        anchor = unquote(anchor)
        page = resolved / "README.md" if resolved.is_dir() else resolved
        if page.suffix.lower() != ".md" or not page.is_file():
            if not LINE_ANCHOR.match(anchor):
                out.append(f"{where}:{line}: {target}: #{anchor} in a file that has no headings")
            continue
        if anchor not in anchors(page):
            out.append(f"{where}:{line}: {target}: no heading of {page.relative_to(root.resolve())} has the "
                       f"anchor #{anchor}")
    return out


def test_the_docs_are_found() -> None:
    names = {str(p.relative_to(REPO)) for p in doc_files()}
    assert {"README.md", "CHANGELOG.md", "docs/redis.md", "docs/tenancy.md", "docs/runbooks/README.md",
            "charts/gateway-operator/README.md"} <= names, names


@pytest.mark.parametrize("doc", [str(p.relative_to(REPO)) for p in doc_files()])
def test_every_relative_link_and_anchor_resolves(doc: str) -> None:
    broken = problems(REPO / doc)
    assert not broken, "broken links:\n" + "\n".join(broken)


# -- the checker itself ------------------------------------------------------------------------

@pytest.mark.parametrize("heading, expected", [
    ("Conditions and reasons", "conditions-and-reasons"),
    ("Exactly once with more than one replica: the checker", "exactly-once-with-more-than-one-replica-the-checker"),
    ("The administrator's settings (chart values)", "the-administrators-settings-chart-values"),
    ("GitOps examples (`examples/gitops`)", "gitops-examples-examplesgitops"),
    ("The two commands (fresh Debian/Ubuntu machine with Go, Python 3.11, Node/npm; root)",
     "the-two-commands-fresh-debianubuntu-machine-with-go-python-311-nodenpm-root"),
    ("Readiness: kubectl wait, helm --wait, Argo CD", "readiness-kubectl-wait-helm---wait-argo-cd"),
    ("**Bold** and [a link](x.md) and snake_case", "bold-and-a-link-and-snake_case"),
])
def test_slugs_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/other.md").write_text("# Other\n\n## Same\n\ntext\n\n## Same\n\nSetext title\n---\n")
    (tmp_path / "README.md").write_text("\n".join([
        "# Top",
        "## Same", "## Same",
        "[ok](docs/other.md) [ok](docs/other.md#same-1) [ok](#same-1) [ok](docs/other.md#setext-title)",
        "[ok](https://example.com/nowhere.md) [ok](docs) [ok](/docs/other.md#other)",
        "`[in code](missing-in-span.md)`",
        "```", "[in a block](missing-in-block.md)", "```",
        "[gone](docs/missing.md)",
        "[bad anchor](docs/other.md#same-2)",
        "[bad local anchor](#nowhere)",
        "![gone image](img/missing.png)",
        "[out](../outside.md)",
        "[ref]: docs/also-missing.md",
        "a link over",
        "two lines [text",
        "continued](docs/missing-too.md)",
    ]) + "\n")
    found = problems(tmp_path / "README.md", root=tmp_path)
    assert [p.split(": ", 2)[1] for p in found] == [
        "docs/missing.md", "docs/other.md#same-2", "#nowhere", "img/missing.png", "../outside.md",
        "docs/also-missing.md", "docs/missing-too.md"], found
    assert all(p.startswith("README.md:") for p in found)
