"""The frozen reader: every term's lists laid end to end, read in place.

A load maps the data file and hands its posting parts here; a bulk build or
a bulk refresh packs its lists into the same layout.  Either way the parts
never change: :class:`PackedLists` cuts one term's chunk ids, frequencies
and impacts out of them as read-only views, running the segment's block
checks (and the chunk-range check) the first time a list is read, and
:class:`PackedOrders` does the same for the impact orders.  The index
(``_index``) copies a list out before it changes it, so these readers stay
valid for the generation they were packed in, and a save can copy them whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .._exceptions import IndexFormatError
from .._storage._codec import Floats, Ints, PostingChecks
from .._storage._lists import lengths_of

__all__ = ["PackedLists", "PackedOrders", "TermLists"]


class TermLists(NamedTuple):
    """One term's postings: chunk ids (ascending), frequencies and impacts, side by side."""

    docs: Ints
    tfs: Ints
    imps: Floats


class PackedLists:
    """Packed postings: term ``t``'s lists are ``[offsets[t], offsets[t + 1])`` of each part."""

    __slots__ = ("checks", "docs", "gen", "imps", "n_chunks", "n_terms", "offsets", "tfs", "where")

    def __init__(
        self,
        offsets: Ints,
        docs: Ints,
        tfs: Ints,
        imps: Floats,
        gen: int,
        *,
        n_chunks: int | None = None,
        where: str = "index",
        checks: PostingChecks | None = None,
    ) -> None:
        """``gen``: the index generation the lists (and impacts) are for.

        With ``n_chunks``, each list is checked against it when first cut
        (its ends suffice: lists are sorted), so a damaged index fails
        clearly; ``checks`` are a big segment's block checks, run before a
        list is first read (the offsets were checked at load).
        """
        self.docs: Ints = memoryview(docs)
        self.tfs: Ints = memoryview(tfs)
        self.imps: Floats = memoryview(imps)
        self.offsets: Ints = memoryview(offsets)
        self.n_terms = len(offsets) - 1
        self.gen = gen
        self.n_chunks = n_chunks
        self.where = where
        self.checks = checks

    def holds(self, tid: int) -> bool:
        return tid < self.n_terms

    def cut(self, tid: int) -> TermLists:
        """The term's lists as views, checked on the way."""
        offsets, checks = self.offsets, self.checks
        a, b = offsets[tid], offsets[tid + 1]
        if checks is not None:
            checks.chunks(a, b)
            checks.tfs(a, b)
            checks.impacts(a, b)
        d = self.docs[a:b]
        if self.n_chunks is not None and d and (d[0] < 0 or d[-1] >= self.n_chunks):
            raise IndexFormatError(f"{self.where}: a posting points at a chunk that does not exist")
        return TermLists(d, self.tfs[a:b], self.imps[a:b])

    def raw(self, tid: int) -> tuple[memoryview, memoryview]:
        """The bytes of the term's chunk ids and frequencies (checked), for a repack."""
        offsets, checks = self.offsets, self.checks
        a, b = offsets[tid], offsets[tid + 1]
        if checks is not None:
            checks.chunks(a, b)
            checks.tfs(a, b)
        return memoryview(self.docs[a:b]).cast("B"), memoryview(self.tfs[a:b]).cast("B")

    def lengths(self) -> Iterable[int]:
        return lengths_of(self.offsets)


class PackedOrders:
    """Packed impact orders: term ``t``'s is ``positions[offsets[t]:offsets[t + 1]]`` (empty: none saved)."""

    __slots__ = ("checks", "gen", "offsets", "positions")

    def __init__(self, offsets: Ints, positions: Ints, gen: int, *, checks: PostingChecks | None = None) -> None:
        self.positions: Ints = memoryview(positions)
        self.offsets: Ints = memoryview(offsets)
        self.gen = gen
        self.checks = checks

    def has(self, tid: int) -> bool:
        """Whether an order of the term is saved here."""
        offsets = self.offsets
        return tid + 1 < len(offsets) and offsets[tid + 1] > offsets[tid]

    def read(self, tid: int, length: int) -> Ints:
        """The term's saved order (a list of ``length`` postings), checked on the way."""
        start = self.offsets[tid]
        if self.checks is not None:
            self.checks.positions(start, start + length)
        # Read in place.  Not range-checked here: the checksum vouches for
        # it, and a bad position fails loudly (IndexError), never silently.
        return self.positions[start : start + length]

    def hint(self, tid: int) -> Ints:
        """The term's saved order as it is, for a list that may have changed since."""
        return self.positions[self.offsets[tid] : self.offsets[tid + 1]]

    def lengths(self) -> Iterable[int]:
        return lengths_of(self.offsets)
