"""A passage's sentences and the query terms each holds: what the window chooser weighs.

:func:`sentence_units` splits a passage into sentences (a table row, a
heading, a list item and a code line are one each) and says which query terms
each holds, with two kinds of marks besides: the answer's type (a sentence
holding a token of the kind the question asks for, :mod:`._answer_types`) and
a query term written inside a name as code.  A term weighs more the fewer
sentences hold it (:func:`term_weights`); :func:`rule_scores` sums those
weights per sentence, scaled by the passage's score over the first one's.
Nothing here knows any collection: the rules read English question words and
the shapes of technical documentation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .._types import HitLike
from ._answer_types import DEFAULT, IDENT, LITERAL, code_names, says_default, tokens_of, types_in
from ._windows import body_owner

__all__ = [
    "SentenceQuery",
    "SentenceUnits",
    "is_code_at",
    "mark_kind",
    "rule_scores",
    "sentence_spans",
    "sentence_units",
    "term_weights",
    "unit_scores",
]

# Prefixes of the pseudo-terms that stand for an answer type a sentence holds and for a query
# term held inside a name written as code (no analyser emits a NUL).
_TYPE_MARK = "\0type:"
_NAME_MARK = "\0name:"
# The answer's type weighs as two query terms held as often: it is what the question asks for.
_TYPE_WEIGHT = 2.0
# A line that starts a new unit (not a wrapped line of the sentence before it).
_BLOCK_START = re.compile(r"[ \t]*(?:$|\n|[|#>]|[-*+] |\d+[.)] |```)", re.M)
# A table's header separator: "|---|:---:|" (Markdown) or "+====+====+" (reStructuredText grid).
_RULE_RE = re.compile(r"[ \t]*(?:\|?[ \t:|-]*-{3,}[ \t:|-]*|\+[=+]*={3,}[=+]*)[ \t]*$")
_ROW_RE = re.compile(r"[ \t]*[|+]")
# Numbers a user spells out that documentation writes as digits.  Not "one": in English it is as
# often a pronoun or "a single" as the number 1.
_NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


class SentenceQuery(NamedTuple):
    """What the window chooser is told about the question."""

    query: str
    terms: set[str]  # the query's terms, as the index analyses them
    analyzer: Callable[[str], list[str]]
    budget: int  # the characters of a sentence that count (and are shown)
    expected: frozenset[str]  # the answer types asked for (``focus_types``)
    attach: int  # the budget of what a sentence takes with it (``_windows.attached``)
    howto: bool  # the question asks how to do something


class SentenceUnits(NamedTuple):
    """A passage's sentences and what each holds."""

    spans: list[tuple[int, int]]  # [start, end) of each sentence in the passage's text
    terms: list[set[str]]  # the query terms each counts, with the marks
    lead_ins: dict[int, int]  # sentence -> the one that began it, for prose resumed after code


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each non-blank sentence of ``text``.

    A sentence ends at ".", "!" or "?" before a space or line end outside
    backticks and brackets, or at a line end that is not a wrapped line of
    prose: a blank line follows, the line is a table row or heading, or the
    next one starts a list item, table row, heading or code fence.  A table
    row is one unit whatever its cells say.
    """
    spans: list[tuple[int, int]] = []
    start, depth, code = 0, 0, False

    def row(at: int) -> bool:
        return text[text.rfind("\n", 0, at) + 1 :].lstrip().startswith("|")

    def close(end: int) -> None:
        if text[start:end].strip():
            spans.append((start, end))

    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif not code and ch in "([":
            depth += 1
        elif not code and ch in ")]" and depth:
            depth -= 1
        if ch == "\n":
            line = text[start:i].rsplit("\n", 1)[-1].lstrip()
            if line.startswith(("|", "#")) or line.rstrip() == "```" or _BLOCK_START.match(text, i + 1):
                close(i)
                start, depth, code = i + 1, 0, False
        elif ch in ".!?" and not code and not depth and text[i + 1 : i + 2] in (" ", "\t", "\n") and not row(i):
            close(i + 1)
            start = i + 2
    close(len(text))
    return [(a + len(text[a:b]) - len(text[a:b].lstrip()), b) for a, b in spans]


def _fences(text: str) -> list[int]:
    return [m.start() for m in re.finditer(r"^[ \t]*```", text, re.M)]


def _is_code(text: str, at: int, fenced: list[int]) -> bool:
    line = text[text.rfind("\n", 0, at) + 1 :]
    return line.startswith(("    ", "\t", "```")) or sum(f < at for f in fenced) % 2 == 1


def is_code_at(text: str, at: int) -> bool:
    """Whether the unit of ``text`` starting at ``at`` is code: an indented line, a fence or inside one."""
    return _is_code(text, at, _fences(text))


def _lead_ins(text: str, spans: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Unit index -> the unit that began its sentence: a unit starting in lower case that only code
    separates from an earlier prose unit ending with a colon resumes that unit's sentence."""
    fenced = _fences(text)
    code = [_is_code(text, a, fenced) for a, _ in spans]
    out: dict[int, int] = {}
    for k, (a, _) in enumerate(spans):
        if k == 0 or code[k] or not text[a].islower() or not code[k - 1]:
            continue
        lead = k - 1
        while lead >= 0 and code[lead]:
            lead -= 1
        if lead >= 0 and text[spans[lead][0] : spans[lead][1]].rstrip().endswith(":"):
            out[k] = lead
    return out


def _table_rows(text: str, spans: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Header unit -> the table rows under it: a header is a unit on a line starting with ``|`` whose
    next line is a separator rule; its rows are the units after it on lines starting with ``|`` or ``+``."""
    lines = text.splitlines()
    line_of = [text.count("\n", 0, a) for a, _ in spans]
    out: dict[int, list[int]] = {}
    k, n = 0, len(spans)
    while k < n:
        line = line_of[k]
        if text.startswith("|", spans[k][0]) and line + 1 < len(lines) and _RULE_RE.fullmatch(lines[line + 1]):
            header, k = k, k + 1
            rows = out.setdefault(header, [])
            while k < n and _ROW_RE.match(lines[line_of[k]]):
                if not _RULE_RE.fullmatch(lines[line_of[k]]):
                    rows.append(k)
                k += 1
            continue
        k += 1
    return out


def _new_types(text: str, asked: SentenceQuery) -> frozenset[str]:
    """The asked-for types ``text`` holds a token of, not counting names made of the query's words only:
    a sentence whose only inline code is a word of the question does not name the answer."""
    held = set(asked.expected & types_in(text))
    for kind in held & {IDENT, LITERAL}:
        if all(set(asked.analyzer(token)) <= asked.terms for token in tokens_of(text, kind)):
            held.discard(kind)
    return frozenset(held)


def _named_terms(text: str, asked: SentenceQuery) -> set[str]:
    """The query terms ``text`` holds inside a name written as code that says more than the query
    (documentation names a thing after what it does; a name of the question's words only is its own)."""
    out: set[str] = set()
    for name in code_names(text):
        parts = set(asked.analyzer(name))
        if parts and not parts <= asked.terms:
            out |= parts & asked.terms
    return out


def _spelled_numbers(asked: SentenceQuery) -> dict[str, re.Pattern[str]]:
    """Query term -> the digits it spells, for the number words among the terms; the digits match as
    a number of their own, not inside a longer one, a version or a decimal."""
    out: dict[str, re.Pattern[str]] = {}
    for value, word in enumerate(_NUMBER_WORDS, start=2):
        for term in asked.analyzer(word):
            if term in asked.terms:
                out[term] = re.compile(rf"(?<![\w.]){value}(?![\w]|\.\d)")
    return out


def sentence_units(text: str, asked: SentenceQuery) -> SentenceUnits:
    """The sentences of ``text`` and the query terms (and marks) each counts.

    Only what would be shown counts (a sentence's first ``budget``
    characters).  Prose resumed after a code block counts its lead-in's terms
    (the fact ends a sentence its lead-in began); a sentence in a directive's
    body counts the directive line's; a table row counts its header's (the
    header itself names columns and never answers).  A sentence holding a
    token of an asked-for type gets a type mark, one saying "default" where a
    default is asked for another; for a "which" question (not a how-to, whose
    words name the task) a query term inside a name written as code gets a
    name mark.  A number word of the question counts where its digits stand.
    """
    spans = sentence_spans(text) or [(0, len(text))]
    lead_ins = _lead_ins(text, spans)
    terms, analyzer, budget, expected = asked.terms, asked.analyzer, asked.budget, asked.expected
    shown = [text[a : min(b, a + budget)] for a, b in spans]
    found = [terms.intersection(analyzer(s)) for s in shown]
    spelled = _spelled_numbers(asked)
    if spelled:
        for held, (a, b) in zip(found, spans):
            held.update(term for term, digits in spelled.items() if digits.search(text, a, min(b, a + budget)))
    for k, lead in lead_ins.items():
        found[k] |= found[lead]
    for held, (a, _) in zip(found, spans):
        owner = body_owner(text, a)
        if owner is not None:
            held |= terms.intersection(analyzer(text[owner[0] : owner[1]]))
    if expected:
        for held, s in zip(found, shown):
            held.update(_TYPE_MARK + (kind if kind == DEFAULT else "shape") for kind in _new_types(s, asked))
    if IDENT in expected and not asked.howto:
        for held, s in zip(found, shown):
            held.update(_NAME_MARK + term for term in _named_terms(s, asked))
    for header, rows in _table_rows(text, spans).items():
        said = {t for t in found[header] if not t.startswith(_NAME_MARK) and t != _TYPE_MARK + "shape"}
        if DEFAULT in expected and says_default(text[spans[header][0] : spans[header][1]]):
            said.add(_TYPE_MARK + DEFAULT)
        for row in rows:
            found[row] |= said
        found[header] = set()
    return SentenceUnits(spans, found, lead_ins)


def term_weights(unit_terms: Sequence[set[str]]) -> dict[str, float]:
    """A term weighs more the fewer units hold it (idf over units); a type mark :data:`_TYPE_WEIGHT` times more."""
    held: dict[str, int] = {}
    for found in unit_terms:
        for term in found:
            held[term] = held.get(term, 0) + 1
    weight = {term: math.log(1.0 + len(unit_terms) / count) for term, count in held.items()}
    for term in weight:
        if term.startswith(_TYPE_MARK):
            weight[term] *= _TYPE_WEIGHT
    return weight


def unit_scores(found: Sequence[set[str]], weight: dict[str, float], scale: float = 1.0) -> list[float]:
    """Each unit's summed term weight times ``scale``, summed in a fixed order (equal units tie exactly)."""
    return [scale * sum(weight[t] for t in sorted(terms)) for terms in found]


def rule_scores(
    hits: Sequence[HitLike], unit_terms: Sequence[Sequence[set[str]]], weight: dict[str, float]
) -> list[list[float]]:
    """Each sentence's weight (:func:`unit_scores`) times its passage's score over the first passage's."""
    top = hits[0].score if hits else 0.0
    out = []
    for hit, found in zip(hits, unit_terms):
        scale = hit.score / top if top > 0 and hit.score > 0 else 1.0
        out.append(unit_scores(found, weight, scale))
    return out


def mark_kind(term: str) -> str | None:
    """``"shape"`` or ``"default"`` for a type mark, ``"name"`` for a name mark, None for a query term."""
    if term.startswith(_TYPE_MARK):
        return term[len(_TYPE_MARK) :]
    return "name" if term.startswith(_NAME_MARK) else None
