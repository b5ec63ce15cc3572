"""Passage shaping: each hit cut down to the text that answers.

A small model reading a 1,200-character chunk copies whichever line is
nearest its end.  :class:`FocusedRetriever` cuts each hit to a window: by
default the whole lines within ``budget`` holding the most query-term weight
(:func:`~clanker_rag._retrieval._focus.focus_hit`); with ``sentence=True``
one sentence and what it needs around it (:func:`~._windows.attached`), the
learned chooser's window first (what ``ask`` shows a base model).  A shaped
hit is an exact slice of its document, with its own line numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .._exceptions import ConfigError
from .._retrieval._focus import focus_hit, hit_window
from .._text._analysis import Analyzer
from .._types import HitLike, Retriever
from ._kinds import cue_words
from ._learned import PICK, best_window, term_weights
from ._sentences import SentenceQuery, is_code_at, sentence_spans, sentence_units
from ._windows import attached, is_changelog, strip_inline_html

__all__ = ["FocusedRetriever", "focus_sentence", "sentence_query"]


def sentence_query(query: str, analyzer: Callable[[str], list[str]], budget: int, attach: int) -> SentenceQuery:
    """What the chooser is told about ``query``: its terms without those that only name the answer's kind.

    "Which option ..." says what kind of answer is asked (the chooser reads
    the kind itself), not where the answer sits.
    """
    terms = set(analyzer(query))
    topic = terms - set(analyzer(" ".join(cue_words(query))))
    return SentenceQuery(query, topic or terms, analyzer, budget, attach)


def focus_sentence(hit: HitLike, asked: SentenceQuery, unit: int | None = None) -> HitLike:
    """``hit`` cut to sentence ``unit`` (default: the one holding the most query-term weight) and what it takes.

    Its first ``budget`` characters widened by :func:`~._windows.attached`,
    on one line (a model copying a wrapped line stops at its break), without
    the HTML tags of prose.
    """
    text = hit.text
    spans = sentence_spans(text)
    if not spans or (len(spans) == 1 and len(text) <= asked.budget):
        return hit
    if unit is None or not 0 <= unit < len(spans):
        found = sentence_units(text, asked, spans).terms
        weight = term_weights(found)
        scores = [sum(weight[t] for t in sorted(held)) for held in found]
        unit = max(range(len(spans)), key=lambda k: (scores[k], -k))
    start, end = spans[unit]
    end = min(end, start + asked.budget)
    out = hit_window(hit, *attached(text, start, end, max(asked.attach, end - start)))
    shown = out.text if is_code_at(text, start) else strip_inline_html(out.text)
    return dataclasses.replace(out, text=" ".join(shown.split()))


class FocusedRetriever:
    """A retriever whose hits are cut to ``budget`` characters around the query's words (see the module doc).

    ``sentence=True``: one sentence per hit with what it takes within
    ``attach`` characters; the chooser's window first, then each other hit's
    best sentence, release notes last (they name every feature in passing).
    ``analyzer`` defaults to the retriever's own; filters pass through.
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
        if not self.sentence:
            terms = set(self.analyzer(query))
            return [focus_hit(hit, terms, self.analyzer, self.budget) for hit in hits]
        notes = [is_changelog(h.source, h.text) for h in hits]
        explain = [h for h, n in zip(hits, notes) if not n]
        hits = explain + [h for h, n in zip(hits, notes) if n]
        if not hits:
            return []
        asked = sentence_query(query, self.analyzer, self.budget, self.attach)
        first, unit = best_window((explain or hits)[:PICK], asked)
        rest = [focus_sentence(h, asked) for i, h in enumerate(hits) if i != first]
        return [focus_sentence(hits[first], asked, unit), *rest]
