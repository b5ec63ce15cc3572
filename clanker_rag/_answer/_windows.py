"""What a chosen sentence needs around it to answer, and what a shown window leaves out.

A fact often comes in two pieces: a sentence ending in a colon introduces the
block that holds it; a definition (a directive, a heading) names a thing and
its indented body says what it is.  :func:`attached` widens a sentence to the
block it introduces and the definition line it belongs to, in whole lines,
within a budget; :func:`body_owner` and :func:`section_head` say which line a
position sits under; :func:`strip_inline_html` drops Markdown prose's HTML tags.
"""

from __future__ import annotations

import re

__all__ = ["CAPS_HEAD_RE", "attached", "body_owner", "is_changelog", "section_head", "strip_inline_html"]

# A plain-text section heading (manual pages, RFCs): an unindented line in capitals.
CAPS_HEAD_RE = re.compile(r"[A-Z][A-Z0-9]*(?:[ -][A-Z0-9]+)*[ \t]*")
# A reStructuredText directive or a Markdown heading: a line that names what follows.
_HEAD_RE = re.compile(r"[ \t]*(?:\.\. [\w:-]+::|#{1,6} )")
# Lines between a lead-in and its block that carry no content: directives (".. code-block:: python"), their options.
_SKIP_RE = re.compile(r"[ \t]*(?:\.\. [\w:-]+::.*$|:[\w -]+:(?:[ \t].*)?$)")
_UNDERLINE_RE = re.compile(r"[ \t]*([=\-~^\"'`#*+])\1{2,}[ \t]*$")
_ITEM_RE = re.compile(r"[ \t]*(?:[-*+] |\d+[.)] )")
_FENCE_RE = re.compile(r"[ \t]*(?:```|~~~)")
# Names and headings of release notes: they mention every feature in passing and answer nothing.
_CHANGELOG_NAME_RE = re.compile(r"(?:^|/)(?:change(?:s|log)|history|news|release[-_ ]?notes)[^/]*$", re.I)
_VERSION_HEAD_RE = re.compile(r"^(?:#+ )?(?:Version|Release) \d+\.\d+", re.M)


def _lines(text: str) -> list[tuple[int, int]]:
    """[start, end) of each line of ``text`` (without its line break)."""
    out, at = [], 0
    for line in text.splitlines(keepends=True):
        out.append((at, at + len(line.rstrip("\r\n"))))
        at += len(line)
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _line_of(lines: list[tuple[int, int]], pos: int) -> int:
    for i, (_, b) in enumerate(lines):
        if pos <= b:
            return i
    return len(lines) - 1


def is_head(text: str, lines: list[tuple[int, int]], i: int) -> bool:
    """Whether line ``i`` names what follows: a directive, a heading, a line over an underline."""
    a, b = lines[i]
    if _HEAD_RE.match(text, a, b):
        return True
    if i + 1 < len(lines):
        na, nb = lines[i + 1]
        return bool(text[a:b].strip()) and _UNDERLINE_RE.fullmatch(text, na, nb) is not None
    return False


def body_owner(text: str, pos: int) -> tuple[int, int] | None:
    """The directive line (start, end) whose indented body holds ``pos``, if any."""
    lines = _lines(text)
    if not lines:
        return None
    i = _line_of(lines, pos)
    a, b = lines[i]
    if not text[a:b].strip():
        return None
    depth = _indent(text[a:b])
    for j in range(i - 1, -1, -1):
        ja, jb = lines[j]
        line = text[ja:jb]
        if not line.strip():
            continue
        if _indent(line) < depth:
            return (ja, jb) if _HEAD_RE.match(line) and line.lstrip().startswith("..") else None
    return None


def section_head(text: str, pos: int) -> tuple[int, int] | None:
    """The plain-text heading in capitals (start, end) whose section holds ``pos``, if any.

    The section runs from an unindented heading line to the next unindented
    line: a manual page's "EXIT STATUS" names what its indented body states.
    """
    line_start = text.rfind("\n", 0, pos) + 1
    if text[line_start : line_start + 1].strip():
        return None  # an unindented line is not in a section's body
    while line_start > 0:
        at = text.rfind("\n", 0, line_start - 1) + 1
        line = text[at : line_start - 1]
        if line[:1].strip():
            return (at, at + len(line.rstrip())) if CAPS_HEAD_RE.fullmatch(line) else None
        line_start = at
    return None


def _block_after(text: str, lines: list[tuple[int, int]], i: int) -> tuple[int, int] | None:
    """The first content line and the end of the block that line ``i`` introduces, or None when nothing follows."""
    n = len(lines)
    j = i + 1
    if j < n and _UNDERLINE_RE.fullmatch(text, *lines[j]):
        j += 1
    lead = _indent(text[lines[i][0] : lines[i][1]])
    while j < n and (not text[lines[j][0] : lines[j][1]].strip() or _SKIP_RE.match(text, *lines[j])):
        j += 1
    if j >= n:
        return None
    first = text[lines[j][0] : lines[j][1]]
    if _FENCE_RE.match(first):
        for k in range(j + 1, n):
            if _FENCE_RE.match(text, *lines[k]):
                return j + 1, lines[k][1]
        # An unclosed fence runs to the passage's end; a fence on its last line opens nothing shown.
        return (j + 1, lines[-1][1]) if j + 1 < n else None
    base = _indent(first)
    item = _ITEM_RE.match(first) is not None
    end = lines[j][1]
    k = j + 1
    while k < n:
        line = text[lines[k][0] : lines[k][1]]
        if line.strip():
            deeper = _indent(line) > base or (_indent(line) == base and base > lead)
            if not (deeper or (item and _indent(line) == base and _ITEM_RE.match(line))):
                break
            end = lines[k][1]
        elif not item and base <= lead:
            break  # a prose paragraph ends at its blank line
        k += 1
    return j, end


def attached(text: str, start: int, end: int, budget: int) -> tuple[int, int]:
    """``[start, end)`` widened to what it introduces and what it defines, in whole lines, within ``budget``.

    A span ending in a colon (or in a paragraph ending in one), or a line
    naming what follows (a directive or heading), takes the block after it (the code, the list, the indented
    body) up to the last whole line that fits; a span that opens a
    directive's body takes the directive line before it when it fits.
    """
    lines = _lines(text)
    if not lines:
        return start, end
    first, last = _line_of(lines, start), _line_of(lines, end)
    # The rest of the sentence's paragraph, when the paragraph ends in a colon: "... will be
    # imported. ::" and its literal block belong to every sentence of that paragraph.
    para = last
    while para + 1 < len(lines) and text[lines[para + 1][0] : lines[para + 1][1]].strip():
        if is_head(text, lines, para + 1) or _ITEM_RE.match(text, *lines[para + 1]):
            break
        para += 1
    lead_in = text[lines[para][0] : lines[para][1]].rstrip().endswith(":")
    if lead_in and lines[para][1] - start <= budget:
        end, last = max(end, lines[para][1]), para
    tail = text[start:end].rstrip()
    if tail.endswith(":") or is_head(text, lines, last) or is_head(text, lines, first):
        block = _block_after(text, lines, last)
        if block is not None:
            content, after = block
            # Whole lines that fit, and at least the block's first content line (not only a
            # ".. code-block::" line): a code block or list is never cut mid-line.
            stop = end
            for a, b in lines[last + 1 :]:
                if b > after or b - start > budget:
                    break
                if text[a:b].strip():
                    stop = b
            if stop >= lines[content][1]:
                end = max(end, stop)
    owner = body_owner(text, start)
    if owner is not None:
        head = owner[0] + _indent(text[owner[0] : owner[1]])
        if end - head <= budget:
            start = head
    return start, end


def is_changelog(source: str, text: str = "") -> bool:
    """Whether a passage comes from release notes (by its source name, or a "Version 1.2" heading in it)."""
    return _CHANGELOG_NAME_RE.search(source) is not None or _VERSION_HEAD_RE.search(text) is not None


# Named HTML elements in Markdown prose (``<span class="...">New in 1.8</span>``): a rendered page
# shows none of these tags, a model copies them.  Inline ones vanish; block ones and line breaks
# leave a space.  ``<name>`` placeholders, autolinks and anything in code stay.
_INLINE_TAGS = frozenset((
    "a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins", "kbd",
    "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u", "var", "wbr",
))  # fmt: skip
_SPACED_TAGS = frozenset((
    "address", "article", "aside", "audio", "blockquote", "br", "caption", "center", "col", "colgroup", "dd",
    "details", "dir", "div", "dl", "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hr", "iframe", "img", "li", "main", "nav", "ol", "p", "picture", "pre", "section", "source",
    "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul", "video",
))  # fmt: skip
_HTML_TAG = re.compile(
    r"<!--.*?-->"
    r"|</?(?P<name>[A-Za-z][A-Za-z0-9]*)"
    r"(?:\s+[A-Za-z_:][\w:.-]*(?:\s*=\s*(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'=<>`]+))?)*\s*/?>"
)
_CODE_SPAN = re.compile(r"(`+).*?(?<!`)\1(?!`)")
_MD_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _untag(prose: str) -> str:
    def repl(m: re.Match[str]) -> str:
        name = (m.group("name") or "").lower()  # none: a comment
        return "" if not name or name in _INLINE_TAGS else " " if name in _SPACED_TAGS else m.group()

    return _HTML_TAG.sub(repl, prose) if "<" in prose else prose


def strip_inline_html(text: str) -> str:
    """``text`` without the HTML tags of its prose; fenced, indented and inline code and line breaks untouched."""
    if "<" not in text:
        return text
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        m = _MD_FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end() :].strip():
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        if "<" not in line or line.startswith(("    ", "\t")):
            continue  # an indented line may be code
        parts: list[str] = []
        at = 0
        for code in _CODE_SPAN.finditer(line):
            parts.append(_untag(line[at : code.start()]))
            parts.append(code.group())
            at = code.end()
        parts.append(_untag(line[at:]))
        lines[i] = "".join(parts)
    return "\n".join(lines)
