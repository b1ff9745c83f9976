"""Derandomized Hypothesis searches that draw the same examples in every process.

Hypothesis (6.13x and later) mixes into what it draws the constants it finds in the source of every
"local" module loaded at that moment (``sys.modules`` outside site-packages) and caches them per
choice kind. ``derandomize=True`` fixes the random seed but not that pool, so the same search drew
different interleavings after another test module had been imported: the protocol model's planted
"journal never written" search found its defect alone and missed it after tests/unit/test_claim_risk.py
in the same process. ``pinned()`` gives those searches Hypothesis's own constants only.

The two names it replaces are Hypothesis internals: this is the one place that touches them, and it
fails loudly (rather than silently drawing another pool) when a Hypothesis release renames them.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from hypothesis.internal.conjecture import providers

_NEEDED = ("_get_local_constants", "CONSTANTS_CACHE", "Constants", "SortedSet", "float_to_int", "LRUCache")


def _check() -> None:
    missing = [name for name in _NEEDED if not hasattr(providers, name)]
    if missing:
        raise RuntimeError(f"hypothesis.internal.conjecture.providers lacks {', '.join(missing)}: "
                           "tests/harness/pinned_hypothesis.py needs updating for this Hypothesis release")


def _no_local_constants() -> "providers.Constants":
    return providers.Constants(integers=providers.SortedSet(), floats=providers.SortedSet(key=providers.float_to_int),
                               bytes=providers.SortedSet(), strings=providers.SortedSet())


@contextlib.contextmanager
def pinned() -> Iterator[None]:
    """Within it, Hypothesis draws no constant from the modules loaded, through a cache of its own
    (the process's cache may hold pools built from other modules; it is put back on the way out)."""
    _check()
    empty = _no_local_constants()
    original, cache = providers._get_local_constants, providers.CONSTANTS_CACHE
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE = providers.LRUCache(cache.max_size)
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = original, cache
