"""Passage shaping: a hit cut to the whole lines around the query's words.

:func:`focus_hit` keeps the run of whole lines, within a character budget,
that holds the most query-term weight; :func:`hit_window` makes any slice of
a hit a :class:`~clanker_rag.Hit` of its own (an exact slice of its document,
with its own offsets and line numbers).  ``FocusedRetriever`` applies it to
every hit of a retriever.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from .._types import Hit, HitLike

__all__ = ["focus_hit", "hit_window"]


def hit_window(hit: HitLike, start: int, end: int) -> Hit:
    text = hit.text[start:end].rstrip("\n")
    end = start + len(text)
    if not isinstance(hit, Hit):
        return Hit(text=text, source=hit.source, score=hit.score)
    first = hit.text.count("\n", 0, start)
    return dataclasses.replace(
        hit,
        text=text,
        start=hit.start + start,
        end=hit.start + end,
        start_line=hit.start_line + first,
        end_line=hit.start_line + first + text.count("\n"),
    )


def focus_hit(hit: HitLike, terms: set[str], analyzer: Callable[[str], list[str]], budget: int) -> HitLike:
    """``hit`` cut to the whole lines, at most ``budget`` characters, holding the most weight of ``terms``.

    A term weighs more the fewer lines hold it; each counts once per window;
    ties go to the earliest window, which then widens (a line below, a line
    above) while it fits.  A first line longer than ``budget`` keeps its start.
    """
    text = hit.text
    if len(text) <= budget:
        return hit
    lines = text.splitlines(keepends=True)
    lengths = [len(line) for line in lines]
    held = [terms.intersection(analyzer(line)) for line in lines]
    count: dict[str, int] = {}
    for found in held:
        for term in found:
            count[term] = count.get(term, 0) + 1
    weight = {term: math.log(1.0 + len(lines) / c) for term, c in count.items()}
    (i, j), best = (0, 1), -1.0
    for a in range(len(lines)):
        total, covered, b = 0, set(), a
        while b < len(lines) and total + lengths[b] <= budget:
            total += lengths[b]
            covered |= held[b]
            b += 1
        value = sum(weight[t] for t in sorted(covered))
        if b > a and value > best + 1e-9:
            (i, j), best = (a, b), value
    at = sum(lengths[:i])
    if sum(lengths[i:j]) > budget:
        return hit_window(hit, at, at + len(text[at:][:budget]))
    total, grew = sum(lengths[i:j]), True
    while grew:
        grew = False
        if j < len(lines) and total + lengths[j] <= budget:
            total, j, grew = total + lengths[j], j + 1, True
        if i > 0 and total + lengths[i - 1] <= budget:
            i, total, grew = i - 1, total + lengths[i - 1], True
    at = sum(lengths[:i])
    return hit_window(hit, at, at + total)
