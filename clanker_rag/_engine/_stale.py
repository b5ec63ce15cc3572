"""Exact top-k over impacts saved under other statistics: bounds, and exact impacts on demand.

Packed lists (a load's first segment, or a bulk pass) carry impacts and impact
orders computed under the statistics of that moment: the chunk count, the
summed length and each term's document frequency.  Any add or removal since,
and a load of a commit with several segments, changes them, and so every
impact.  Recomputing a long list's impacts and sorting its order again costs a
pass and a sort for each query term; on a segmented index that halved the
queries/s.

They need not be recomputed to search exactly.  A contribution is
``idf(N, df) * tfw(tf, dl, avgdl)``; the idf ratio is one number per term, and
for every variant here the tf weight under a new ``avgdl`` lies within
``[min(1, r), max(1, r)]`` times the weight under the old (``r`` = new
``avgdl`` / old; :func:`scale_bounds`).  So a saved impact times ``hi`` bounds
the exact impact of its posting, the saved order still ranks the postings by
an upper bound, and the pruned search (``_search``) prunes with it and scores
its few candidates exactly, from their tf and chunk length, by the operations
a fresh build uses (:func:`._scoring.term_impacts`): the same floats.  Postings
added since the lists were packed (chunk ids past the packed ones) are a
second run, scored exactly; removed chunks stay in the packed run with length
0, and are left out.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import add, and_, eq, lt, mul, sub, truth

from .._storage._codec import Ints
from .._storage._impact_tables import Table, gather
from .._storage._impact_tables import lookup as saved_lookup
from ._packed_lists import BaseStats, TermLists
from ._pruning import Ranked
from ._scoring import BM25, impact_order, norm_values, term_impacts

__all__ = ["StaleTerm", "saved_under", "scale_bounds", "stale_term", "without_dead"]

# Relative slack on the ratio bounds: each impact is a float32 (2**-24
# relative rounding) of a few double operations; this is far above both.
_SLACK = 1e-6
# Beyond this ratio of the upper to the lower bound (statistics far from the
# packed ones) the bounds prune too little: the term's impacts are recomputed.
LOOSE = 1.25
# Added postings are scored and sorted exactly, removed ones are dead weight
# in the pool: past 1/MOVED_SHARE of the packed list, recomputing is cheaper.
MOVED_SHARE = 4
# Candidates scored from tf and length cost a few times what a table lookup
# does; once a term's candidates in a generation pass 1/RECOMPUTE_SHARE of its
# list, its impacts are recomputed and looked up as usual (a ski rental).
RECOMPUTE_SHARE = 4
# The exact largest impact is found among the top of the packed order,
# starting with this many postings.
_TOP_STEP = 4

Norms = Callable[[Sequence[int]], Sequence[float]]


def scale_bounds(
    bm: BM25, now: tuple[int, int, int], then: tuple[int, int, int]
) -> tuple[float, float, float] | None:  # fmt: skip
    """``(lo, hi, idf)``: every posting's exact impact under ``now`` lies within
    ``lo`` and ``hi`` times its impact under ``then`` (each ``(N, summed length,
    df)``), and ``idf`` is the term's under ``now``; None when they are too far
    apart (or a statistic is degenerate).

    The tf weight's ratio is within ``[min(1, r), max(1, r)]``, ``r`` the ratio
    of the average lengths: for lucene, robertson and atire, ``tf / (tf + k1 B)``
    with ``B = 1 - b + b dl / avgdl``, whose ratio ``B_then / B_now`` lies
    between 1 and ``r``, and ``(tf + x) / (tf + y)`` between 1 and ``x / y``;
    bm25+ adds ``delta >= 0`` to both, which pulls the ratio towards 1; bm25l's
    ``(c + delta) / (k1 + c + delta)`` with ``c = tf / B`` changes by at most
    the factor ``c`` does.
    """
    (n, total, df), (n0, total0, df0) = now, then
    if n <= 0 or n0 <= 0 or total <= 0 or total0 <= 0 or df <= 0 or df0 <= 0:
        return None
    idf, idf0 = bm.idf(n, df), bm.idf(n0, df0)
    if not idf > 0.0 or not idf0 > 0.0:
        return None
    r = (total / n) / (total0 / n0)
    t = idf / idf0
    lo, hi = t * min(1.0, r) * (1.0 - _SLACK), t * max(1.0, r) * (1.0 + _SLACK)
    return (lo, hi, idf) if hi <= lo * LOOSE else None


@dataclass(slots=True)
class StaleTerm:
    """One term's packed postings under the current statistics (one generation).

    ``runs`` are what the pruning reads; :meth:`lookup` scores candidates
    exactly.  ``top`` is the exact largest impact, as a fresh build's.
    """

    gen: int
    idf: float
    avgdl: float
    top: float
    lo: float  # exact impacts are at least lo and at most hi times the saved ones
    hi: float
    runs: list[Ranked]
    base: TermLists
    table: Table | None  # the packed list's saved lookup table (see _storage/_impact_tables)
    dead: bool  # the packed list holds removed chunks
    first_new: int  # chunk ids from here on are added postings (``added``)
    packed_all: bool  # no chunk was added since the lists were packed: every candidate is below first_new
    added: dict[int, float]
    norms: Norms  # the length norms of chunks in this generation
    length: int  # of the current list
    looked: int = 0  # candidates scored by :meth:`lookup` so far
    # The packed impacts at given chunks below first_new (see :meth:`use_packed`).
    saved: Callable[[list[int]], Iterable[float]] | None = None

    def use_packed(self, packed: Callable[[list[int]], Iterable[float]]) -> None:
        """Read the packed impacts from the saved table, or else through ``packed``
        (at chunks below :attr:`first_new`), from now on."""
        table = self.table
        self.saved = packed if table is None else partial(saved_lookup, table)

    def bound(self, w: float, cands: list[int], highest: int = -1) -> Iterable[float]:
        """``w`` times the term's packed impact at each of ``cands`` (its exact one for
        an added posting; :meth:`use_packed` first): the exact impacts lie within
        ``lo`` and ``hi`` times these.  ``highest``: at least the largest of ``cands``
        (-1: not known)."""
        saved = self.saved
        assert saved is not None  # use_packed was called
        n = self.first_new
        if self.packed_all or (highest if highest >= 0 else max(cands)) < n:
            vals = saved(cands)
            return vals if w == 1.0 else map(mul, vals, repeat(w))
        # Chunks added since are in no packed list: read at chunk 0 (x * True is x), then masked
        # to 0.0; an added chunk's exact impact then replaces its 0.0 (a chunk is in one run).
        packed = list(map(lt, cands, repeat(n)))
        vals = map(mul, saved(list(map(mul, cands, packed))), packed)
        if self.added:
            vals = map(self.added.get, cands, vals)
        return vals if w == 1.0 else map(mul, vals, repeat(w))

    def worth_looking(self, n: int) -> bool:
        """Count ``n`` more candidates; whether scoring them here still beats recomputing
        the term's impacts."""
        self.looked += n
        return self.looked * RECOMPUTE_SHARE < self.length

    def lookup(self, bm: BM25, w: float, cands: list[int], dl: Sequence[int], highest: int = -1) -> Iterable[float]:
        """``w`` times the term's exact impact at each of ``cands`` (0.0 where absent;
        ``highest`` as for :meth:`bound`)."""
        docs, tfs = self.base.docs, self.base.tfs
        slots = None if self.table is None else self.table[1]
        highest = 0 if self.packed_all else highest if highest >= 0 else max(cands)
        late = bool(self.added) and highest >= self.first_new
        if slots is not None and len(slots) >= self.first_new:  # (a table covers every packed chunk)
            if highest < len(slots):
                at = gather(slots, cands)
                found: list[bool] = list(map(truth, at))
            else:  # chunks added since lie past the table, in no packed list: read at chunk 0, masked
                inside = list(map(lt, cands, repeat(len(slots))))
                at = gather(slots, list(map(mul, cands, inside)))
                found = list(map(and_, map(truth, at), inside))
            idx: Iterable[int] = map(sub, at, repeat(1))  # -1 where absent: any tf, masked below
        else:
            last = len(docs) - 1
            pos = list(map(bisect_left, repeat(docs), cands, repeat(0), repeat(last)))
            found = list(map(eq, gather(docs, pos), cands))
            idx = pos
        if self.dead:  # a removed chunk is still in the packed list: length 0
            found = list(map(and_, found, map(truth, gather(dl, cands))))
        imps = term_impacts(bm, self.idf, list(gather(tfs, list(idx))), self.norms(cands), cands, dl, self.avgdl)
        vals: Iterable[float] = imps if w == 1.0 else map(mul, imps, repeat(w))
        vals = map(mul, vals, found)
        if late:
            extra: Iterable[float] = map(self.added.get, cands, repeat(0.0))
            # x + 0.0 is x and 0.0 + x is x: each chunk is in one of the two runs.
            vals = map(add, vals, extra if w == 1.0 else map(mul, extra, repeat(w)))
        return vals


def stale_term(
    bm: BM25,
    gen: int,
    base: TermLists,
    order: Ints,
    stats: BaseStats,
    now: tuple[int, int],
    kept: int,
    new_docs: Ints,
    new_tfs: Ints,
    dl: Sequence[int],
    norms: Norms,
    table: Table | None,
) -> StaleTerm | None:
    """The term of packed lists ``base`` (impact order ``order``, computed under
    ``stats``; ``table`` its saved lookup table) whose current lists are ``kept``
    of the packed postings and ``new_docs``/``new_tfs`` added since (chunk ids
    past the packed ones), under the current ``now`` (N, summed length); None
    when its impacts had better be recomputed."""
    n_base = len(base.docs)
    n_added, n_dead = len(new_docs), n_base - kept
    length = kept + n_added
    if n_dead < 0 or MOVED_SHARE * max(n_added, n_dead) > n_base:
        return None
    bounds = scale_bounds(bm, (*now, length), (stats.n_docs, stats.total_len, n_base))
    if bounds is None:
        return None
    lo, hi, idf = bounds
    n, total = now
    avgdl = total / n
    values = base.imps
    live = _live(base, dl) if n_dead else list

    def exact(positions: list[int]) -> array[float]:
        cids = list(gather(base.docs, positions))
        return term_impacts(bm, idf, list(gather(base.tfs, positions)), norms(cids), cids, dl, avgdl)

    # The exact largest impact is among the packed order's top: past the
    # first rank whose bound is below the best found, nothing can beat it.
    end, top, step = 0, 0.0, _TOP_STEP
    while end < len(order):
        if top > 0.0:
            if values[order[end]] * hi < top:  # the usual case: one look
                break
            cut = max(end + 1, bisect_right(order, -(top / hi), lo=end, key=lambda p: -values[p]))
        else:  # none live yet
            cut, step = min(len(order), end + step), 2 * step
        more = live(order[end:cut])
        if more:
            top = max(top, max(exact(more)))
        end = cut
    runs = [Ranked(base.docs, order, values, hi, n_dead > 0)]
    added: dict[int, float] = {}
    if n_added:
        new_imps = term_impacts(bm, idf, new_tfs, norms(new_docs), new_docs, dl, avgdl)
        top = max(top, max(new_imps))
        runs.append(Ranked(new_docs, impact_order(new_imps), new_imps, 1.0))
        added = dict(zip(new_docs, new_imps))
    packed_all = len(dl) <= stats.n_chunks
    return StaleTerm(
        gen, idf, avgdl, top, lo, hi, runs, base, table, n_dead > 0, stats.n_chunks, packed_all, added, norms, length
    )


def _live(base: TermLists, dl: Sequence[int]) -> Callable[[Iterable[int]], list[int]]:
    docs = base.docs
    return lambda positions: [p for p in positions if dl[docs[p]]]


def saved_under(bm: BM25, stats: BaseStats, base: TermLists, order: Ints, dl: Sequence[int]) -> bool | None:
    """Whether the packed impact at the first live posting of ``order`` (within
    its first few) is, bit for bit, the one ``stats`` give; None: none live."""
    docs = base.docs
    for pos in order[:_TOP_STEP]:
        cid = docs[pos]
        if dl[cid]:
            avgdl0 = stats.total_len / stats.n_docs
            norm = list(norm_values(bm, avgdl0, [dl[cid]]))
            idf0 = bm.idf(stats.n_docs, len(docs))
            return term_impacts(bm, idf0, [base.tfs[pos]], norm, [cid], dl, avgdl0)[0] == base.imps[pos]
    return None


def without_dead(cands: Iterable[int], dl: Sequence[int]) -> list[int]:
    """``cands`` less removed chunks (length 0; a chunk in a posting list has terms)."""
    return list(filter(dl.__getitem__, cands))
