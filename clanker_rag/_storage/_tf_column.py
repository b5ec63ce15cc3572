"""The term-frequency column of a segment: saved as narrow as its values allow.

Chunks of a few hundred words never count a term 256 times, so format 5
saves a segment's term frequencies in the narrowest of uint8, uint16 and
uint32 that holds its largest (``postings.tf_type``; uint32 before, and
when the key is absent).  Every reader takes the items as ints through a
typed view, so a narrow column costs nothing to read; what copies lists
byte for byte into uint32 arrays widens them with :func:`extend_ints`.  The
stdlib benchmark corpus (whole files as chunks, up to 4,606 terms; 19 of its
2.4M postings count more than 255) takes uint16: 4.9 MB instead of 9.8.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any, Union

from .._exceptions import IndexFormatError
from ._store import Blob

__all__ = ["TF_TYPES", "extend_ints", "narrow_tfs", "tf_part", "tf_type"]

Ints = Union["array[int]", "memoryview[int]"]
Floats = Union["array[float]", "memoryview[float]"]
_LITTLE = sys.byteorder == "little"
TF_TYPES = ("B", "H", "I")


def extend_ints(out: array[Any], values: Ints | Floats) -> None:
    """Append ``values`` to ``out``: one memcpy when their items are as wide, else one
    C-level pass widening each (term frequencies saved narrower, see :func:`narrow_tfs`)."""
    view = memoryview(values)
    if view.itemsize == out.itemsize:
        out.frombytes(view.cast("B"))
    else:
        out.extend(view)


def narrow_tfs(tfs: Ints) -> Ints:
    """``tfs`` as uint8, uint16 or uint32 items, the narrowest that holds them all."""
    view = memoryview(tfs)
    if view.format in TF_TYPES[:2]:
        return tfs
    raw = view.cast("B")
    if _LITTLE and view.itemsize == 4 and not any(raw[i::4].tobytes().strip(b"\0") for i in (1, 2, 3)):
        # Every high byte zero: the low bytes are the uint8 values (three C-level scans, no item loop).
        return array("B", raw[0::4].tobytes())
    if _LITTLE and view.itemsize == 4 and not any(raw[i::4].tobytes().strip(b"\0") for i in (2, 3)):
        # The two high bytes zero: the uint16 values are the two low bytes of each (slices, no item loop).
        low = bytearray(2 * len(view))
        low[0::2] = raw[0::4]
        low[1::2] = raw[1::4]
        narrow: array[int] = array("H")
        narrow.frombytes(low)
        return narrow
    for code in TF_TYPES[1:]:
        try:
            return array(code, tfs)
        except OverflowError:
            continue
    raise IndexFormatError(f"a term frequency does not fit in 32 bits (largest {max(tfs)})")


def tf_part(blob: Blob, tfs: Ints) -> dict[str, Any]:
    """The body keys of a segment's term frequencies, added to ``blob`` narrowed."""
    narrow = narrow_tfs(tfs)
    code = narrow.typecode if isinstance(narrow, array) else narrow.format
    return {"tfs": blob.array(narrow), "tf_type": code}


def tf_type(postings: dict[str, Any], where: str) -> str:
    """The item type of a segment's saved term frequencies."""
    code = postings.get("tf_type", "I")
    if code not in TF_TYPES:
        raise IndexFormatError(f"{where}: postings.tf_type is {code!r}, not one of {', '.join(TF_TYPES)}")
    return str(code)
