"""Impacts and impact orders of a whole packed index, over two processes when it is big.

A bulk build ends with one pass over every posting: its BM25 impact, then
each long list's positions sorted by impact.  Both are per-list work that
needs nothing of the other lists, so a forked child computes the lists of
the second half of the postings while this process computes the first half;
the child writes its part into an anonymous shared mapping made before the
fork, and this process appends it to its own.  The values are the ones one
process computes, bit for bit (the same operations in the same order, list
by list); when forking is not safe, no core is idle or the child fails,
this process does the second half itself.

A fresh build's lists are still Python lists of ``[chunk id, tf, ...]``
pairs; :func:`pack_pending` forks before packing them, so the child packs
its half straight from the lists it inherits and both halves of the packing
run side by side too.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import time
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from functools import partial
from itertools import accumulate, compress, islice, repeat
from operator import add, and_, gt, mul, not_, rshift, truth
from typing import Any

from .._forking import Child, start_child
from ._fill import retyped_int32s
from ._scoring import BM25, bulk_impacts, impact_orders

__all__ = [
    "CHILD_SHARE",
    "IDLE_SAMPLE_S",
    "SPLIT_MIN",
    "Packed",
    "can_fork",
    "idle_core",
    "impacts_and_orders",
    "list_maxes",
    "pack_pending",
    "spare_core",
]

# Below this many postings one process does it all: forking a big parent
# costs milliseconds, and the half it saves must be worth more.
SPLIT_MIN = 2_000_000
# How long the CPU's idle time is sampled before deciding to fork.
IDLE_SAMPLE_S = 0.05
# The child's share of the postings when it packs them too (pack_pending).
# More than half: the first terms (the most frequent) cost this process more
# per posting (long lists to sort) than the child's mostly short lists, and
# this process also appends the child's arrays.  Measured at 225k chunks:
# 0.5 gave 11.0 s of CPU here against 9.3 s in the child; 0.6, 8.5 s
# against 10.3 s (the child waited for).  Since each process also finds its
# lists' largest impacts (a step per list: the child's half holds most of
# the lists), 0.55 gave 4.9 s here against 5.5 s in the child, and 5.7
# against 6.5 under load: 0.52 evens them.
CHILD_SHARE = 0.52

Packed = tuple["array[float]", "array[int]"]
# Chunk ids, tfs, impacts, orders and largest impacts of packed lists.
PackedLists = tuple["array[int]", "array[int]", "array[float]", "array[int]", "array[float]"]
# A child's arrays: typecode and length of each, in the order it writes them.
_Layout = Sequence[tuple[str, int]]
# What _part takes before the range of lists.
_Ints = Sequence[int]
_Args = tuple[BM25, int, _Ints, _Ints, _Ints, _Ints, list[float], _Ints, float, int]
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def can_fork() -> bool:
    """Whether a forked child may compute half the lists.

    Forking a process that runs other threads can deadlock the child on a
    lock one of them held, and macOS frameworks are not fork-safe.
    """
    if not hasattr(os, "fork") or sys.platform == "darwin" or threading.active_count() != 1:
        return False
    return _cpus() > 1


def _cpus() -> int:
    getaffinity = getattr(os, "sched_getaffinity", None)
    try:
        return len(getaffinity(0)) if getaffinity is not None else (os.cpu_count() or 1)
    except OSError:
        return os.cpu_count() or 1


def idle_core() -> bool:
    """Whether a core is idle for the child right now.

    On a busy machine the split gains no time and costs about a sixth more
    CPU: while the child lives, every page either process writes to is
    copied (measured on 225k chunks: 5.6 s in one process; 3.8 s here and
    2.7 s in the child, 6.5 s of wall time when no core was free).  The
    load average cannot tell: it still counts the build's own workers for a
    minute after they stop, so the CPU's idle time is sampled instead.
    """
    idle = _idle_cores(IDLE_SAMPLE_S)
    if idle is not None:
        return idle >= 0.75
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    return load < _cpus() - 0.5


def spare_core() -> bool:
    """Whether a forked child may work beside this process now: a safe fork and an idle core."""
    return can_fork() and idle_core()


def _idle_cores(sample: float) -> float | None:
    """How many cores were idle over the next ``sample`` seconds (Linux's
    ``/proc/stat``), or None where that cannot be read."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(sample)
    second = _cpu_times()
    if second is None:
        return None
    total = sum(second) - sum(first)
    if total <= 0:
        return None
    idle = second[3] + second[4] - first[3] - first[4]  # idle and iowait
    return (os.cpu_count() or 1) * idle / total


def _cpu_times() -> list[int] | None:
    """user, nice, system, idle, iowait, irq, softirq, steal of all CPUs, or None."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    try:
        return [int(field) for field in fields[1:9]]
    except ValueError:
        return None


def _part(
    bm: BM25,
    n_docs: int,
    lengths: Sequence[int],
    offsets: Sequence[int],
    tfs: Sequence[int],
    docs: Sequence[int],
    norms: list[float],
    dls: Sequence[int],
    avgdl: float,
    order_min: int,
    terms: tuple[int, int],
) -> Packed:
    """Impacts and orders of lists ``terms[0]`` to ``terms[1] - 1`` (``offsets`` over all lists)."""
    lo, hi = terms
    a, b = offsets[lo], offsets[hi]
    part_docs = memoryview(docs)[a:b] if isinstance(docs, array) else docs[a:b]
    part_lengths = lengths[lo:hi]
    imps = bulk_impacts(
        bm,
        n_docs,
        part_lengths,
        memoryview(tfs)[a:b] if isinstance(tfs, array) else tfs[a:b],
        map(norms.__getitem__, part_docs),
        part_docs,
        dls,
        avgdl,
    )
    part_offsets = array("q", accumulate(part_lengths, initial=0))
    return imps, impact_orders(imps, part_offsets, order_min)


def impacts_and_orders(
    bm: BM25,
    n_docs: int,
    lengths: Sequence[int],
    tfs: Sequence[int],
    docs: Sequence[int],
    norms: list[float],
    dls: Sequence[int],
    avgdl: float,
    order_min: int,
    *,
    split_min: int = SPLIT_MIN,
) -> Packed:
    """:func:`bulk_impacts` and :func:`impact_orders` of lists laid end to end
    (``lengths`` postings each; ``norms`` the length norm of every chunk).

    With at least ``split_min`` postings, a safe fork and an idle core, a
    child process computes the second half of the lists.
    """
    offsets = array("q", accumulate(lengths, initial=0))
    n_terms = len(lengths)
    args: _Args = (bm, n_docs, lengths, offsets, tfs, docs, norms, dls, avgdl, order_min)
    mid = _split(offsets, split_min, 0.5)
    if mid is None:
        return _part(*args, (0, n_terms))
    child_postings = offsets[-1] - offsets[mid]
    layout = (("f", child_postings), ("i", _ordered(lengths, mid, order_min)))
    child = _forked(partial(_part, *args), (mid, n_terms), layout)
    try:
        imps, positions = _part(*args, (0, mid))
    except BaseException:
        if child is not None:
            child.abandon()
        raise
    if child is None or not child.collect((imps, positions)):
        got = _part(*args, (mid, n_terms))
        imps.extend(got[0])
        positions.extend(got[1])
    return imps, positions


def list_maxes(imps: array[float], lengths: Sequence[int], positions: Sequence[int], order_min: int) -> array[float]:
    """Each list's largest impact (-1.0 for an empty list), lists laid end to end with
    their orders (:func:`impact_orders`): a long list's is the impact its order puts
    first (the first of the largest, as ``max`` finds it), a short one's the ``max`` of
    its few impacts: one Python float made per long list, not one per posting."""
    n = len(lengths)
    offsets = array("q", accumulate(lengths, initial=0))
    long = list(map(gt, lengths, repeat(order_min)))
    order_offsets = list(accumulate(map(mul, lengths, long), initial=0))
    maxes = array("f", repeat(-1.0, n))
    firsts = map(positions.__getitem__, compress(order_offsets, long))
    _consume(
        map(
            maxes.__setitem__,
            compress(range(n), long),
            map(imps.__getitem__, map(add, compress(offsets, long), firsts)),
        )
    )
    short = list(map(and_, map(truth, lengths), map(not_, long)))  # (0 < length <= order_min)
    view = memoryview(imps)
    ends = compress(islice(offsets, 1, None), short)
    _consume(
        map(
            maxes.__setitem__,
            compress(range(n), short),
            map(max, map(view.__getitem__, map(slice, compress(offsets, short), ends))),
        )
    )
    return maxes


def pack_pending(
    pending: MutableMapping[int, list[int]],
    n_terms: int,
    bm: BM25,
    n_docs: int,
    norms: list[float],
    dls: Sequence[int],
    avgdl: float,
    order_min: int,
    *,
    split_min: int = SPLIT_MIN,
) -> tuple[array[int], array[int], array[int], array[float], array[int], array[float]]:
    """Lengths, chunk ids, tfs, impacts, orders and largest impacts (:func:`list_maxes`)
    of terms ``0`` to ``n_terms - 1`` packed end to end from their ``pending`` lists
    (``[chunk id, tf, chunk id, tf, ...]``; a term without one has none).

    The values of :func:`impacts_and_orders` over the packed lists, bit for
    bit (the largest impacts found by each process for its own lists).  With at
    least ``split_min`` postings, a safe fork and an idle core, a child packs
    and computes the last :data:`CHILD_SHARE` of the postings.
    Empties ``pending``: alone, as soon as its lists are packed (as few of
    them and their copies live at once as can be); with a child, only once
    it is collected (freeing the lists sooner would write to pages it still
    reads, and copy them; a failed child leaves its half to this process).
    """
    none: list[int] = []  # shared, never changed
    plists = list(map(pending.get, range(n_terms), repeat(none)))
    lengths = array("i", map(rshift, map(len, plists), repeat(1)))  # two ints per posting
    offsets = array("q", accumulate(lengths, initial=0))
    stats = (bm, n_docs, norms, dls, avgdl, order_min)
    mid = _split(offsets, split_min, CHILD_SHARE)

    def free() -> None:
        plists.clear()
        pending.clear()

    if mid is None:
        return (lengths, *_packed_part(plists, lengths, stats, (0, n_terms), free))
    child_postings = offsets[-1] - offsets[mid]
    layout = (
        ("i", child_postings),
        ("I", child_postings),
        ("f", child_postings),
        ("i", _ordered(lengths, mid, order_min)),
        ("f", n_terms - mid),
    )
    child = _forked(partial(_packed_part, plists, lengths, stats), (mid, n_terms), layout)
    try:
        mine = _packed_part(plists, lengths, stats, (0, mid))
    except BaseException:
        if child is not None:
            child.abandon()
        raise
    if child is None or not child.collect(mine):
        # The lists are all still here: this process packs the child's half.
        ours: Sequence[array[Any]] = mine
        theirs: Sequence[array[Any]] = _packed_part(plists, lengths, stats, (mid, n_terms), free)
        for have, got in zip(ours, theirs, strict=True):
            have.extend(got)
    free()  # (again, after a failed child: nothing left)
    return (lengths, *mine)


_Stats = tuple[BM25, int, list[float], Sequence[int], float, int]


def _packed_part(
    plists: list[list[int]],
    lengths: array[int],
    stats: _Stats,
    terms: tuple[int, int],
    free: Callable[[], None] | None = None,
) -> PackedLists:
    """Chunk ids, tfs, impacts, orders and largest impacts of lists ``terms[0]`` to
    ``terms[1] - 1`` of ``plists``; ``free`` is called once they are packed, before the rest."""
    lo, hi = terms
    bm, n_docs, norms, dls, avgdl, order_min = stats
    # One fromlist per list: no flat list of every posting in between; unsigned, the
    # array module's conversion that parses no format (see _fill): chunk ids and tfs are >= 0.
    pairs = array("I")
    _consume(map(pairs.fromlist, islice(plists, lo, hi)))
    if free is not None:
        free()
    docs = retyped_int32s(pairs[0::2])
    tfs = pairs[1::2]
    del pairs
    part_lengths = lengths[lo:hi]
    offsets = array("q", accumulate(part_lengths, initial=0))
    imps, positions = _part(bm, n_docs, part_lengths, offsets, tfs, docs, norms, dls, avgdl, order_min, (0, hi - lo))
    return docs, tfs, imps, positions, list_maxes(imps, part_lengths, positions, order_min)


def _split(offsets: Sequence[int], split_min: int, share: float) -> int | None:
    """The first list of a child's half (about ``share`` of the postings), or
    None when this process should do it all."""
    n_terms = len(offsets) - 1
    total = offsets[-1]
    if total < split_min or n_terms < 2 or not can_fork() or not idle_core():
        return None
    # The first list that starts past this process's share begins the child's half.
    return max(1, min(n_terms - 1, bisect_left(offsets, int(total * (1 - share)))))


def _ordered(lengths: Sequence[int], mid: int, order_min: int) -> int:
    """How many positions the orders of lists ``mid`` onwards hold."""
    return sum(compress(islice(lengths, mid, None), map(gt, islice(lengths, mid, None), repeat(order_min))))


class _Child:
    """A forked child computing some lists into a shared mapping (laid out as ``layout``)."""

    def __init__(self, child: Child, layout: _Layout) -> None:
        self.child = child
        self.layout = layout

    def abandon(self) -> None:
        """Stop the child (this process failed or was interrupted) and reap it."""
        self.child.abandon()

    def collect(self, into: Sequence[array[Any]]) -> bool:
        """Append the child's arrays to ``into`` (one each, as laid out);
        False, with nothing appended, when it failed."""
        child = self.child
        ok = child.succeeded()  # (interrupted while waiting: the child goes too)
        try:
            if not ok:
                return False
            # Straight from the mapping: no copy of the child's bytes in between.
            with memoryview(child.shared) as view:
                at = 0
                for have, (code, count) in zip(into, self.layout, strict=True):
                    size = count * array(code).itemsize
                    have.frombytes(view[at : at + size])
                    at += size
            return True
        finally:
            child.close()


def _forked(
    job: Callable[[tuple[int, int]], Sequence[array[Any]]], terms: tuple[int, int], layout: _Layout
) -> _Child | None:
    """Start a child writing ``job(terms)`` (arrays as ``layout`` says) into
    a shared mapping (:func:`.._forking.start_child`); None when it cannot start."""

    def run(shared: mmap.mmap) -> int:  # pragma: no cover - runs in the child
        parts = job(terms)
        if len(parts) != len(layout) or not all(
            part.typecode == want and len(part) == count for part, (want, count) in zip(parts, layout)
        ):
            return 1
        with memoryview(shared) as view:
            at = 0
            for part in parts:
                raw = memoryview(part).cast("B")
                view[at : at + len(raw)] = raw
                at += len(raw)
                raw.release()
        return 0

    child = start_child(sum(count * array(code).itemsize for code, count in layout), run)
    return None if child is None else _Child(child, layout)
