"""A segment's sources as stored: names, texts and fingerprints read in place, each checked when first read.

A big index has hundreds of thousands of sources and a commit reads a few of
them (the name an add or a removal looks up, the run of chunks a removal
drops): checking every offset of every column at load was most of what a
load + commit cost, and touching those columns paged in megabytes of the data
file.  So a lazily checked segment's offsets (:class:`Offsets`) are checked a
pair at a time as they are read (their blocks' CRC-32s, and that the pair is
in order inside its part), and whole (once) before anything reads them all;
an eagerly checked one's are checked whole at load.  Either way a damaged or
inconsistent column is an ``IndexFormatError`` before any of it is used.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Sequence
from itertools import compress, count, pairwise
from operator import gt
from typing import TYPE_CHECKING, Union

from .._exceptions import IndexFormatError
from . import _store
from ._segments import BlockCheck, PartCheck
from ._texts import BlockTexts

if TYPE_CHECKING:
    from array import array

__all__ = ["NameIndex", "Offsets", "Pread", "SourceNames", "SourceStore", "compressed_reader", "strings"]

Ints = Union["array[int]", "memoryview[int]"]


class Offsets:
    """``n + 1`` offsets into a part of ``size`` bytes (``values[i]..values[i + 1]`` is item ``i``).

    At construction only what costs O(1) is checked: their number and both
    ends.  ``pair(i)`` checks item ``i``'s two offsets before it returns them
    (their blocks, with ``check``, and ``0 <= a <= b <= size``: every pair in
    order is the same as the whole column in order), and :meth:`check_all`
    checks them all, once; ``eager`` does that at once.
    """

    __slots__ = ("_check", "_whole", "size", "values", "where")

    def __init__(
        self, values: Ints, n: int, size: int, where: str, check: PartCheck | None = None, *, eager: bool = True
    ) -> None:
        self.values = values
        self.size = size
        self.where = where
        self._check = check
        self._whole = False
        if check is not None and len(values):
            check(0, 1)
            check(len(values) - 1, len(values))
        if len(values) != n + 1 or values[0] != 0 or values[n] != size:
            raise IndexFormatError(f"{where} do not match their part of the data file")
        if eager:
            self.check_all()

    def __len__(self) -> int:
        return len(self.values) - 1

    def pair(self, i: int) -> tuple[int, int]:
        values = self.values
        if self._whole:
            return values[i], values[i + 1]
        if self._check is not None:
            self._check(i, i + 2)
        a, b = values[i], values[i + 1]
        if not 0 <= a <= b <= self.size:
            raise IndexFormatError(f"{self.where} do not match their part of the data file")
        return a, b

    def check_all(self) -> None:
        if self._whole:
            return
        values = self.values
        if self._check is not None:
            self._check(0, len(values))
        if any(map(gt, values[:-1], values[1:])):
            raise IndexFormatError(f"{self.where} do not match their part of the data file")
        self._whole = True


class Pread:
    """Reads a range of the data file with ``os.pread`` instead of through the mapping.

    A text shown in a hit is a few hundred bytes, but touching it through the
    mapping makes the kernel map the pages around it too (fault-around, 64 KB
    by default): over many hits that is most of the resident set.  The file
    is kept open while this object lives.
    """

    __slots__ = ("__weakref__", "_file", "base")

    def __init__(self, opened: _store.DataFile, base: int) -> None:
        # The descriptor the load mapped the file with (not the path opened
        # again): a save may have replaced and deleted the path since, and
        # this one, like the mapping, keeps reading the file loaded.
        self._file = opened
        self.base = base

    def __call__(self, offset: int, length: int) -> bytes:
        return self.absolute(self.base + offset, length)

    def absolute(self, offset: int, length: int) -> bytes:
        copy = self._file.copy
        data = os.pread(self._file.fd, length, offset) if copy is None else bytes(copy[offset : offset + length])
        if len(data) != length:
            raise IndexFormatError(f"{self._file.path}: truncated since it was loaded")
        return data


class SourceStore:
    """Source texts and fingerprints still in the data file, decoded on demand
    (UTF-8, back to back, with ``n + 1`` offsets each)."""

    __slots__ = (
        "_blocks", "_chars_check", "_fp_offsets", "_fps", "_offsets", "_pread", "_texts", "_unpack", "chars", "where",
    )  # fmt: skip

    def __init__(
        self,
        texts: memoryview,
        offsets: Offsets,
        fps: memoryview,
        fp_offsets: Offsets,
        chars: Ints,
        where: str,
        pread: Pread | None = None,
        blocks: tuple[BlockCheck, int, int] | None = None,
        unpack: BlockTexts | None = None,
        chars_check: PartCheck | None = None,
    ) -> None:
        # (block checks, where the texts and the fingerprints start in the file)
        self._blocks = blocks
        self._unpack = unpack  # compressed texts: ranges decompressed from their blocks
        self._texts = texts
        self._offsets = offsets
        self._fps = fps
        self._fp_offsets = fp_offsets
        self.chars = chars
        self._chars_check = chars_check  # a lazily checked segment's, until check_all
        self.where = where
        self._pread = pread

    def __len__(self) -> int:
        return len(self._offsets)

    def char_count(self, i: int) -> int:
        """Source ``i``'s saved length in characters (its block checked first)."""
        if self._chars_check is not None:
            self._chars_check(i, i + 1)
        return self.chars[i]

    def check_all(self) -> None:
        """Check every offset and length now (before something reads them all)."""
        self._offsets.check_all()
        self._fp_offsets.check_all()
        self.check_chars()

    def check_chars(self) -> None:
        """Check every saved length now (before something reads them all)."""
        if self._chars_check is not None:
            self._chars_check(0, len(self.chars))
            self._chars_check = None

    def raw(self, i: int) -> bytes | memoryview:
        return self._bytes(*self._offsets.pair(i))

    def span(self, i: int, start: int, end: int) -> str:
        """Characters ``start .. end - 1`` of source ``i``'s text.

        A text as long in bytes as in characters is ASCII, so its characters
        are its bytes and only their range is read (and decompressed): a hit
        in a long file costs its chunk, not the file.  Any other text is
        decoded whole.
        """
        a, b = self._offsets.pair(i)
        if b - a != self.char_count(i) or not 0 <= start <= end <= b - a:
            return self.text(i)[start:end]
        try:
            text = str(self._bytes(a + start, a + end), "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: a source text is not valid UTF-8 ({exc.reason})") from None
        if len(text) != end - start:
            raise IndexFormatError(f"{self.where}: a source text is not the ASCII its saved length says")
        return text

    def _bytes(self, a: int, b: int) -> bytes | memoryview:
        if self._unpack is not None:
            return self._unpack(a, b)
        blocks, pread = self._blocks, self._pread
        if blocks is not None:
            blocks[0].check(blocks[1] + a, blocks[1] + b, None if pread is None else pread.absolute)
        if pread is not None:
            return pread(a, b - a)
        return self._texts[a:b]

    def text(self, i: int) -> str:
        """Source ``i``'s text, checked against its saved length in characters."""
        try:
            text = str(self.raw(i), "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: a source text is not valid UTF-8 ({exc.reason})") from None
        chars = self.char_count(i)
        if len(text) != chars:
            raise IndexFormatError(f"{self.where}: a source text is {len(text)} characters, not {chars}")
        return text

    def fingerprint(self, i: int) -> str:
        a, b = self._fp_offsets.pair(i)
        if self._blocks is not None:
            self._blocks[0].check(self._blocks[2] + a, self._blocks[2] + b)
        return str(self._fps[a:b], "utf-8", "surrogatepass")


class SourceNames:
    """Source names still in the data file (UTF-8, back to back, with ``n + 1``
    offsets), decoded one by one on demand or all at once.

    A big index has hundreds of thousands of names and a search shows a few:
    decoding them all at load was a tenth of a second and megabytes of
    strings.  A name that is not valid UTF-8 fails when it is decoded.
    """

    __slots__ = ("_blob", "_check", "_offsets", "where")

    def __init__(self, blob: memoryview, offsets: Offsets, where: str, check: PartCheck | None = None) -> None:
        self._blob = blob
        self._offsets = offsets
        self.where = where
        self._check = check  # a big segment's block checks of the names, by byte

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < len(self):
            raise IndexError(f"source {i} does not exist")
        a, b = self._offsets.pair(i)
        if self._check is not None:
            self._check(a, b)
        try:
            return str(self._blob[a:b], "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: not valid UTF-8 ({exc})") from None

    def __iter__(self) -> Iterator[str]:
        self._offsets.check_all()
        if self._check is not None:
            self._check(0, len(self._blob))
        return iter(strings(self._blob, self._offsets.values, self.where))

    def raw(self) -> tuple[bytes, Ints]:
        """The names' bytes and offsets, their blocks checked (not the offsets' order:
        offsets out of order only cut other bytes, never outside the names)."""
        offsets = self._offsets
        if offsets._check is not None:
            offsets._check(0, len(offsets.values))
        if self._check is not None:
            self._check(0, len(self._blob))
        return bytes(self._blob), offsets.values

    def numbers_of(self, wanted: Collection[str]) -> dict[str, int]:
        """The numbers of those of ``wanted`` this column names: compared as UTF-8 bytes in
        C-level passes over every name, none decoded; a name found is read back through
        :meth:`__getitem__`'s checks."""
        keys = {name.encode("utf-8", "surrogatepass") for name in wanted}
        blob, values = self.raw()
        bounds = values.tolist()
        pieces = map(blob.__getitem__, map(slice, bounds[:-1], bounds[1:]))
        found = list(compress(count(), map(keys.__contains__, pieces)))
        return {name: i for name, i in zip(map(self.__getitem__, found), found) if name in wanted}


# Sorted names between two fences of NameIndex.numbers_of, and the share of names wanted past
# which comparing every name costs less.
_FENCE = 32
_BULK_SHARE = 16


class NameIndex:
    """A segment's source numbers by name: ``find`` is a binary search that decodes about 18 names.

    ``check`` (a lazily checked segment's) checks each sorted entry's block
    before it is read."""

    __slots__ = ("_check", "_names", "_sorted", "where")

    def __init__(
        self, names: Sequence[str] | SourceNames, sorted_numbers: Ints, where: str = "", check: PartCheck | None = None
    ) -> None:
        self._names = names
        self._sorted = sorted_numbers
        self._check = check
        self.where = where

    def __len__(self) -> int:
        return len(self._sorted)

    def number(self, rank: int) -> int:
        """The source number of the ``rank``-th name in sorted order."""
        if self._check is not None:
            self._check(rank, rank + 1)
        number = self._sorted[rank]
        if not 0 <= number < len(self._names):
            raise IndexFormatError(f"{self.where}: the sorted source names name a source that does not exist")
        return number

    def __getitem__(self, rank: int) -> str:
        return self._names[self.number(rank)]

    def find(self, name: str) -> int | None:
        i = bisect_left(self, name)
        if i < len(self) and self[i] == name:
            return self.number(i)
        return None

    def numbers_of(self, wanted: Collection[str]) -> dict[str, int]:
        """The numbers of those of ``wanted`` this segment names, as :meth:`find` gives them.

        Compared as UTF-8 bytes (whose order is the names' order): every
        ``_FENCE``-th name in sorted order is cut out in C-level passes, each
        wanted name placed among them by a C-level bisection and then among
        the few names between two, through a one-line key (a few tenths of a
        microsecond a name, against several microseconds for :meth:`find`'s).
        With many names wanted (a sixteenth of those here), every name is
        compared instead (:meth:`SourceNames.numbers_of`)."""
        names = self._names
        if not isinstance(names, SourceNames):  # (a snapshot held in memory)
            return {name: number for number, name in enumerate(names) if name in wanted}
        n = len(self._sorted)
        if len(wanted) * _BULK_SHARE >= n:
            return names.numbers_of(wanted)
        if self._check is not None:
            self._check(0, n)
        blob, values = names.raw()
        ranks = self._sorted
        size = len(values) - 1

        def key(rank: int) -> bytes:
            number = ranks[rank]
            if not 0 <= number < size:
                raise IndexFormatError(f"{self.where}: the sorted source names name a source that does not exist")
            return blob[values[number] : values[number + 1]]

        fences = list(map(key, range(0, n, _FENCE)))
        out: dict[str, int] = {}
        for name in wanted:
            target = name.encode("utf-8", "surrogatepass")
            lo = (bisect_right(fences, target) - 1) * _FENCE
            if lo < 0:
                continue
            i = bisect_left(range(n), target, lo, min(lo + _FENCE, n), key=key)
            if i < n and key(i) == target:
                number = ranks[i]
                if names[number] == name:  # (read back with its checks)
                    out[name] = number
        return out


def strings(blob: memoryview, offsets: Ints, where: str) -> list[str]:
    """The strings laid back to back in ``blob`` at ``offsets`` (one decode when all ASCII)."""
    try:
        if bytes(blob).isascii():
            whole = str(blob, "ascii")
            return list(map(whole.__getitem__, map(slice, offsets[:-1], offsets[1:])))
        return [str(blob[a:b], "utf-8", "surrogatepass") for a, b in pairwise(offsets)]
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexFormatError(f"{where}: not valid UTF-8 ({exc})") from None


def compressed_reader(
    blob: memoryview, base: int, pread: Pread | None, blocks: BlockCheck | None
) -> Callable[[int, int], bytes | memoryview]:
    """Reads ``length`` bytes at ``offset`` of a compressed texts part (by ``pread`` when it can:
    see :class:`Pread`), its blocks checked first."""

    def read(offset: int, length: int) -> bytes | memoryview:
        if blocks is not None:
            blocks.check(base + offset, base + offset + length, None if pread is None else pread.absolute)
        return blob[offset : offset + length] if pread is None else pread(offset, length)

    return read
