"""The reader registry: which reader takes which file, and the two entry points.

Adding a file format is one module holding its ``Reader`` (see
:class:`._base.Reader`) and one line in ``_REGISTERED`` below; bump
``READER_VERSION`` when a change alters what an existing reader produces, so
a re-ingest reads the files again instead of keeping their old chunks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from ._base import Document, Reader, Section, SkipFile, plain
from ._code import READERS as CODE_READERS
from ._decoding import binary_reason, bom_encoding, decode_bytes
from ._files import hash_file, open_file, read_bytes, stat_key
from ._markup import READERS as MARKUP_READERS
from ._office import READERS as OFFICE_READERS
from ._records import READERS as RECORD_READERS
from ._sections import release_counts

__all__ = [
    "DEFAULT_EXTENSIONS",
    "DEFAULT_FILENAMES",
    "READERS",
    "READER_VERSION",
    "STREAMED_FORMATS",
    "format_for",
    "parse_text",
    "read_document",
]

# Recorded with every ingested file; bumped when readers change what they
# produce, so re-ingest re-reads files.
READER_VERSION = 1

# Plain text: also the reader of any extension no other reader claims.
_TEXT = Reader("text", (".txt", ".log", ".tex", ".xml", ".properties", ".bat", ".cmd"), plain)

_REGISTERED: tuple[Reader, ...] = (
    _TEXT,
    *MARKUP_READERS,
    *CODE_READERS,
    *RECORD_READERS,
    *OFFICE_READERS,
)

# Reader name -> reader.
READERS: dict[str, Reader] = {reader.name: reader for reader in _REGISTERED}
# Extension -> reader.  The keys are the default allow-list.
_BY_EXTENSION: dict[str, Reader] = {ext: reader for reader in _REGISTERED for ext in reader.extensions}
if len(READERS) != len(_REGISTERED) or len(_BY_EXTENSION) != sum(len(r.extensions) for r in _REGISTERED):
    raise AssertionError("two readers share a name or an extension")  # a registration mistake, caught on import

DEFAULT_EXTENSIONS: frozenset[str] = frozenset(_BY_EXTENSION)
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
# Record formats get their own (larger) size cap.
STREAMED_FORMATS: frozenset[str] = frozenset(reader.name for reader in _REGISTERED if reader.streamed)


def format_for(name: str) -> str:
    """The reader name for a file name; plain text for anything unknown."""
    ext = os.path.splitext(name)[1].lower()
    return _BY_EXTENSION.get(ext, _TEXT).name


def parse_text(
    text: str, fmt: str, *, budget: int | None = None, path: str | None = None
) -> tuple[str, list[Section] | None]:
    """Structure a decoded text: returns ``(text_to_index, sections)``.

    ``budget`` is the chunk size in words; sections longer than it are split
    at paragraph boundaries (never inside a fenced code block) where possible.
    ``path`` (the source name) leads the labels of code sections.
    """
    try:
        return READERS.get(fmt, _TEXT).parse(text, budget, path)
    finally:
        release_counts()  # do not keep the last document alive


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
    reader = READERS.get(fmt, _TEXT)
    if reader.stream is not None:
        # Hash in one streamed pass, then render in a second: the raw bytes
        # and the rendering never sit in memory together.
        sha, st = hash_file(path, max_bytes=max_bytes, sniff=binary_reason)
        if known_hash is not None and known_hash(sha, st):
            return None
        with open_file(path) as fh:
            head = fh.read(8192)
        reason = binary_reason(head)
        if reason:
            raise SkipFile(reason)
        text, stream_sections, encoding = reader.stream(path, stat_key(st), head)
        return _finish(Document(text, stream_sections, encoding, fmt, sha, st.st_size, st.st_mtime_ns))

    data, st = read_bytes(path, max_bytes=max_bytes, sniff=None if reader.binary is not None else binary_reason)
    sha = hashlib.sha256(data).hexdigest()
    if known_hash is not None and known_hash(sha, st):
        return None
    if reader.binary is not None:
        text, binary_sections = reader.binary(data, max_bytes, budget)
        return _finish(Document(text, binary_sections, reader.name, fmt, sha, st.st_size, st.st_mtime_ns))
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
