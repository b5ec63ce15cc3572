"""Combining ranked lists, and growing hits into bigger passages.

* :func:`reciprocal_rank_fusion` - RRF (Cormack, Clarke and Büttcher, SIGIR
  2009): an item's fused score is ``sum_i w_i / (k + rank_i)`` over the lists
  it appears in, ranks counted from 1.  It needs no score calibration, which
  is why it can mix BM25 scores with cosine similarities or several queries.
* :class:`MultiQueryRetriever` - retrieve for several rewrites of a query
  (multi-query expansion, HyDE: any ``str -> list[str]`` callable, typically
  an LLM the caller supplies) and fuse the lists with RRF.
* :func:`expand_neighbors` - "small-to-big": match on small chunks, hand the
  reader the surrounding passage.  Each hit is widened with its neighbouring
  chunks, overlapping or touching spans of one document are merged, and the
  whole result stays within a character budget.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from .._exceptions import ConfigError
from .._types import Hit, HitLike, Retriever
from .._validate import check_int, check_number, positive_int

__all__ = [
    "MultiQueryRetriever",
    "check_rrf",
    "expand_neighbors",
    "fuse_hits",
    "hit_key",
    "reciprocal_rank_fusion",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_RRF_K = 60


def hit_key(hit: Any) -> Hashable:
    """Identity of a hit across ranked lists: the same passage of the same source.

    A hit that carries a character span is identified by ``(source, start,
    end)``; one without a span (``start == end``) by ``(source, text)``.
    """
    start = getattr(hit, "start", 0)
    end = getattr(hit, "end", 0)
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return (hit.source, start, end)
    return (hit.source, hit.text)


def check_rrf(k: object, weights: Sequence[object] | None = None) -> None:
    """``ConfigError`` unless ``k`` is a finite number >= 0 and every weight a finite number >= 0.

    A negative or NaN weight would turn "found by this list" into a penalty
    or poison every sum it enters; an infinite ``k`` makes every score zero.
    """
    check_number("k", k, 0)
    for i, weight in enumerate(weights or ()):
        check_number(f"weights[{i}]", weight, 0)


def reciprocal_rank_fusion(
    rankings: Sequence[Iterable[T]],
    *,
    k: float = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    key: Callable[[T], Hashable] | None = None,
) -> list[tuple[T, float]]:
    """Fuse ranked lists into one: ``[(item, fused_score), ...]``, best first.

    ``key`` maps an item to its identity (default: the item itself); the item
    returned for a key is its first occurrence (earliest list, best rank).  An
    item repeated within one list counts at its best rank only.  Ties keep the
    order of first appearance, so the fusion is deterministic.
    """
    check_rrf(k, weights)
    lists = [list(r) for r in rankings]
    if weights is None:
        weights = [1.0] * len(lists)
    elif len(weights) != len(lists):
        raise ConfigError(f"{len(weights)} weights given for {len(lists)} ranked lists")
    keyfn: Callable[[T], Hashable] = key if key is not None else (lambda item: item)
    first: dict[Hashable, T] = {}
    scores: dict[Hashable, float] = {}
    for ranking, weight in zip(lists, weights, strict=True):
        seen: set[Hashable] = set()
        for rank, item in enumerate(ranking, start=1):
            ident = keyfn(item)
            if ident in seen:
                continue
            seen.add(ident)
            if ident not in first:
                first[ident] = item
                scores[ident] = 0.0
            scores[ident] += weight / (k + rank)
    # sorted() is stable and dicts keep insertion order: ties stay in first-seen order.
    order = sorted(scores, key=scores.__getitem__, reverse=True)
    return [(first[ident], scores[ident]) for ident in order]


def _with_score(hit: T, score: float) -> T:
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type) and hasattr(hit, "score"):
        return dataclasses.replace(hit, score=score)
    return hit


def fuse_hits(
    lists: Sequence[Sequence[T]],
    k: int | None = None,
    *,
    rrf_k: float = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
) -> list[T]:
    """RRF over lists of hits; each returned :class:`Hit` carries its fused score.

    Hits are matched with :func:`hit_key`.  Hit objects that are not
    dataclasses come back unchanged (in fused order).
    """
    fused = reciprocal_rank_fusion(lists, k=rrf_k, weights=weights, key=hit_key)
    if k is not None:
        fused = fused[:k]
    return [_with_score(hit, score) for hit, score in fused]


class MultiQueryRetriever:
    """Retrieve for a query and its rewrites; fuse the ranked lists by RRF.

    ``rewrite`` is any callable ``query -> list of queries`` (paraphrases from
    an LLM, a HyDE-style hypothetical answer, keyword variants).  The original
    query is searched too unless ``include_original=False``.  Each query is
    searched for ``depth`` hits (default ``max(2 * k, 20)``).  If ``rewrite``
    raises, the failure is logged and the original query alone is used: a
    flaky LLM must not take retrieval down with it.
    """

    def __init__(
        self,
        retriever: Retriever,
        rewrite: Callable[[str], Iterable[str] | str],
        *,
        include_original: bool = True,
        rrf_k: float = DEFAULT_RRF_K,
        depth: int | None = None,
        max_queries: int = 8,
    ) -> None:
        if not callable(getattr(retriever, "search", None)):
            raise ConfigError("retriever must have a search(query, k) method")
        if not callable(rewrite):
            raise ConfigError(f"rewrite={rewrite!r} must be a callable str -> list[str]")
        check_int("depth", depth, 1, none=True)
        positive_int("max_queries", max_queries)
        self.retriever = retriever
        self.rewrite = rewrite
        self.include_original = include_original
        self.rrf_k = rrf_k
        self.depth = depth
        self.max_queries = max_queries

    def queries(self, query: str) -> list[str]:
        """The de-duplicated queries that :meth:`search` runs for ``query``."""
        try:
            produced = self.rewrite(query)
            rewrites = [produced] if isinstance(produced, str) else list(produced)
        except Exception as exc:  # any failure of a user hook degrades to the plain query
            log.warning("query rewrite failed (%s: %s); searching the original query only", type(exc).__name__, exc)
            rewrites = []
        out: list[str] = []
        seen: set[str] = set()
        for q in ([query] if self.include_original else []) + rewrites:
            if not isinstance(q, str):
                log.warning("query rewrite returned a %s, not a str; ignored", type(q).__name__)
                continue
            norm = " ".join(q.split()).casefold()
            if norm and norm not in seen:
                seen.add(norm)
                out.append(q)
        if not out:
            out = [query]
        return out[: self.max_queries]

    def search(self, query: str, k: int = 10) -> list[HitLike]:
        if k <= 0:
            return []
        depth = self.depth if self.depth is not None else max(2 * k, 20)
        lists = [list(self.retriever.search(q, depth)) for q in self.queries(query)]
        if len(lists) == 1:
            return lists[0][:k]
        return fuse_hits(lists, k, rrf_k=self.rrf_k)

    def __call__(self, query: str, k: int = 10) -> list[HitLike]:
        return self.search(query, k)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


class _Group:
    """Merged span of one source, built from hits and their neighbour chunks."""

    __slots__ = ("best", "end", "rank", "score", "source", "start")

    def __init__(self, source: str, start: int, end: int, best: Hit, rank: int, score: float) -> None:
        self.source = source
        self.start = start
        self.end = end
        self.best = best
        self.rank = rank
        self.score = score


def expand_neighbors(
    kb: Any,
    hits: Sequence[Hit],
    window: int = 1,
    budget_chars: int | None = 4000,
) -> list[Hit]:
    """Small-to-big: widen each hit with up to ``window`` chunks on either side.

    Hits and neighbours of one source whose character spans overlap or touch
    are merged into one :class:`Hit` whose ``text`` is exactly
    ``kb.source_text(source)[start:end]``; its score, ``chunk_index``,
    ``chunk_id`` and ``section`` are those of its best-ranked hit, and results
    keep the rank order of their best hit.  Expansion goes ring by ring
    (distance 1 for every hit in rank order, then distance 2, ...) and stops
    adding a neighbour once the total text would exceed ``budget_chars``.  The
    hits themselves are kept in rank order while they fit; the first hit is
    always returned, even if alone it is over the budget.  Hits whose source or
    chunk ``kb`` does not know are passed through unchanged.
    """
    check_int("window", window, 0)
    check_int("budget_chars", budget_chars, 0, none=True)
    limit = float("inf") if budget_chars is None else budget_chars

    chunk_cache: dict[str, list[Hit]] = {}

    def chunks_of(source: str) -> list[Hit]:
        if source not in chunk_cache:
            chunk_cache[source] = sorted(kb.chunks(source), key=lambda c: c.chunk_index)
        return chunk_cache[source]

    # Each entry: a foreign hit passed through, or a _Group of one source.
    entries: list[Hit | _Group] = []
    groups_by_source: dict[str, list[_Group]] = {}
    anchors: list[tuple[_Group, list[Hit], int]] = []  # (group, chunks of its source, position of the hit)
    used = 0

    def total_after(source: str, start: int, end: int) -> int:
        """Total characters if [start, end) were merged into ``source``'s groups."""
        covered = 0
        lo, hi = start, end
        for g in groups_by_source.get(source, ()):
            if g.start <= hi and lo <= g.end:
                covered += g.end - g.start
                lo, hi = min(lo, g.start), max(hi, g.end)
        return used - covered + (hi - lo)

    def merge(source: str, start: int, end: int) -> _Group:
        """Merge [start, end) into ``source``'s groups; returns the surviving group."""
        nonlocal used
        lo, hi = start, end
        touching = [g for g in groups_by_source.get(source, ()) if g.start <= hi and lo <= g.end]
        if not touching:
            raise AssertionError("merge() needs an existing group")  # pragma: no cover
        # Repeat until stable: widening can reach a further group.
        while True:
            for g in touching:
                lo, hi = min(lo, g.start), max(hi, g.end)
            more = [g for g in groups_by_source[source] if g not in touching and g.start <= hi and lo <= g.end]
            if not more:
                break
            touching.extend(more)
        keep = min(touching, key=lambda g: g.rank)
        for g in touching:
            used -= g.end - g.start
            if g is not keep:
                groups_by_source[source].remove(g)
                entries.remove(g)
                keep.score = max(keep.score, g.score)
                for i, (ag, chs, pos) in enumerate(anchors):
                    if ag is g:
                        anchors[i] = (keep, chs, pos)
        keep.start, keep.end = lo, hi
        used += hi - lo
        return keep

    for rank, hit in enumerate(hits):
        source = hit.source
        text = kb.source_text(source) if isinstance(source, str) else None
        chs = chunks_of(source) if text is not None else []
        pos = next((i for i, c in enumerate(chs) if c.chunk_index == hit.chunk_index), None)
        known = pos is not None and chs[pos].start == hit.start and chs[pos].end == hit.end
        if not known:
            size = len(hit.text)
            if entries and used + size > limit:
                continue
            entries.append(hit)
            used += size
            continue
        assert pos is not None
        if entries and total_after(source, hit.start, hit.end) > limit:
            continue
        score = float(hit.score)
        if any(g.start <= hit.end and hit.start <= g.end for g in groups_by_source.get(source, ())):
            group = merge(source, hit.start, hit.end)
            group.score = max(group.score, score)
        else:
            group = _Group(source, hit.start, hit.end, hit, rank, score)
            groups_by_source.setdefault(source, []).append(group)
            entries.append(group)
            used += hit.end - hit.start
        anchors.append((group, chs, pos))

    for distance in range(1, window + 1):
        for i in range(len(anchors)):
            _, chs, pos = anchors[i]
            for npos in (pos - distance, pos + distance):
                if not 0 <= npos < len(chs):
                    continue
                neighbour = chs[npos]
                group = anchors[i][0]  # re-read: an earlier merge may have replaced it
                # Spanning from the group to the neighbour also covers any gap
                # between chunks, so the merged text stays one contiguous slice.
                lo, hi = min(neighbour.start, group.start), max(neighbour.end, group.end)
                if total_after(group.source, lo, hi) > limit:
                    continue
                merge(group.source, lo, hi)

    out: list[Hit] = []
    for entry in entries:
        if not isinstance(entry, _Group):
            out.append(entry)
            continue
        best = entry.best
        text = kb.source_text(entry.source)
        chs = chunks_of(entry.source)
        inside = [c for c in chs if entry.start <= c.start and c.end <= entry.end]
        start_line = min((c.start_line for c in inside), default=_line_of(text, entry.start))
        end_line = max((c.end_line for c in inside), default=_line_of(text, max(entry.start, entry.end - 1)))
        out.append(
            dataclasses.replace(
                best,
                text=text[entry.start : entry.end],
                score=entry.score,
                start=entry.start,
                end=entry.end,
                start_line=start_line,
                end_line=end_line,
            )
        )
    return out
