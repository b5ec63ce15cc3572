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

:func:`ranked` orders the candidates by that score and keeps those whose
windows do not overlap: the best few windows, for a block that shows more
than one (``answer_controller(windows=N)``).

Pure standard library: the score is a dot product.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._types import HitLike
from ._answer_types import DEFAULT, FLAG, IDENT, LITERAL, NUMBER, code_names, says_default, types_in
from ._focusing import (
    SentenceQuery,
    SentenceUnits,
    is_code_at,
    mark_kind,
    rule_scores,
    sentence_units,
    term_weights,
)
from ._windows import attached, is_changelog

__all__ = [
    "FEATURES",
    "PICK",
    "WEIGHTS",
    "Candidate",
    "candidates",
    "learned_sentence",
    "learned_sentences",
    "ranked",
    "score",
]

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
    "window_length",  # log of the window's length
    "prev_cover",  # the previous sentence's share of the question's terms
    "next_cover",  # the next sentence's
    "says_default",  # the sentence says "default", whatever the question asks
    "new_name",  # the window writes a name as code that is not made of the question's words
    # The same, for the kind of question asked: a how-to wants something to write, a default
    # question the value stated near its setting, a "which" question a name, a "how many" a number.
    "howto_x_new_name",
    "howto_x_is_code",
    "default_x_says",
    "default_x_digit",
    "default_x_prev_rule",
    "name_x_new_name",
    "number_x_digit",
    "after_best",  # the sentence right after the rules' choice, in its passage
    "before_best",  # ... right before it
    "rule_order",  # 1 / (1 + how many candidates have a higher rule score)
    "pairs",  # share of the question's adjacent term pairs the window writes side by side
    "sentence_pairs",  # ... the sentence
    "states_default",  # the window states a value as the default ("defaults to X", "Default: X", "default X)")
    "default_x_states",  # ... where a default is asked for
    "new_number",  # the window holds a number the question does not
    "number_x_new_number",  # ... where a number or a default is asked for
    "new_flag",  # the window holds a command-line flag the question does not
    "flag_x_new_flag",  # ... where a flag, an option or a how-to is asked for
)

# Fitted by ``python bench/train_selector.py --write`` (bench/results/h26learn.md): passages weighed, weights.
PICK = 3
WEIGHTS: tuple[float, ...] = (
    0.692799,  # rule
    0.685068,  # rule_best
    -0.007171,  # terms
    0.752581,  # cover
    0.878964,  # shape
    0.28831,  # default
    0.827237,  # name
    0.746096,  # type_window
    -0.207624,  # inline_code
    -0.060696,  # is_code
    0.486451,  # took_block
    0.529119,  # colon
    2.876847,  # resumed
    -0.591354,  # rank1
    -0.148776,  # rank2
    1.508023,  # ratio
    0.271024,  # position
    0.156856,  # first
    -0.604118,  # length
    -0.101611,  # heading
    -0.959395,  # changelog
    0.352204,  # prev_rule
    -0.267822,  # next_rule
    -0.132707,  # howto_code
    0.344138,  # digit
    0.830486,  # echo
    -0.600721,  # novel
    1.310065,  # window_terms
    0.096695,  # window_length
    1.231118,  # prev_cover
    0.371058,  # next_cover
    -0.020776,  # says_default
    0.320484,  # new_name
    0.574521,  # howto_x_new_name
    0.458966,  # howto_x_is_code
    0.570524,  # default_x_says
    0.066932,  # default_x_digit
    -0.561516,  # default_x_prev_rule
    0.320719,  # name_x_new_name
    1.177824,  # number_x_digit
    0.18344,  # after_best
    1.055351,  # before_best
    0.263107,  # rule_order
    2.377883,  # pairs
    1.796356,  # sentence_pairs
    1.092202,  # states_default
    -0.089743,  # default_x_states
    0.21803,  # new_number
    0.608362,  # number_x_new_number
    -0.225725,  # new_flag
    1.401307,  # flag_x_new_flag
)

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


def _pairs(terms: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(terms))


def candidates(hits: Sequence[HitLike], asked: SentenceQuery) -> list[Candidate]:
    """Every sentence of ``hits`` with its features (:data:`FEATURES`), in rank and text order."""
    terms, analyzer, budget, expected = asked.terms, asked.analyzer, asked.budget, asked.expected
    attach, rank_prior, howto = asked.attach, asked.rank_prior, asked.howto
    # Words the question writes side by side ("data file", "worker processes"), as a sentence would.
    pairs = _pairs(analyzer(asked.query))
    units: list[SentenceUnits] = [sentence_units(h, terms, analyzer, budget, expected, attach, howto) for h in hits]
    weight = term_weights([found for u in units for found in u.terms])
    top = hits[0].score if hits else 0.0
    asks_default = DEFAULT in expected
    asks_name = bool(expected & {IDENT, LITERAL})
    asks_number = NUMBER in expected or asks_default
    asks_flag = FLAG in expected or howto
    asked_numbers = set(_NUMBER_RE.findall(asked.query))
    asked_flags = set(_FLAG_RE.findall(asked.query))
    raw: list[tuple[int, int, int, int, dict[str, float]]] = []
    rules = rule_scores(hits, [u.terms for u in units], weight, rank_prior)
    for i, (hit, unit) in enumerate(zip(hits, units)):
        text = hit.text
        ratio = hit.score / top if top > 0 and hit.score > 0 else 1.0
        changelog = float(is_changelog(hit.source, text))
        covers = [sum(mark_kind(t) is None for t in found) / len(terms) if terms else 0.0 for found in unit.terms]
        n = len(unit.spans)
        for u, ((a, b), found) in enumerate(zip(unit.spans, unit.terms)):
            b = min(b, a + budget)
            start, end = attached(text, a, b, max(attach, b - a)) if attach is not None else (a, b)
            sentence, window = text[a:b], text[start:end]
            said = analyzer(sentence)
            kinds = {mark_kind(t) for t in found}
            plain = sorted(t for t in found if mark_kind(t) is None)
            own = sum(t in terms for t in said)
            in_window = analyzer(window)
            window_terms = terms.intersection(in_window)
            new_name = any(not set(analyzer(name)) <= terms for name in code_names(window))
            digit = any(ch.isdigit() for ch in sentence)
            default = says_default(sentence)
            is_code = is_code_at(text, a)
            states = _STATES_DEFAULT_RE.search(window) is not None
            new_number = bool(set(_NUMBER_RE.findall(window)) - asked_numbers)
            new_flag = bool(set(_FLAG_RE.findall(window)) - asked_flags)
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
                        "heading": float(
                            _HEADING_RE.match(sentence) is not None or _UNDERLINE_RE.match(text, b) is not None
                        ),
                        "changelog": changelog,
                        "howto_code": float(howto and _CODE_RE.search(window) is not None),
                        "digit": float(digit),
                        "echo": own / len(said) if said else 0.0,
                        "novel": math.log1p(len(said) - own) / 3.0,
                        "window_terms": sum(weight.get(t, 0.0) for t in sorted(window_terms)),
                        "window_length": math.log1p(len(window)) / 5.0,
                        "pairs": len(pairs & _pairs(in_window)) / len(pairs) if pairs else 0.0,
                        "sentence_pairs": len(pairs & _pairs(said)) / len(pairs) if pairs else 0.0,
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
                    },
                )
            )
    flat = [r for per in rules for r in per]
    best_rule = max(flat, default=0.0)
    best_terms = max((f["terms"] for *_, f in raw), default=0.0)
    best_window = max((f["window_terms"] for *_, f in raw), default=0.0)
    # best_sentence's choice: the highest rule score, ties to the higher passage and earlier sentence.
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


def score(features: Sequence[float], weights: Sequence[float] = WEIGHTS) -> float:
    """The candidate's score: the weighted sum of its features, summed in a fixed order."""
    return math.fsum(w * x for w, x in zip(weights, features))


def ranked(hits: Sequence[HitLike], asked: SentenceQuery, n: int = 1) -> list[tuple[int, int]]:
    """(hit, sentence) of the ``n`` best-scoring candidates whose windows do not overlap, best first.

    Ties go to the higher passage and the earlier sentence.  A later
    candidate whose window shares text with an earlier one's (the same
    passage, overlapping spans) would show the same words twice: it is passed over.
    """
    found = candidates(hits, asked)
    scores = [score(c.features) for c in found]
    order = sorted(range(len(found)), key=lambda k: (-scores[k], k))
    out: list[Candidate] = []
    for k in order:
        c = found[k]
        if all(c.hit != o.hit or c.end <= o.start or c.start >= o.end for o in out):
            out.append(c)
            if len(out) == n:
                break
    return [(c.hit, c.unit) for c in out]


def learned_sentence(hits: Sequence[HitLike], asked: SentenceQuery) -> tuple[int, int]:
    """(hit, sentence) of the best-scoring candidate; ties go to the higher passage and the earlier sentence.

    A :data:`~._focusing.SentenceChooser`: :class:`~._focusing.FocusedRetriever`'s
    ``chooser`` in place of :func:`~._focusing.best_sentence`.
    """
    best = ranked(hits, asked)
    return best[0] if best else (0, 0)


def learned_sentences(hits: Sequence[HitLike], asked: SentenceQuery, n: int) -> list[tuple[int, int]]:
    """:func:`ranked` as a :data:`~._focusing.SentenceRanker` (``FocusedRetriever(ranker=..., windows=n)``)."""
    return ranked(hits, asked, n)
