"""Impact orders as saved: uint16 positions for lists of at most 65,536 postings, int32 beyond.

A list's order holds positions in that list, so a list of at most
``SHORT_LIMIT`` postings numbers them in 16 bits: their orders are saved
as uint16 (``orders.short``, term by term) and the few longer ones apart as
int32 (``orders.wide``, with their term ids in ``orders.wide_terms``).  At
225k chunks 19 lists are longer, holding 1.75M of the 15.8M positions: the
orders take 35 MB instead of 63.  ``orders.offsets`` still numbers every
term's order as if they were laid end to end, so a term's place in its part
is its offset less the wide orders before it (:class:`WideOrders`).  Reading
a narrow position through a typed view costs what reading a wide one does.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from itertools import accumulate, compress, pairwise, repeat
from operator import gt, sub
from typing import Any, NamedTuple, Union

from .._exceptions import IndexFormatError
from ._offset_column import offset_part, offset_type
from ._store import Blob

__all__ = ["SHORT_LIMIT", "SavedOrders", "WideOrders", "order_parts", "read_orders", "read_wide", "widened"]

Ints = Union["array[int]", "memoryview[int]"]
# Positions 0..65535: the orders of lists of at most this many postings fit uint16.
SHORT_LIMIT = 65_536
_LITTLE = sys.byteorder == "little"
# Checks items a .. b - 1 of a part against its segment's block checksums.
Check = Callable[[int, int], None]


class WideOrders(NamedTuple):
    """The orders saved apart as int32: of ``terms`` (ascending), laid end to end in ``positions``;
    term ``terms[i]``'s starts at ``starts[i]`` (``starts`` has one more item: the total)."""

    terms: list[int]
    starts: list[int]
    positions: Ints
    check: Check | None = None  # a big segment's block checks of ``positions``, by item

    def locate(self, tid: int, offset: int) -> tuple[bool, int]:
        """``(wide, start)``: whether term ``tid``'s order is here, and where it starts in its
        part (``offset``: where it would start were every order laid end to end)."""
        i = bisect_left(self.terms, tid)
        if i < len(self.terms) and self.terms[i] == tid:
            return True, self.starts[i]
        return False, offset - self.starts[i]


def _lengths(offsets: Ints) -> Iterable[int]:
    return map(sub, offsets[1:], offsets[:-1])


def _narrowed(positions: Ints) -> bytes:
    """The uint16 bytes (little-endian) of int32 ``positions``, each below 65,536."""
    view = memoryview(positions)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        out = array("H", view)
        out.byteswap()
        return out.tobytes()
    halves = view.cast("B").cast("H")
    # Little-endian: each item's low half, then its high half, which must be zero.
    if view.itemsize != 4 or halves[1::2].tobytes().strip(b"\0"):
        raise IndexFormatError("an impact order holds a position past its list's end")
    return halves[0::2].tobytes()


def order_parts(blob: Blob, positions: Ints, offsets: Ints) -> dict[str, Any]:
    """The body keys of the orders (``positions`` laid end to end at ``offsets``, int32), added to
    ``blob``: the short lists' orders as uint16, the rest apart as int32."""
    view = memoryview(positions)
    wide = list(compress(range(len(offsets) - 1), map(gt, _lengths(offsets), repeat(SHORT_LIMIT))))
    short: list[bytes] = []
    long = array("i")
    at = 0
    for tid in wide:
        a, b = offsets[tid], offsets[tid + 1]
        short.append(_narrowed(view[at:a]))
        long.frombytes(view[a:b].cast("B"))
        at = b
    short.append(_narrowed(view[at:]))
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        long.byteswap()
    ref, code = offset_part(blob, offsets)
    return {
        "offsets": ref,
        "offsets_type": code,
        "short": blob.add(b"".join(short)),
        "wide_terms": blob.array(array("i", wide), "i"),
        "wide": blob.add(long.tobytes()),
    }


def read_wide(terms: Ints, positions: Ints, offsets: Ints, where: str, check: Check | None = None) -> WideOrders:
    """The wide orders of a loaded segment, checked against ``offsets`` (O(wide orders))."""
    ids = list(terms)
    n_terms = len(offsets) - 1
    if any(b <= a for a, b in pairwise(ids)) or any(not 0 <= t < n_terms for t in ids[:1] + ids[-1:]):
        raise IndexFormatError(f"{where}: orders.wide_terms are not ascending term ids")
    lengths = [offsets[t + 1] - offsets[t] for t in ids]
    if any(n <= SHORT_LIMIT for n in lengths):
        raise IndexFormatError(f"{where}: orders.wide_terms names a list short enough for uint16")
    starts = list(accumulate(lengths, initial=0))
    if starts[-1] != len(positions):
        raise IndexFormatError(f"{where}: orders.wide has the wrong length")
    return WideOrders(ids, starts, positions, check)


class SavedOrders(NamedTuple):
    """A loaded segment's orders: offsets as if laid end to end, the short orders (uint16) and their
    range in the data file, and the wide orders."""

    offsets: Ints
    positions: Any  # a typed view: memoryview[int] (``itemsize`` says how wide)
    ref: list[int]
    wide: WideOrders


def read_orders(
    orders: dict[str, Any],
    view: Callable[[Any, str, str], Any],
    where: str,
    part: Callable[[list[int], int], Check] | None = None,
) -> SavedOrders:
    """The orders a segment body names (``view(ref, typecode, name)`` maps a part; ``part(ref,
    itemsize)`` gives a big segment's block checks of one)."""
    offsets = view(orders["offsets"], offset_type(orders, where), "orders.offsets")
    terms = view(orders["wide_terms"], "i", "orders.wide_terms")
    if part is not None:  # the offsets are checked as read (the wide terms' here), not whole at load
        part(orders["wide_terms"], 4)(0, len(terms))
        check_offsets = part(orders["offsets"], offsets.itemsize)
        for t in terms:
            check_offsets(t, t + 2)
    wide = read_wide(
        terms,
        view(orders["wide"], "i", "orders.wide"),
        offsets,
        where,
        None if part is None else part(orders["wide"], 4),
    )
    return SavedOrders(offsets, view(orders["short"], "H", "orders.short"), orders["short"], wide)


def widened(short: Ints, offsets: Ints, wide: WideOrders) -> array[int]:
    """Every order as int32, laid end to end at ``offsets`` (what a save takes)."""
    out = array("i", bytes(4 * offsets[len(offsets) - 1]))
    raw = memoryview(out).cast("B")
    halves = raw.cast("H")
    view, long = memoryview(short), memoryview(wide.positions)
    at = done = 0  # where the next short run starts in ``short`` and in ``out``
    for tid, start, end in zip(wide.terms, wide.starts, wide.starts[1:]):
        a, b = offsets[tid], offsets[tid + 1]
        if _LITTLE:
            halves[2 * done : 2 * a : 2] = view[at : at + a - done]
        else:  # pragma: no cover - big-endian hosts
            out[done:a] = array("i", view[at : at + a - done])
        at += a - done
        raw[4 * a : 4 * b] = long[start:end].cast("B")
        done = b
    n = len(out)
    if _LITTLE:
        halves[2 * done : 2 * n : 2] = view[at : at + n - done]
    else:  # pragma: no cover - big-endian hosts
        out[done:n] = array("i", view[at : at + n - done])
    return out
