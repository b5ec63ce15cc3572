"""Passage shaping: each hit cut down to the text that answers.

A chunk is about 1,200 characters; the sentence that answers a question is
one or two lines of it, often not the first, and a small model reading a long
block copies whichever line is nearest the end.  :class:`FocusedRetriever`
wraps any retriever and returns each hit cut to a window of its text:

* by default, the run of whole lines within ``budget`` characters that holds
  the most query-term weight (:func:`focus_hit`);
* with ``sentence=True``, one sentence (or table row, or heading) and what it
  needs around it (:func:`~._windows.attached`), chosen among the top
  :data:`~._learned.PICK` passages' sentences by the learned window chooser
  (:mod:`._learned`) and shown first; the other hits keep their own best
  sentence.  This is what ``ask`` shows a base model.

A shaped :class:`~clanker_rag.Hit` keeps its promise: ``start``/``end`` and
the line numbers are the window's own slice of the document.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from .._exceptions import ConfigError
from .._text._analysis import Analyzer
from .._types import Hit, HitLike, Retriever
from ._answer_types import asks_how, focus_types, types_in
from ._learned import PICK, best_window
from ._sentences import SentenceQuery, is_code_at, sentence_spans, sentence_units, term_weights, unit_scores
from ._windows import attached, is_changelog, strip_inline_html

__all__ = ["FocusedRetriever", "focus_hit", "focus_sentence"]


def _best_window(lengths: Sequence[int], line_terms: Sequence[set[str]], budget: int) -> tuple[int, int]:
    """[i, j) of consecutive lines within ``budget`` characters covering the most query-term weight.

    A term weighs more the fewer lines hold it (a word on every line, like
    the topic of the whole chunk, says nothing about where the answer is);
    each term counts once per window.  Ties go to the earliest window.
    """
    n = len(lengths)
    held: dict[str, int] = {}
    for terms in line_terms:
        for term in terms:
            held[term] = held.get(term, 0) + 1
    weight = {term: math.log(1.0 + n / count) for term, count in held.items()}
    best, best_score = (0, 1), -1.0
    for i in range(n):
        total, covered, j = 0, set(), i
        while j < n and total + lengths[j] <= budget:
            total += lengths[j]
            covered |= line_terms[j]
            j += 1
        score = sum(weight[t] for t in sorted(covered))
        if j > i and score > best_score + 1e-9:
            best, best_score = (i, j), score
    return best


def focus_hit(hit: HitLike, terms: set[str], analyzer: Callable[[str], list[str]], budget: int) -> HitLike:
    """``hit`` cut to the lines around ``terms`` (whole lines, at most ``budget`` characters)."""
    text = hit.text
    if len(text) <= budget:
        return hit
    lines = text.splitlines(keepends=True)
    lengths = [len(line) for line in lines]
    line_terms = [terms.intersection(analyzer(line)) for line in lines]
    i, j = _best_window(lengths, line_terms, budget)
    if sum(lengths[i:j]) > budget:
        # One line longer than the budget: keep its start.
        cut = text[sum(lengths[:i]) :][:budget]
        return _window(hit, sum(lengths[:i]), sum(lengths[:i]) + len(cut), i, i)
    # Widen around the best lines, one line below then one above, while it fits.
    total = sum(lengths[i:j])
    grew = True
    while grew:
        grew = False
        if j < len(lines) and total + lengths[j] <= budget:
            total += lengths[j]
            j += 1
            grew = True
        if i > 0 and total + lengths[i - 1] <= budget:
            i -= 1
            total += lengths[i]
            grew = True
    start = sum(lengths[:i])
    end = start + total
    return _window(hit, start, end, i, j - 1)


def focus_sentence(hit: HitLike, asked: SentenceQuery, unit: int | None = None) -> HitLike:
    """``hit`` cut to one sentence: ``unit`` (its index in :func:`~._sentences.sentence_spans`), or the one
    holding the most query-term weight (ties to the earliest).

    A sentence longer than ``budget`` keeps its start; it takes what
    :func:`~._windows.attached` adds (the block its colon introduces, the
    definition it belongs to).  It comes back on one line (each whitespace
    run one space: a model copying a wrapped sentence stops at its first line
    break) and without the HTML tags of its prose (noise a model copies),
    unless it starts inside code.
    """
    text = hit.text
    spans = sentence_spans(text)
    if not spans or (len(spans) == 1 and len(text) <= asked.budget):
        return hit
    if unit is None or not 0 <= unit < len(spans):
        found = sentence_units(text, asked).terms
        scores = unit_scores(found, term_weights(found))
        unit = max(range(len(spans)), key=lambda i: (scores[i], -i))
    start, end = spans[unit]
    end = min(end, start + asked.budget)
    start, end = attached(text, start, end, max(asked.attach, end - start))
    first = text.count("\n", 0, start)
    out = _window(hit, start, end, first, first + text.count("\n", start, end))
    shown = out.text
    if "<" in shown and not is_code_at(text, start):
        shown = strip_inline_html(shown)
    return dataclasses.replace(out, text=" ".join(shown.split()))


def _window(hit: HitLike, start: int, end: int, first_line: int, last_line: int) -> Hit:
    text = hit.text[start:end].rstrip("\n")
    end = start + len(text)
    if isinstance(hit, Hit):
        return dataclasses.replace(
            hit,
            text=text,
            start=hit.start + start,
            end=hit.start + end,
            start_line=hit.start_line + first_line,
            end_line=hit.start_line + max(first_line, last_line),
        )
    return Hit(text=text, source=hit.source, score=hit.score)


class FocusedRetriever:
    """A retriever whose hits are cut to ``budget`` characters around the query's words (see the module doc).

    ``sentence=True`` shows one sentence per hit, each with what it
    introduces or belongs to within ``attach`` characters; release notes go
    after the passages that explain (they name every feature in passing); the
    learned chooser's window comes first, then the hits whose sentence holds a
    token of the asked-for type and a query term, then the rest, each group in
    rank order.  ``analyzer`` defaults to the wrapped retriever's own (else
    the standard English one), so query and text match the way the index
    matches them.  Keyword arguments of :meth:`search` (filters) pass through.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        budget: int = 400,
        analyzer: Callable[[str], list[str]] | None = None,
        sentence: bool = False,
        attach: int = 320,
    ) -> None:
        if budget < 40:
            raise ConfigError(f"budget must be >= 40 characters, got {budget}")
        if attach < 0:
            raise ConfigError(f"attach must be >= 0 characters, got {attach}")
        self.retriever = retriever
        self.budget = budget
        self.sentence = sentence
        self.attach = attach
        found = getattr(retriever, "analyzer", None)
        self.analyzer: Callable[[str], list[str]] = analyzer or (found if callable(found) else Analyzer())

    def search(self, query: str, k: int = 10, **kwargs: object) -> list[HitLike]:
        hits = self.retriever.search(query, k, **kwargs)
        terms = set(self.analyzer(query))
        if not self.sentence:
            return [focus_hit(hit, terms, self.analyzer, self.budget) for hit in hits]
        notes = [is_changelog(h.source, h.text) for h in hits]
        hits = [h for h, n in zip(hits, notes) if not n] + [h for h, n in zip(hits, notes) if n]
        expected = focus_types(query)
        asked = SentenceQuery(query, terms, self.analyzer, self.budget, expected, self.attach, asks_how(query))
        first = [best_window(hits[:PICK], asked)] if len(hits) > 1 else []
        out = [focus_sentence(hits[i], asked, unit) for i, unit in first]
        rest = [focus_sentence(h, asked) for i, h in enumerate(hits) if i not in {i for i, _ in first}]
        fits = [bool(expected & types_in(h.text)) and bool(terms.intersection(self.analyzer(h.text))) for h in rest]
        return out + [h for h, ok in zip(rest, fits) if ok] + [h for h, ok in zip(rest, fits) if not ok]
