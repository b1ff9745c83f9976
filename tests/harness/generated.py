"""A generated section of a committed document: the text between two marker lines, written
again (``make <target>``) or checked (``--check``, what the tests run). hack/api-reference.py
and hack/chart-readme.py are two of them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence


def between(document: str, begin: str, end: str, body: str, name: str) -> str:
    """``document`` with what stands between ``begin`` and ``end`` replaced by ``body``."""
    if document.count(begin) != 1 or document.count(end) != 1:
        raise SystemExit(f"{name}: the document needs exactly one pair of markers:\n{begin}\n{end}")
    head, rest = document.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(path: Path, begin: str, end: str, body: Callable[[], str], target: str, description: str,
         argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed section is stale")
    args = parser.parse_args(argv)
    current = path.read_text()
    wanted = between(current, begin, end, body(), target)
    if args.check:
        if current != wanted:
            print(f"{path} is stale: run `make {target}`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        path.write_text(wanted)
        print(f"wrote {path}")
    return 0
