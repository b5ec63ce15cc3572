"""The one record of removed chunks: :class:`Held`.

It holds the removed chunks whose postings are still in the lists (each list
is swept of them when next read), the source each came from (a writer drops
the rest by the terms of its text), and the chunks removed since the lists
were packed (a stale term's packed list still holds them: the search leaves
them out).

A committed chunk that is removed (a load's deletion mark, or ``remove`` of
a committed source) leaves the statistics at once (its length is 0 from
then on), but its postings stay in the lists until each list is next read.
Then the list drops the chunks held since it was last swept, found by
binary search when they are few beside the list, else by one pass over the
list's chunk lengths.  A search so pays only for the lists it reads: at
225k chunks, dropping ten removed chunks from every list that held them
(about 650, each cut out of the mapped file, its blocks checked and copied)
cost the first search after a load 0.2 s, though a query reads a few of
them.

The frequencies swept are counted per chunk: once they add up to a chunk's
length, no list holds it any more, which is how a writer that must have
every list clean (a whole save) knows that sweeping the lists of the terms
the chunk's text gives was enough (see ``InvertedIndex.drop_held``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress, repeat
from operator import not_
from typing import TYPE_CHECKING

from .._storage._codec import Ints

if TYPE_CHECKING:
    from ._sources import Doc

__all__ = ["Held", "SCAN_SHARE"]

# A list at least SCAN_SHARE times longer than the chunks to find in it is
# binary-searched for each (some 17 probes of a long list each cost about
# what two postings of a pass over the lengths do), else scanned once.
SCAN_SHARE = 32


class Held:
    """Removed chunks: those whose postings may still be in some lists (with what was swept of
    them, and their sources), and those removed since the lists were packed."""

    __slots__ = ("cids", "docs", "lengths", "removed", "since_packed", "swept")

    def __init__(self) -> None:
        self.cids: list[int] = []  # in the order they were held
        self.lengths: dict[int, int] = {}  # cid -> its length (summed tf) before it was removed
        self.docs: dict[int, Doc] = {}  # cid -> its source (when the remover gave it)
        self.removed: dict[int, int] = {}  # cid -> the frequencies swept of it so far
        self.swept: dict[int, int] = {}  # tid -> how many of ``cids`` its list was swept of
        # Chunks removed since the lists were packed (held or not): the packed lists still hold them.
        self.since_packed: set[int] = set()

    def __len__(self) -> int:
        return len(self.cids)

    def hold(self, cid: int, length: int, doc: Doc | None = None) -> None:
        self.cids.append(cid)
        self.lengths[cid] = length
        if doc is not None:
            self.docs[cid] = doc

    def swept_all(self) -> None:
        """Every list was swept: no chunk is held any more (those removed since packing stay recorded)."""
        self.cids, self.lengths, self.docs, self.removed, self.swept = [], {}, {}, {}, {}

    def due(self, tid: int) -> bool:
        """Whether chunks were held since the term's list was last swept."""
        return self.swept.get(tid, 0) < len(self.cids)

    def positions(self, tid: int, docs: Ints, dl: Sequence[int]) -> list[int]:
        """Ascending positions in ``docs`` (the term's sorted chunk ids) of the chunks held
        since its list was last swept (``dl``: chunk lengths, 0 for a removed chunk)."""
        n = len(docs)
        fresh = self.cids[self.swept.get(tid, 0) :]
        if not n:
            return []
        if len(fresh) * SCAN_SHARE < n:
            at = list(map(bisect_left, repeat(docs), fresh))
            return sorted(p for p, cid in zip(at, fresh) if p < n and docs[p] == cid)
        # Every chunk in a list has terms: a length of 0 is a removed one (held now or before).
        return list(compress(range(n), map(not_, map(dl.__getitem__, docs))))

    def swept_of(self, tid: int, cids: Sequence[int], tfs: Sequence[int]) -> None:
        """The term's list no longer holds ``cids`` (with frequencies ``tfs``), nor any chunk held so far."""
        removed = self.removed
        for cid, tf in zip(cids, tfs):
            removed[cid] = removed.get(cid, 0) + tf
        self.swept[tid] = len(self.cids)

    def short(self) -> list[int]:
        """The held chunks some of whose postings were not swept yet."""
        removed, lengths = self.removed, self.lengths
        return [cid for cid in self.cids if removed.get(cid, 0) != lengths[cid]]
