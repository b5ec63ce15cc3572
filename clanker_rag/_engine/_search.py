"""The pruned search: exact top-k over an index's typed accessors.

Search is exact top-k in two stages.  Every list longer than the index's
``ORDER_MIN`` also keeps its positions sorted by impact.  A query first runs
the threshold algorithm of Fagin, Lotem and Naor in batches: the chunks among
the best few impacts of each term are scored in full, and their k-th best
score is a floor for the answer; a chunk never seen can only gain the impact
at the cut from each term.  When that bound is already below the floor, the
answer is found; otherwise MaxScore over those bounds names the few chunks
still in the running (prefixes of the essential terms' orders), or, when they
would be too many, term-at-a-time scoring with MaxScore pruning finishes the
job, starting from the floor.  Scores are always summed in the same term
order, so the ranking equals exhaustive scoring bit for bit (property tests
check it).

This module holds no index state: it reads a :class:`ScoredLists` (the
index) through its accessors, so the search reads alone.  The hot loops are
``map``/``zip``/``dict`` pipelines over builtin callables, so CPython runs
them without executing Python bytecode per posting.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable, Mapping, Sequence, Set
from itertools import compress, repeat
from operator import add, ge
from typing import Protocol

from .._storage._codec import Floats, Ints, TermList
from .._storage._impact_tables import gather
from ._pruning import Plan, Ranked, above, best_of, cheap_essentials, essential_slices, merge_cost
from ._scoring import BM25, TermExplanation
from ._stale import without_dead

__all__ = ["ScoredLists", "explain", "full_scores", "plan_of", "score_all", "term_at_a_time", "top_k"]

# A query first scores the SEED best chunks of each term in full; the k-th
# best of those is a lower bound on the final threshold, and only the chunks
# that could still beat it are scored (see top_k).  Candidates scored one by
# one may cost 1/BUDGET_SHARE of the postings that term-at-a-time scoring
# would merge instead (with saved tables a lookup is one subscript: at 225k
# chunks 1 ran 4.9 % fewer instructions than 2, callgrind, 500 cold queries;
# 4/16 for SEED and ESSENTIAL_SHARE 1 did not help).
SEED = 8
BUDGET_SHARE = 1
# The essential-union path runs when its lists hold under 1/ESSENTIAL_SHARE of
# the postings term-at-a-time would merge: each candidate is then looked up
# in every list, a few times the cost of merging a posting.
ESSENTIAL_SHARE = 2
# Candidates scored exactly at once, without pruning on saved impacts first
# (see full_scores): a term's exact impacts from tf and length cost a few
# lookups each, and a pass per term costs about as much as some dozens of them.
DIRECT = 32


class ScoredLists(Protocol):
    """What the search reads of an index: per-term lists, impacts, ranked runs and lookups."""

    @property
    def bm25(self) -> BM25: ...
    @property
    def terms(self) -> list[str] | TermList: ...
    @property
    def dl(self) -> Sequence[int]: ...
    @property
    def n_docs(self) -> int: ...
    @property
    def dead(self) -> Set[int]:
        """Chunks removed since the lists were packed (a stale run's ``dead`` postings)."""

    @property
    def avgdl(self) -> float: ...

    def fold(self, tid: int) -> Ints:
        """The term's sorted chunk ids."""

    def length(self, tid: int) -> int:
        """How many chunk ids :meth:`fold` holds (without making them one list)."""

    def tfs_of(self, tid: int) -> Ints:
        """The term's frequencies beside :meth:`fold`'s chunk ids."""

    def impacts(self, tid: int) -> tuple[Floats, float]:
        """The term's current impacts and their maximum."""

    def top_impact(self, tid: int) -> float:
        """The term's largest current impact."""

    def contributions(self, tid: int, w: float) -> Iterable[float]:
        """``w`` times each current impact, beside :meth:`fold`'s chunk ids."""

    def runs(self, tid: int) -> list[Ranked] | None:
        """The term's postings ranked by an upper bound on their impacts; None for short lists."""

    def order_ready(self, tid: int) -> bool:
        """Whether the term's impact order is at hand, or worth sorting now."""

    def lookup(self, tid: int, w: float, cands: list[int], highest: int = -1) -> Iterable[float]:
        """``w`` times the term's impact at each of ``cands`` (0.0 where absent);
        ``highest``, when not -1, is at least the largest of ``cands``."""

    def scales(self, tid: int) -> tuple[float, float]:
        """``(lo, hi)``: :meth:`lookup`'s values lie within ``lo`` and ``hi`` times
        :meth:`bound`'s ((1.0, 1.0): :meth:`bound` is :meth:`lookup`)."""

    def bound(self, tid: int, w: float, cands: list[int], highest: int = -1) -> Iterable[float]:
        """``w`` times the term's saved impact at each of ``cands`` (see :meth:`scales`;
        ``highest`` as for :meth:`lookup`)."""


def plan_of(index: ScoredLists, weights: Mapping[int, float]) -> Plan:
    """The query's ``(upper bound, term id, weight)``, largest bound first."""
    plan = []
    for tid, w in weights.items():
        if w <= 0 or not index.length(tid):
            continue
        plan.append((index.top_impact(tid) * w, tid, w))
    # Largest upper bound first; the term itself breaks ties, so the order,
    # and so the floating-point sum, is the same for pruned and exhaustive
    # scoring and for any history of adds and removes.
    terms = index.terms
    plan.sort(key=lambda item: (-item[0], terms[item[1]]))
    return plan


def top_k(
    index: ScoredLists, weights: Mapping[int, float], k: int, allowed: Container[int] | None = None
) -> list[tuple[int, float]]:
    """The ``k`` best ``(chunk id, score)`` pairs, best first, ties by lower id.

    First a threshold: the ``SEED`` highest-impact chunks of every term
    are scored in full, and the k-th best of them, ``theta``, can only
    rise.  A chunk not yet seen then needs at least ``theta - (what the
    other terms can still give it)`` from some term (MaxScore's essential
    terms), and the chunks meeting that are a prefix of each term's impact
    order; they are scored in full when few (see :func:`_seed`).  When
    they are too many, term-at-a-time scoring runs instead, starting from
    ``theta``.
    """
    plan = plan_of(index, weights)
    if k <= 0 or not plan:
        return []
    theta = 0.0
    total_len = sum(index.length(tid) for _, tid, _ in plan)
    if total_len > 4 * max(SEED, k) and all([index.order_ready(tid) for _, tid, _ in plan]):
        seeded = _seed(index, plan, k, allowed, total_len)
        if seeded is not None:
            found, theta = seeded
            if found is not None:
                return found
    return term_at_a_time(index, plan, k, allowed, theta, ESSENTIAL_SHARE)


def _runs(index: ScoredLists, tid: int) -> list[Ranked]:
    return index.runs(tid) or []


def _seed(
    index: ScoredLists, plan: Plan, k: int, allowed: Container[int] | None, total_len: int
) -> tuple[list[tuple[int, float]] | None, float] | None:
    """``(top k or None, theta)`` from the terms' best chunks, or None.

    The threshold algorithm of Fagin, Lotem and Naor, in batches: the
    pool is every chunk within ``depth`` of the top of some term's impact
    order, scored in full, and a chunk outside it gets at most ``edge``
    (the impact at ``depth``) from each term.  When the k-th best pool
    score ``theta`` beats the sum of the edges, the pool's best are the
    answer.  Otherwise the chunks that could still beat ``theta`` are in
    prefixes of the essential terms' orders (MaxScore, over the edges);
    when they are fewer than the postings term-at-a-time would merge,
    they are scored too, else the pool deepens while that stays cheaper.
    """
    depth = max(SEED, k)
    fold = index.fold
    pool: set[int] = set()
    cands: list[int] = []
    scores: list[float] = []
    bounds = [ub for ub, _, _ in plan]
    lengths = [index.length(tid) for _, tid, _ in plan]
    theta = 0.0
    # Terms whose whole list was in the pool by the last round: a chunk
    # new to it gets exactly 0.0 from them, so they are not looked up.
    inside: set[int] = set()
    # Some run holds removed chunks (length 0): they never join the candidates.
    dead = False
    while True:
        new: set[int] = set()
        edges: list[float] = []
        now_inside: set[int] = set()
        for i, (_, tid, w) in enumerate(plan):
            runs = index.runs(tid)
            if runs is None:
                new.update(fold(tid))
                edges.append(0.0)
                now_inside.add(i)
                continue
            # A chunk is in one run of a term: below depth in each, it gets at most the largest edge.
            edge = 0.0
            for run in runs:
                order = run.order
                dead = dead or run.dead
                if depth >= len(order):
                    new.update(run.docs)
                else:
                    new.update(gather(run.docs, order[:depth]))
                    edge = max(edge, run.values[order[depth]] * run.scale)
            edges.append(edge * w)
            if edge == 0.0:
                now_inside.add(i)
        new.difference_update(pool)
        pool.update(new)
        # Chunks new to the pool lie below the last depth everywhere:
        # the last edges bound what each term gives them.
        more, more_scores = full_scores(index, plan, _candidates(index, new, allowed, dead), theta, bounds, inside, k)
        cands.extend(more)
        scores.extend(more_scores)
        if len(cands) >= k:
            theta = max(theta, heapq.nlargest(k, scores)[-1])
        if not any(edges) or (theta > 0.0 and above(sum(edges)) < theta):
            return best_of(cands, scores, k, theta), theta
        budget = (merge_cost(plan, lengths, theta) if theta > 0.0 else total_len) // BUDGET_SHARE
        deeper = 3 * depth * len(plan)  # at most this many chunks join the pool next round
        if theta > 0.0:
            ranges, n_fresh = essential_slices(plan, edges, depth, theta, lambda tid: _runs(index, tid))
            if n_fresh <= deeper or (n_fresh <= budget and len(pool) + deeper > budget):
                fresh: set[int] = set()
                for run, lo, hi in ranges:
                    fresh.update(gather(run.docs, run.order[lo:hi]))
                fresh.difference_update(pool)
                last = _candidates(index, fresh, allowed, dead)
                more, more_scores = full_scores(index, plan, last, theta, edges, now_inside, k)
                cands.extend(more)
                scores.extend(more_scores)
                return best_of(cands, scores, k, theta), theta
        if len(pool) + deeper > budget:
            return (None, theta) if theta > 0.0 else None
        bounds, inside = edges, now_inside
        depth *= 4


def _candidates(index: ScoredLists, chunks: set[int], allowed: Container[int] | None, dead: bool) -> list[int]:
    """``chunks`` (the caller's, changed here) that may be scored: allowed, and (``dead``:
    some run holds removed ones) not removed."""
    if dead:
        gone = index.dead
        # In place, this costs the smaller side (the removed chunks are usually few).
        if len(gone) < len(chunks):
            chunks.difference_update(gone)
        else:
            chunks = set(without_dead(chunks, index.dl))
    return list(chunks if allowed is None else filter(allowed.__contains__, chunks))


def full_scores(
    index: ScoredLists, plan: Plan, cands: list[int], theta: float, bounds: list[float], absent: Container[int],
    k: int = 0,
) -> tuple[list[int], list[float]]:  # fmt: skip
    """Scores of ``cands`` summed in plan order (some dropped: see below).
    With ``theta > 0``, a chunk is dropped on the way once its partial score
    plus ``bounds`` (what each term left can still add to it) cannot reach
    ``theta``.

    The terms at the plan positions in ``absent`` hold none of ``cands``:
    they add exactly 0.0, which leaves a sum unchanged bit for bit, so they
    are not looked up.

    When some term's impacts are stale (see ``_stale``), a chunk's score lies
    within ``low`` and ``high`` times the sum of its saved impacts (each
    term's :meth:`ScoredLists.scales`), which costs what a lookup of saved
    impacts does: the chunks are pruned on that first, and those left are
    scored exactly, the best bounds first.  With ``k`` > 0 the k-th best of
    those exact scores (or, without ``theta``, of the lower bounds) raises
    the floor for the rest; every chunk dropped scores under the k-th best
    of ``cands``, so their top ``k`` are among those returned.
    """
    last = len(plan) - 1
    if len(cands) <= DIRECT:
        return _summed(index.lookup, plan, cands, theta, bounds, absent, last)
    scales = [index.scales(tid) for _, tid, _ in plan]
    low = min(1.0, min(scales)[0])
    high = max(1.0, max([hi for _, hi in scales]))
    if low == 1.0 and high == 1.0:
        return _summed(index.lookup, plan, cands, theta, bounds, absent, last)
    # Every list below is a part of ``cands``: their largest, found once, bounds each
    # (a stale term must know whether some candidate was added since its lists were packed).
    highest = max(cands)
    cands, sums = _summed(index.bound, plan, cands, theta / high, [b / high for b in bounds], absent, last + 1, highest)
    if theta <= 0.0 and 0 < k <= len(cands):
        theta = heapq.nlargest(k, sums)[-1] * low * (1.0 - _FLOOR_SLACK)
    by_bound = sorted(range(len(cands)), key=sums.__getitem__, reverse=True)
    ranked = list(map(cands.__getitem__, by_bound))
    head = k if 0 < k < len(ranked) else len(ranked)
    found, scores = _summed(index.lookup, plan, ranked[:head], theta, bounds, absent, last, highest)
    if head < len(ranked):
        if len(scores) >= k:
            theta = max(theta, heapq.nlargest(k, scores)[-1])
        # Largest bound first: the chunks that may still reach theta (bound times
        # ``high`` at least theta, with the slack on the side of keeping) are a prefix.
        floor = (theta - _UB_ABS) / (high * (1.0 + _UB_ABS))
        n = sum(map(ge, map(sums.__getitem__, by_bound[head:]), repeat(floor)))
        if n:
            more, more_scores = _summed(
                index.lookup, plan, ranked[head : head + n], theta, bounds, absent, last, highest
            )
            found.extend(more)
            scores.extend(more_scores)
    return found, scores


# Relative slack on a floor taken from lower bounds (whose own slack is far larger),
# and the slack of ``above`` on a bound.
_FLOOR_SLACK = 1e-9
_UB_ABS = 1e-9


def _summed(
    lookup: Callable[[int, float, list[int], int], Iterable[float]], plan: Plan, cands: list[int], theta: float,
    bounds: list[float], absent: Container[int], last: int, highest: int = -1,
) -> tuple[list[int], list[float]]:  # fmt: skip
    """:func:`full_scores` with ``lookup``'s values, pruning after the terms before plan position
    ``last`` (``highest``: at least the largest of ``cands``, or -1)."""
    scores: list[float] | None = None
    rest = sum(bounds)
    for i, ((_, tid, w), bound) in enumerate(zip(plan, bounds)):
        if not cands:
            break
        rest -= bound
        if i in absent:
            continue
        found = lookup(tid, w, cands, highest)
        # 0.0 + x is x, bit for bit, so the first term needs no addition.
        scores = list(found) if scores is None else list(map(add, scores, found))
        if theta > 0.0 and i < last:
            # score + rest >= theta, with the slack on the side of keeping.
            keep = list(map(ge, scores, repeat(theta - above(rest))))
            if not all(keep):
                cands = list(compress(cands, keep))
                scores = list(compress(scores, keep))
    if scores is None:
        scores = [0.0] * len(cands)
    return cands, scores


def term_at_a_time(
    index: ScoredLists,
    plan: Plan,
    k: int,
    allowed: Container[int] | None,
    theta0: float,
    essential_share: int = ESSENTIAL_SHARE,
) -> list[tuple[int, float]]:
    """Top ``k`` by term-at-a-time scoring with MaxScore pruning, from the floor ``theta0``.

    With ``theta0 > 0`` and essential lists holding under
    ``1/essential_share`` of what merging would visit, their union is
    scored in full instead.
    """
    fold = index.fold
    if theta0 > 0.0:
        lengths = [index.length(tid) for _, tid, _ in plan]
        essential = cheap_essentials(plan, lengths, theta0)
        if sum(lengths[i] for i in essential) * essential_share < merge_cost(plan, lengths, theta0):
            # Every chunk that can reach theta0 is in an essential list:
            # score their union in full, in plan order (the same sum as
            # every other path), instead of merging the long lists.
            union: set[int] = set()
            for i in essential:
                union.update(fold(plan[i][1]))
            cands = list(union if allowed is None else filter(allowed.__contains__, union))
            bounds = [ub for ub, _, _ in plan]
            cands, scores = full_scores(index, plan, cands, theta0, bounds, (), k)
            return best_of(cands, scores, k, theta0)
    remaining = [0.0] * len(plan)
    total = 0.0
    for i in range(len(plan) - 1, 0, -1):
        total += plan[i][0]
        remaining[i - 1] = above(total)
    acc: dict[int, float] = {}
    and_mode = False
    seen_ub = 0.0
    for i, (ub, tid, w) in enumerate(plan):
        if not and_mode:
            docs = fold(tid)
            contribs = index.contributions(tid, w)
            if acc:
                contribs = map(add, map(acc.get, docs, repeat(0.0)), contribs)
            pairs: Iterable[tuple[int, float]] = zip(docs, contribs)
            if allowed is not None:
                pairs = compress(pairs, map(allowed.__contains__, docs))
            acc.update(pairs)
        else:
            # Only chunks already in acc can still reach theta: look them up.
            cands = list(acc)
            acc = dict(zip(cands, map(add, acc.values(), index.lookup(tid, w, cands))))
        rest = remaining[i]
        seen_ub += ub
        if rest < theta0 or (len(acc) >= k and (and_mode or rest < seen_ub)):
            theta = max(heapq.nlargest(k, acc.values())[-1], theta0) if len(acc) >= k else theta0
            if rest < theta:
                and_mode = True
                acc = dict(compress(acc.items(), map(ge, map(add, acc.values(), repeat(rest)), repeat(theta))))
    if len(acc) > k:
        theta = heapq.nlargest(k, acc.values())[-1]
        acc = dict(compress(acc.items(), map(ge, acc.values(), repeat(theta))))
    best = sorted(acc.items(), key=lambda item: (-item[1], item[0]))
    return best[:k]


def score_all(index: ScoredLists, weights: Mapping[int, float]) -> dict[int, float]:
    """Exhaustive scores of every matching chunk (the reference for tests)."""
    acc: dict[int, float] = {}
    for _, tid, w in plan_of(index, weights):
        for d, c in zip(index.fold(tid), index.contributions(tid, w)):
            acc[d] = acc.get(d, 0.0) + c
    return acc


def explain(index: ScoredLists, weights: Mapping[int, float], cid: int) -> tuple[float, list[TermExplanation]]:
    """Per-term breakdown of chunk ``cid``'s score; the parts sum to the score exactly."""
    score = 0.0
    parts = []
    dls = index.dl
    dl = dls[cid] if cid < len(dls) else 0
    for _, tid, w in plan_of(index, weights):
        docs = index.fold(tid)
        i = bisect_left(docs, cid)
        if i >= len(docs) or docs[i] != cid:
            continue
        imp = index.impacts(tid)[0][i]
        contribution = imp if w == 1.0 else imp * w
        score = score + contribution
        parts.append(
            TermExplanation.of(
                index.bm25,
                index.terms[tid],
                w,
                index.tfs_of(tid)[i],
                len(docs),
                index.n_docs,
                dl,
                index.avgdl,
                contribution,
            )
        )
    return score, parts
