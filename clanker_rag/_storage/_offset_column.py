"""Offsets and other counts of a segment: saved as uint32 when they fit, int64 otherwise.

A list's, an order's or a term's offsets count items or bytes of one part
of one segment, so below 4 GiB (every index measured, by far: 18.4M postings
at 225k chunks) uint32 holds them and saves 4 bytes a term in each of
``postings.offsets``, ``orders.offsets`` and ``dictionary.offsets`` (7 MB at
225k chunks).  The item type is saved beside each (``offsets_type``:
``"I"`` or ``"q"``).  The sources' name, text and fingerprint offsets,
lengths and runs of chunks, the chunks' start and end and the text block
tables are saved the same way (6 MB less at 225k chunks), their types in
the body's ``types`` (``"sources.chars": "I"``...; the text blocks' in
``text_blocks.type``).  Readers take the items as ints through a typed view
either way.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any, Union

from .._exceptions import IndexFormatError
from ._store import Blob

__all__ = ["OFFSET_TYPES", "column_type", "int_part", "narrowest", "offset_part", "offset_type"]

Ints = Union["array[int]", "memoryview[int]"]
OFFSET_TYPES = ("I", "q")
_UINT32_END = 1 << 32


def narrowest(largest: int) -> str:
    """The item type of non-negative values up to ``largest``: uint32 when it fits, else int64."""
    return "I" if largest < _UINT32_END else "q"


def _part(blob: Blob, values: Ints, largest: Callable[[], int]) -> tuple[list[int], str]:
    """``values`` added to ``blob`` as :func:`narrowest` of ``largest()`` (not called when they
    are uint32 already, nor for none): the part's range and item type."""
    code = values.typecode if isinstance(values, array) else memoryview(values).format
    if code == "I" or narrowest(largest() if len(values) else 0) == "I":
        return blob.array(values if code == "I" else array("I", values)), "I"
    return blob.array(values if code == "q" else array("q", values)), "q"


def offset_part(blob: Blob, offsets: Ints) -> tuple[list[int], str]:
    """Add ascending ``offsets`` to ``blob`` as narrow as they fit: the part's range and item type."""
    return _part(blob, offsets, lambda: offsets[-1])  # ascending: the last is the largest


def int_part(blob: Blob, values: Ints) -> tuple[list[int], str]:
    """Add non-negative ``values`` (in any order) to ``blob`` as uint32 when they fit, else int64:
    the part's range and item type (the sources' offsets and lengths, the chunks' bounds)."""
    # A negative value (none is saved) takes int64, as one past uint32 does.
    return _part(blob, values, lambda: max(values) if min(values) >= 0 else _UINT32_END)


def column_type(types: Any, name: str, where: str) -> str:
    """The item type of column ``name`` in a segment body's ``types``."""
    return _checked(types.get(name) if isinstance(types, dict) else None, f"the type of {name}", where)


def offset_type(section: dict[str, Any], where: str) -> str:
    """The item type of a section's saved ``offsets``."""
    return _checked(section.get("offsets_type"), "offsets_type", where)


def _checked(code: Any, what: str, where: str) -> str:
    if code not in OFFSET_TYPES:
        raise IndexFormatError(f"{where}: {what} is {code!r}, not one of {', '.join(OFFSET_TYPES)}")
    return str(code)
