"""Reranking by term proximity: a passage that has the query's words next to each other, in order.

BM25 scores each word on its own: a chunk that says "test client" and one
that says "test" in its first line and "client" in its last score alike.  A
question's adjacent content words ("result backend", "output directory",
"group invocation without command") usually name one thing, and the passage
that answers writes them together.  :class:`ProximityRetriever` takes the
inner retriever's top ``depth`` hits and ranks them by their score plus, for
every pair of terms adjacent in the query (stop words dropped, in order), a
BM25-like term: the pair's weight (the mean idf of its two terms) times the
saturated count of places where the second follows the first within ``gap``
terms, in the passage's text or in its section heading; the best ``k`` come
back (by default in the inner order, scores untouched).  This is the ordered-window part of
the sequential dependence model (Metzler and Croft, SIGIR 2005), computed
only over the candidates, so the index is untouched and the cost is the
analysis of ``depth`` passages.

Pure standard library; the term weights need the retriever's collection
statistics (``collection_stats(terms)``, as :class:`~clanker_rag.KnowledgeBase`,
the sharded index and the proxy's shared retriever have): without them the
hits come back in the inner retriever's order.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._engine._collection import CollectionStats
from .._engine._scoring import BM25
from .._text._analysis import Analyzer
from .._types import HitLike, Retriever
from .._validate import check_number, int_k, positive_int

__all__ = ["DEFAULT_DEPTH", "DEFAULT_GAP", "DEFAULT_WEIGHT", "ProximityRetriever", "ordered_pairs", "pair_counts"]

log = logging.getLogger(__name__)

# The bonus's weight: decided leave-one-collection-out on bench/bench_docs.py's collections
# (bench/results/h26retr.md).
DEFAULT_WEIGHT = 0.4
# The candidates reranked and how far apart two terms may be (in terms, stop words dropped).
# Not tuned: at weight 0.4, 15, 30 and 50 candidates and gaps 1, 2 and 3 all put the answer in the top 3
# for 403-406 of the 466 questions (bench/bench_retrieval.py --depth/--gap, bench/results/h26retr.md).
DEFAULT_DEPTH = 30
DEFAULT_GAP = 2


def ordered_pairs(terms: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of different terms adjacent in ``terms``, each once, in order."""
    return list(dict.fromkeys((a, b) for a, b in itertools.pairwise(terms) if a != b))


def pair_counts(pairs: Iterable[tuple[str, str]], terms: Sequence[str], gap: int) -> dict[tuple[str, str], int]:
    """For each pair (a, b): how many occurrences of a in ``terms`` have b within the next ``gap`` terms."""
    where: dict[str, list[int]] = {}
    for i, term in enumerate(terms):
        where.setdefault(term, []).append(i)
    counts: dict[tuple[str, str], int] = {}
    for a, b in pairs:
        firsts, seconds = where.get(a), where.get(b)
        if not firsts or not seconds:
            continue
        after = set(seconds)
        n = sum(1 for i in firsts if any(i + d in after for d in range(1, gap + 1)))
        if n:
            counts[(a, b)] = n
    return counts


class ProximityRetriever:
    """``retriever``'s top ``depth`` hits reranked with a bonus for the query's adjacent terms written together.

    ``weight`` scales the bonus (0: the inner order, unchanged).
    ``analyzer`` defaults to the retriever's own, so query and passages are
    read the way the index reads them.  The reranking decides *which* ``k``
    hits come back; they come back as the retriever made them, scores
    included, and with ``keep_order`` (the default) in the retriever's own
    order, so that a reader of ranks and score ratios sees the retriever's
    own.  ``keep_order=False`` returns them best first by BM25 plus bonus.
    Keyword arguments of :meth:`search` (filters) pass through.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        weight: float = DEFAULT_WEIGHT,
        depth: int = DEFAULT_DEPTH,
        gap: int = DEFAULT_GAP,
        analyzer: Callable[[str], Iterable[str]] | None = None,
        keep_order: bool = True,
    ) -> None:
        check_number("weight", weight, 0, 10)
        self.retriever = retriever
        self.keep_order = keep_order
        self.weight = float(weight)
        self.depth = positive_int("depth", depth)
        self.gap = positive_int("gap", gap)
        found = getattr(retriever, "analyzer", None)
        self.analyzer: Callable[[str], Iterable[str]] = analyzer or (found if callable(found) else Analyzer())
        bm25 = getattr(retriever, "bm25", None)
        self.bm25 = bm25 if isinstance(bm25, BM25) else BM25()

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        int_k(k)
        hits = list(self.retriever.search(query, max(k, self.depth), **kwargs))
        if self.weight == 0.0 or len(hits) < 2:
            return hits[:k]
        terms = list(self.analyzer(query))
        idf = self._idf(set(terms))
        pairs = [(a, b) for a, b in ordered_pairs(terms) if a in idf and b in idf]
        if not pairs:
            return hits[:k]
        scored = [(hit.score + self.bonus(hit, pairs, idf), i, hit) for i, hit in enumerate(hits)]
        scored.sort(key=lambda item: (-item[0], item[1]))
        kept = scored[:k]
        if self.keep_order:
            kept.sort(key=lambda item: item[1])
        return [hit for _, _, hit in kept]

    def bonus(self, hit: HitLike, pairs: Sequence[tuple[str, str]], idf: dict[str, float]) -> float:
        """What ``hit`` gains for the query's ``pairs`` written together in its text or its section heading."""
        counts = pair_counts(pairs, list(self.analyzer(hit.text)), self.gap)
        section = getattr(hit, "section", None)
        if isinstance(section, str) and section:
            # Apart from the text: a heading's last word and the text's first are not a phrase.
            for pair, n in pair_counts(pairs, list(self.analyzer(section)), self.gap).items():
                counts[pair] = counts.get(pair, 0) + n
        k1 = self.bm25.k1
        total = 0.0
        for (a, b), n in counts.items():
            total += (idf[a] + idf[b]) / 2 * n * (k1 + 1) / (n + k1)
        return self.weight * total

    def _idf(self, terms: set[str]) -> dict[str, float]:
        """Each query term the collection holds, with its BM25 idf (none without collection statistics)."""
        stats_of = getattr(self.retriever, "collection_stats", None)
        if not callable(stats_of):
            log.debug("%s has no collection statistics: proximity reranking is off", type(self.retriever).__name__)
            return {}
        stats = stats_of(terms)
        if not isinstance(stats, CollectionStats):
            return {}
        return {t: self.bm25.idf(stats.n_docs, df) for t in terms if (df := stats.df.get(t, 0)) > 0}
