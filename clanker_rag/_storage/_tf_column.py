"""The term-frequency column of a segment: saved as narrow as its values allow.

Chunks of a few hundred words rarely count a term 255 times, so a segment's
term frequencies are saved in the narrowest of uint8, uint16 and uint32 that
holds its largest (``postings.tf_type``: ``"B"``, ``"H"`` or ``"I"``).  A
column whose few large counts would widen every item is saved as uint8 anyway, with those counts apart
(``postings.tf_overflow``): each posting counted 255 times or more holds 255
in the column, and its position (int64, ascending) and count (uint32) are in
the overflow table.  At 225k chunks 60 of 18.4M postings count more than 255:
18.4 MB instead of 36.9.  A loaded column with an overflow table is a
:class:`TfColumn`, which patches the few counts into the slices it hands out
(a copy only for the lists that hold one); every other reader takes the
items through a typed view, so a narrow column costs nothing to read.  What
copies lists byte for byte into uint32 arrays widens them with
:func:`extend_ints`.
"""

from __future__ import annotations

import re
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from operator import le
from typing import Any, NamedTuple, Union, cast, overload

from .._exceptions import IndexFormatError
from ._store import Blob

__all__ = [
    "OVERFLOW",
    "OVERFLOW_SHARE",
    "TF_TYPES",
    "TfColumn",
    "Tfs",
    "extend_ints",
    "narrow_tfs",
    "split_overflow",
    "tf_part",
    "tf_type",
]

Ints = Union["array[int]", "memoryview[int]"]
Floats = Union["array[float]", "memoryview[float]"]
_LITTLE = sys.byteorder == "little"
TF_TYPES = ("B", "H", "I")
_UNSIGNED = ("B", "H", "I")
_WIDER = ("H", "I", "q", "Q")  # what a zero-extended unsigned value stays the same in
# A uint8 column's item for a count of 255 or more: the count is in the overflow table.
OVERFLOW = 255
# The overflow table is used when at most 1/OVERFLOW_SHARE of the postings count 255 or more
# (12 bytes each apart against 1 or 3 more bytes for every posting widened).
OVERFLOW_SHARE = 64
_ONES = bytes([0] + [1] * 255)  # bytes.translate: nonzero -> 1
_IS_MAX = bytes([0] * 255 + [1])  # bytes.translate: 255 -> 1


class TfColumn(Sequence[int]):
    """A uint8 column of term frequencies and its overflow table (see the module docstring).

    Slices are views of the column, or, for a range holding an overflowed
    posting, uint32 copies with the saved counts in place.  ``check`` (a big
    segment's block check of the column, by item) runs before a patched item
    is compared with its mark."""

    __slots__ = ("check", "narrow", "positions", "values", "where")

    def __init__(
        self, narrow: Ints, positions: Ints, values: Ints, where: str, check: Callable[[int, int], None] | None = None
    ) -> None:
        self.narrow: Ints = memoryview(narrow) if not isinstance(narrow, array) else narrow
        self.positions = positions
        self.values = values
        self.where = where
        self.check = check

    def __len__(self) -> int:
        return len(self.narrow)

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> Ints: ...
    def __getitem__(self, key: int | slice) -> int | Ints:
        narrow, positions = self.narrow, self.positions
        if not isinstance(key, slice):
            value = narrow[key]
            if value != OVERFLOW:
                return value
            at = key + len(narrow) if key < 0 else key
            i = bisect_left(positions, at)
            if i == len(positions) or positions[i] != at:
                raise IndexFormatError(f"{self.where}: a term frequency of 255 has no entry in its overflow table")
            return self.values[i]
        part = narrow[key]
        a, b, step = key.indices(len(narrow))
        i = bisect_left(positions, a)
        if i == len(positions) or positions[i] >= b:
            return part  # the usual case: no overflowed posting in the range
        if step != 1:
            raise ValueError("a term-frequency column is sliced with step 1")
        j = bisect_left(positions, b, i)
        out: array[int] = array("I")
        out.extend(part)
        for k in range(i, j):
            out[positions[k] - a] = self._value(k)
        return out

    def _value(self, k: int) -> int:
        at = self.positions[k]
        if self.check is not None:
            self.check(at, at + 1)
        if self.narrow[at] != OVERFLOW:
            raise IndexFormatError(f"{self.where}: the overflow table names a posting its column does not mark")
        return self.values[k]

    def __iter__(self) -> Iterator[int]:
        return iter(self.whole())

    def whole(self) -> array[int]:
        """Every count, uint32 (a pass over the column: for passes over every posting)."""
        out: array[int] = array("I")
        out.extend(self.narrow)
        for k in range(len(self.positions)):
            out[self.positions[k]] = self._value(k)
        return out

    def check_table(self) -> None:
        """The O(overflows) checks: positions ascending inside the column, counts of 255 or more."""
        positions, values = self.positions, self.values
        n = len(self.narrow)
        if (
            len(values) != len(positions)
            or (len(positions) and (positions[0] < 0 or positions[len(positions) - 1] >= n))
            or any(map(le, positions[1:], positions[:-1]))
            or (len(values) and min(values) < OVERFLOW)
        ):
            raise IndexFormatError(f"{self.where}: the term-frequency overflow table is inconsistent")


Tfs = Union["array[int]", "memoryview[int]", TfColumn]


def extend_ints(out: array[Any], values: Ints | Floats) -> None:
    """Append ``values`` to ``out``: one memcpy when their items are as wide, else one
    C-level pass widening each (term frequencies saved narrower, see :func:`narrow_tfs`)."""
    view = memoryview(values)
    width, wide = view.itemsize, out.itemsize
    if width == wide:
        out.frombytes(view.cast("B"))
    elif _LITTLE and width < wide and view.format in _UNSIGNED and out.typecode in _WIDER and len(view) > 64:
        # Zero-extended by one strided copy of whole items into zeroed bytes (the low end of each
        # wider item), not an int per item: uint32 bounds into int64 columns (1.7 ms at 225k
        # chunks against 12 ms), uint8 counts into uint32 lists.
        out_bytes = bytearray(wide * len(view))
        with memoryview(out_bytes).cast(cast(Any, view.format)) as items:
            items[0 :: wide // width] = view
        out.frombytes(out_bytes)
    else:
        out.extend(view)


def _high_bytes(raw: memoryview, lanes: tuple[int, ...]) -> bool:
    """Whether any little-endian uint32 item of ``raw`` (its bytes) has a byte of ``lanes`` not zero:
    ``(1, 2, 3)``, an item of 256 or more; ``(2, 3)``, one of 65536 or more (C-level scans, no item loop)."""
    return any(raw[i::4].tobytes().strip(b"\0") for i in lanes)


def narrow_tfs(tfs: Ints) -> Ints:
    """``tfs`` as uint8, uint16 or uint32 items, the narrowest that holds them all."""
    view = memoryview(tfs)
    if view.format in TF_TYPES[:2]:
        return tfs
    raw = view.cast("B")
    if _LITTLE and view.itemsize == 4 and not _high_bytes(raw, (1, 2, 3)):
        # Every high byte zero: the low bytes are the uint8 values (three C-level scans, no item loop).
        return array("B", raw[0::4].tobytes())
    if _LITTLE and view.itemsize == 4 and not _high_bytes(raw, (2, 3)):
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


class Overflow(NamedTuple):
    """A column split by :func:`split_overflow`: uint8 items, and the counts of 255 or more apart."""

    narrow: array[int]
    positions: array[int]
    values: array[int]


def split_overflow(tfs: Ints) -> Overflow | None:
    """``tfs`` (uint16 or uint32, as :func:`narrow_tfs` gives them) as uint8 items with the
    counts of 255 or more apart, or None when more than 1/``OVERFLOW_SHARE`` of them are.

    The marks are found by C-level passes over the bytes (a byte-wise OR of the
    high bytes, done as one big-integer OR), so the Python steps are one per overflow."""
    view = memoryview(tfs)
    width = view.itemsize
    if not _LITTLE or width == 1:
        return None
    raw = view.cast("B")
    n = len(view)
    low = raw[0::width].tobytes()
    mask = int.from_bytes(low.translate(_IS_MAX), "little")
    for i in range(1, width):
        mask |= int.from_bytes(raw[i::width].tobytes().translate(_ONES), "little")
    marks = mask.to_bytes(n, "little")
    if marks.count(1) * OVERFLOW_SHARE > n:
        return None
    positions: array[int] = array("q", (m.start() for m in re.finditer(b"\x01", marks)))
    narrow: array[int] = array("B", low)
    values: array[int] = array("I")
    for p in positions:
        values.append(view[p])
        narrow[p] = OVERFLOW
    return Overflow(narrow, positions, values)


def tf_part(blob: Blob, tfs: Tfs) -> dict[str, Any]:
    """The body keys of a segment's term frequencies, added to ``blob`` narrowed."""
    if isinstance(tfs, TfColumn):  # a loaded column copied whole: its parts as they are
        return _overflow_part(
            blob, Overflow(_array(tfs.narrow, "B"), _array(tfs.positions, "q"), _array(tfs.values, "I"))
        )
    view = memoryview(tfs)
    if _LITTLE and view.itemsize == 4 and view.format not in TF_TYPES[:2]:
        raw = view.cast("B")
        if not _high_bytes(raw, (1, 2, 3)):
            return {"tfs": blob.array(array("B", raw[0::4].tobytes())), "tf_type": "B"}
        # Split straight from the 4-byte items: the marks and values split_overflow finds in the
        # uint16 items narrow_tfs would make first (a count's marks depend on its value alone).
        split = split_overflow(tfs)
        if split is not None:
            return _overflow_part(blob, split)
        narrow = narrow_tfs(tfs)
    else:
        narrow = narrow_tfs(tfs)
        split = split_overflow(narrow)
        if split is not None:
            return _overflow_part(blob, split)
    code = narrow.typecode if isinstance(narrow, array) else narrow.format
    return {"tfs": blob.array(narrow), "tf_type": code}


def _array(values: Ints, code: str) -> Any:
    return values if (values.typecode if isinstance(values, array) else values.format) == code else array(code, values)


def _overflow_part(blob: Blob, split: Overflow) -> dict[str, Any]:
    return {
        "tfs": blob.array(split.narrow),
        "tf_type": "B",
        "tf_overflow": {"positions": blob.array(split.positions, "q"), "values": blob.array(split.values, "I")},
    }


def tf_type(postings: dict[str, Any], where: str) -> str:
    """The item type of a segment's saved term frequencies."""
    code = postings.get("tf_type")
    if code not in TF_TYPES:
        raise IndexFormatError(f"{where}: postings.tf_type is {code!r}, not one of {', '.join(TF_TYPES)}")
    if "tf_overflow" in postings and code != "B":
        raise IndexFormatError(f"{where}: postings.tf_overflow is saved beside a {code!r} column, not a uint8 one")
    return str(code)
