"""A passage's sentences and the query terms each holds: what the window chooser weighs.

:func:`sentence_spans` cuts a passage into units: sentences of prose, and one
unit per table row, heading, list item and code line.  :func:`sentence_units`
says which query terms each unit holds, reading a unit with what it belongs
to: prose resumed after a code block with the lead-in that began its sentence,
a directive's body with the directive line, a table row with its header.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ._windows import CAPS_HEAD_RE, body_owner, section_head

__all__ = ["SentenceQuery", "SentenceUnits", "is_code_at", "sentence_spans", "sentence_units"]

# A line that starts a new unit (not a wrapped line of the sentence before it).
_BLOCK_START = re.compile(r"[ \t]*(?:$|\n|[|#>]|[-*+] |\d+[.)] |```)", re.M)
# A table's header separator: "|---|:---:|" (Markdown) or "+====+====+" (reStructuredText grid).
_RULE_RE = re.compile(r"[ \t]*(?:\|?[ \t:|-]*-{3,}[ \t:|-]*|\+[=+]*={3,}[=+]*)[ \t]*$")
_ROW_RE = re.compile(r"[ \t]*[|+]")
_FENCE_RE = re.compile(r"^[ \t]*```", re.M)


class SentenceQuery(NamedTuple):
    """What the window chooser is told about the question."""

    query: str
    terms: set[str]  # the query's terms, as the index analyses them
    analyzer: Callable[[str], list[str]]
    budget: int  # the characters of a sentence that count (and are shown)
    attach: int  # the budget of what a sentence takes with it (``_windows.attached``)


class SentenceUnits(NamedTuple):
    """A passage's units and what each holds."""

    spans: list[tuple[int, int]]  # [start, end) of each unit in the passage's text
    terms: list[set[str]]  # the query terms each counts
    lead_ins: dict[int, int]  # unit -> the one that began its sentence, for prose resumed after code


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each non-blank unit of ``text``.

    A sentence ends at ".", "!" or "?" (not an ellipsis: "[FILE]..." marks a
    repeat) before a space or line end outside backticks and brackets, or at a
    line end that does not wrap prose: a blank line follows, the line is a
    table row or heading, or the next one starts a list item, table row,
    heading or code fence.
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
            raw = text[start:i].rsplit("\n", 1)[-1]
            line = raw.lstrip()
            if (
                line.startswith(("|", "#"))
                or line.rstrip() == "```"
                or _BLOCK_START.match(text, i + 1)
                or CAPS_HEAD_RE.fullmatch(raw)
            ):
                close(i)
                start, depth, code = i + 1, 0, False
        elif (
            ch in ".!?"
            and not code
            and not depth
            and text[i + 1 : i + 2] in (" ", "\t", "\n")
            and text[i - 2 : i] != ".."
            and not row(i)
        ):
            close(i + 1)
            start = i + 2
    close(len(text))
    return [(a + len(text[a:b]) - len(text[a:b].lstrip()), b) for a, b in spans]


def _is_code(text: str, at: int, fences: Sequence[int]) -> bool:
    line = text[text.rfind("\n", 0, at) + 1 :]
    return line.startswith(("    ", "\t", "```")) or sum(f < at for f in fences) % 2 == 1


def is_code_at(text: str, at: int) -> bool:
    """Whether the unit of ``text`` starting at ``at`` is code: an indented line, a fence or inside one."""
    return _is_code(text, at, [m.start() for m in _FENCE_RE.finditer(text)])


def _lead_ins(text: str, spans: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Unit -> the unit that began its sentence: a unit starting in lower case that only code
    separates from an earlier prose unit ending with a colon resumes that unit's sentence."""
    fences = [m.start() for m in _FENCE_RE.finditer(text)]
    code = [_is_code(text, a, fences) for a, _ in spans]
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
    """Header unit -> the rows under it: a header is a unit on a line starting with ``|`` whose next
    line is a separator rule; its rows are the units after it on lines starting with ``|`` or ``+``."""
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


def sentence_units(text: str, asked: SentenceQuery, spans: list[tuple[int, int]] | None = None) -> SentenceUnits:
    """The units of ``text`` and the query terms each counts (only in its first ``budget`` characters).

    Prose resumed after a code block counts its lead-in's terms; a unit in a
    directive's body counts the directive line's, and one in a plain-text
    section the section heading's; a table row counts its header's, and the
    header itself, which names columns, counts none.  ``spans``: the
    :func:`sentence_spans` of ``text`` when the caller has them.
    """
    spans = (sentence_spans(text) if spans is None else spans) or [(0, len(text))]
    lead_ins = _lead_ins(text, spans)
    terms, analyzer = asked.terms, asked.analyzer
    found = [terms.intersection(analyzer(text[a : min(b, a + asked.budget)])) for a, b in spans]
    for k, lead in lead_ins.items():
        found[k] |= found[lead]
    for held, (a, _) in zip(found, spans):
        for owner in (body_owner(text, a), section_head(text, a)):
            if owner is not None:
                held |= terms.intersection(analyzer(text[owner[0] : owner[1]]))
    for k, (a, b) in enumerate(spans):
        if CAPS_HEAD_RE.fullmatch(text, a, b):
            found[k] = set()  # a section heading names what its body says; its body counts its words
    for header, rows in _table_rows(text, spans).items():
        for row in rows:
            found[row] |= found[header]
        found[header] = set()
    return SentenceUnits(spans, found, lead_ins)
