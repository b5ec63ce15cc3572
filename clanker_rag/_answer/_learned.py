"""The injected sentence chosen by a learned linear score instead of hand-written rules.

:func:`~._focusing.best_sentence` ranks the sentences of the top passages by
rules fitted question by question on a few collections; on collections they
were not fitted on, the sentence it keeps holds the answer far less often.
:func:`learned_sentence` scores the same candidates (every sentence of the
top passages, each with what :func:`~._windows.attached` would take with it)
by a weighted sum of a few features: the rule score and its parts, the
passage's rank and score, the sentence's shape and position, and what the
window it would show holds.  The weights (:data:`WEIGHTS`) were fitted as a
conditional logit (a softmax over one question's candidates, the label being
"the injected text holds an accepted answer") on every development
collection, with features and regularisation chosen by leave-one-collection-out
cross-validation; regenerate them with::

    python bench/train_selector.py --write

Pure standard library: the score is a dot product.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._types import HitLike
from ._answer_types import types_in
from ._focusing import SentenceUnits, mark_kind, sentence_units, term_weights
from ._windows import attached, is_changelog

__all__ = ["FEATURES", "WEIGHTS", "Candidate", "candidates", "learned_sentence", "score"]

FEATURES: tuple[str, ...] = (
    "rule",  # the rule score (best_sentence's, rank prior included) over the best candidate's
    "rule_best",  # 1 for the candidate best_sentence would choose
    "terms",  # idf weight of the plain query terms the sentence holds, over the best candidate's
    "cover",  # share of the question's distinct terms the sentence holds
    "shape",  # holds a token of the asked-for shape (answer-type mark)
    "default",  # says "default" where a default is asked for
    "name",  # holds a query term inside a name written as code
    "type_window",  # the shown window holds a token of an asked-for type
    "inline_code",  # the sentence holds inline code
    "is_code",  # the sentence is a code line (indented or fenced)
    "took_block",  # the window took a block, a body or a directive line with it
    "colon",  # the sentence ends with a colon (a lead-in)
    "resumed",  # prose resumed after a code block its lead-in introduced
    "rank1",  # the passage is the second one shown
    "rank2",  # ... the third
    "ratio",  # the passage's score over the first passage's
    "position",  # where the sentence is in its passage, 0 (first) to 1 (last)
    "first",  # the passage's first sentence
    "length",  # log of the sentence's length
    "heading",  # the sentence is a heading or directive line
    "changelog",  # the passage is from release notes
    "prev_rule",  # the previous sentence's rule score, over the best candidate's
    "next_rule",  # the next sentence's
    "howto_code",  # a how-to question and a window holding code or a flag
    "digit",  # the sentence holds a digit
    "echo",  # share of the sentence's terms that are the question's own
    "novel",  # log of how many of the sentence's terms are not the question's
    "window_terms",  # idf weight of the query terms in the whole window, over the best candidate's
)

# Fitted by ``python bench/train_selector.py --write`` (see bench/results/h26learn.md).
WEIGHTS: tuple[float, ...] = (0.0,) * len(FEATURES)

_HEADING_RE = re.compile(r"[ \t]*(?:#{1,6} |\.\. [\w:-]+::)")
_UNDERLINE_RE = re.compile(r"\n[ \t]*([=\-~^\"'`#*+])\1{2,}[ \t]*(?:\n|$)")
_CODE_RE = re.compile(r"`|^[ \t]*(?:\$ |>>> )|(?<![\w-])--?[a-zA-Z]", re.M)


@dataclass(frozen=True)
class Candidate:
    """One sentence that could be shown: its passage, its index there, its window and its features."""

    hit: int
    unit: int
    start: int  # the window shown, in the passage's text
    end: int
    features: tuple[float, ...]


def _relative(value: float, best: float) -> float:
    return value / best if best > 0 else 0.0


def _is_code(text: str, at: int) -> bool:
    line = text[text.rfind("\n", 0, at) + 1 :]
    if line.startswith(("    ", "\t", "```")):
        return True
    return text.count("```", 0, at) % 2 == 1


def candidates(
    hits: Sequence[HitLike],
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str] = frozenset(),
    attach: int | None = None,
    rank_prior: float = 0.0,
    howto: bool = False,
) -> list[Candidate]:
    """Every sentence of ``hits`` with its features (:data:`FEATURES`), in rank and text order."""
    units: list[SentenceUnits] = [sentence_units(h, terms, analyzer, budget, expected, attach, howto) for h in hits]
    weight = term_weights([found for u in units for found in u.terms])
    top = hits[0].score if hits else 0.0
    raw: list[tuple[int, int, int, int, dict[str, float]]] = []
    rules: list[list[float]] = []
    for i, (hit, unit) in enumerate(zip(hits, units)):
        text = hit.text
        ratio = hit.score / top if top > 0 and hit.score > 0 else 1.0
        scale = ratio**rank_prior
        changelog = float(is_changelog(hit.source, text))
        rules.append([scale * sum(weight[t] for t in sorted(found)) for found in unit.terms])
        n = len(unit.spans)
        for u, ((a, b), found) in enumerate(zip(unit.spans, unit.terms)):
            b = min(b, a + budget)
            start, end = attached(text, a, b, max(attach, b - a)) if attach is not None else (a, b)
            sentence, window = text[a:b], text[start:end]
            said = analyzer(sentence)
            kinds = {mark_kind(t) for t in found}
            plain = sorted(t for t in found if mark_kind(t) is None)
            own = sum(t in terms for t in said)
            window_terms = terms.intersection(analyzer(window))
            raw.append(
                (
                    i,
                    u,
                    start,
                    end,
                    {
                        "terms": sum(weight[t] for t in plain),
                        "cover": len(plain) / len(terms) if terms else 0.0,
                        "shape": float("shape" in kinds),
                        "default": float("default" in kinds),
                        "name": float("name" in kinds),
                        "type_window": float(bool(expected & types_in(window))),
                        "inline_code": float("`" in sentence),
                        "is_code": float(_is_code(text, a)),
                        "took_block": float(start < a or end > b),
                        "colon": float(sentence.rstrip().endswith(":")),
                        "resumed": float(u in unit.lead_ins),
                        "rank1": float(i == 1),
                        "rank2": float(i >= 2),
                        "ratio": ratio,
                        "position": u / (n - 1) if n > 1 else 0.0,
                        "first": float(u == 0),
                        "length": math.log1p(len(sentence)) / 5.0,
                        "heading": float(
                            _HEADING_RE.match(sentence) is not None or _UNDERLINE_RE.match(text, b) is not None
                        ),
                        "changelog": changelog,
                        "howto_code": float(howto and _CODE_RE.search(window) is not None),
                        "digit": float(any(ch.isdigit() for ch in sentence)),
                        "echo": own / len(said) if said else 0.0,
                        "novel": math.log1p(len(said) - own) / 3.0,
                        "window_terms": sum(weight.get(t, 0.0) for t in sorted(window_terms)),
                    },
                )
            )
    flat = [r for per in rules for r in per]
    best_rule = max(flat, default=0.0)
    best_terms = max((f["terms"] for *_, f in raw), default=0.0)
    best_window = max((f["window_terms"] for *_, f in raw), default=0.0)
    # best_sentence's choice: the highest rule score, ties to the higher passage and earlier sentence.
    chosen = max(range(len(flat)), key=lambda k: (flat[k], -k)) if flat else -1
    out = []
    for k, (i, u, start, end, f) in enumerate(raw):
        per = rules[i]
        f["rule"] = _relative(per[u], best_rule)
        f["rule_best"] = float(k == chosen)
        f["terms"] = _relative(f["terms"], best_terms)
        f["window_terms"] = _relative(f["window_terms"], best_window)
        f["prev_rule"] = _relative(per[u - 1], best_rule) if u > 0 else 0.0
        f["next_rule"] = _relative(per[u + 1], best_rule) if u + 1 < len(per) else 0.0
        out.append(Candidate(i, u, start, end, tuple(f[name] for name in FEATURES)))
    return out


def score(features: Sequence[float], weights: Sequence[float] = WEIGHTS) -> float:
    """The candidate's score: the weighted sum of its features, summed in a fixed order."""
    return math.fsum(w * x for w, x in zip(weights, features))


def learned_sentence(
    hits: Sequence[HitLike],
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str] = frozenset(),
    attach: int | None = None,
    rank_prior: float = 0.0,
    howto: bool = False,
) -> tuple[int, int]:
    """(hit, sentence) of the best-scoring candidate; ties go to the higher passage and the earlier sentence.

    Takes the arguments of :func:`~._focusing.best_sentence`, so it can stand
    in for it as :class:`~._focusing.FocusedRetriever`'s ``chooser``.
    """
    found = candidates(hits, terms, analyzer, budget, expected, attach, rank_prior, howto)
    if not found:
        return 0, 0
    scores = [score(c.features) for c in found]
    best = max(range(len(found)), key=lambda k: (scores[k], -k))
    return found[best].hit, found[best].unit
