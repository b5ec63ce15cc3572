"""Length norms of the collection's chunks, cached for one generation.

A term's impacts need the BM25 length norm of each of its chunks, and the
norms change with the average length, so with every add and remove.  The
whole collection's norms are computed once a generation; a search right
after an add needs fresh impacts for a few terms only, and their own chunks'
norms cost less than every chunk's, until the lists asking for them in that
generation add up to half the collection.  Both ways give the same floats.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._storage._impact_tables import gather
from ._scoring import BM25, norm_values

__all__ = ["LengthNorms"]


class LengthNorms:
    """The length norms of one index's chunks; callers pass the generation and lengths they are for."""

    def __init__(self, bm25: BM25) -> None:
        self.bm25 = bm25
        self.gen = -1  # the generation ``values`` are for
        self.values: list[float] = []
        # (generation, postings whose norms were computed one by one in it)
        self.work = (-1, 0)

    def every(self, gen: int, dl: Sequence[int], avgdl: float) -> list[float]:
        """Every chunk's norm by chunk id (``k1`` for all while the collection is empty)."""
        if self.gen != gen:
            if avgdl > 0:
                self.values = list(norm_values(self.bm25, avgdl, dl))
            else:
                self.values = [self.bm25.k1] * len(dl)
            self.gen = gen
        return self.values

    def of(self, docs: Sequence[int], gen: int, dl: Sequence[int], avgdl: float) -> list[float]:
        """The norms of chunks ``docs``, bit for bit those of :meth:`every`."""
        if self.gen == gen:  # the common case, first (itemgetter: no method wrapper per chunk)
            return list(gather(self.values, docs))
        last, work = self.work
        work = (work if last == gen else 0) + len(docs)
        self.work = (gen, work)
        if 2 * work < len(dl) and avgdl > 0:
            return list(norm_values(self.bm25, avgdl, gather(dl, docs)))
        return list(gather(self.every(gen, dl, avgdl), docs))
