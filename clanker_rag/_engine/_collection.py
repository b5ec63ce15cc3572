"""Scoring one part of a collection with the statistics of the whole.

BM25 reads three collection statistics: the number of chunks ``N``, their
summed length (for ``avgdl``) and each query term's document frequency
``df``.  A knowledge base split over shards (:mod:`clanker_rag.cluster`)
adds these up over its shards, hands the sum to every shard, and each shard
scores its own chunks with it here: a chunk's score is then what one
knowledge base holding every chunk gives it.  Impacts are rounded to float32
exactly as the index stores them, so only the order in which a chunk's
terms are summed can differ (in the last bit).

This module reads the index only through its public surface (``term_id``,
``fold``, ``tfs``, ``dl``, ``bm25``): it is the small, stable hook a sharded
index needs, kept apart from the index's search machinery.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, mul

from .._exceptions import ConfigError
from .._storage._codec import Ints
from .._storage._lists import lengths_of
from ._index import InvertedIndex
from ._pruning import Plan, Ranked, above, best_of, essential_slices, probe
from ._scoring import TermExplanation, impact_order, length_norm, norm_values, tf_weight, tf_weights
from ._search import SEED

__all__ = ["CollectionStats", "explain_with_stats", "local_stats", "top_with_stats"]


@dataclass(frozen=True, slots=True)
class CollectionStats:
    """What BM25 needs of a whole collection: chunks, summed length, document frequencies.

    ``df`` maps each query term some part of the collection knows (it may be
    0 there after removals) to the number of chunks holding it.
    """

    n_docs: int
    total_length: int
    df: Mapping[str, int] = field(default_factory=dict)

    @property
    def avgdl(self) -> float:
        return self.total_length / self.n_docs if self.n_docs else 0.0

    @classmethod
    def combine(cls, parts: Iterable[CollectionStats]) -> CollectionStats:
        """The statistics of the union of disjoint parts."""
        n = 0
        total = 0
        df: dict[str, int] = {}
        for part in parts:
            n += part.n_docs
            total += part.total_length
            for term, count in part.df.items():
                df[term] = df.get(term, 0) + count
        return cls(n, total, df)


def local_stats(index: InvertedIndex, terms: Iterable[str] | None = None) -> CollectionStats:
    """This index's statistics for ``terms`` (only the terms its vocabulary holds).

    ``terms=None``: for every term the vocabulary holds, including terms
    whose chunks were all removed (df 0: a query still counts them, as
    ``KnowledgeBase.search`` does).  A sharded index's client keeps this
    table of every shard, so a search needs no statistics round trip.
    """
    term_id = index.term_id
    df: dict[str, int] = {}
    if terms is None:
        index.pending.read_all()  # every term of a load's later segments known first
        packed = index.packed()
        if packed is not None and len(packed.offsets) == len(index.terms) + 1:
            # Loaded or bulk-built and unchanged since: the list lengths are
            # in the packed offsets, no list need be cut out of them.
            return CollectionStats(index.n_docs, index.total_len, dict(zip(packed.terms, lengths_of(packed.offsets))))
        fold = index.fold
        for each, term in enumerate(index.terms):
            df[term] = len(fold(each))
        return CollectionStats(index.n_docs, index.total_len, df)
    for term in terms:
        tid = term_id(term)
        if tid is not None:
            df[term] = len(index.fold(tid))
    return CollectionStats(index.n_docs, index.total_len, df)


@dataclass(slots=True)
class _Impacts:
    """One term's postings here scored with a whole collection's statistics."""

    key: tuple[int, int, int, int]  # the index generation, N, summed length, df they are for
    docs: Ints
    imps: array[float]
    idf: float
    top: float  # the largest impact
    order: array[int] | None = None  # positions by decreasing impact, sorted on first need

    def by_impact(self) -> array[int]:
        if self.order is None:
            self.order = impact_order(self.imps)
        return self.order

    def ranked(self) -> Ranked:
        return Ranked(self.docs, self.by_impact(), self.imps, 1.0)


# Impacts under the last statistics seen, per index and term, least recently
# used first.  The statistics change only when the collection does, so a
# shard scores a term's list once per change rather than once per query.
# Weak: a shard's cache goes with its index.
_CACHES: weakref.WeakKeyDictionary[InvertedIndex, _Cache] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()
# Postings cached per index (8 bytes each: a float32 impact and an int32 position).
CACHE_POSTINGS = 4_000_000
# Chunks a list contributes to the pool before the pruned search gives up on
# its bounds and scores every posting (a share of all the query's postings).
_POOL_SHARE = 4


@dataclass(slots=True)
class _Cache:
    """One index's cached impacts, least recently used first, and the postings they hold."""

    entries: dict[str, _Impacts] = field(default_factory=dict)
    held: int = 0

    def take(self, term: str, key: tuple[int, int, int, int]) -> _Impacts | None:
        """The term's impacts if cached for ``key`` (now the most recently used); a stale entry goes."""
        found = self.entries.pop(term, None)
        if found is None:
            return None
        if found.key != key:
            self.held -= len(found.docs)
            return None
        self.entries[term] = found
        return found

    def put(self, term: str, found: _Impacts) -> None:
        """Keep ``found``, dropping the least recently used while over ``CACHE_POSTINGS`` (never the last)."""
        self.entries[term] = found
        self.held += len(found.docs)
        while self.held > CACHE_POSTINGS and len(self.entries) > 1:
            self.held -= len(self.entries.pop(next(iter(self.entries))).docs)


def _cache_of(index: InvertedIndex) -> _Cache:
    with _CACHE_LOCK:
        cache = _CACHES.get(index)
        if cache is None:
            cache = _CACHES[index] = _Cache()
        return cache


def _impacts(index: InvertedIndex, term: str, stats: CollectionStats) -> _Impacts | None:
    """The term's chunk ids here and their float32 impacts under ``stats`` (cached)."""
    tid = index.term_id(term)
    if tid is None:
        return None
    docs = index.fold(tid)
    if not docs:
        return None
    df = stats.df.get(term, 0)
    if df < len(docs) or stats.n_docs < index.n_docs:
        raise ConfigError(
            f"collection statistics name {df} chunks holding {term!r} and {stats.n_docs} chunks in all, "
            f"fewer than this part alone holds ({len(docs)} and {index.n_docs})"
        )
    key = (index.gen, stats.n_docs, stats.total_length, df)
    cache = _cache_of(index)
    hit = cache.take(term, key)
    if hit is not None:
        return hit
    tfs = index.tfs[tid]
    assert tfs is not None
    bm = index.bm25
    avgdl = stats.avgdl
    idf = bm.idf(stats.n_docs, df)
    # The same operations, in the same order, as InvertedIndex.impacts(), with the whole collection's avgdl.
    lengths = map(index.dl.__getitem__, docs)
    norms = list(norm_values(bm, avgdl, lengths)) if avgdl > 0 else [bm.k1] * len(docs)
    weights = tf_weights(bm, tfs, norms, docs, index.dl, avgdl)
    imps = array("f", map(mul, repeat(idf), weights))
    found = _Impacts(key, docs, imps, idf, max(imps))
    cache.put(term, found)
    return found


def _terms(weights: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    # One fixed order (by term) so every shard, and the pruned and the
    # exhaustive scoring, sum a chunk's parts alike.
    for term in sorted(weights):
        w = weights[term]
        if w > 0:
            yield term, w


def _exhaustive(lists: list[tuple[_Impacts, float]], k: int, allowed: Container[int] | None) -> list[tuple[int, float]]:
    acc: dict[int, float] = {}
    for found, w in lists:
        contribs: Iterable[float] = found.imps if w == 1.0 else map(mul, found.imps, repeat(w))
        for d, c in zip(found.docs, contribs):
            if allowed is None or d in allowed:
                acc[d] = acc.get(d, 0.0) + c
    return heapq.nsmallest(k, acc.items(), key=lambda item: (-item[1], item[0]))


def _scores(lists: list[tuple[_Impacts, float]], cands: list[int]) -> list[float]:
    """Full scores of ``cands``, summed in the exhaustive order (bit for bit its sums)."""
    scores: list[float] = []
    for i, (found, w) in enumerate(lists):
        vals = probe(found.docs, found.imps, w, cands)
        # 0.0 + x is x, and x + 0.0 is x: an absent term changes nothing.
        scores = list(map(add, scores, vals)) if i else list(vals)
    return scores


def top_with_stats(
    index: InvertedIndex,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    allowed: Container[int] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` best ``(chunk id, score)`` pairs here under ``stats``, best first, ties by lower id.

    Exact and pruned, as ``InvertedIndex.top_k``: the threshold algorithm
    over each term's impact order (impacts under ``stats``, cached), then
    MaxScore's essential terms bound what a chunk outside the pool can
    score; when the bounds leave too many chunks, every posting is scored.
    """
    if k <= 0:
        return []
    lists = []
    for term, w in _terms(weights):
        found = _impacts(index, term, stats)
        if found is not None:
            lists.append((found, w))
    total = sum(len(found.docs) for found, _ in lists)
    depth = max(SEED, k)
    if total <= 4 * depth or len(lists) < 1:
        return _exhaustive(lists, k, allowed)
    plan: Plan = [(found.top * w, i, w) for i, (found, w) in enumerate(lists)]
    pool: set[int] = set()
    cands: list[int] = []
    scores: list[float] = []
    theta = 0.0
    while True:
        new: set[int] = set()
        edges: list[float] = []
        for found, w in lists:
            docs = found.docs
            if depth >= len(docs):
                new.update(docs)
                edges.append(0.0)
            else:
                order = found.by_impact()
                new.update(map(docs.__getitem__, order[:depth]))
                edges.append(found.imps[order[depth]] * w)
        new.difference_update(pool)
        pool.update(new)
        fresh = list(new) if allowed is None else list(filter(allowed.__contains__, new))
        cands.extend(fresh)
        scores.extend(_scores(lists, fresh))
        if len(cands) >= k:
            theta = heapq.nlargest(k, scores)[-1]
        if not any(edges) or (theta > 0.0 and above(sum(edges)) < theta):
            return best_of(cands, scores, k, theta)
        if theta > 0.0:
            ranges, n_more = essential_slices(plan, edges, depth, theta, lambda i: [lists[i][0].ranked()])
            if n_more <= total // _POOL_SHARE:
                more: set[int] = set()
                for run, lo, hi in ranges:
                    more.update(map(run.docs.__getitem__, run.order[lo:hi]))
                more.difference_update(pool)
                extra = list(more) if allowed is None else list(filter(allowed.__contains__, more))
                cands.extend(extra)
                scores.extend(_scores(lists, extra))
                return best_of(cands, scores, k, theta)
        if len(pool) > total // _POOL_SHARE:
            return _exhaustive(lists, k, allowed)
        depth *= 4


def explain_with_stats(
    index: InvertedIndex, weights: Mapping[str, float], cid: int, stats: CollectionStats
) -> tuple[float, list[TermExplanation]]:
    """Chunk ``cid``'s score under ``stats`` term by term; the parts sum to the score."""
    bm = index.bm25
    dl = index.dl[cid] if cid < len(index.dl) else 0
    score = 0.0
    parts = []
    for term, w in _terms(weights):
        found = _impacts(index, term, stats)
        if found is None:
            continue
        docs, imps, idf = found.docs, found.imps, found.idf
        i = bisect_left(docs, cid)
        if i >= len(docs) or docs[i] != cid:
            continue
        contribution = imps[i] if w == 1.0 else imps[i] * w
        score += contribution
        tid = index.term_id(term)
        assert tid is not None  # _impacts found it
        tfs = index.tfs[tid]
        assert tfs is not None
        norm = length_norm(bm.k1, bm.b, dl, stats.avgdl)
        parts.append(
            TermExplanation(
                term=term,
                weight=w,
                tf=tfs[i],
                df=stats.df.get(term, 0),
                idf=idf,
                tf_weight=tf_weight(bm.variant, tfs[i], norm, bm.k1, bm.b, bm.delta_value, dl, stats.avgdl),
                contribution=contribution,
            )
        )
    return score, parts
