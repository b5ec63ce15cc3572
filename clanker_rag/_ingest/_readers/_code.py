"""Source-code readers: one section per definition, labelled ``path > Class.method``.

Each language is a line pattern that opens a definition.  The comments and
decorators right above a definition belong to it; a class too big for one
chunk is split at its methods (Python) or at paragraphs; small neighbouring
definitions are merged back into chunk-sized sections.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from operator import itemgetter

from ._base import Reader, Section, TextParse
from ._sections import fits, pack, spans, word_counts

__all__ = ["READERS"]

_COMMENT_LEAD = re.compile(r"[ \t]*(?:#|//|/\*|\*|@|--|;|\"\"\"|''')")

_CODE_DEF_SOURCES: dict[str, tuple[str, int]] = {
    "python": (r"(?:async[ \t]+)?(?:def|class)[ \t]+(?P<name>\w+)", re.MULTILINE),
    "js": (
        r"(?:export[ \t]+)?(?:default[ \t]+)?(?:declare[ \t]+)?(?:abstract[ \t]+)?(?:async[ \t]+)?"
        r"(?:function\*?|class|interface|type|enum|namespace|(?:const|let|var)(?=[ \t]+\w+[ \t]*="
        r"[ \t]*(?:async[ \t]*)?(?:function|\(|\w+[ \t]*=>)))[ \t]+(?P<name>[\w$]+)",
        re.MULTILINE,
    ),
    "go": (r"(?:func[ \t]+(?:\([^)\n]*\)[ \t]*)?|type[ \t]+)(?P<name>\w+)", re.MULTILINE),
    "rust": (
        r"(?:pub(?:\([\w: ]+\))?[ \t]+)?(?:async[ \t]+)?(?:unsafe[ \t]+)?(?:const[ \t]+)?"
        r"(?:fn|struct|enum|trait|mod|union|macro_rules!|impl(?:<[^>\n]*>)?(?:[ \t]+[\w:<>, ]+[ \t]+for)?)"
        r"[ \t]+(?P<name>\w+)",
        re.MULTILINE,
    ),
    "jvm": (
        r"[ \t]{0,4}(?:@\w+[ \t]+)*(?:(?:public|private|protected|internal|static|final|abstract|open|"
        r"override|sealed|data|async|virtual|partial|suspend|inline|synchronized|fileprivate)[ \t]+)*"
        r"(?:(?:class|interface|enum|record|object|struct|fun|func|protocol|extension|trait|def)[ \t]+"
        r"(?P<name>\w+)|[\w<>\[\],.?]+[ \t]+(?P<method>\w+)[ \t]*\([^;\n]*$)",
        re.MULTILINE,
    ),
    "c": (
        r"(?:(?:struct|class|enum|union|namespace|typedef[ \t]+struct)[ \t]+(?P<name>\w+)[^;\n]*$"
        r"|(?!(?:if|for|while|switch|return|else|do)\b)[A-Za-z_][\w \t\*&:<>,]*?[ \t\*&]"
        r"(?P<func>[\w:~]+)[ \t]*\([^;\n]*$)",
        re.MULTILINE,
    ),
    "ruby": (r"[ \t]{0,2}(?:def|class|module)[ \t]+(?P<name>[\w.:?!]+)", re.MULTILINE),
    "php": (
        r"[ \t]{0,4}(?:(?:public|private|protected|static|abstract|final)[ \t]+)*"
        r"(?:function|class|interface|trait|enum)[ \t]+&?(?P<name>\w+)",
        re.MULTILINE,
    ),
    "shell": (r"(?:function[ \t]+(?P<name>[\w-]+)|(?P<func>[\w-]+)[ \t]*\(\)[ \t]*\{?)", re.MULTILINE),
    "powershell": (r"(?:function|filter)[ \t]+(?P<name>[\w-]+)", re.MULTILINE | re.IGNORECASE),
    "sql": (
        r"(?:CREATE|ALTER)[ \t]+(?:OR[ \t]+REPLACE[ \t]+)?(?:TEMP(?:ORARY)?[ \t]+)?(?:UNIQUE[ \t]+)?"
        r"(?:TABLE|VIEW|FUNCTION|PROCEDURE|INDEX|TRIGGER|TYPE|SCHEMA)[ \t]+(?:IF[ \t]+NOT[ \t]+EXISTS[ \t]+)?"
        r"(?P<name>[\w.\"`\[\]]+)",
        re.MULTILINE | re.IGNORECASE,
    ),
    "css": (r"(?P<name>[^\s{}/@][^{}\n;]*?)[ \t]*\{", re.MULTILINE),
    "ini": (r"[ \t]*\[\[?(?P<name>[^\]\n]+)\]\]?[ \t]*(?:[#;].*)?$", re.MULTILINE),
    "yaml": (r"(?P<name>[A-Za-z_][\w.-]*|\"[^\"\n]+\"|'[^'\n]+')[ \t]*:", re.MULTILINE),
}
_PY_DEF = re.compile(r"def[ \t]+(?P<name>\w+)")


def _line_patterns(body: str, flags: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    # A leading literal "\n" lets the regex engine jump from line to line;
    # "^" with MULTILINE would try every position.  The second pattern
    # matches a definition on the very first line.
    return re.compile("\n" + body, flags), re.compile(body, flags)


_CODE_DEFS = {lang: _line_patterns(body, flags) for lang, (body, flags) in _CODE_DEF_SOURCES.items()}


def _line_matches(pats: tuple[re.Pattern[str], re.Pattern[str]], text: str) -> Iterator[tuple[int, re.Match[str]]]:
    """``(line start, match)`` of every line that opens a definition."""
    first = pats[1].match(text)
    if first is not None:
        yield 0, first
    for m in pats[0].finditer(text):
        yield m.start() + 1, m


def _py_methods(text: str, start: int, end: int) -> list[tuple[int, str, str]]:
    """``(line start, indent, name)`` of indented ``def`` lines in ``text[start:end]``."""
    out = []
    for m in _PY_DEF.finditer(text, start, end):
        at = m.start()
        line_start = text.rfind("\n", start, at) + 1
        prefix = text[line_start:at]
        rest = prefix.strip(" \t")
        if not rest:
            indent = prefix  # nearly every method: only indentation before "def"
        elif rest == "async":
            indent = prefix[: len(prefix) - len(prefix.lstrip(" \t"))]
        else:
            continue
        if indent:
            out.append((line_start, indent, m["name"]))
    return out


def _symbol(m: re.Match[str]) -> str:
    names = m.re.groupindex
    for group in ("name", "method", "func"):
        value = m[group] if group in names else None
        if value:
            return value.strip().strip("\"'`[]")
    return m.group(0).strip()


def _attach_comments(text: str, pos: int, floor: int) -> int:
    """Move a definition's start up over the comments and decorators right above it."""
    while pos > floor:
        prev_start = text.rfind("\n", floor, pos - 1) + 1
        if prev_start < floor:
            break
        line = text[prev_start:pos]
        if not line.strip() or not _COMMENT_LEAD.match(line):
            break
        pos = prev_start
    return pos


def _code_sections(text: str, lang: str, budget: int | None, path: str | None) -> list[Section]:
    pattern = _CODE_DEFS[lang]
    starts: list[tuple[int, str | None]] = [(0, None)]
    floor = 0
    for line_start, m in _line_matches(pattern, text):
        pos = _attach_comments(text, line_start, floor)
        if pos <= starts[-1][0]:
            pos = line_start
            if pos <= starts[-1][0]:
                starts[-1] = (pos, _symbol(m))
                floor = m.end()
                continue
        starts.append((pos, _symbol(m)))
        floor = m.end()
    parts = spans(starts, len(text))
    out: list[Section] = []
    for s, e, label in parts:
        if fits(text, s, e, budget):
            out.append((s, e, label))
            continue
        # A big class: split at its methods, labelled Class.method.
        inner: list[tuple[int, str | None]] = [(s, label)]
        if lang == "python" and label:
            indent = None
            for line_start, head, name in _py_methods(text, s, e):
                # Only the class's own methods, not functions nested in them.
                if indent is None:
                    indent = head
                elif head != indent:
                    continue
                pos = _attach_comments(text, line_start, inner[-1][0] + 1)
                if pos > inner[-1][0]:
                    inner.append((pos, f"{label}.{name}"))
        for ps, pe, plabel in spans(inner, e):
            if ps < s:
                continue
            out.extend(pack(text, ps, pe, plabel, budget, code=True))
    merged = _merge_small(text, out, budget)
    if path:
        # The path is part of every label so a file is found by its name,
        # read like a heading path: "pkg/mod.py > Class.method".
        merged = [(s, e, f"{path} > {label}" if label else path) for s, e, label in merged]
    return merged


def _merge_small(text: str, sections: list[Section], budget: int | None) -> list[Section]:
    """Join neighbouring small definitions into one chunk-sized section."""
    if budget is None or len(sections) < 2:
        return sections
    out: list[Section] = []
    sizes = word_counts(text).counts(list(map(itemgetter(0), sections)), list(map(itemgetter(1), sections)))
    cur_s, cur_e, labels = sections[0][0], sections[0][1], [sections[0][2]]
    cur_tokens = sizes[0]
    for (s, e, label), n in zip(sections[1:], sizes[1:], strict=True):
        if cur_tokens + n <= budget:
            cur_e = e
            cur_tokens += n
            labels.append(label)
            continue
        out.append((cur_s, cur_e, _join_labels(labels)))
        cur_s, cur_e, labels, cur_tokens = s, e, [label], n
    out.append((cur_s, cur_e, _join_labels(labels)))
    return out


def _join_labels(labels: list[str | None]) -> str | None:
    if len(labels) == 1:
        return labels[0] or None
    seen = [label for label in dict.fromkeys(labels) if label]
    if len(seen) < 2:
        return seen[0] if seen else None
    # "Widget, Widget.polish" says no more than "Widget.polish": drop every
    # label that is another's part before a dot.  A set of those parts
    # avoids comparing every pair of a long label list.
    parents: set[str] = set()
    for other in seen:
        dot = other.find(".")
        while dot >= 0:
            parents.add(other[:dot])
            dot = other.find(".", dot + 1)
    kept = [x for x in seen if x not in parents]
    return ", ".join(kept) if kept else None


def _parser(lang: str) -> TextParse:
    def parse(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
        return text, _code_sections(text, lang, budget, path)

    parse.__name__ = parse.__qualname__ = f"parse_{lang}"
    return parse


# Language -> its extensions; the language's definition pattern is in _CODE_DEF_SOURCES.
_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "python": (".py", ".pyi"),
    "js": (".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx"),
    "go": (".go",),
    "rust": (".rs",),
    "jvm": (".java", ".kt", ".kts", ".scala", ".swift", ".cs", ".gradle"),
    "c": (".c", ".h", ".cpp", ".hpp", ".cc", ".cxx", ".hh"),
    "ruby": (".rb",),
    "php": (".php",),
    "shell": (".sh", ".bash", ".zsh"),
    "powershell": (".ps1",),
    "sql": (".sql",),
    "css": (".css", ".scss", ".less"),
    "ini": (".toml", ".ini", ".cfg", ".conf"),
    "yaml": (".yaml", ".yml"),
}

READERS = tuple(Reader(lang, exts, _parser(lang)) for lang, exts in _EXTENSIONS.items())
