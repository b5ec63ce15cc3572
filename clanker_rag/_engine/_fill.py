"""Arrays filled from Python numbers by the array module's cheaper conversions.

``array("i", ...)`` and ``array("f", ...)`` convert every item by parsing a
format string (``PyArg_Parse``): 15-30 ns an item, which a bulk build pays
on each of its passes over tens of millions of postings.  Unsigned ints
convert without one (``array("I")``: about 3x faster), and :mod:`struct`
packs floats without one (about 2x faster, slices of a list included).  The
bytes are the same as the signed or ``array("f")`` fill gives, so the arrays
are filled that way and retyped with a copy of their bytes.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice

__all__ = ["float32s", "int32s", "retyped_int32s"]

# Floats packed per struct call: a list this long lives at a time.
_SLICE = 1 << 16
# The byte of each 4-byte unsigned int that holds its top bit.
_TOP = 3 if sys.byteorder == "little" else 0


@lru_cache(maxsize=64)
def _floats(n: int) -> struct.Struct:
    return struct.Struct(f"{n}f")  # native: the C float array("f") holds


def float32s(values: Iterable[float]) -> array[float]:
    """``array("f", values)``: the same values (each double rounded to the
    nearest C float, as the array module does), packed by :mod:`struct`."""
    out = array("f")
    it = iter(values)
    while part := list(islice(it, _SLICE)):
        try:
            out.frombytes(_floats(len(part)).pack(*part))
        except (OverflowError, struct.error):
            # A value struct refuses where the array module rounds (past float32's range on
            # some Python versions) or that is no float: the array module decides.
            out.extend(array("f", part))
    return out


def retyped_int32s(unsigned: array[int]) -> array[int]:
    """An ``array("I")`` of values below 2**31 as the ``array("i")`` of the same values
    (``OverflowError`` if one is larger, as filling ``array("i")`` with it raises)."""
    if unsigned.itemsize != 4:  # (C ints of another size: fill as signed)
        return array("i", unsigned)
    raw = memoryview(unsigned).cast("B")
    if not raw[_TOP::4].tobytes().isascii():  # a top bit set: 2**31 or more
        raise OverflowError("signed integer is greater than maximum")
    out = array("i")
    out.frombytes(raw)
    return out


def int32s(values: Iterable[int]) -> array[int]:
    """``array("i", values)`` for values in ``[0, 2**31)``, filled as unsigned
    (``OverflowError`` for any other, as ``array("I")`` or the check raises)."""
    return retyped_int32s(array("I", values))
