"""Turning file bytes into text to index, plus the sections that structure it.

One module per family of formats, each offering its :class:`Reader` records:
:mod:`._markup` (Markdown, reStructuredText, HTML), :mod:`._code` (source
code by definitions), :mod:`._records` (JSON, JSON Lines, CSV, TSV) and
:mod:`._office` (Word, PDF).  :mod:`._registry` maps extensions to readers
and holds the entry points; :mod:`._decoding` turns bytes into text,
:mod:`._files` reads files under a size cap and :mod:`._sections` packs
spans to the chunk budget.
"""

from ._base import READER_ERRORS, Document, Reader, Section, SkipFile
from ._decoding import binary_reason, decode_bytes, has_private_key
from ._files import BENEATH, FoundPath, content_known, open_beneath, open_regular
from ._registry import (
    DEFAULT_EXTENSIONS,
    DEFAULT_FILENAMES,
    READER_VERSION,
    READERS,
    STREAMED_FORMATS,
    format_for,
    parse_text,
    read_document,
)

__all__ = [
    "BENEATH",
    "DEFAULT_EXTENSIONS",
    "DEFAULT_FILENAMES",
    "READERS",
    "READER_ERRORS",
    "READER_VERSION",
    "STREAMED_FORMATS",
    "Document",
    "FoundPath",
    "Reader",
    "Section",
    "SkipFile",
    "binary_reason",
    "content_known",
    "decode_bytes",
    "format_for",
    "has_private_key",
    "open_beneath",
    "open_regular",
    "parse_text",
    "read_document",
]
