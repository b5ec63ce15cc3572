"""Reading, chunking and counting files in worker processes.

A parallel ingest hands batches of files to a process pool.  A worker reads
and structures each file (:func:`._readers.read_document`), splits it with
the knowledge base's chunker and counts each chunk's terms with its analyser,
through the same :func:`._kb.span_counts` as :meth:`KnowledgeBase.add_text`.
The main process turns the worker's term numbers into the index's term ids
and appends the postings, and prepares batches itself (with a
:class:`Worker` of its own) while it would otherwise wait, so the analysis,
most of an ingest, runs on every core.

Term strings cross the process boundary once per worker: each batch result
carries the terms its worker numbered for the first time while preparing it.
The main process settles batches in the order it handed them out, and a
worker prepares its batches in that order too, so a number is always learnt
before it is met.  Index term ids are created as chunks are added, in the
order a serial ingest creates them, so both build the same index.

Nothing here logs: a worker returns its failures (with the traceback) and the
main process reports them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from array import array
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from itertools import count, repeat
from typing import Any

from ._analysis import Analyzer
from ._bulk import collector_paused
from ._chunking import Chunker
from ._kb import KnowledgeBase, _TermIds, span_counts
from ._readers import READER_ERRORS, Document, SkipFile, content_known, read_document

__all__ = [
    "BatchResult",
    "Counted",
    "Pool",
    "Task",
    "Worker",
    "WorkerTerms",
    "can_parallel",
    "prepare_batch",
    "prepare_with",
    "start_method",
    "usable_cpus",
]


@dataclass(frozen=True, slots=True)
class Task:
    """One file for a worker: what :func:`read_document` needs."""

    path: str
    fmt: str
    max_bytes: int
    budget: int | None
    known_sha: str | None  # the indexed content's hash: equal means unchanged
    name: str


@dataclass(slots=True)
class Counted:
    """A file's chunks, counted: per chunk four bounds, a label, a run of keys and tfs.

    ``known`` holds, per chunk, how many terms the worker had numbered once
    the chunk was counted, so the main process knows every number a chunk
    holds before it looks them up.
    """

    bounds: array[int]  # start, end, start_line, end_line per chunk
    labels: list[str | None]
    sizes: array[int]  # distinct terms per chunk
    known: array[int]
    keys: array[int]  # worker term numbers, chunk after chunk
    tfs: array[int]

    def chunks(self, terms: WorkerTerms) -> Iterator[tuple[int, int, int, int, str | None, list[int], array[int]]]:
        """``(start, end, start_line, end_line, label, tids, tfs)`` per chunk, with index term ids."""
        keys, tfs, b, known = self.keys, self.tfs, self.bounds, self.known
        ids = terms.ids
        get = ids.__getitem__
        pos = 0
        for i, n in enumerate(self.sizes):
            if known[i] > len(ids):
                ids.extend(repeat(-1, known[i] - len(ids)))
            end = pos + n
            nums = keys[pos:end]
            tids = list(map(get, nums))
            if -1 in tids:
                terms.resolve(nums, tids)
            j = 4 * i
            yield b[j], b[j + 1], b[j + 2], b[j + 3], self.labels[i], tids, tfs[pos:end]
            pos = end


# ("doc", Document, Counted) | ("same",) | ("skip", reason, transient)
# | ("fail", "Type: message", traceback) | ("error", traceback)
Outcome = tuple[Any, ...]
BatchResult = tuple[str, list[str], list[Outcome]]


class WorkerTerms:
    """One worker's term numbers -> the index's term ids (-1: not met in an added chunk yet)."""

    __slots__ = ("ids", "strings", "vocab")

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self.strings: list[str] = []  # number -> term, as the worker sent them
        self.ids: list[int] = []
        self.vocab = vocab

    def resolve(self, nums: array[int], tids: list[int]) -> None:
        """Fill in the -1s of ``tids`` (a chunk's ids, in the order it met them).

        A number is resolved when an added chunk first holds it, never when
        the file that introduced it was skipped (a secret, say): its terms
        must not reach the index.  Resolving in the chunk's order creates
        new index ids in the order a serial ingest creates them.
        """
        ids, strings, vocab = self.ids, self.strings, self.vocab
        find = tids.index  # a C-level scan: a chunk holds few new terms among many
        j = find(-1)
        while True:
            number = nums[j]
            tids[j] = ids[number] = vocab[strings[number]]
            try:
                j = find(-1, j + 1)
            except ValueError:
                return


class _Numbers(dict[str, int]):
    """A worker's own term numbering; remembers the terms not yet sent."""

    __slots__ = ("fresh",)

    def __init__(self) -> None:
        super().__init__()
        self.fresh: list[str] = []

    def __missing__(self, term: str) -> int:
        number = len(self)
        self[term] = number
        self.fresh.append(term)
        return number


class Worker:
    """Reads, chunks and counts files, numbering terms its own way (see :class:`WorkerTerms`)."""

    def __init__(self, analyzer: Analyzer, chunker: Chunker) -> None:
        self.token = os.urandom(8).hex()
        self.analyzer = analyzer
        self.chunker = chunker
        self.numbers = _Numbers()
        self.term_ids = _TermIds(analyzer, self.numbers)

    def prepare(self, task: Task) -> Outcome:
        try:
            doc = read_document(
                task.path,
                task.fmt,
                max_bytes=task.max_bytes,
                budget=task.budget,
                known_hash=content_known(task.known_sha),
                name=task.name,
            )
        except SkipFile as exc:
            return ("skip", exc.reason, exc.transient)
        except READER_ERRORS as exc:
            return ("fail", f"{type(exc).__name__}: {exc}", traceback.format_exc())
        except Exception:
            return ("error", traceback.format_exc())
        if doc is None:
            return ("same",)
        try:
            return ("doc", doc, self.count(doc))
        except Exception:
            return ("error", traceback.format_exc())

    def count(self, doc: Document) -> Counted:
        bounds: array[int] = array("q")
        labels: list[str | None] = []
        sizes: array[int] = array("i")
        known: array[int] = array("i")
        keys: array[int] = array("i")
        tfs: array[int] = array("i")
        term_ids, analyzer, numbers = self.term_ids, self.analyzer, self.numbers
        for span in self.chunker.split(doc.text, doc.sections):
            counts = span_counts(span, term_ids, analyzer, numbers)
            keys.extend(counts)
            tfs.extend(counts.values())
            sizes.append(len(counts))
            known.append(len(numbers))
            bounds.extend((span.start, span.end, span.start_line, span.end_line))
            labels.append(span.label)
        return Counted(bounds, labels, sizes, known, keys, tfs)


# The worker process's own Worker and the pool's spool folder.
_worker: Worker | None = None
_spool = ""


def _start_worker(analyzer_settings: dict[str, Any], chunker_settings: dict[str, Any], spool: str) -> None:
    global _worker, _spool
    # Ctrl-C is the main process's to handle: it saves what is done and
    # shuts the pool down; workers dying on their own would only add noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker starts with a copy of the whole parent heap: frozen,
    # the collector never walks it, so its pages stay shared.
    gc.freeze()
    _worker = Worker(Analyzer.from_settings(analyzer_settings), Chunker(**chunker_settings))
    _spool = spool
    threading.Thread(target=_watch_parent, args=(os.getppid(), spool), daemon=True).start()


def _watch_parent(parent: int, spool: str) -> None:
    # A worker waiting for its next batch would outlive a main process killed
    # outright (kill -9, out of memory): nothing else tells it to stop.  When
    # its parent is gone, clean the spool folder up and leave.
    while True:
        time.sleep(0.25)
        if os.getppid() != parent:
            shutil.rmtree(spool, ignore_errors=True)
            os._exit(1)


def prepare_batch(tasks: list[Task], name: str) -> str:
    """Run in a worker: read, chunk and count each file of the batch; the
    result goes to the file ``name`` in the pool's spool folder."""
    worker = _worker
    assert worker is not None, "prepare_batch runs in a pool started by Pool()"
    result = prepare_with(worker, tasks)
    with open(os.path.join(_spool, name), "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return name


def prepare_with(worker: Worker, tasks: list[Task]) -> BatchResult:
    """Read, chunk and count each file of a batch with ``worker``'s numbering."""
    with collector_paused():
        outcomes = [worker.prepare(task) for task in tasks]
    fresh = worker.numbers.fresh
    worker.numbers.fresh = []
    return worker.token, fresh, outcomes


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def can_parallel(kb: KnowledgeBase) -> str | None:
    """Why ``kb`` must be ingested in this process, or None when workers can count for it."""
    if type(kb.analyzer) is not Analyzer or kb.analyzer.custom is not None:
        return "a custom analyser"
    if type(kb.chunker) is not Chunker:
        return "a custom chunker"
    return None


def start_method(explicit: bool) -> str | None:
    """The start method for a pool, or None when automatic mode should stay serial.

    Forking is cheapest and does not re-import the caller's main module, but
    forking a process that runs other threads can deadlock the child on a
    lock one of them held; then only an explicit request starts workers, by
    ``forkserver`` or ``spawn`` (which need an importable main module).
    """
    methods = multiprocessing.get_all_start_methods()
    # Forking on macOS can crash system frameworks: Python itself stopped
    # defaulting to it there.
    if "fork" in methods and threading.active_count() == 1 and sys.platform != "darwin":
        return "fork"
    if not explicit:
        return None
    return "forkserver" if "forkserver" in methods else "spawn"


class Pool:
    """Worker processes that read and count like ``kb`` does.

    Results come back through files in a private spool folder, not through
    the executor's pipe: a worker writing a large result into a pipe would
    wait for this process's result thread, and that thread waits for the
    interpreter lock, which the main thread keeps while it adds chunks.
    """

    def __init__(self, kb: KnowledgeBase, workers: int, method: str) -> None:
        self.spool = tempfile.mkdtemp(prefix="clanker-rag-ingest-")  # only this user can read it
        try:
            self.executor = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_start_worker,
                initargs=(kb.analyzer.settings(), kb.chunker.settings(), self.spool),
            )
        except BaseException:
            shutil.rmtree(self.spool, ignore_errors=True)
            raise
        self._names = count()

    def submit(self, tasks: list[Task]) -> Future[str]:
        return self.executor.submit(prepare_batch, tasks, f"{next(self._names)}.pickle")

    def result(self, future: Future[str]) -> BatchResult:
        """The batch's result (waiting for it); raises what went wrong in the worker."""
        path = os.path.join(self.spool, future.result())
        with open(path, "rb") as fh:
            data = fh.read()
        os.unlink(path)
        result: BatchResult = pickle.loads(data)
        return result

    def close(self) -> None:
        try:
            self.executor.shutdown(wait=True, cancel_futures=True)
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)
