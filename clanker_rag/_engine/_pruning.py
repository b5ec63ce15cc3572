"""Pure helpers of the exact top-k search: bounds, MaxScore slices, probes.

A query's *plan* is a list of ``(upper bound, term id, weight)``, largest
bound first (see ``InvertedIndex._plan``); these functions work on it and on
the per-term numbers the index hands them, so they hold no index state.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Container, Iterable, Sequence
from itertools import compress, repeat
from operator import add, eq, ge, mul

__all__ = [
    "Lookup",
    "Plan",
    "above",
    "best_of",
    "cheap_essentials",
    "essential_slices",
    "full_scores",
    "merge_cost",
    "probe",
    "term_at_a_time",
]

Plan = list[tuple[float, int, float]]
# (term id, weight, chunk ids) -> the weighted impact of the term in each (0.0 where absent).
Lookup = Callable[[int, float, list[int]], Iterable[float]]
# Relative and absolute slack on upper bounds: the pruned and the exhaustive
# sums may round differently in the last bit.
_UB_SLACK = 1e-9


def above(bound: float) -> float:
    """``bound`` raised past any rounding difference between two ways of summing."""
    return bound * (1 + _UB_SLACK) + _UB_SLACK


def best_of(cands: list[int], scores: list[float], k: int, theta: float) -> list[tuple[int, float]]:
    """The ``k`` best of ``cands`` scoring at least ``theta``, best first, ties by lower id."""
    kept = compress(zip(cands, scores), map(ge, scores, repeat(theta)))
    return sorted(kept, key=lambda item: (-item[1], item[0]))[:k]


def probe(docs: Sequence[int], imps: Sequence[float], w: float, cands: list[int]) -> Iterable[float]:
    """``w`` times the impact of each of ``cands`` in a list (0.0 where absent),
    by binary search over its sorted chunk ids ``docs``."""
    # hi=last keeps every index valid; a chunk beyond the end lands on
    # the last posting and fails the equality test below.
    last = len(docs) - 1
    idx = list(map(bisect_left, repeat(docs), cands, repeat(0), repeat(last)))
    found = map(eq, map(docs.__getitem__, idx), cands)
    vals: Iterable[float] = map(imps.__getitem__, idx)
    if w != 1.0:
        vals = map(mul, vals, repeat(w))
    return map(mul, vals, found)


def merge_cost(plan: Plan, lengths: Sequence[int], theta: float) -> int:
    """Postings term-at-a-time merges (the plan's lists are ``lengths`` long)
    before ``theta`` turns it to probing."""
    rest = sum(ub for ub, _, _ in plan)
    cost = 0
    for (ub, _, _), length in zip(plan, lengths):
        if above(rest) < theta:
            break
        cost += length
        rest -= ub
    return cost


def cheap_essentials(plan: Plan, lengths: Sequence[int], theta: float) -> list[int]:
    """Plan positions of a MaxScore essential set chosen for short lists.

    Any set of terms whose upper bounds sum below ``theta`` is non-essential:
    a chunk in none of the other lists scores under ``theta``.  Plan order
    (largest bound first) makes long lists of common terms essential when
    their weight is high; here the non-essential set is filled greedily by
    postings saved per unit of bound, so long, low-bound lists are left out
    and the essential lists, whose union is scored in full, stay short.
    """
    by_ratio = sorted(range(len(plan)), key=lambda i: -lengths[i] / max(plan[i][0], 1e-300))
    spent = 0.0
    skipped = set()
    for i in by_ratio:
        if above(spent + plan[i][0]) < theta:
            spent += plan[i][0]
            skipped.add(i)
    return [i for i in range(len(plan)) if i not in skipped]


def essential_slices(
    plan: Plan,
    edges: list[float],
    depth: int,
    theta: float,
    order_of: Callable[[int], Sequence[int]],
    imps_of: Callable[[int], Sequence[float]],
) -> tuple[list[tuple[int, int, int]], int]:
    """Where the chunks below ``depth`` in every impact order that could
    reach ``theta`` are: ``(tid, start, end)`` slices of impact orders
    (``order_of(tid)``, over impacts ``imps_of(tid)``), and their total length."""
    # MaxScore: the terms with the smallest edges, summing below theta,
    # are not essential: a chunk in none of the others cannot reach it.
    by_edge = sorted(range(len(plan)), key=edges.__getitem__)
    low = 0.0
    skip = set()
    for i in by_edge:
        if above(low + edges[i]) >= theta:
            break
        low += edges[i]
        skip.add(i)
    total = sum(edges)
    ranges = []
    count = 0
    for i, (_, tid, w) in enumerate(plan):
        if i in skip or edges[i] == 0.0:
            continue
        # Below this contribution here, a chunk outside the pool stays under theta.
        need = (theta - above(total - edges[i])) / w
        order = order_of(tid)
        imps = imps_of(tid)
        cut = bisect_right(order, -need, lo=depth, key=lambda pos: -imps[pos]) if need > 0.0 else len(order)
        ranges.append((tid, depth, cut))
        count += cut - depth
    return ranges, count


def full_scores(
    plan: Plan, cands: list[int], theta: float, bounds: list[float], absent: Container[int], lookup: Lookup
) -> tuple[list[int], list[float]]:
    """Scores of ``cands`` summed in plan order.  With ``theta > 0``, a
    chunk is dropped on the way once its partial score plus ``bounds``
    (what each term left can still add to it) cannot reach ``theta``.

    The terms at the plan positions in ``absent`` hold none of ``cands``:
    they add exactly 0.0, which leaves a sum unchanged bit for bit, so they
    are not looked up.
    """
    scores: list[float] | None = None
    rest = sum(bounds)
    last = len(plan) - 1
    for i, ((_, tid, w), bound) in enumerate(zip(plan, bounds)):
        if not cands:
            break
        rest -= bound
        if i in absent:
            continue
        found = lookup(tid, w, cands)
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
    plan: Plan,
    k: int,
    allowed: Container[int] | None,
    theta0: float,
    postings: Callable[[int], Sequence[int]],
    contributions: Callable[[int, float], Iterable[float]],
    lookup: Lookup,
    essential_share: int,
) -> list[tuple[int, float]]:
    """Top ``k`` by term-at-a-time scoring with MaxScore pruning, from the floor ``theta0``.

    ``postings(tid)`` is a term's sorted chunk ids and ``contributions(tid, w)``
    its weighted impacts beside them.  With ``theta0 > 0`` and essential lists
    holding under ``1/essential_share`` of what merging would visit, their
    union is scored in full instead.
    """
    if theta0 > 0.0:
        lengths = [len(postings(tid)) for _, tid, _ in plan]
        essential = cheap_essentials(plan, lengths, theta0)
        if sum(lengths[i] for i in essential) * essential_share < merge_cost(plan, lengths, theta0):
            # Every chunk that can reach theta0 is in an essential list:
            # score their union in full, in plan order (the same sum as
            # every other path), instead of merging the long lists.
            union: set[int] = set()
            for i in essential:
                union.update(postings(plan[i][1]))
            cands = list(union if allowed is None else filter(allowed.__contains__, union))
            bounds = [ub for ub, _, _ in plan]
            cands, scores = full_scores(plan, cands, theta0, bounds, (), lookup)
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
            docs = postings(tid)
            contribs = contributions(tid, w)
            if acc:
                contribs = map(add, map(acc.get, docs, repeat(0.0)), contribs)
            pairs: Iterable[tuple[int, float]] = zip(docs, contribs)
            if allowed is not None:
                pairs = compress(pairs, map(allowed.__contains__, docs))
            acc.update(pairs)
        else:
            # Only chunks already in acc can still reach theta: look them up.
            cands = list(acc)
            acc = dict(zip(cands, map(add, acc.values(), lookup(tid, w, cands))))
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
