"""Pausing the cyclic garbage collector around bulk indexing."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off, then restore it.

    Indexing allocates millions of small objects that never form cycles
    (postings, counts, cached terms); each full collection would rescan them
    all for nothing, about a tenth of a large build.  Reference counting
    still frees everything as usual.  Nested and concurrent uses are safe:
    whoever found the collector on turns it back on, and a collector the
    caller had turned off stays off.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
