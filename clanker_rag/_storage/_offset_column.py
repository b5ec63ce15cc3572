"""Offsets of a segment's lists and terms: saved as uint32 when they fit, int64 otherwise.

A list's, an order's or a term's offsets count items or bytes of one part
of one segment, so below 4 GiB (every index measured, by far: 18.4M postings
at 225k chunks) uint32 holds them and saves 4 bytes a term in each of
``postings.offsets``, ``orders.offsets`` and ``dictionary.offsets`` (7 MB at
225k chunks).  Format 7 records the item type beside each
(``offsets_type``: ``"I"`` or ``"q"``; int64 when absent, as formats 3-6
saved them).  Readers take the items as ints through a typed view either way.
"""

from __future__ import annotations

from array import array
from typing import Any, Union

from .._exceptions import IndexFormatError
from ._store import Blob

__all__ = ["OFFSET_TYPES", "offset_part", "offset_type"]

Ints = Union["array[int]", "memoryview[int]"]
OFFSET_TYPES = ("I", "q")
_UINT32_END = 1 << 32


def offset_part(blob: Blob, offsets: Ints) -> tuple[list[int], str]:
    """Add ascending ``offsets`` to ``blob`` as narrow as they fit: the part's range and item type."""
    code = offsets.typecode if isinstance(offsets, array) else memoryview(offsets).format
    if code == "I":
        return blob.array(offsets), "I"
    if not len(offsets) or offsets[-1] < _UINT32_END:  # ascending: the last is the largest
        return blob.array(array("I", offsets)), "I"
    return blob.array(offsets if code == "q" else array("q", offsets)), "q"


def offset_type(section: dict[str, Any], where: str) -> str:
    """The item type of a section's saved ``offsets``."""
    code = section.get("offsets_type", "q")
    if code not in OFFSET_TYPES:
        raise IndexFormatError(f"{where}: offsets_type is {code!r}, not one of {', '.join(OFFSET_TYPES)}")
    return str(code)
