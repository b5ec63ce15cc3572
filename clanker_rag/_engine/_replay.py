"""An index's lists as segments: a loaded segment's lists read into it on demand, and the postings added since a commit.

A commit (see ``_storage/_segments.py``) writes the chunks added since the
last one as a new segment of term frequencies.  A load adds each segment
after the first to the index's statistics at once (chunk lengths, counts)
but leaves its lists in the mapped data file: :class:`TailLists` hands a
term's postings to the index's pending ones (``_vocab.LazyPending``) the
first time the index reads the term, and every term's only before something
reads every list (a whole save, a full scan).  A search then reads its few
terms' postings, not the segments', and the lists, statistics and impacts are
those of adding the segments' chunks one by one.  Both work on the index's
public columns (``pending``, ``docs``, ``tfs``, ``touched``, ``dl`` and the
statistics), never on its search machinery.
"""

from __future__ import annotations

import weakref
from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import ne

from .._exceptions import IndexFormatError
from .._storage._codec import Ints, PostingChecks, Postings, TermList
from .._storage._impact_tables import gather
from .._storage._tf_column import Tfs
from ._index import InvertedIndex

__all__ = ["TailLists", "add_stats", "postings_since"]


# A segment's terms are found by binary search in its dictionary (about 12 us) until the
# searches would have decoded it whole into a dict (about 0.15 us a term) this many times over.
_DICT_SHARE = 64


@dataclass(slots=True, eq=False)
class _Tail:
    """One loaded segment's lists: its dictionary, offsets, chunk ids (renumbered by
    ``renumber``, -1: a deleted source's) and frequencies."""

    terms: TermList
    offsets: Ints
    chunks: Ints
    tfs: Tfs
    renumber: Sequence[int]
    whole: bool  # no chunk left out (-1 not in renumber)
    checks: PostingChecks | None
    where: str
    ids: dict[str, int] | None = None  # the terms decoded into a dict, once the searches add up to that
    searched: int = 0

    def find(self, term: str) -> int | None:
        """The segment's number of ``term``, or None."""
        ids = self.ids
        if ids is None:
            self.searched += 1
            if self.searched * _DICT_SHARE < len(self.terms):
                return self.terms.find(term)
            ids = self.ids = dict(zip(self.terms, range(len(self.terms))))
        return ids.get(term)


class TailLists:
    """The lists of a load's segments after the first, read into an index's pending
    postings term by term (the ``PendingSource`` of its ``LazyPending``), in
    segment order: chunk ids ascending, as a replay of every segment adds them."""

    __slots__ = ("_index", "_tails")

    def __init__(self, index: InvertedIndex) -> None:
        # Held weakly: the index holds this (through its pending postings).
        self._index = weakref.ref(index)
        self._tails: list[_Tail] = []

    def __len__(self) -> int:
        return len(self._tails)

    def add(self, post: Postings, renumber: Sequence[int], where: str) -> None:
        """Segment lists ``post``, whose chunk ``i`` is the index's ``renumber[i]`` (-1: left out)."""
        assert isinstance(post.terms, TermList)  # (a loaded segment's)
        self._tails.append(
            _Tail(post.terms, post.offsets, post.chunks, post.tfs, renumber, -1 not in renumber, post.checks, where)
        )

    def _owner(self) -> InvertedIndex:
        index = self._index()
        if index is None:
            raise ReferenceError("the index these lists belong to is gone")
        return index

    def holds(self, term: str) -> bool:
        return any(tail.find(term) is not None for tail in self._tails)

    def take(self, tid: int) -> list[int] | None:
        term = self._owner().terms[tid]
        out: list[int] = []
        for tail in self._tails:
            j = tail.find(term)
            if j is not None:
                out.extend(_postings(tail, j))
        return out or None

    def take_all(self, taken: set[int]) -> dict[int, list[int]]:
        index, done = self._owner(), taken
        out: dict[int, list[int]] = {}
        for tail in self._tails:
            tids = index.ids_of(list(tail.terms))
            offsets, chunks, tfs, renumber = tail.offsets, tail.chunks, tail.tfs, tail.renumber
            if tail.checks is not None:  # a big segment's: checked whole, as every list is read
                for check, part in zip(tail.checks[:3], (offsets, chunks, tfs)):
                    check(0, len(part))
            try:
                if tail.whole:  # the runs cut from one pass over the segment
                    runs = _interleaved(gather(renumber, chunks), tfs)
                    for tid, a, b in zip(tids, offsets, offsets[1:]):
                        if b > a and tid not in done:
                            have = out.get(tid)
                            if have is None:
                                out[tid] = runs[2 * a : 2 * b]
                            else:
                                have.extend(runs[2 * a : 2 * b])
                    continue
                for j, tid in enumerate(tids):
                    if tid not in done:
                        got = _postings(tail, j)
                        if got:
                            out.setdefault(tid, []).extend(got)
            except IndexError:
                raise IndexFormatError(f"{tail.where}: a posting names a chunk the segment does not hold") from None
        self._tails = []
        return out


def _postings(tail: _Tail, j: int) -> list[int]:
    """Term ``j``'s postings in ``tail`` as chunk id, tf, ... (deleted sources' left out)."""
    checks = tail.checks
    if checks is not None:
        checks.offsets(j, j + 2)
    a, b = tail.offsets[j], tail.offsets[j + 1]
    if checks is not None:
        checks.chunks(a, b)
        checks.tfs(a, b)
    try:
        ids = list(gather(tail.renumber, tail.chunks[a:b]))
    except IndexError:
        raise IndexFormatError(f"{tail.where}: a posting names a chunk the segment does not hold") from None
    counts: Sequence[int] = tail.tfs[a:b]
    if not tail.whole and -1 in ids:
        keep = list(map(ne, ids, repeat(-1)))
        ids = list(compress(ids, keep))
        counts = list(compress(counts, keep))
    return _interleaved(ids, counts)


def _interleaved(ids: Sequence[int], counts: Sequence[int]) -> list[int]:
    """Chunk id, tf, ... from two lists of one length (the load checks a segment's chunks and
    tfs agree), by two slice stores: a quarter of the time of chaining zipped pairs."""
    out = [0] * (2 * len(ids))
    out[0::2] = ids
    out[1::2] = counts
    return out


def add_stats(index: InvertedIndex, dls: Sequence[int]) -> None:
    """Chunks of lengths ``dls`` (ids from ``len(index.dl)`` on) join the statistics
    (their postings: :class:`TailLists`)."""
    index.dl.extend(dls)
    index.n_docs += len(dls)
    index.grow_total(sum(dls))
    index.gen += len(dls)


def postings_since(index: InvertedIndex, boundary: int, renumber: Mapping[int, int]) -> Postings:
    """The postings of chunks ``boundary`` and later, renumbered by ``renumber``, as an unscored
    segment's lists; read without folding (a loaded list is never copied to append to it)."""
    terms: list[str] = []
    lengths: list[int] = []
    p_docs, p_tfs = array("i"), array("I")
    # Chunks since the commit are read: a term not yet read from a loaded segment has none.
    for tid in sorted(index.touched.union(index.pending.present())):
        cids: list[int] = []
        counts: list[int] = []
        docs, tfs = index.docs[tid], index.tfs[tid]
        if isinstance(docs, array) and isinstance(tfs, array):  # a list of its own (a loaded one is a view)
            i = bisect_left(docs, boundary)
            cids, counts = docs[i:].tolist(), tfs[i:].tolist()
        pend = index.pending.get(tid)
        if pend:
            ids = pend[0::2]
            i = bisect_left(ids, boundary)
            cids.extend(ids[i:])
            counts.extend(pend[1::2][i:])
        if cids:
            terms.append(index.terms[tid])
            lengths.append(len(cids))
            p_docs.extend(map(renumber.__getitem__, cids))
            p_tfs.extend(counts)
    return Postings(
        terms, array("q", accumulate(lengths, initial=0)), p_docs, p_tfs, array("f"), None, None, None, scored=False
    )
