"""One value per term id, of which only the values set are held: a load reads nothing per term.

A loaded index's per-term state (its lists as cut out, impacts, their
generation and largest impact) starts the same for every term, or as saved
(the largest impacts, read in place).  A list of millions of entries made at
load costs tens of milliseconds and tens of megabytes before any term is read;
:class:`TermColumn` holds the entries set since, over a default or a read-only
base, so a load + small add + commit pays for the terms it touches.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import Generic, TypeVar

from .._storage._codec import copy_array

__all__ = ["TermColumn", "floats"]

T = TypeVar("T")


class TermColumn(Generic[T]):
    """``n`` values by term id: those set, over ``base`` (read in place) or else ``default``.

    ``check(a, b)`` runs before base items ``a .. b - 1`` are read (a big segment's block
    checks: a damaged saved value fails clearly when first read, not at load).
    """

    __slots__ = ("base", "check", "default", "n", "values")

    def __init__(
        self, n: int, default: T, base: Sequence[T] | None = None, check: Callable[[int, int], None] | None = None
    ) -> None:
        if base is not None and len(base) != n:
            raise ValueError(f"a column of {n} terms over a base of {len(base)}")
        self.n = n
        self.default = default
        self.base = base
        self.check = check
        self.values: dict[int, T] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, tid: int) -> T:
        try:
            return self.values[tid]
        except KeyError:
            if not 0 <= tid < self.n:
                raise IndexError(f"term id {tid} out of range for {self.n} terms") from None
            base = self.base
            if base is None:
                return self.default
            if self.check is not None:
                self.check(tid, tid + 1)
            return base[tid]

    def __setitem__(self, tid: int, value: T) -> None:
        if not 0 <= tid < self.n:
            raise IndexError(f"term id {tid} out of range for {self.n} terms")
        self.values[tid] = value

    def __iter__(self) -> Iterator[T]:
        return map(self.__getitem__, range(self.n))

    def grow(self, value: T, count: int) -> None:
        """``count`` more terms holding ``value`` (held only where it is not the default)."""
        first, self.n = self.n, self.n + count
        if self.base is not None or value != self.default:
            self.values.update(zip(range(first, self.n), repeat(value)))

    def count_not(self, value: T) -> int:
        """How many terms hold something other than ``value``: O(values set) when the default is ``value``."""
        if self.base is None:
            unset = self.n - len(self.values)
            differ = sum(1 for v in self.values.values() if v != value)
            return differ + (unset if self.default != value else 0)
        return sum(1 for v in self if v != value)


def floats(column: TermColumn[float]) -> array[float]:
    """Every value of ``column`` as an ``array("f")`` (a save's largest impacts): the base, patched."""
    base = column.base
    if base is not None and column.check is not None:
        column.check(0, len(base))
    if isinstance(base, (array, memoryview)):
        out = copy_array("f", base)
    else:
        out = array("f", repeat(column.default, column.n) if base is None else base)
    for tid, value in column.values.items():
        out[tid] = value
    return out
