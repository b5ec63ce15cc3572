"""Markup readers: Markdown, reStructuredText and HTML, sectioned by their headings."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ._base import Reader, Section
from ._sections import heading_sections

__all__ = ["READERS"]

# Markdown ---------------------------------------------------------------

_MD_LINE = re.compile(
    r"^(?P<fence> {0,3}(?:`{3,}|~{3,}))"
    r"|^ {0,3}(?P<atx>#{1,6})(?:[ \t]+(?P<title>[^\n]*?))?(?:[ \t]+#+)?[ \t]*$"
    r"|^ {0,3}(?P<setext>=+|-+)[ \t]*$",
    re.MULTILINE,
)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)


def _md_sections(text: str, budget: int | None) -> list[Section]:
    heads: list[tuple[int, int, str]] = []  # (line start, level, title)
    fences: list[tuple[int, int]] = []
    fence_open: tuple[int, str, int] | None = None  # (start, char, length)
    fm = _FRONT_MATTER.match(text)
    skip_until = fm.end() if fm else 0
    for m in _MD_LINE.finditer(text, skip_until):
        line_start = m.start()
        if m.group("fence"):
            mark = m.group("fence").strip()
            if fence_open is None:
                fence_open = (line_start, mark[0], len(mark))
            elif mark[0] == fence_open[1] and len(mark) >= fence_open[2]:
                line_end = text.find("\n", m.end())
                fences.append((fence_open[0], len(text) if line_end < 0 else line_end + 1))
                fence_open = None
            continue
        if fence_open is not None:
            continue
        if m.group("atx"):
            title = (m.group("title") or "").strip()
            heads.append((line_start, len(m.group("atx")), title))
        else:
            # Setext underline: the previous line is the heading text, unless
            # it is blank (then "---" is a thematic break).
            if line_start == 0:
                continue
            prev_start = text.rfind("\n", 0, line_start - 1) + 1
            prev = text[prev_start : line_start - 1].strip()
            if not prev or prev_start < skip_until or prev.startswith(("#", "-", "*", ">", "|")):
                continue
            if heads and heads[-1][0] == prev_start:
                continue
            level = 1 if m.group("setext").startswith("=") else 2
            heads.append((prev_start, level, prev))
    if fence_open is not None:
        fences.append((fence_open[0], len(text)))
    return heading_sections(text, heads, fences, budget)


# reStructuredText -------------------------------------------------------

_RST_ADORN = re.compile(r"^([=\-`:'\"~^_*+#<>.!$%&(),/;?@\[\\\]{|}])\1+[ \t]*$", re.MULTILINE)


def _rst_sections(text: str, budget: int | None) -> list[Section]:
    styles: list[tuple[str, bool]] = []
    heads: list[tuple[int, int, str]] = []
    used_overlines: set[int] = set()
    for m in _RST_ADORN.finditer(text):
        if m.start() in used_overlines or m.start() == 0:
            continue
        char = m.group(1)
        under_len = len(m.group(0).rstrip())
        title_end = m.start() - 1
        title_start = text.rfind("\n", 0, title_end) + 1
        title = text[title_start:title_end].strip()
        if not title or len(title) > under_len + 2 or _RST_ADORN.fullmatch(text[title_start:title_end]):
            continue
        if text[title_start : title_start + 1] in (" ", "\t") and not title:
            continue
        start = title_start
        overline = False
        if title_start > 0:
            over_end = title_start - 1
            over_start = text.rfind("\n", 0, over_end) + 1
            over = text[over_start:over_end].rstrip()
            if over and set(over) == {char} and len(over) == under_len:
                overline = True
                start = over_start
        # A "title" line preceded by text is a paragraph's last line, not a heading.
        if not overline and title_start > 0:
            before_end = title_start - 1
            before_start = text.rfind("\n", 0, before_end) + 1
            if text[before_start:before_end].strip():
                continue
        style = (char, overline)
        if style not in styles:
            styles.append(style)
        end_of_under = text.find("\n", m.start())
        if end_of_under >= 0:
            used_overlines.add(end_of_under + 1)
        heads.append((start, styles.index(style) + 1, title))
    return heading_sections(text, heads, [], budget)


# HTML -------------------------------------------------------------------

_HTML_BLOCK = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tr",
        "ul",
        "title",
        "caption",
        "th",
        "td",
    }
)
_HTML_HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_SPACES = re.compile(r"\s+")


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.length = 0
        self.hidden = 0
        self.in_title = False
        self.pre = 0
        self.heads: list[tuple[int, int, str]] = []
        self._heading: tuple[int, int, list[str]] | None = None

    def _emit(self, s: str) -> None:
        if s:
            self.parts.append(s)
            self.length += len(s)

    def _newline(self, n: int = 1) -> None:
        tail = "".join(self.parts[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if self.parts and have < n:
            self._emit("\n" * (n - have))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
            return
        if tag in _HTML_HIDDEN:
            self.hidden += 1
            return
        if tag == "pre":
            self.pre += 1
        if tag in _HTML_BLOCK:
            self._newline(2 if tag in ("p", "pre", "table", "ul", "ol") or tag[0] == "h" else 1)
        if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._heading = (self.length, int(tag[1]), [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            self._newline(2)
            return
        if tag in _HTML_HIDDEN:
            self.hidden = max(0, self.hidden - 1)
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if self._heading is not None and len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            pos, level, words = self._heading
            self.heads.append((pos, level, " ".join("".join(words).split())))
            self._heading = None
        if tag in _HTML_BLOCK:
            self._newline(2 if tag in ("p", "pre", "table", "ul", "ol") or tag[0] == "h" else 1)

    def handle_data(self, data: str) -> None:
        if self.hidden and not self.in_title:
            return
        if not self.pre:
            data = _SPACES.sub(" ", data)
            if self.parts and self.parts[-1].endswith(("\n", " ")):
                data = data.lstrip(" ")
            elif not self.parts:
                data = data.lstrip()
        if self._heading is not None:
            self._heading[2].append(data)
        self._emit(data)


def _html(text: str, budget: int | None) -> tuple[str, list[Section]]:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    out = "".join(parser.parts).strip("\n") + "\n"
    lead = len("".join(parser.parts)) - len("".join(parser.parts).lstrip("\n"))
    heads = [(max(0, pos - lead), level, title) for pos, level, title in parser.heads if pos - lead < len(out)]
    return out, heading_sections(out, heads, [], budget)


def _parse_markdown(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return text, _md_sections(text, budget)


def _parse_rst(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return text, _rst_sections(text, budget)


def _parse_html(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return _html(text, budget)


READERS = (
    Reader("markdown", (".md", ".markdown", ".mdx"), _parse_markdown),
    Reader("rst", (".rst",), _parse_rst),
    Reader("html", (".html", ".htm", ".xhtml"), _parse_html),
)
