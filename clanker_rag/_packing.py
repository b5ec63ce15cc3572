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
"""

from __future__ import annotations

import gc
import mmap
import os
import signal
import sys
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, compress, islice, repeat
from operator import gt

from ._scoring import BM25, bulk_impacts, impact_orders

__all__ = ["IDLE_SAMPLE_S", "SPLIT_MIN", "Packed", "can_fork", "idle_core", "impacts_and_orders"]

# Below this many postings one process does it all: forking a big parent
# costs milliseconds, and the half it saves must be worth more.
SPLIT_MIN = 2_000_000
# How long the CPU's idle time is sampled before deciding to fork.
IDLE_SAMPLE_S = 0.05

Packed = tuple["array[float]", "array[int]"]
# What _part takes before the range of lists.
_Ints = Sequence[int]
_Args = tuple[BM25, int, _Ints, _Ints, _Ints, _Ints, list[float], _Ints, float, int]
_FLOAT = array("f").itemsize
_INT = array("i").itemsize


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
    total = offsets[-1]
    if total < split_min or n_terms < 2 or not can_fork() or not idle_core():
        return _part(*args, (0, n_terms))
    # The first list that starts past half the postings begins the child's half.
    mid = max(1, min(n_terms - 1, bisect_left(offsets, total // 2)))
    child_postings = total - offsets[mid]
    child_ordered = sum(compress(islice(lengths, mid, None), map(gt, islice(lengths, mid, None), repeat(order_min))))
    child = _forked(args, (mid, n_terms), child_postings, child_ordered)
    try:
        imps, positions = _part(*args, (0, mid))
    except BaseException:
        if child is not None:
            child.abandon()
        raise
    got = child.collect() if child is not None else None
    if got is None:
        got = _part(*args, (mid, n_terms))
    imps.extend(got[0])
    positions.extend(got[1])
    return imps, positions


class _Child:
    """A forked child computing some lists into a shared mapping."""

    def __init__(self, pid: int, shared: mmap.mmap, n_imps: int, n_positions: int) -> None:
        self.pid = pid
        self.shared = shared
        self.n_imps = n_imps
        self.n_positions = n_positions

    def abandon(self) -> None:
        """Stop the child (this process failed or was interrupted) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        finally:
            self.shared.close()

    def collect(self) -> Packed | None:
        """The child's impacts and orders, or None when it failed."""
        try:
            _, status = os.waitpid(self.pid, 0)
        except BaseException:  # interrupted while waiting: the child goes too
            self.abandon()
            raise
        try:
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                return None
            imps: array[float] = array("f")
            positions: array[int] = array("i")
            cut = self.n_imps * _FLOAT
            imps.frombytes(self.shared[:cut])
            positions.frombytes(self.shared[cut : cut + self.n_positions * _INT])
            return imps, positions
        finally:
            self.shared.close()


def _forked(
    args: _Args,
    terms: tuple[int, int],
    n_imps: int,
    n_positions: int,
) -> _Child | None:
    """Start a child computing lists ``terms``; None when it cannot start."""
    size = max(1, n_imps * _FLOAT + n_positions * _INT)
    try:
        shared = mmap.mmap(-1, size)  # anonymous and shared with the child
    except (OSError, ValueError):
        return None
    try:
        pid = os.fork()
    except OSError:
        shared.close()
        return None
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        code = 1
        try:
            # The collector would write to every object of the inherited heap
            # (copying its pages); the child allocates little that cycles.
            gc.disable()
            imps, positions = _part(*args, terms)
            if len(imps) == n_imps and len(positions) == n_positions:
                view = memoryview(shared)
                cut = n_imps * _FLOAT
                view[:cut] = memoryview(imps).cast("B")
                view[cut : cut + n_positions * _INT] = memoryview(positions).cast("B")
                view.release()
                code = 0
        finally:
            os._exit(code)
    return _Child(pid, shared, n_imps, n_positions)
