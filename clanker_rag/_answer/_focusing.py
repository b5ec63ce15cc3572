"""Passage shaping: each hit cut down to the lines around the query's words.

A chunk of the shipped guide is about 1,200 characters; the sentence that
answers a question is one or two lines of it, often not the first.  Cutting a
block at a character count keeps the chunk's head and drops that sentence; a
small model reading a long block copies whichever line is nearest the end.
:class:`FocusedRetriever` wraps any retriever and returns, for each hit, the
window of whole lines that holds the most query terms, widened around them
while it fits ``budget`` characters.

The window is a contiguous slice, so a shaped :class:`~clanker_rag.Hit` keeps
its promise: ``text`` is ``source_text[start:end]`` and ``start_line`` /
``end_line`` are the window's own lines.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .._exceptions import ConfigError
from .._text._analysis import Analyzer
from .._types import Hit, HitLike, Retriever
from ._answer_types import DEFAULT, IDENT, LITERAL, asks_how, code_names, focus_types, says_default, tokens_of, types_in
from ._windows import attached, body_owner, is_changelog, strip_inline_html

__all__ = [
    "FocusedRetriever",
    "SentenceChooser",
    "SentenceQuery",
    "SentenceRanker",
    "SentenceUnits",
    "check_windows",
    "focus_hit",
    "focus_sentence",
    "is_code_at",
    "rule_scores",
    "rules_sentence",
    "sentence_units",
]

# Prefix of the pseudo-terms that stand for answer types (no analyser emits a NUL).
_TYPE_MARK = "\0type:"
# ... and for a query term held inside a name written as code ("FileReader" holds "file").
_NAME_MARK = "\0name:"
# The answer's type weighs as two query terms held as often: it is what the question asks for
# (bench/RESULTS.md: 1.5 to 3 chose the same sentences on the tune half, 1 fewer, a filter fewer).
_TYPE_WEIGHT = 2.0
# A line that starts a new unit of text (not a wrapped line of the previous sentence).
# The most characters a sentence and the ones after it may fill: a block, not a page.
_MAX_FOLLOW = 4000
_BLOCK_START = re.compile(r"[ \t]*(?:$|\n|[|#>]|[-*+] |\d+[.)] |```)", re.M)


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


def _sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) of each non-blank sentence of ``text``.

    A sentence ends at ".", "!" or "?" before a space or line end outside backticks and brackets, or
    at a line end that is not a wrapped line of prose: a blank line follows,
    the line is a table row or heading, or the next one starts a list item,
    table row, heading or code fence.
    """
    spans: list[tuple[int, int]] = []
    start, depth, code = 0, 0, False
    i, n = 0, len(text)

    def row(at: int) -> bool:
        # Inside a table row: a row is one unit whatever its cells say.
        return text[text.rfind("\n", 0, at) + 1 :].lstrip().startswith("|")

    def close(end: int) -> None:
        if text[start:end].strip():
            spans.append((start, end))

    while i < n:
        ch = text[i]
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
        i += 1
    close(n)
    return [(a + len(text[a:b]) - len(text[a:b].lstrip()), b) for a, b in spans]


def _fences(text: str) -> list[int]:
    return [m.start() for m in re.finditer(r"^[ \t]*```", text, re.M)]


def _is_code(text: str, at: int, fenced: list[int]) -> bool:
    """Whether the unit starting at ``at`` is code: an indented line, a fence or inside one."""
    line = text[text.rfind("\n", 0, at) + 1 :]
    return line.startswith(("    ", "\t", "```")) or sum(f < at for f in fenced) % 2 == 1


def is_code_at(text: str, at: int) -> bool:
    """Whether the unit of ``text`` starting at ``at`` is code (:func:`_is_code`, the fences found here)."""
    return _is_code(text, at, _fences(text))


def _lead_ins(text: str, spans: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Unit index -> the unit that began its sentence, for prose resumed after a code block.

    A unit resumes a sentence when it starts in lower case and only code
    separates it from an earlier prose unit ending with a colon.
    """
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


def _unit_terms(
    text: str,
    spans: Sequence[tuple[int, int]],
    lead_ins: dict[int, int],
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str],
    attach: int | None,
    howto: bool = False,
) -> list[set[str]]:
    """The query terms (and answer-type marks) each sentence of ``text`` counts; see :func:`focus_sentence`.

    ``lead_ins`` is :func:`_lead_ins` of ``spans`` (found once: choosers read it too).

    A name holding the question's words answers "which ..." questions only:
    in a how-to (``howto``), ``serving`` in a module name is the question's
    verb, not its answer.
    """
    # Only what would be shown counts: a long sentence is scored on its first ``budget`` characters.
    unit_terms = [terms.intersection(analyzer(text[a : min(b, a + budget)])) for a, b in spans]
    spelled = spelled_numbers(terms, analyzer)
    if spelled:
        for found, (a, b) in zip(unit_terms, spans):
            found.update(term for term, digits in spelled.items() if digits.search(text, a, min(b, a + budget)))
    for k, lead in lead_ins.items():
        # "BM25 is scored with:", a code block, "with k1 = 1.2.": the fact ends a sentence its
        # lead-in began, so it is about the lead-in's words too.
        unit_terms[k] |= unit_terms[lead]
    if attach is not None:
        for found, (a, _) in zip(unit_terms, spans):
            owner = body_owner(text, a)
            if owner is not None:
                # "Default: None" under ".. data:: NAME" is about NAME.
                found |= terms.intersection(analyzer(text[owner[0] : owner[1]]))
    if expected:
        # The answer's type is one more query term, held by the sentences with a token of that type.
        for found, (a, b) in zip(unit_terms, spans):
            held = new_types(text[a : min(b, a + budget)], expected, terms, analyzer)
            # The shapes asked for are one mark (a name is an identifier and inline code at once);
            # "default" said in the sentence is another.
            found.update(_TYPE_MARK + (kind if kind == DEFAULT else "shape") for kind in held)
    if IDENT in expected and not howto:
        for found, (a, b) in zip(unit_terms, spans):
            found.update(_NAME_MARK + term for term in named_terms(text[a : min(b, a + budget)], terms, analyzer))
    for header, rows in table_rows(text, spans).items():
        # A table row is read with its header: "| workers | 4 |" under "| setting | default |" says a
        # default; the header itself names the columns and never answers.
        said = {t for t in unit_terms[header] if not t.startswith(_NAME_MARK) and t != _TYPE_MARK + "shape"}
        if DEFAULT in expected and says_default(text[spans[header][0] : spans[header][1]]):
            said.add(_TYPE_MARK + DEFAULT)
        for row in rows:
            unit_terms[row] |= said
        unit_terms[header] = set()
    return unit_terms


# A table's header separator: "|---|:---:|" (Markdown) or "+====+====+" (reStructuredText grid).
_RULE_RE = re.compile(r"[ \t]*(?:\|?[ \t:|-]*-{3,}[ \t:|-]*|\+[=+]*={3,}[=+]*)[ \t]*$")
_ROW_RE = re.compile(r"[ \t]*[|+]")


def table_rows(text: str, spans: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Header unit index -> the indices of the table rows under it.

    A header is a unit on a line starting with ``|`` whose next line is a
    separator rule; its rows are the following units on lines starting with
    ``|`` or ``+``, up to the first unit that is not.
    """
    lines = text.splitlines()
    line_of = [text.count("\n", 0, a) for a, _ in spans]
    out: dict[int, list[int]] = {}
    k, n = 0, len(spans)
    while k < n:
        line = line_of[k]
        if text[spans[k][0]] == "|" and line + 1 < len(lines) and _RULE_RE.fullmatch(lines[line + 1]):
            header, k = k, k + 1
            rows = out.setdefault(header, [])
            while k < n and _ROW_RE.match(lines[line_of[k]]):
                if not _RULE_RE.fullmatch(lines[line_of[k]]):
                    rows.append(k)
                k += 1
            continue
        k += 1
    return out


def new_types(
    text: str, expected: frozenset[str], terms: set[str], analyzer: Callable[[str], list[str]]
) -> frozenset[str]:
    """The ``expected`` types ``text`` holds a token of, not counting names made of the query's words only.

    "Which extension adds ``break`` to loops?" is not answered by a sentence
    whose only inline code is ``break``.
    """
    held = set(expected & types_in(text))
    for kind in held & {IDENT, LITERAL}:
        if all(set(analyzer(token)) <= terms for token in tokens_of(text, kind)):
            held.discard(kind)
    return frozenset(held)


def named_terms(text: str, terms: set[str], analyzer: Callable[[str], list[str]]) -> set[str]:
    """The query ``terms`` that ``text`` holds inside a name written as code, a name that says more than the query.

    A name made only of the question's words (``start_server`` in "which
    parameter of start_server ...") is the question's own, not its answer.
    """
    out: set[str] = set()
    for name in code_names(text):
        parts = set(analyzer(name))
        if parts and not parts <= terms:
            out |= parts & terms
    return out


# Numbers a user spells out that documentation writes as digits ("three retries", "-r 3").  Not "one":
# in English it is as often a pronoun ("the one that") or "a single" as the number 1.
_NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def spelled_numbers(terms: set[str], analyzer: Callable[[str], list[str]]) -> dict[str, re.Pattern[str]]:
    """Query term -> the digits it spells, for the number words among ``terms`` ("four" -> ``4``).

    A question says "three retry attempts"; the docs' command line says
    ``-r 3``.  The digits match as a number of their own, not inside a
    longer one, a version or a decimal ("14", "4.2" are not four).
    """
    out: dict[str, re.Pattern[str]] = {}
    for value, word in enumerate(_NUMBER_WORDS, start=2):
        for term in analyzer(word):
            if term in terms:
                out[term] = re.compile(rf"(?<![\w.]){value}(?![\w]|\.\d)")
    return out


def _weights(unit_terms: Sequence[set[str]]) -> dict[str, float]:
    """A term weighs more the fewer units hold it; an answer-type mark weighs :data:`_TYPE_WEIGHT` times more."""
    held: dict[str, int] = {}
    for found in unit_terms:
        for term in found:
            held[term] = held.get(term, 0) + 1
    weight = {term: math.log(1.0 + len(unit_terms) / count) for term, count in held.items()}
    for term in weight:
        if term.startswith(_TYPE_MARK):
            weight[term] *= _TYPE_WEIGHT
    return weight


class SentenceUnits(NamedTuple):
    """A passage's sentences as :func:`best_sentence` weighs them (for other choosers, e.g. ``_learned``)."""

    spans: list[tuple[int, int]]  # [start, end) of each sentence in the passage's text
    terms: list[set[str]]  # the query terms each counts, with the marks below
    lead_ins: dict[int, int]  # sentence -> the one that began it, for prose resumed after code


def sentence_units(
    hit: HitLike,
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str] = frozenset(),
    attach: int | None = None,
    howto: bool = False,
) -> SentenceUnits:
    """The sentences of ``hit`` and the query terms (and answer-type marks) each counts."""
    spans = _sentences(hit.text) or [(0, len(hit.text))]
    lead_ins = _lead_ins(hit.text, spans)
    found = _unit_terms(hit.text, spans, lead_ins, terms, analyzer, budget, expected, attach, howto)
    return SentenceUnits(spans, found, lead_ins)


def term_weights(unit_terms: Sequence[set[str]]) -> dict[str, float]:
    """Each term's weight over ``unit_terms`` as :func:`best_sentence` weighs it."""
    return _weights(unit_terms)


def rule_scores(
    hits: Sequence[HitLike], unit_terms: Sequence[Sequence[set[str]]], weight: dict[str, float], rank_prior: float
) -> list[list[float]]:
    """Each sentence's score as :func:`best_sentence` ranks it: its terms' weight, times (hit score / first
    hit's score) ** ``rank_prior``; ``unit_terms`` holds each hit's sentences' terms."""
    top = hits[0].score if hits else 0.0
    out = []
    for hit, units in zip(hits, unit_terms):
        scale = (hit.score / top) ** rank_prior if top > 0 and hit.score > 0 else 1.0
        # Summed in a fixed order: equal sentences tie exactly whatever the hash seed.
        out.append([scale * sum(weight[t] for t in sorted(found)) for found in units])
    return out


def mark_kind(term: str) -> str | None:
    """``"shape"`` or ``"default"`` for an answer-type mark, ``"name"`` for a name mark, None for a query term."""
    if term.startswith(_TYPE_MARK):
        return term[len(_TYPE_MARK) :]
    return "name" if term.startswith(_NAME_MARK) else None


class SentenceQuery(NamedTuple):
    """What a sentence chooser is told about the question (the arguments of :func:`best_sentence`)."""

    query: str
    terms: set[str]
    analyzer: Callable[[str], list[str]]
    budget: int
    expected: frozenset[str]
    attach: int | None
    rank_prior: float
    howto: bool


# Chooses (hit, sentence) among the top passages, instead of best_sentence (e.g. ``_learned``).
SentenceChooser = Callable[[Sequence[HitLike], SentenceQuery], tuple[int, int]]
# Ranks the n best (hit, sentence) pairs among the top passages, best first, their windows apart.
SentenceRanker = Callable[[Sequence[HitLike], SentenceQuery, int], list[tuple[int, int]]]
# The most windows a ranker may put first.
_MAX_WINDOWS = 5


def check_windows(windows: object) -> int:
    """``windows`` if it is a count of windows a block may show first (1 to 5), else a ConfigError."""
    if isinstance(windows, bool) or not isinstance(windows, int) or not 1 <= windows <= _MAX_WINDOWS:
        raise ConfigError(f"windows must be an integer 1..{_MAX_WINDOWS}, got {windows!r}")
    return windows


def best_sentence(
    hits: Sequence[HitLike],
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str] = frozenset(),
    attach: int | None = None,
    rank_prior: float = 0.0,
    howto: bool = False,
) -> tuple[int, int]:
    """(hit, sentence) of the sentence that answers best among ``hits``, weighing terms over all their sentences.

    The search ranked whole chunks; the block shows one sentence.  The chunk
    that ranks first often owes its score to a heading or to repeating the
    question's words across several lines, while a lower one holds the one
    sentence (or the lead-in and its code) that has them together.  A
    sentence's score is scaled by ``(hit score / first hit's score) **
    rank_prior``, so a lower hit must answer clearly better to be shown.
    Ties go to the higher-ranked hit and the earlier sentence.
    """
    per_hit = [sentence_units(hit, terms, analyzer, budget, expected, attach, howto).terms for hit in hits]
    weight = _weights([found for units in per_hit for found in units])
    best, best_score = (0, 0), -1.0
    for i, scores in enumerate(rule_scores(hits, per_hit, weight, rank_prior)):
        for u, score in enumerate(scores):
            if score > best_score + 1e-9:
                best, best_score = (i, u), score
    return best


def rules_sentence(hits: Sequence[HitLike], asked: SentenceQuery) -> tuple[int, int]:
    """:func:`best_sentence` as a :data:`SentenceChooser` (:class:`FocusedRetriever`'s default)."""
    return best_sentence(
        hits, asked.terms, asked.analyzer, asked.budget, asked.expected, asked.attach, asked.rank_prior, asked.howto
    )


def focus_sentence(
    hit: HitLike,
    terms: set[str],
    analyzer: Callable[[str], list[str]],
    budget: int,
    expected: frozenset[str] = frozenset(),
    attach: int | None = None,
    unit: int | None = None,
    howto: bool = False,
    follow: int = 0,
) -> HitLike:
    """``hit`` cut to its one sentence (or line, or table row) holding the most query-term weight.

    A small model asked to copy a fact copies *some* line of its passage;
    with one line there is only the right one to copy.  Weights as in
    :func:`_best_window`; ties go to the earliest sentence; a sentence longer
    than ``budget`` keeps its start.  Prose resumed after a code block ("the
    score is:", a formula, "with k1 = 1.2") also counts the query terms of the
    sentence that led into the code (:func:`_lead_ins`).  ``unit`` names the
    sentence (by its index in :func:`_sentences`) when it was chosen already.

    With ``attach`` (a budget in characters), the sentence keeps what it
    needs around it (:func:`~clanker_rag._answer._windows.attached`): the code
    block or list its colon introduces, the body of the heading or directive
    it is, the directive line whose body it opens; and a sentence in a
    directive's body counts the directive line's query terms too.

    With ``follow`` (a budget in characters, 0: off), the sentence also takes
    the whole sentences after it in the passage while the shown span fits
    ``follow`` characters: the sentence that repeats the question's words is
    often followed by the one that answers ("... line length. The default
    is 88.").

    The sentence comes back on one line (each whitespace run made one
    space) and without the HTML tags of its prose (:func:`strip_inline_html`),
    so its ``text`` is the slice ``start:end`` of the document up to
    whitespace and tags; ``start``/``end`` and the line numbers are the slice's own.
    """
    text = hit.text
    spans = _sentences(text)
    if len(spans) <= 1 and len(text) <= budget:
        return hit
    if not spans:
        return hit
    if unit is None or not 0 <= unit < len(spans):
        unit_terms = _unit_terms(text, spans, _lead_ins(text, spans), terms, analyzer, budget, expected, attach, howto)
        weight = _weights(unit_terms)
        # Summed in a fixed order: equal sentences tie exactly whatever the hash seed.
        scores = [sum(weight[t] for t in sorted(found)) for found in unit_terms]
        unit = max(range(len(spans)), key=lambda i: (scores[i], -i))
    start, end = spans[unit]
    end = min(end, start + budget)
    if attach is not None:
        start, end = attached(text, start, end, max(attach, end - start))
    if follow and end >= spans[unit][1]:
        # Not after a sentence cut at ``budget``: its own rest comes first.
        end = _followed(spans, start, end, follow)
    first = text.count("\n", 0, start)
    out = _window(hit, start, end, first, first + text.count("\n", start, end))
    # Markup a rendered page hides is noise to a model that copies; a window
    # that starts inside a code block is code, tags and all. The passage's
    # fences are looked for only when the window has a tag to lose.
    shown = out.text
    if "<" in shown and not is_code_at(text, start):
        shown = strip_inline_html(shown)
    # One line: a model copying a wrapped sentence stops at its first line break.
    return dataclasses.replace(out, text=" ".join(shown.split()))


def _followed(spans: Sequence[tuple[int, int]], start: int, end: int, budget: int) -> int:
    """``end`` moved past the whole sentences of ``spans`` after it while ``[start, end)`` fits ``budget``."""
    for a, b in spans:
        if a < end:
            continue
        if b - start > budget:
            break
        end = b
    return end


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
    """A retriever whose hits are cut to ``budget`` characters around the query's words.

    ``sentence=True`` keeps only the one sentence, line or table row that
    holds the most query-term weight (:func:`focus_sentence`).  With
    ``answer_types=True`` as well, the type of answer the query asks for
    (:mod:`._answer_types`) counts as a query term, and the hits whose
    sentence holds a token of that type and a query term come first (each
    group in rank order): a top passage without a number cannot say "how many".
    The types are :func:`~._answer_types.focus_types` (inline code, a stated
    default), and for a "which" question a name written as code that holds the
    question's words counts them again (:func:`named_terms`); a table row is read
    with its header (:func:`table_rows`); a number the question spells out
    counts where a sentence writes its digits (:func:`spelled_numbers`).
    ``pick`` > 1 shows first the passage, of the top ``pick``, holding the best
    sentence of them all (:func:`best_sentence`, scaled by the passage's score
    to the power ``rank_prior``); that passage stays first whatever its type.
    ``analyzer`` turns text into terms (default: the wrapped retriever's own
    ``analyzer`` if it has one, else the standard English analyser), so query
    and lines match the way the index matches them.  ``follow`` > 0 (characters)
    lets the sentence take the whole sentences after it within that budget
    (:func:`focus_sentence`).  ``windows`` > 1 with a ``ranker`` (a
    :data:`SentenceRanker`, e.g. ``_learned.learned_sentences``) shows that
    ranker's best ``windows`` sentences of the top ``pick`` passages first,
    in its order, each cut from its passage (two may come from one passage).
    Keyword arguments of :meth:`search` (filters) pass through.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        budget: int = 400,
        analyzer: Callable[[str], list[str]] | None = None,
        sentence: bool = False,
        answer_types: bool = False,
        attach: int | None = None,
        changelog_last: bool = False,
        pick: int = 1,
        rank_prior: float = 0.0,
        chooser: SentenceChooser | None = None,
        follow: int = 0,
        ranker: SentenceRanker | None = None,
        windows: int = 1,
    ) -> None:
        if budget < 40:
            raise ConfigError(f"budget must be >= 40 characters, got {budget}")
        if follow != 0 and not 40 <= follow <= _MAX_FOLLOW:
            raise ConfigError(f"follow must be 0 (off) or 40..{_MAX_FOLLOW} characters, got {follow!r}")
        check_windows(windows)
        if windows > 1 and ranker is None:
            raise ConfigError("windows > 1 needs a ranker (a SentenceRanker) to choose them")
        self.ranker = ranker
        self.windows = windows
        self.follow = follow
        self.sentence = sentence
        self.attach = attach
        self.changelog_last = changelog_last
        self.pick = pick
        self.rank_prior = rank_prior
        # How the sentence is chosen among the top ``pick`` passages (``_learned``); None: best_sentence.
        self.chooser: SentenceChooser = rules_sentence if chooser is None else chooser
        self.answer_types = answer_types
        self.retriever = retriever
        self.budget = budget
        found = getattr(retriever, "analyzer", None)
        self.analyzer: Callable[[str], list[str]] = analyzer or (found if callable(found) else Analyzer())

    def search(self, query: str, k: int = 10, **kwargs: object) -> list[HitLike]:
        hits = self.retriever.search(query, k, **kwargs)
        if self.changelog_last:
            # Release notes name every feature once, in passing: they go after the passages that explain.
            notes = [is_changelog(h.source, h.text) for h in hits]
            hits = [h for h, n in zip(hits, notes) if not n] + [h for h, n in zip(hits, notes) if n]
        terms = set(self.analyzer(query))
        if not self.sentence:
            return [focus_hit(hit, terms, self.analyzer, self.budget) for hit in hits]
        expected = focus_types(query) if self.answer_types else frozenset()
        howto = self.answer_types and asks_how(query)
        # (hit, sentence) chosen among the top passages, shown first in this order.
        chosen: list[tuple[int, int]] = []
        if self.pick > 1 and len(hits) > 1:
            asked = SentenceQuery(
                query, terms, self.analyzer, self.budget, expected, self.attach, self.rank_prior, howto
            )
            if self.ranker is not None and self.windows > 1:
                chosen = self.ranker(hits[: self.pick], asked, self.windows)
            else:
                chosen = [self.chooser(hits[: self.pick], asked)]
        used = {i for i, _ in chosen}
        order = [(i, u) for i, u in chosen] + [(i, None) for i in range(len(hits)) if i not in used]
        out = [
            focus_sentence(hits[i], terms, self.analyzer, self.budget, expected, self.attach, unit, howto, self.follow)
            for i, unit in order
        ]
        if expected:
            # A passage whose best sentence holds no token of the asked-for type (and a query
            # term) cannot answer; the ones that can go first, each group in rank order.
            fits = [bool(expected & types_in(h.text)) and bool(terms.intersection(self.analyzer(h.text))) for h in out]
            # Sentences chosen among several passages weighed the type already: they stay first.
            keep = len(chosen)
            rest = list(zip(out[keep:], fits[keep:]))
            out = out[:keep] + [h for h, ok in rest if ok] + [h for h, ok in rest if not ok]
        return out
