"""Turning file bytes into text to index, plus the sections that structure it.

A reader returns a :class:`Document`: the text that goes into the index and a
list of ``(start, end, label)`` spans covering it.  The label is the heading
path ("Guide > Install > Linux") or the code symbol ("KnowledgeBase.search")
the span sits under; the knowledge base indexes it with each chunk while the
returned text stays the exact slice ``text[start:end]``.

Readers never guess silently: anything that cannot be read raises
:class:`SkipFile` with a reason that ends up in the ingest report.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import os
import re
import zipfile
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from itertools import accumulate, repeat
from operator import add, itemgetter
from typing import IO, Any
from xml.etree import ElementTree

__all__ = [
    "DEFAULT_EXTENSIONS",
    "DEFAULT_FILENAMES",
    "READER_ERRORS",
    "STREAMED_FORMATS",
    "Document",
    "SkipFile",
    "binary_reason",
    "content_known",
    "decode_bytes",
    "format_for",
    "has_private_key",
    "parse_text",
    "read_document",
]

Section = tuple[int, int, "str | None"]

# Extension -> reader name.  The keys are the default allow-list.
_FORMATS: dict[str, str] = {
    ".txt": "text",
    ".log": "text",
    ".tex": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".py": "python",
    ".pyi": "python",
    ".js": "js",
    ".mjs": "js",
    ".cjs": "js",
    ".jsx": "js",
    ".ts": "js",
    ".tsx": "js",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".xml": "text",
    ".toml": "ini",
    ".ini": "ini",
    ".cfg": "ini",
    ".conf": "ini",
    ".properties": "text",
    ".c": "c",
    ".h": "c",
    ".cpp": "c",
    ".hpp": "c",
    ".cc": "c",
    ".cxx": "c",
    ".hh": "c",
    ".go": "go",
    ".rs": "rust",
    ".java": "jvm",
    ".kt": "jvm",
    ".kts": "jvm",
    ".scala": "jvm",
    ".swift": "jvm",
    ".cs": "jvm",
    ".gradle": "jvm",
    ".rb": "ruby",
    ".php": "php",
    ".css": "css",
    ".scss": "css",
    ".less": "css",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".sql": "sql",
    ".bat": "text",
    ".cmd": "text",
    ".ps1": "powershell",
    ".csv": "csv",
    ".tsv": "tsv",
    ".docx": "docx",
    ".pdf": "pdf",
}
DEFAULT_EXTENSIONS: frozenset[str] = frozenset(_FORMATS)
# Extension-less files worth indexing by default.
DEFAULT_FILENAMES: frozenset[str] = frozenset(
    {
        "Makefile",
        "GNUmakefile",
        "Dockerfile",
        "Containerfile",
        "Jenkinsfile",
        "Vagrantfile",
        "Gemfile",
        "Rakefile",
        "Procfile",
        "README",
        "LICENSE",
        "COPYING",
        "NOTICE",
        "AUTHORS",
        "CHANGELOG",
        "CONTRIBUTING",
        "INSTALL",
        "TODO",
    }
)
# Record formats are read as a stream, so they get their own (larger) size cap.
STREAMED_FORMATS: frozenset[str] = frozenset({"csv", "tsv", "jsonl", "json"})

# What a reader may raise on a file it cannot handle (deep nesting, odd
# encodings, I/O trouble): the file is skipped with the error as its reason.
READER_ERRORS: tuple[type[Exception], ...] = (RecursionError, MemoryError, ValueError, LookupError, OSError)


class SkipFile(Exception):
    """A file that will not be indexed; ``reason`` goes into the report.

    ``transient`` marks failures of the moment (unreadable, vanished, changed
    while read): the file's previously indexed chunks are kept for those.
    """

    def __init__(self, reason: str, *, transient: bool = False) -> None:
        super().__init__(reason)
        self.reason: str = reason
        self.transient: bool = transient


@dataclass(slots=True)
class Document:
    """What a reader produced: the text to index and its structure."""

    text: str
    sections: list[Section] | None
    encoding: str
    format: str
    sha256: str = ""
    size: int = 0
    mtime_ns: int = 0


def format_for(name: str) -> str:
    """The reader name for a file name; plain text for anything unknown."""
    ext = os.path.splitext(name)[1].lower()
    return _FORMATS.get(ext, "text")


# ---------------------------------------------------------------- decoding

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with UTF-16's.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def bom_encoding(head: bytes) -> str | None:
    """The encoding announced by a byte-order mark, if any."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def decode_bytes(data: bytes) -> tuple[str, str]:
    """Decode with BOM, then strict UTF-8, then cp1252, then latin-1.

    Returns ``(text, encoding)``.  latin-1 maps every byte, so this never fails.
    """
    bom = bom_encoding(data[:4])
    if bom is not None:
        try:
            return data.decode(bom), bom
        except UnicodeDecodeError:
            # A BOM followed by garbage: keep what can be read, say so.
            return data.decode(bom, errors="replace"), bom + "+replace"
    for enc in ("utf-8", "cp1252"):
        try:
            return data.decode(enc), enc
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1"), "latin-1"


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"PK\x05\x06", "ZIP archive"),
    (b"\x7fELF", "ELF executable"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh91AY&SY", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"(\xb5/\xfd", "zstd archive"),
    (b"7z\xbc\xaf\x27\x1c", "7z archive"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O binary"),
    (b"\xcf\xfa\xed\xfe", "Mach-O binary"),
    (b"\xce\xfa\xed\xfe", "Mach-O binary"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"),
    (b"OggS", "Ogg media"),
    (b"fLaC", "FLAC audio"),
    (b"ID3", "MP3 audio"),
    (b"RIFF", "RIFF media"),
    (b"II*\x00", "TIFF image"),
    (b"MM\x00*", "TIFF image"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2 (old Office) document"),
)
# Bytes that never appear in text: C0 controls other than \t \n \v \f \r \x1b.
_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 11, 12, 13, 27)) + b"\x7f"


def binary_reason(head: bytes, *, allow: str | None = None) -> str | None:
    """Why ``head`` (the first bytes of a file) looks binary, or None for text.

    ``allow`` names one magic description that is expected (a .docx is a ZIP).
    """
    if bom_encoding(head[:4]) is not None:
        return None  # UTF-16/32 text is full of NUL bytes
    for magic, what in _MAGIC:
        if head.startswith(magic) and what != allow:
            return f"binary file ({what})"
    sample = head[:8192]
    if b"\x00" in sample:
        return "binary file (contains NUL bytes)"
    if sample:
        controls = len(sample) - len(sample.translate(None, _CONTROL))
        if controls * 10 > len(sample):
            return "binary file (control characters)"
    return None


# A PEM/OpenSSH/PGP private key header, whatever the key type.
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PRIVATE_KEY_BYTES = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def has_private_key(text: str) -> bool:
    """True if ``text`` holds a private-key block."""
    return _PRIVATE_KEY.search(text) is not None


# ------------------------------------------------------------ sectioning

_WORD = re.compile(r"\w+")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)*")
# ASCII byte -> 1 for a word character (what \w matches), 0 otherwise.
_WORD_BYTES = bytes(1 if chr(b).isalnum() or b == 0x5F else 0 for b in range(128)) + bytes(128)
_WORD_START = b"\x02"
_WORD_INSIDE = b"\x01"


class _WordCounts:
    """Word counts of any span of one text, from work done once per text.

    Sectioning asks about many overlapping spans of the same text; counting
    each afresh made big files cost many passes over the same characters.

    Counts come from a mask with one byte per character: 2 where a word
    starts, 1 for the rest of a word, 0 between words.  The words in a span
    are then the 2s in it, plus one if it starts on a 1 (inside a word), and
    ``bytes.count`` finds those in C without making any word objects.
    """

    __slots__ = ("_mask", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        # "replace" turns each non-ASCII character into one b"?", so offsets
        # in the mask stay character offsets.
        raw = text.encode("ascii", "replace")
        words = raw.translate(_WORD_BYTES)
        if not text.isascii():
            # Even non-ASCII files are mostly ASCII: only the b"?" bytes need a
            # look, and the word regex itself says which are word characters.
            fixed = bytearray(words)
            q = raw.find(b"?")
            while q >= 0:
                if _WORD.match(text, q) is not None:
                    fixed[q] = 1
                q = raw.find(b"?", q + 1)
            words = bytes(fixed)
        # Bytewise "word here and not just before", on one big integer: read
        # little-endian, a left shift by 8 bits moves each byte one character
        # later, and no byte of the sum exceeds 2, so nothing carries over.
        bits = int.from_bytes(words, "little")
        starts = bits & ~(bits << 8)
        self._mask = (bits + starts).to_bytes(len(words), "little")

    def count(self, start: int, end: int) -> int:
        """``len(_WORD.findall(text, start, end))``: the words the span overlaps."""
        # Both terms are 0 for an empty or reversed span.
        return self._mask.count(_WORD_START, start, end) + self._mask.startswith(_WORD_INSIDE, start, end)

    def counts(self, starts: list[int], ends: list[int]) -> list[int]:
        """``[count(s, e) for s, e in zip(starts, ends)]``, looped in C.

        Each span is scanned whole, which is what a caller wants for spans
        that tile a stretch of text (its lines, its sections).
        """
        mask = self._mask
        return list(
            map(
                add,
                map(mask.count, repeat(_WORD_START), starts, ends),
                map(mask.startswith, repeat(_WORD_INSIDE), starts, ends),
            )
        )


_counts: _WordCounts | None = None


def _word_counts(text: str) -> _WordCounts:
    # One document is sectioned at a time; parse_text drops the counts after.
    global _counts
    counts = _counts
    if counts is None or counts.text is not text:
        counts = _counts = _WordCounts(text)
    return counts


def _tokens(text: str, start: int, end: int) -> int:
    """Words in ``text[start:end]``, counted like the chunker counts them (near enough)."""
    return _word_counts(text).count(start, end)


def _fits(text: str, start: int, end: int, budget: int | None) -> bool:
    if budget is None:
        return True
    if end - start <= 2 * budget:
        return True
    counts = _word_counts(text)
    # A span has at least the words of its head, and code and prose run well
    # over one word per 8 characters: counting a head that long settles most
    # big spans (a whole class) without scanning all of them.
    head = start + 8 * budget
    if head < end and counts.count(start, head) > budget:
        return False
    return counts.count(start, end) <= budget


def _outside(positions: list[int], atomic: Sequence[tuple[int, int]]) -> list[int]:
    """The ``positions`` not strictly inside any ``atomic`` span."""
    if not atomic:
        return positions
    spans = sorted(atomic)
    lows = [a for a, _ in spans]
    # reach[k]: the furthest end among the first k + 1 spans, so a position
    # is inside one of the spans that open before it iff it is below that.
    reach = list(accumulate((b for _, b in spans), max))
    out = []
    for pos in positions:
        k = bisect_left(lows, pos)
        if k == 0 or reach[k - 1] <= pos:
            out.append(pos)
    return out


def _paragraph_starts(
    text: str, start: int, end: int, atomic: Sequence[tuple[int, int]], *, code: bool = False
) -> list[int]:
    """Offsets in ``(start, end)`` where a paragraph starts, never inside ``atomic`` spans."""
    cuts = []
    for m in _BLANK_LINES.finditer(text, start, end):
        pos = m.end()
        if pos >= end:
            break
        # An indented paragraph continues the one above (literal blocks,
        # list continuations, directive bodies): keep them together.
        if not code and text[pos : pos + 1] in (" ", "\t"):
            continue
        cuts.append(pos)
    return _outside(cuts, atomic)


def _pack(
    text: str,
    start: int,
    end: int,
    label: str | None,
    budget: int | None,
    atomic: Sequence[tuple[int, int]] = (),
    *,
    code: bool = False,
) -> list[Section]:
    """Split ``[start, end)`` at paragraph starts so each piece fits ``budget`` tokens.

    A block between two paragraph starts that is too big on its own (a long
    list, a function without blank lines) is cut at line starts instead,
    except inside ``atomic`` spans (fenced code), which the chunker windows if
    it must.  ``code`` lets indented paragraphs start a piece.
    """
    if _fits(text, start, end, budget):
        return [(start, end, label)]
    assert budget is not None
    counts = _word_counts(text)
    cuts = _paragraph_starts(text, start, end, atomic, code=code)
    lows, highs = [start, *cuts], [*cuts, end]
    # Each paragraph with its word count, then each line of the ones too big.
    bounds: list[int] = []
    sizes: list[int] = []
    for prev, cut, n in zip(lows, highs, counts.counts(lows, highs), strict=True):
        if cut - prev > 2 * budget and n > budget:
            lines = _outside(_line_starts(text, prev, cut), atomic)
            if lines:
                sizes.extend(counts.counts([prev, *lines], [*lines, cut]))
                bounds.extend(lines)
                bounds.append(cut)
                continue
        sizes.append(n)
        bounds.append(cut)
    out: list[Section] = []
    piece_start = start
    prev = start
    total = 0
    for cut, n in zip(bounds, sizes, strict=True):
        if total and total + n > budget:
            out.append((piece_start, prev, label))
            piece_start = prev
            total = 0
        total += n
        prev = cut
    out.append((piece_start, end, label))
    return out


def _line_starts(text: str, start: int, end: int) -> list[int]:
    """Offsets strictly inside ``(start, end)`` that begin a line."""
    # Line lengths from str.split and a running sum keep the loop in C; a
    # function without blank lines can run to thousands of lines.
    lines = text[start:end].split("\n")
    starts = list(accumulate(map(add, map(len, lines[:-1]), repeat(1)), initial=start))
    if starts[-1] >= end:
        starts.pop()
    return starts[1:]


def _spans(starts: list[tuple[int, str | None]], length: int) -> list[tuple[int, int, str | None]]:
    """Turn sorted ``(offset, label)`` boundaries into contiguous spans over the text."""
    if not starts or starts[0][0] != 0:
        starts = [(0, None), *starts]
    ends = list(map(itemgetter(0), starts))
    ends[:-1] = ends[1:]
    ends[-1] = length
    return [(pos, end, label) for (pos, label), end in zip(starts, ends, strict=True) if end > pos]


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
    return _heading_sections(text, heads, fences, budget)


def _heading_sections(
    text: str, heads: list[tuple[int, int, str]], atomic: list[tuple[int, int]], budget: int | None
) -> list[Section]:
    stack: list[tuple[int, str]] = []
    starts: list[tuple[int, str | None]] = []
    for pos, level, title in heads:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        starts.append((pos, " > ".join(t for _, t in stack if t) or None))
    out: list[Section] = []
    for s, e, label in _spans(starts, len(text)):
        out.extend(_pack(text, s, e, label, budget, atomic))
    return out


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
    return _heading_sections(text, heads, [], budget)


# Code -------------------------------------------------------------------

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
    spans = _spans(starts, len(text))
    out: list[Section] = []
    for s, e, label in spans:
        if _fits(text, s, e, budget):
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
        for ps, pe, plabel in _spans(inner, e):
            if ps < s:
                continue
            out.extend(_pack(text, ps, pe, plabel, budget, code=True))
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
    sizes = _word_counts(text).counts(list(map(itemgetter(0), sections)), list(map(itemgetter(1), sections)))
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
    return out, _heading_sections(out, heads, [], budget)


# JSON -------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NAME_KEYS = ("name", "title", "id", "key", "path")


def _record_label(obj: Any) -> str | None:
    # Only a record's own name makes a label: a bare position ("[41]",
    # "row 41") would add one index term per record for nothing.
    if isinstance(obj, dict):
        for key in _NAME_KEYS:
            value = obj.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return f"{key}={value}"[:200]
    return None


def _json_sections(text: str) -> list[Section] | None:
    """One section per array element or top-level key, spans in the original text."""
    pos = _WS.match(text).end()  # type: ignore[union-attr]
    if pos >= len(text) or text[pos] not in "[{":
        return None
    is_array = text[pos] == "["
    pos += 1
    starts: list[tuple[int, str | None]] = []
    index = 0
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if pos < len(text) and text[pos] in "]}":
            break
        item_start = pos
        if is_array:
            value, pos = _DECODER.raw_decode(text, pos)
            label = _record_label(value)
        else:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos : pos + 1] != ":":
                raise ValueError("expected ':'")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            _, pos = _DECODER.raw_decode(text, pos)
            label = str(key)[:200]
        starts.append((item_start, label))
        index += 1
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos : pos + 1] == ",":
            pos += 1
            continue
        if text[pos : pos + 1] in ("]", "}"):
            break
        raise ValueError("expected ',' or closing bracket")
    if not starts:
        return None
    # The opening bracket belongs to the first record, not a chunk of its own.
    starts[0] = (0, starts[0][1])
    return _spans(starts, len(text))


def _jsonl_sections(text: str) -> list[Section]:
    starts: list[tuple[int, str | None]] = []
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        if not text[pos:end].isspace():
            starts.append((pos, None))
        pos = end
    if starts:
        starts[0] = (0, None)
    return _spans(starts, len(text))


# Entry points -------------------------------------------------------------


def parse_text(
    text: str, fmt: str, *, budget: int | None = None, path: str | None = None
) -> tuple[str, list[Section] | None]:
    """Structure a decoded text: returns ``(text_to_index, sections)``.

    ``budget`` is the chunk size in words; sections longer than it are split
    at paragraph boundaries (never inside a fenced code block) where possible.
    ``path`` (the source name) leads the labels of code sections.
    """
    global _counts
    try:
        return _parse(text, fmt, budget, path)
    finally:
        _counts = None  # do not keep the last document alive


def _parse(text: str, fmt: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    if fmt == "markdown":
        return text, _md_sections(text, budget)
    if fmt == "rst":
        return text, _rst_sections(text, budget)
    if fmt in _CODE_DEFS:
        return text, _code_sections(text, fmt, budget, path)
    if fmt == "html":
        return _html(text, budget)
    if fmt == "json":
        try:
            return text, _json_sections(text)
        except ValueError:
            return text, None  # not valid JSON: index it as plain text
    if fmt == "jsonl":
        return text, _jsonl_sections(text)
    if fmt in ("csv", "tsv"):
        return _render_csv(io.StringIO(text, newline=""), fmt)
    return text, None


def _render_csv(stream: IO[str], fmt: str) -> tuple[str, list[Section]]:
    """Render each CSV row as ``header: value`` lines; one section per row."""
    if fmt == "tsv":
        delimiter = "\t"
    else:
        head = stream.read(65536)
        stream.seek(0)
        try:
            delimiter = csv.Sniffer().sniff(head, delimiters=",;|\t").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(stream, delimiter=delimiter)
    pieces: list[str] = []
    sections: list[Section] = []
    pos = 0
    try:
        header = next(reader, None)
        if header is None:
            return "", []
        header = [h.strip() or f"column {i + 1}" for i, h in enumerate(header)]
        width = len(header)
        for row in reader:
            if len(row) > width:
                header.extend(f"column {i + 1}" for i in range(width, len(row)))
                width = len(row)
            lines = [f"{name}: {value}\n" for name, value in zip(header, row, strict=False) if value.strip()]
            if not lines:
                continue
            lines.append("\n")
            record = "".join(lines)
            pieces.append(record)
            sections.append((pos, pos + len(record), None))
            pos += len(record)
    except csv.Error as exc:
        raise SkipFile(f"malformed {fmt.upper()}: {exc}") from exc
    return "".join(pieces), sections


# File reading -------------------------------------------------------------

_BLOCK = 1 << 20


def _stat_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def hash_file(path: str, *, max_bytes: int) -> tuple[str, os.stat_result]:
    """SHA-256 of a file read as a stream, with the stat taken when it was opened."""
    digest = hashlib.sha256()
    with _open(path) as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise SkipFile(f"too large ({st.st_size} bytes > cap of {max_bytes})")
        while block := fh.read(_BLOCK):
            digest.update(block)
        if _stat_key(os.fstat(fh.fileno())) != _stat_key(st):
            raise SkipFile("file changed while being read", transient=True)
    return digest.hexdigest(), st


def _open(path: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except FileNotFoundError as exc:
        raise SkipFile("vanished before it could be read", transient=True) from exc
    except IsADirectoryError as exc:
        raise SkipFile("is a directory") from exc
    except OSError as exc:
        raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc


def read_bytes(path: str, *, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """Read a whole file, checking the size cap first and that it did not change meanwhile."""
    with _open(path) as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise SkipFile(f"too large ({st.st_size} bytes > cap of {max_bytes})")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise SkipFile(f"unreadable: {exc.strerror or exc}", transient=True) from exc
        if len(data) > max_bytes:
            raise SkipFile(f"too large (grew past the cap of {max_bytes} bytes while read)", transient=True)
        if _stat_key(os.fstat(fh.fileno())) != _stat_key(st) or len(data) != st.st_size:
            raise SkipFile("file changed while being read", transient=True)
    return data, st


def _pdf(data: bytes) -> tuple[str, list[Section]]:
    try:
        import pypdf  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise SkipFile("PDF needs the optional extra: pip install 'clanker-rag[pdf]'") from exc
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise SkipFile("encrypted PDF")
        pieces: list[str] = []
        sections: list[Section] = []
        pos = 0
        for number, page in enumerate(reader.pages, start=1):
            page_text = (page.extract_text() or "").strip()
            if not page_text:
                continue
            page_text += "\n\n"
            pieces.append(page_text)
            sections.append((pos, pos + len(page_text), f"page {number}"))
            pos += len(page_text)
    except SkipFile:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files
        raise SkipFile(f"unreadable PDF: {exc}") from exc
    return "".join(pieces), sections


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_STYLE = re.compile(r"heading\s*(\d)", re.IGNORECASE)


def _docx(data: bytes, max_bytes: int, budget: int | None) -> tuple[str, list[Section] | None]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        info = zf.getinfo("word/document.xml")
    except (zipfile.BadZipFile, KeyError) as exc:
        raise SkipFile("not a readable Word document (no word/document.xml)") from exc
    # Guard against zip bombs: the XML is read as a stream, but cap it anyway.
    if info.file_size > 20 * max_bytes:
        raise SkipFile(f"Word document body too large ({info.file_size} bytes uncompressed)")
    pieces: list[str] = []
    heads: list[tuple[int, int, str]] = []
    pos = 0
    try:
        with zf.open(info) as fh:
            for _, elem in ElementTree.iterparse(fh, events=("end",)):
                if elem.tag != _W + "p":
                    continue
                parts: list[str] = []
                for node in elem.iter():
                    if node.tag == _W + "t" and node.text:
                        parts.append(node.text)
                    elif node.tag == _W + "tab":
                        parts.append("\t")
                    elif node.tag in (_W + "br", _W + "cr"):
                        parts.append("\n")
                para = "".join(parts).strip()
                level = _docx_heading_level(elem)
                elem.clear()
                if not para:
                    continue
                if level:
                    heads.append((pos, level, para))
                para += "\n\n"
                pieces.append(para)
                pos += len(para)
    except ElementTree.ParseError as exc:
        raise SkipFile(f"damaged Word document: {exc}") from exc
    text = "".join(pieces)
    return text, _heading_sections(text, heads, [], budget)


def _docx_heading_level(p: ElementTree.Element) -> int:
    ppr = p.find(_W + "pPr")
    if ppr is None:
        return 0
    outline = ppr.find(_W + "outlineLvl")
    if outline is not None:
        try:
            return int(outline.get(_W + "val", "9")) + 1
        except ValueError:
            return 0
    style = ppr.find(_W + "pStyle")
    if style is None:
        return 0
    name = style.get(_W + "val", "")
    if name.lower() == "title":
        return 1
    m = _HEADING_STYLE.search(name)
    return int(m.group(1)) if m else 0


def _read_streamed_csv(path: str, fmt: str, st_key: tuple[int, int], head: bytes) -> tuple[str, list[Section], str]:
    bom = bom_encoding(head)
    encodings = [bom] if bom else ["utf-8", "cp1252", "latin-1"]
    for enc in encodings:
        try:
            with _open(path) as raw:
                stream = io.TextIOWrapper(raw, encoding=enc, newline="")
                text, sections = _render_csv(stream, fmt)
                if _stat_key(os.fstat(raw.fileno())) != st_key:
                    raise SkipFile("file changed while being read", transient=True)
                return text, sections, enc
        except UnicodeDecodeError:
            continue
    raise SkipFile("undecodable text")  # latin-1 cannot fail; kept for the type checker


def content_known(sha: str | None) -> Callable[[str, os.stat_result], bool] | None:
    """A ``known_hash`` for :func:`read_document`: is the content the one that hashed to ``sha``?

    None (no check) when nothing of the file is indexed yet.
    """
    if sha is None:
        return None
    return lambda digest, _st: digest == sha


def read_document(
    path: str,
    fmt: str,
    *,
    max_bytes: int,
    budget: int | None = None,
    known_hash: Callable[[str, os.stat_result], bool] | None = None,
    name: str | None = None,
) -> Document | None:
    """Read and structure one file.

    ``known_hash(sha256, stat)`` is asked before any parsing; when it says the
    content is already indexed, ``None`` is returned (the file is unchanged).
    Raises :class:`SkipFile` for anything that should not be indexed.
    """
    if fmt in ("csv", "tsv"):
        # Hash in one streamed pass, then render rows in a second: the raw
        # bytes and the rendering never sit in memory together.
        sha, st = hash_file(path, max_bytes=max_bytes)
        if known_hash is not None and known_hash(sha, st):
            return None
        with _open(path) as fh:
            head = fh.read(8192)
        reason = binary_reason(head)
        if reason:
            raise SkipFile(reason)
        text, csv_sections, encoding = _read_streamed_csv(path, fmt, _stat_key(st), head)
        return _finish(Document(text, csv_sections, encoding, fmt, sha, st.st_size, st.st_mtime_ns))

    data, st = read_bytes(path, max_bytes=max_bytes)
    sha = hashlib.sha256(data).hexdigest()
    if known_hash is not None and known_hash(sha, st):
        return None
    if fmt == "docx":
        if not data.startswith(b"PK\x03\x04"):
            raise SkipFile("not a readable Word document (not a ZIP file)")
        text, docx_sections = _docx(data, max_bytes, budget)
        return _finish(Document(text, docx_sections, "docx", fmt, sha, st.st_size, st.st_mtime_ns))
    if fmt == "pdf":
        if not data.startswith(b"%PDF-"):
            raise SkipFile("not a PDF file (no %PDF- header)")
        text, pdf_sections = _pdf(data)
        return _finish(Document(text, pdf_sections, "pdf", fmt, sha, st.st_size, st.st_mtime_ns))
    if reason := binary_reason(data[:8192]):
        raise SkipFile(reason)
    if bom_encoding(data[:4]) is None and b"\x00" in data:
        raise SkipFile("binary file (contains NUL bytes)")
    decoded, encoding = decode_bytes(data)
    del data
    text, sections = parse_text(decoded, fmt, budget=budget, path=name)
    return _finish(Document(text, sections, encoding, fmt, sha, st.st_size, st.st_mtime_ns))


def _finish(doc: Document) -> Document:
    if not doc.text or doc.text.isspace():
        raise SkipFile("empty or whitespace-only")
    return doc
