"""The window chooser: a learned linear score over every sentence of the top passages.

Each sentence of the top :data:`PICK` passages is a candidate, shown with
what :func:`~._windows.attached` takes with it.  Its features are general
signals of where an answer sits: the idf weight of the query terms it and its
window hold (:mod:`._sentences`), the question's adjacent word pairs written
together, whether it holds a token of the asked-for type (a number, a flag, a
name written as code, a stated default) and such a token the question does not
write, its shape (a heading, a code line, a lead-in colon, prose resumed after
code), its neighbours' terms, its passage's rank and score ratio, and, for each
kind of question (a how-to, a default, a name, a number, a flag), whether the
window holds what that kind asks for.  None names a collection or a question.

The score is the dot product with :data:`WEIGHTS`, a conditional logit (a
softmax over one question's candidates, the label being "the window holds an
accepted answer") fitted on the development collections of
``bench/bench_docs.py`` (never on its held-out ones); ``PICK`` and the penalty
are chosen by leave-one-collection-out cross-validation.  Regenerate both
with ``python bench/train_selector.py --write``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._types import HitLike
from ._answer_types import DEFAULT, FLAG, IDENT, LITERAL, NUMBER, code_names, says_default, types_in
from ._sentences import SentenceQuery, is_code_at, mark_kind, rule_scores, sentence_units, term_weights
from ._windows import attached, is_changelog

__all__ = ["FEATURES", "PICK", "WEIGHTS", "Candidate", "best_window", "candidates", "score"]

# Written by ``python bench/train_selector.py --write``: passages weighed, feature -> weight.
# fmt: off
PICK = 3
WEIGHTS: dict[str, float] = {
    "rule": 0.692799, "rule_best": 0.685068, "terms": -0.007171, "cover": 0.752581, "shape": 0.878964,
    "default": 0.28831, "name": 0.827237, "type_window": 0.746096, "inline_code": -0.207624, "is_code": -0.060696,
    "took_block": 0.486451, "colon": 0.529119, "resumed": 2.876847, "rank1": -0.591354, "rank2": -0.148776,
    "ratio": 1.508023, "position": 0.271024, "first": 0.156856, "length": -0.604118, "heading": -0.101611,
    "changelog": -0.959395, "prev_rule": 0.352204, "next_rule": -0.267822, "howto_code": -0.132707, "digit": 0.344138,
    "echo": 0.830486, "novel": -0.600721, "window_terms": 1.310065, "window_length": 0.096695, "prev_cover": 1.231118,
    "next_cover": 0.371058, "says_default": -0.020776, "new_name": 0.320484, "howto_x_new_name": 0.574521,
    "howto_x_is_code": 0.458966, "default_x_says": 0.570524, "default_x_digit": 0.066932,
    "default_x_prev_rule": -0.561516, "name_x_new_name": 0.320719, "number_x_digit": 1.177824, "after_best": 0.18344,
    "before_best": 1.055351, "rule_order": 0.263107, "pairs": 2.377883, "sentence_pairs": 1.796356,
    "states_default": 1.092202, "default_x_states": -0.089743, "new_number": 0.21803, "number_x_new_number": 0.608362,
    "new_flag": -0.225725, "flag_x_new_flag": 1.401307,
}
# fmt: on
FEATURES: tuple[str, ...] = tuple(WEIGHTS)

_HEADING_RE = re.compile(r"[ \t]*(?:#{1,6} |\.\. [\w:-]+::)")
_UNDERLINE_RE = re.compile(r"\n[ \t]*([=\-~^\"'`#*+])\1{2,}[ \t]*(?:\n|$)")
_STATES_DEFAULT_RE = re.compile(
    r"\bdefaults? (?:is |are |to |value is |of )?[`'\"]*[\w.-]|\bdefault:\s*\S|\bdefault [`'\"]?[\w.-]+[`'\"]?\)", re.I
)
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)*")
_FLAG_RE = re.compile(r"(?<![\w-])--?[a-zA-Z][\w-]*")
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


def candidates(hits: Sequence[HitLike], asked: SentenceQuery) -> list[Candidate]:
    """Every sentence of ``hits`` with its features (:data:`FEATURES`), in rank and text order."""
    terms, analyzer, budget, expected, howto = asked.terms, asked.analyzer, asked.budget, asked.expected, asked.howto
    pairs = set(itertools.pairwise(analyzer(asked.query)))
    units = [sentence_units(h.text, asked) for h in hits]
    weight = term_weights([found for u in units for found in u.terms])
    top = hits[0].score if hits else 0.0
    asks_default = DEFAULT in expected
    asks_name = bool(expected & {IDENT, LITERAL})
    asks_number = NUMBER in expected or asks_default
    asks_flag = FLAG in expected or howto
    asked_numbers = set(_NUMBER_RE.findall(asked.query))
    asked_flags = set(_FLAG_RE.findall(asked.query))
    raw: list[tuple[int, int, int, int, dict[str, float]]] = []
    rules = rule_scores(hits, [u.terms for u in units], weight)
    for i, (hit, unit) in enumerate(zip(hits, units)):
        text = hit.text
        ratio = hit.score / top if top > 0 and hit.score > 0 else 1.0
        changelog = float(is_changelog(hit.source, text))
        covers = [sum(mark_kind(t) is None for t in found) / len(terms) if terms else 0.0 for found in unit.terms]
        n = len(unit.spans)
        for u, ((a, b), found) in enumerate(zip(unit.spans, unit.terms)):
            b = min(b, a + budget)
            start, end = attached(text, a, b, max(asked.attach, b - a))
            sentence, window = text[a:b], text[start:end]
            said = analyzer(sentence)
            kinds = {mark_kind(t) for t in found}
            plain = sorted(t for t in found if mark_kind(t) is None)
            own = sum(t in terms for t in said)
            in_window = analyzer(window)
            new_name = any(not set(analyzer(name)) <= terms for name in code_names(window))
            digit = any(ch.isdigit() for ch in sentence)
            default = says_default(sentence)
            is_code = is_code_at(text, a)
            states = _STATES_DEFAULT_RE.search(window) is not None
            new_number = bool(set(_NUMBER_RE.findall(window)) - asked_numbers)
            new_flag = bool(set(_FLAG_RE.findall(window)) - asked_flags)
            f = {
                "terms": sum(weight[t] for t in plain),
                "cover": len(plain) / len(terms) if terms else 0.0,
                "shape": float("shape" in kinds),
                "default": float("default" in kinds),
                "name": float("name" in kinds),
                "type_window": float(bool(expected & types_in(window))),
                "inline_code": float("`" in sentence),
                "is_code": float(is_code),
                "took_block": float(start < a or end > b),
                "colon": float(sentence.rstrip().endswith(":")),
                "resumed": float(u in unit.lead_ins),
                "rank1": float(i == 1),
                "rank2": float(i >= 2),
                "ratio": ratio,
                "position": u / (n - 1) if n > 1 else 0.0,
                "first": float(u == 0),
                "length": math.log1p(len(sentence)) / 5.0,
                "heading": float(_HEADING_RE.match(sentence) is not None or _UNDERLINE_RE.match(text, b) is not None),
                "changelog": changelog,
                "howto_code": float(howto and _CODE_RE.search(window) is not None),
                "digit": float(digit),
                "echo": own / len(said) if said else 0.0,
                "novel": math.log1p(len(said) - own) / 3.0,
                "window_terms": sum(weight.get(t, 0.0) for t in sorted(terms.intersection(in_window))),
                "window_length": math.log1p(len(window)) / 5.0,
                "pairs": len(pairs & set(itertools.pairwise(in_window))) / len(pairs) if pairs else 0.0,
                "sentence_pairs": len(pairs & set(itertools.pairwise(said))) / len(pairs) if pairs else 0.0,
                "prev_cover": covers[u - 1] if u > 0 else 0.0,
                "next_cover": covers[u + 1] if u + 1 < n else 0.0,
                "says_default": float(default),
                "new_name": float(new_name),
                "states_default": float(states),
                "default_x_states": float(asks_default and states),
                "new_number": float(new_number),
                "number_x_new_number": float(asks_number and new_number),
                "new_flag": float(new_flag),
                "flag_x_new_flag": float(asks_flag and new_flag),
                "howto_x_new_name": float(howto and new_name),
                "howto_x_is_code": float(howto and is_code),
                "default_x_says": float(asks_default and default),
                "default_x_digit": float(asks_default and digit),
                "name_x_new_name": float(asks_name and new_name),
                "number_x_digit": float(asks_number and digit),
            }
            raw.append((i, u, start, end, f))
    flat = [r for per in rules for r in per]
    best_rule = max(flat, default=0.0)
    best_terms = max((f["terms"] for *_, f in raw), default=0.0)
    best_window = max((f["window_terms"] for *_, f in raw), default=0.0)
    # The rules' own choice: the highest rule score, ties to the higher passage and earlier sentence.
    chosen = max(range(len(flat)), key=lambda k: (flat[k], -k)) if flat else -1
    best_hit, best_unit = (raw[chosen][0], raw[chosen][1]) if chosen >= 0 else (-1, -1)
    out = []
    for k, (i, u, start, end, f) in enumerate(raw):
        per = rules[i]
        f["rule"] = _relative(per[u], best_rule)
        f["rule_best"] = float(k == chosen)
        f["terms"] = _relative(f["terms"], best_terms)
        f["window_terms"] = _relative(f["window_terms"], best_window)
        f["prev_rule"] = _relative(per[u - 1], best_rule) if u > 0 else 0.0
        f["next_rule"] = _relative(per[u + 1], best_rule) if u + 1 < len(per) else 0.0
        f["default_x_prev_rule"] = f["prev_rule"] if asks_default else 0.0
        f["after_best"] = float(i == best_hit and u == best_unit + 1)
        f["before_best"] = float(i == best_hit and u == best_unit - 1)
        f["rule_order"] = 1.0 / (1.0 + sum(r > flat[k] for r in flat))
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
