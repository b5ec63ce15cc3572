"""Pure helpers of the exact top-k search: bounds, MaxScore slices, probes.

A query's *plan* is a list of ``(upper bound, term id, weight)``, largest
bound first (see ``_search.plan_of``); these functions work on it and on
per-term numbers, so they hold no index state (the scoring loops that read
the index are in ``_search``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from operator import eq, ge, mul
from typing import NamedTuple

from .._storage._codec import Floats, Ints
from .._storage._impact_tables import gather

__all__ = [
    "Plan",
    "Ranked",
    "above",
    "best_of",
    "cheap_essentials",
    "essential_slices",
    "merge_cost",
    "probe",
]

Plan = list[tuple[float, int, float]]


class Ranked(NamedTuple):
    """One run of a term's postings as the pruning reads it: positions by decreasing bound.

    ``order`` lists positions of ``docs`` (chunk ids) by decreasing ``values``;
    the term's exact impact at any position is at most ``scale`` times its
    value there.  A run of exact impacts has ``scale`` 1.0; a run of impacts
    saved under other statistics (see ``_stale``) a scale a little above its
    ratio to them.  ``dead``: ``docs`` may hold removed chunks (length 0),
    which a search leaves out.
    """

    docs: Ints
    order: Ints
    values: Floats
    scale: float
    dead: bool = False


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
    found = map(eq, gather(docs, idx), cands)
    vals: Iterable[float] = gather(imps, idx)
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
    runs_of: Callable[[int], Sequence[Ranked]],
) -> tuple[list[tuple[Ranked, int, int]], int]:
    """Where the chunks below ``depth`` in every run that could reach ``theta`` are:
    ``(run, start, end)`` slices of the runs' orders (``runs_of(tid)``: a term's runs
    longer than ``depth``), and their total length."""
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
        for run in runs_of(tid):
            order = run.order
            if depth >= len(order):
                continue
            if need > 0.0:
                # A posting whose bound is below ``need`` cannot reach it: bound = value * scale.
                values, at = run.values, need / run.scale
                cut = bisect_right(order, -at, lo=depth, key=lambda pos: -values[pos])
            else:
                cut = len(order)
            ranges.append((run, depth, cut))
            count += cut - depth
    return ranges, count
