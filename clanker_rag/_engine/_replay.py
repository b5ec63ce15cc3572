"""An index's lists as segments: replaying a saved segment into it, and the postings added since a commit.

A commit (see ``_storage/_segments.py``) writes the chunks added since the
last one as a new segment of term frequencies, and a load replays every
segment after the first into the index as pending postings: the same lists,
statistics and impacts as adding those chunks one by one.  Both work on the
index's public columns (``pending``, ``docs``, ``tfs``, ``touched``, ``dl``
and the statistics), never on its search machinery.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import ne

from .._storage._codec import Ints, Postings
from .._storage._tf_column import Tfs
from ._index import InvertedIndex

__all__ = ["add_lists", "postings_since"]


def add_lists(
    index: InvertedIndex, dls: Sequence[int], tids: Sequence[int], offsets: Ints, chunks: Ints, tfs: Tfs,
    renumber: Sequence[int],
) -> None:  # fmt: skip
    """Add ``len(dls)`` chunks (ids from ``len(index.dl)`` on, of lengths ``dls``) given list by list:
    term ``tids[t]`` holds ``chunks[offsets[t]:offsets[t + 1]]`` (ids of the segment, mapped by
    ``renumber``; -1 leaves a posting out) with those ``tfs``."""
    pending = index.pending
    if -1 not in renumber:  # every chunk kept (the usual replay): the runs cut from one pass over the segment
        runs = list(chain.from_iterable(zip(map(renumber.__getitem__, chunks), tfs)))
        get = pending.get
        for tid, a, b in zip(tids, offsets, offsets[1:]):
            if b > a:
                have = get(tid)
                if have is None:
                    pending[tid] = runs[2 * a : 2 * b]
                else:
                    have.extend(runs[2 * a : 2 * b])
        _add_stats(index, dls)
        return
    for tid, a, b in zip(tids, offsets, offsets[1:]):
        ids = list(map(renumber.__getitem__, chunks[a:b]))
        counts: Sequence[int] | compress[int] = tfs[a:b]
        if -1 in ids:
            keep = list(map(ne, ids, repeat(-1)))
            ids = list(compress(ids, keep))
            counts = compress(counts, keep)
        if ids:
            pending[tid].extend(chain.from_iterable(zip(ids, counts)))
    _add_stats(index, dls)


def _add_stats(index: InvertedIndex, dls: Sequence[int]) -> None:
    index.dl.extend(dls)
    index.n_docs += len(dls)
    index.total_len += sum(dls)
    index.gen += len(dls)


def postings_since(index: InvertedIndex, boundary: int, renumber: Mapping[int, int]) -> Postings:
    """The postings of chunks ``boundary`` and later, renumbered by ``renumber``, as an unscored
    segment's lists; read without folding (a loaded list is never copied to append to it)."""
    terms: list[str] = []
    lengths: list[int] = []
    p_docs, p_tfs = array("i"), array("I")
    for tid in sorted(index.touched.union(index.pending)):
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
