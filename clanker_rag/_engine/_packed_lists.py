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

from array import array
from collections.abc import Iterable
from itertools import repeat
from operator import gt, mul, ne
from typing import NamedTuple

from .._exceptions import IndexFormatError
from .._storage._codec import Floats, Ints, PostingChecks, Postings, TermList
from .._storage._lists import lengths_of, without_empty_lists
from .._storage._order_column import WideOrders, widened
from .._storage._tf_column import TfColumn, Tfs

__all__ = ["BaseStats", "PackedLists", "PackedOrders", "TermLists", "packed_postings"]


class BaseStats(NamedTuple):
    """The statistics packed impacts were computed under, and the chunk ids they cover."""

    n_docs: int
    total_len: int
    n_chunks: int  # chunk ids below this were packed; later ones were added since


class TermLists(NamedTuple):
    """One term's postings: chunk ids (ascending), frequencies and impacts, side by side."""

    docs: Ints
    tfs: Ints
    imps: Floats


class PackedLists:
    """Packed postings: term ``t``'s lists are ``[offsets[t], offsets[t + 1])`` of each part."""

    __slots__ = ("checks", "docs", "gen", "imps", "n_chunks", "n_terms", "offsets", "stats", "tfs", "where")

    def __init__(
        self,
        offsets: Ints,
        docs: Ints,
        tfs: Tfs,
        imps: Floats,
        gen: int,
        *,
        n_chunks: int | None = None,
        where: str = "index",
        checks: PostingChecks | None = None,
        stats: BaseStats | None = None,
    ) -> None:
        """``gen``: the index generation the lists (and impacts) are for;
        ``stats``: the statistics the impacts were computed under.

        With ``n_chunks``, each list is checked against it when first cut
        (its ends suffice: lists are sorted), so a damaged index fails
        clearly; ``checks`` are a big segment's block checks, run before a
        list (and its two offsets) is first read.
        """
        self.docs: Ints = memoryview(docs)
        # A column saved with its large counts apart patches them into the slices it cuts.
        self.tfs: Tfs = tfs if isinstance(tfs, TfColumn) else memoryview(tfs)
        self.imps: Floats = memoryview(imps)
        self.offsets: Ints = memoryview(offsets)
        self.n_terms = len(offsets) - 1
        self.gen = gen
        self.n_chunks = n_chunks
        self.where = where
        self.checks = checks
        self.stats = stats

    def holds(self, tid: int) -> bool:
        return tid < self.n_terms

    def cut(self, tid: int) -> TermLists:
        """The term's lists as views, checked on the way."""
        offsets, checks = self.offsets, self.checks
        if checks is not None:
            checks.offsets(tid, tid + 2)
        a, b = offsets[tid], offsets[tid + 1]
        if checks is not None:
            checks.chunks(a, b)
            checks.tfs(a, b)
            checks.impacts(a, b)
        d = self.docs[a:b]
        if self.n_chunks is not None and d and (d[0] < 0 or d[-1] >= self.n_chunks):
            raise IndexFormatError(f"{self.where}: a posting points at a chunk that does not exist")
        return TermLists(d, self.tfs[a:b], self.imps[a:b])

    def raw(self, tid: int) -> tuple[memoryview, Ints]:
        """The bytes of the term's chunk ids and its frequencies (checked), for a repack."""
        offsets, checks = self.offsets, self.checks
        if checks is not None:
            checks.offsets(tid, tid + 2)
        a, b = offsets[tid], offsets[tid + 1]
        if checks is not None:
            checks.chunks(a, b)
            checks.tfs(a, b)
        return memoryview(self.docs[a:b]).cast("B"), self.tfs[a:b]

    def lengths(self) -> Iterable[int]:
        if self.checks is not None:
            self.checks.offsets(0, len(self.offsets))
        return lengths_of(self.offsets)


class PackedOrders:
    """Packed impact orders: term ``t``'s is ``positions[offsets[t]:offsets[t + 1]]`` (empty: none saved).

    A load's ``positions`` are uint16 and hold only the orders of lists
    of at most 65,536 postings; ``wide`` holds the others (see
    ``_storage._order_column``), and ``offsets`` still count every order.
    """

    __slots__ = ("checks", "gen", "offsets", "positions", "wide")

    def __init__(
        self,
        offsets: Ints,
        positions: Ints,
        gen: int,
        *,
        checks: PostingChecks | None = None,
        wide: WideOrders | None = None,
    ) -> None:
        self.positions: Ints = memoryview(positions)
        self.offsets: Ints = memoryview(offsets)
        self.gen = gen
        self.checks = checks
        self.wide = wide

    def has(self, tid: int) -> bool:
        """Whether an order of the term is saved here."""
        offsets = self.offsets
        if tid + 1 >= len(offsets):
            return False
        if self.checks is not None:
            self.checks.order_offsets(tid, tid + 2)
        return offsets[tid + 1] > offsets[tid]

    def read(self, tid: int, length: int) -> Ints:
        """The term's saved order (a list of ``length`` postings), checked on the way."""
        if self.checks is not None:
            self.checks.order_offsets(tid, tid + 2)
        start = self.offsets[tid]
        wide = self.wide
        if wide is not None:
            apart, start = wide.locate(tid, start)
            if apart:
                if wide.check is not None:
                    wide.check(start, start + length)
                return wide.positions[start : start + length]
        if self.checks is not None:
            self.checks.positions(start, start + length)
        # Read in place.  Not range-checked here: the checksum vouches for
        # it, and a bad position fails loudly (IndexError), never silently.
        return self.positions[start : start + length]

    def hint(self, tid: int) -> Ints:
        """The term's saved order as it is, for a list that may have changed since."""
        if self.checks is not None:
            self.checks.order_offsets(tid, tid + 2)
        return self.read(tid, self.offsets[tid + 1] - self.offsets[tid])

    def whole(self) -> Ints:
        """Every order as int32, laid end to end at :attr:`offsets` (a copy when some are narrow)."""
        if self.checks is not None:
            self.checks.order_offsets(0, len(self.offsets))
        if self.wide is None:
            return self.positions
        return widened(self.positions, self.offsets, self.wide)

    def lengths(self) -> Iterable[int]:
        if self.checks is not None:
            self.checks.order_offsets(0, len(self.offsets))
        return lengths_of(self.offsets)


def packed_postings(
    terms: list[str] | TermList, lists: PackedLists, orders: PackedOrders, maxes: array[float], order_min: int
) -> Postings | None:
    """The postings as a save writes them, straight from the packed parts, or None.

    Terms whose lists are empty are left out (the rest numbered densely), so
    a save copies the parts whole instead of walking every term.  None when
    some term's order does not match its list (``order_min``: the length a
    list needs to be ordered).  Maxima not computed yet (``-1.0``) are
    filled in ``maxes`` from the impacts.
    """
    docs, tfs, imps, offsets = lists.docs, lists.tfs, lists.imps, lists.offsets
    order_offsets = orders.offsets
    checks = lists.checks
    if checks is not None and orders.checks is checks:  # a save copies them whole: check them whole
        parts = (offsets, docs, tfs, imps, order_offsets, orders.positions)
        for check, part in zip(checks[:6], parts):
            check(0, len(part))  # (the maxima are the caller's: see _term_column.floats)
        if orders.wide is not None and orders.wide.check is not None:
            orders.wide.check(0, len(orders.wide.positions))
    lengths = array("q", lengths_of(offsets))
    order_lengths = array("q", lengths_of(order_offsets))
    # What each list's order must hold: its length if over order_min, else 0 (n * True == n),
    # in C-level passes (a generator here took a Python step per term: 0.5 s at 600k terms).
    ordered = map(mul, lengths, map(gt, lengths, repeat(order_min)))
    if any(map(ne, order_lengths, ordered)):
        return None
    if min(maxes, default=0.0) < 0:  # the maxima were not needed yet
        for tid in [tid for tid, mx in enumerate(maxes) if mx < 0]:
            a, b = offsets[tid], offsets[tid + 1]
            maxes[tid] = max(imps[a:b]) if b > a else 0.0
    packed = Postings(terms, offsets, docs, tfs, imps, maxes, order_offsets, orders.whole())
    return packed if all(lengths) else without_empty_lists(packed, lengths, order_lengths)
