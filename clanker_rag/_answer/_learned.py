"""The window chooser: a learned linear score over every sentence of the top passages.

Each sentence of the top :data:`PICK` passages is a candidate, shown with what
:func:`~._windows.attached` takes with it.  Its features are general signals
of where an answer sits: the weight of the query terms it, its window and its
neighbours hold; its shape; its passage's rank, score and agreement with the
others; whether it holds a token of the kind the question asks for
(:func:`~._kinds.question_kinds`) that the question does not write.  None
names a collection or a question.  :data:`WEIGHTS` is a conditional logit
that ``python bench/train_selector.py --write`` fits and chooses by
leave-one-collection-out cross-validation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._types import HitLike
from ._kinds import FLAG_RE, code_names, has_number, question_kinds
from ._sentences import SentenceQuery, is_code_at, sentence_units
from ._windows import attached

__all__ = ["FEATURES", "PICK", "WEIGHTS", "Candidate", "best_window", "candidates", "score", "term_weights"]

# Written by ``python bench/train_selector.py --write``: passages weighed, feature -> weight.
# fmt: off
PICK = 3
WEIGHTS: dict[str, float] = {
    "terms": 0.588132, "cover": 2.111225, "echo": 0.853587, "novel": -0.558239, "window_terms": 2.176317,
    "prev_cover": 1.095892, "next_cover": 0.876227, "inline_code": 0.423517, "is_code": -0.19492,
    "took_block": 0.096731, "colon": 0.811623, "resumed": 3.049821, "length": -0.720574, "window_length": -0.135344,
    "type_window": 1.155024, "states_default": 0.847855, "digit": 0.799709, "new_flag": -0.083823,
    "new_name": 0.271073, "name_x_new_name": 0.495963, "number_x_digit": 1.520088, "flag_x_new_flag": 2.189916,
    "source_terms": -1.167363, "howto_x_new_name": 0.656806, "rank1": -0.538852, "rank2": -0.576072,
    "ratio": 2.850545, "agree": 0.676673,
}
# fmt: on
FEATURES: tuple[str, ...] = tuple(WEIGHTS)

_STATES_DEFAULT = re.compile(
    r"\bdefaults? (?:is |are |to |value is |of )?[`'\"]*[\w.-]|\bdefault:\s*\S|\bdefault [`'\"]?[\w.-]+[`'\"]?\)"
    r"|\bby default\b",
    re.I,
)


@dataclass(frozen=True)
class Candidate:
    """One sentence that could be shown: its passage, its index there, its window and its features."""

    hit: int
    unit: int
    start: int  # the window shown, in the passage's text
    end: int
    features: tuple[float, ...]


def term_weights(unit_terms: Sequence[set[str]]) -> dict[str, float]:
    """A term weighs more the fewer units hold it (an idf over the units)."""
    held: dict[str, int] = {}
    for found in unit_terms:
        for term in found:
            held[term] = held.get(term, 0) + 1
    return {term: math.log(1.0 + len(unit_terms) / count) for term, count in held.items()}


def _relative(value: float, best: float) -> float:
    return value / best if best > 0 else 0.0


def _agreement(held: Sequence[set[str]]) -> list[float]:
    """Per passage: the share of the other passages holding each query term it holds, averaged.

    Passages matching the question on the same terms agree on its topic; one
    matching on other words stands apart however rare those words are.
    """
    n = len(held)
    return [
        sum(sum(t in o for j, o in enumerate(held) if j != i) for t in h) / (len(h) * (n - 1)) if h and n > 1 else 1.0
        for i, h in enumerate(held)
    ]


def candidates(hits: Sequence[HitLike], asked: SentenceQuery) -> list[Candidate]:
    """Every sentence of ``hits`` with its features (:data:`FEATURES`), in rank and text order."""
    terms, analyzer, budget = asked.terms, asked.analyzer, asked.budget
    kinds = question_kinds(asked.query)
    howto, asks_default = "howto" in kinds, "default" in kinds
    asks_number, asks_flag, asks_name = "number" in kinds or asks_default, "flag" in kinds, "name" in kinds
    asked_flags = set(FLAG_RE.findall(asked.query))
    units = [sentence_units(h.text, asked) for h in hits]
    weight = term_weights([found for u in units for found in u.terms])
    agree = _agreement([terms.intersection(analyzer(h.text)) for h in hits])
    top = hits[0].score if hits else 0.0
    raw: list[tuple[int, int, int, int, dict[str, float]]] = []
    for i, (hit, unit) in enumerate(zip(hits, units)):
        text = hit.text
        # Terms of the file's own name: every passage of the page is about what it names.
        named = terms.intersection(analyzer(hit.source.rsplit("/", 1)[-1].rsplit(".", 1)[0]))
        covers = [len(found) / len(terms) if terms else 0.0 for found in unit.terms]
        n = len(unit.spans)
        for u, ((a, b), found) in enumerate(zip(unit.spans, unit.terms)):
            b = min(b, a + budget)
            start, end = attached(text, a, b, max(asked.attach, b - a))
            sentence, window = text[a:b], text[start:end]
            said = analyzer(sentence)
            own = sum(t in terms for t in said)
            is_code = is_code_at(text, a)
            digit = has_number(sentence)
            states = _STATES_DEFAULT.search(window) is not None
            new_flag = bool(set(FLAG_RE.findall(window)) - asked_flags)
            names = code_names(window)
            new_name = any(not set(analyzer(name)) <= terms for name in names)
            typed = (
                (asks_number and digit)
                or (asks_flag and FLAG_RE.search(window) is not None)
                or (asks_name and bool(names))
                or (asks_default and states)
            )
            f = {
                "terms": sum(weight[t] for t in sorted(found)),
                "cover": covers[u],
                "window_terms": sum(weight.get(t, 0.0) for t in sorted(terms.intersection(analyzer(window)))),
                "echo": own / len(said) if said else 0.0,  # the share of the sentence that repeats the question
                "novel": math.log1p(len(said) - own) / 3.0,  # ... and how much it says besides
                "prev_cover": covers[u - 1] if u > 0 else 0.0,
                "next_cover": covers[u + 1] if u + 1 < n else 0.0,
                "inline_code": float("`" in sentence),
                "is_code": float(is_code),
                "took_block": float(start < a or end > b),
                "colon": float(sentence.rstrip().endswith(":")),
                "resumed": float(u in unit.lead_ins),
                "length": math.log1p(len(sentence)) / 5.0,
                "window_length": math.log1p(len(window)) / 5.0,
                "type_window": float(typed),
                "states_default": float(states),
                "digit": float(digit),
                "new_flag": float(new_flag),
                "new_name": float(new_name),
                "name_x_new_name": float(asks_name and new_name),
                "number_x_digit": float(asks_number and digit),
                "flag_x_new_flag": float(asks_flag and new_flag),
                "howto_x_new_name": float(howto and new_name),
                "rank1": float(i == 1),
                "rank2": float(i >= 2),
                "ratio": hit.score / top if top > 0 and hit.score > 0 else 1.0,
                "agree": agree[i],
                "source_terms": _relative(sum(weight[t] for t in found & named), sum(weight[t] for t in found)),
            }
            raw.append((i, u, start, end, f))
    best_terms = max((f["terms"] for *_, f in raw), default=0.0)
    best_window = max((f["window_terms"] for *_, f in raw), default=0.0)
    out = []
    for i, u, start, end, f in raw:
        f["terms"] = _relative(f["terms"], best_terms)
        f["window_terms"] = _relative(f["window_terms"], best_window)
        out.append(Candidate(i, u, start, end, tuple(f[name] for name in FEATURES)))
    return out


def score(features: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """The candidate's score: the weighted sum of its features, summed in a fixed order."""
    w = tuple(WEIGHTS.values()) if weights is None else weights
    return math.fsum(a * x for a, x in zip(w, features))


def best_window(hits: Sequence[HitLike], asked: SentenceQuery) -> tuple[int, int]:
    """(hit, sentence) of the best-scoring candidate; ties go to the higher passage and the earlier sentence."""
    found = candidates(hits, asked)
    if not found:
        return (0, 0)
    best = max(range(len(found)), key=lambda k: (score(found[k].features), -k))
    return found[best].hit, found[best].unit
