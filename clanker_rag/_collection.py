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
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import mul

from ._codec import Ints
from ._exceptions import ConfigError
from ._index import InvertedIndex
from ._scoring import TermExplanation, length_norm, norm_values, tf_weight, tf_weights

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


def local_stats(index: InvertedIndex, terms: Iterable[str]) -> CollectionStats:
    """This index's statistics for ``terms`` (only the terms its vocabulary holds)."""
    term_id = index.term_id
    df: dict[str, int] = {}
    for term in terms:
        tid = term_id(term)
        if tid is not None:
            df[term] = len(index.fold(tid))
    return CollectionStats(index.n_docs, index.total_len, df)


def _impacts(index: InvertedIndex, term: str, stats: CollectionStats) -> tuple[Ints, array[float], float] | None:
    """The term's chunk ids here, their float32 impacts under ``stats``, and its idf."""
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
    tfs = index.tfs[tid]
    assert tfs is not None
    bm = index.bm25
    avgdl = stats.avgdl
    idf = bm.idf(stats.n_docs, df)
    # The same operations, in the same order, as InvertedIndex.impacts(), with the whole collection's avgdl.
    lengths = map(index.dl.__getitem__, docs)
    norms = list(norm_values(bm, avgdl, lengths)) if avgdl > 0 else [bm.k1] * len(docs)
    weights = tf_weights(bm, tfs, norms, docs, index.dl, avgdl)
    return docs, array("f", map(mul, repeat(idf), weights)), idf


def _terms(weights: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    # One fixed order (by term) so every shard sums a chunk's parts alike.
    for term in sorted(weights):
        w = weights[term]
        if w > 0:
            yield term, w


def top_with_stats(
    index: InvertedIndex,
    weights: Mapping[str, float],
    k: int,
    stats: CollectionStats,
    allowed: Container[int] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` best ``(chunk id, score)`` pairs here under ``stats``, best first, ties by lower id.

    Exhaustive over the query terms' postings: a shard is a fraction of the
    collection, and its pruning bounds would need the global statistics too.
    """
    if k <= 0:
        return []
    acc: dict[int, float] = {}
    for term, w in _terms(weights):
        found = _impacts(index, term, stats)
        if found is None:
            continue
        docs, imps, _ = found
        contribs: Iterable[float] = imps if w == 1.0 else map(mul, imps, repeat(w))
        for d, c in zip(docs, contribs):
            if allowed is None or d in allowed:
                acc[d] = acc.get(d, 0.0) + c
    return heapq.nsmallest(k, acc.items(), key=lambda item: (-item[1], item[0]))


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
        docs, imps, idf = found
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
