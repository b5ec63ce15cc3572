"""What every reader shares: the document it returns, the skip it raises, its registration.

A reader returns a :class:`Document`: the text that goes into the index and a
list of ``(start, end, label)`` spans covering it.  The label is the heading
path ("Guide > Install > Linux") or the code symbol ("KnowledgeBase.search")
the span sits under; the knowledge base indexes it with each chunk while the
returned text stays the exact slice ``text[start:end]``.

Readers never guess silently: anything that cannot be read raises
:class:`SkipFile` with a reason that ends up in the ingest report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["READER_ERRORS", "BinaryParse", "Document", "Reader", "Section", "SkipFile", "StreamRead", "TextParse"]

Section = tuple[int, int, "str | None"]

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


# (decoded text, chunk budget in words, source name) -> (text to index, sections)
TextParse = Callable[[str, "int | None", "str | None"], "tuple[str, list[Section] | None]"]
# (raw bytes, size cap, chunk budget) -> (text to index, sections)
BinaryParse = Callable[[bytes, int, "int | None"], "tuple[str, list[Section] | None]"]
# (path, (size, mtime_ns) when hashed, first bytes) -> (text to index, sections, encoding)
StreamRead = Callable[[str, "tuple[int, int]", bytes], "tuple[str, list[Section], str]"]


def plain(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    """Text without structure: indexed as it is, windowed by the chunker alone."""
    return text, None


@dataclass(frozen=True, slots=True)
class Reader:
    """One file format: its name, its extensions and how it turns into text and sections.

    ``name`` is stored in each source's metadata (``format``), so it never
    changes once released.  ``parse`` structures decoded text; every reader
    has one, because :func:`parse_text` takes any format.  ``streamed``
    record formats are read under the larger record size cap.  A reader that
    needs the raw bytes (a ZIP or PDF container) sets ``binary``; one that
    renders the file as a stream (CSV), so the bytes and the rendering never
    sit in memory together, sets ``stream``.
    """

    name: str
    extensions: tuple[str, ...]
    parse: TextParse = plain
    streamed: bool = False
    binary: BinaryParse | None = None
    stream: StreamRead | None = None
