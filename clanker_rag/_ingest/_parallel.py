"""The parallel reader: worker processes read, chunk and count files ahead of the ingest.

A parallel ingest plans its files (a stat each, the unchanged check) in
order, hands batches of the files to read to a process pool and settles
every file strictly in order, so the report, the checkpoints and the index
come out as a serial ingest makes them.  :class:`ParallelReader` is that
scheduler: it yields one :class:`Ready` per file, in order, with the typed
outcome its worker prepared (or ``None``: read it here).

A worker reads and structures each file (:func:`._readers.read_document`),
splits it with the knowledge base's chunker and counts each chunk's terms
with its analyser, through the same :func:`._counting.span_counts` as
:meth:`KnowledgeBase.add_text`.  The main process turns the worker's term
numbers into the index's term ids and appends the postings, and prepares
batches itself (with a :class:`Worker` of its own) while it would otherwise
wait, so the analysis, most of an ingest, runs on every core.

Term strings cross the process boundary once per worker: each batch result
carries the terms its worker numbered for the first time while preparing it.
The main process settles batches in the order it handed them out, and a
worker prepares its batches in that order too, so a number is always learnt
before it is met.  Index term ids are created as chunks are added, in the
order a serial ingest creates them, so both build the same index.

A worker returns its failures (with the traceback) and the main process
reports them.
"""

from __future__ import annotations

import gc
import logging
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
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import compress, count, repeat
from operator import eq
from typing import Any

from .._engine._counting import CountedChunk, TermIds, span_counts
from .._engine._fill import int32s
from .._gc_pause import collector_paused
from .._text._analysis import Analyzer
from .._text._chunking import Chunker
from ._discovery import Candidate
from ._readers import READER_ERRORS, Document, SkipFile, content_known, read_document

__all__ = [
    "BatchResult",
    "Counted",
    "Failed",
    "Outcome",
    "ParallelReader",
    "Pool",
    "Prepared",
    "ReadPlan",
    "Ready",
    "Refused",
    "Retry",
    "StatOutcome",
    "Task",
    "Unchanged",
    "Worker",
    "WorkerTerms",
    "can_parallel",
    "count_texts",
    "prepare_batch",
    "prepare_with",
    "start_method",
    "usable_cpus",
]

logger = logging.getLogger(__name__)

# Runs an iterator of C-level calls to its end without keeping anything.
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


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

    def chunks(
        self, terms: WorkerTerms, vocab: Mapping[str, int], first: int = 0, last: int | None = None, pos: int = 0
    ) -> Iterator[CountedChunk]:
        """Each chunk with the index's term ids (``vocab``: term -> id, creating new ones).

        Only chunks ``first`` to ``last - 1`` (whose keys start at ``pos``)
        when several texts' chunks share this one (see :meth:`Worker.count_many`).
        """
        keys, tfs, b, known, sizes = self.keys, self.tfs, self.bounds, self.known, self.sizes
        lookup = vocab.__getitem__

        def ids_of(fresh: list[str]) -> list[int]:
            return list(map(lookup, fresh))

        for i in range(first, len(sizes) if last is None else last):
            end = pos + sizes[i]
            tids = terms.term_ids(keys[pos:end], known[i], ids_of)
            j = 4 * i
            yield CountedChunk(b[j], b[j + 1], b[j + 2], b[j + 3], self.labels[i], tids, tfs[pos:end])
            pos = end


@dataclass(slots=True)
class Prepared:
    """Read and counted: the document and its chunks' counts."""

    doc: Document
    counted: Counted


@dataclass(slots=True)
class Unchanged:
    """The content is the one already indexed."""


@dataclass(slots=True)
class Refused:
    """The reader skipped the file (:class:`SkipFile`)."""

    reason: str
    transient: bool


@dataclass(slots=True)
class Failed:
    """The reader failed with one of ``READER_ERRORS``: ``what`` is ``"Type: message"``."""

    what: str
    trace: str


@dataclass(slots=True)
class Retry:
    """Anything else went wrong while preparing: the file is read again in the main
    process, where it succeeds or fails exactly as in a serial ingest."""

    trace: str


# What a worker made of one task.
Outcome = Prepared | Unchanged | Refused | Failed | Retry


@dataclass(slots=True)
class BatchResult:
    """A prepared batch: who numbered its terms, the terms numbered first here, one outcome per task."""

    token: str
    fresh: list[str]
    outcomes: list[Outcome]


class WorkerTerms:
    """One worker's term numbers -> the index's term ids (-1: not met in an added chunk yet)."""

    __slots__ = ("ids", "resolved", "strings")

    def __init__(self) -> None:
        self.strings: list[str] = []  # number -> term, as the worker sent them
        self.ids: list[int] = []
        self.resolved = 0  # ids[:resolved] holds no -1

    def term_ids(
        self, keys: array[int], known: int, ids_of: Callable[[list[str]], list[int]], made: int = -1
    ) -> list[int]:
        """The index's id of every number in ``keys`` (several chunks' keys, in
        order; ``known``: the worker's count of numbers once it counted them).

        Numbers met for the first time are resolved in the order the chunks
        hold them, so ``ids_of`` creates new terms in the order adding the
        chunks one by one does.  A number is resolved only once a chunk that
        holds it is added, never for a file that was skipped (a secret, say):
        its terms must not reach the index.  ``made`` (when known): the first
        number the worker made while counting exactly these chunks.
        """
        ids = self.ids
        if 0 <= made <= known:
            if made > len(ids):
                ids.extend(repeat(-1, made - len(ids)))
            if self.resolved < made:
                try:
                    self.resolved = ids.index(-1, self.resolved, made)
                except ValueError:
                    self.resolved = made
            if self.resolved == made == len(ids):
                # Every earlier number is resolved, and numbers ``made`` to ``known - 1`` were made for
                # these chunks, in the order they first hold them: resolved without a pass over the keys.
                ids.extend(ids_of(self.strings[made:known]))
                self.resolved = known
                return list(map(ids.__getitem__, keys))
        if known > len(ids):
            ids.extend(repeat(-1, known - len(ids)))
        tids = list(map(ids.__getitem__, keys))
        if -1 not in tids:
            return tids
        at = list(compress(range(len(tids)), map(eq, tids, repeat(-1))))
        numbers = list(map(keys.__getitem__, at))
        fresh = list(dict.fromkeys(numbers))
        _consume(map(ids.__setitem__, fresh, ids_of(list(map(self.strings.__getitem__, fresh)))))
        _consume(map(tids.__setitem__, at, map(ids.__getitem__, numbers)))
        return tids


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
        self.term_ids = TermIds(analyzer, self.numbers)

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
            return Refused(exc.reason, exc.transient)
        except READER_ERRORS as exc:
            return Failed(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        except Exception:
            return Retry(traceback.format_exc())
        if doc is None:
            return Unchanged()
        try:
            return Prepared(doc, self.count(doc))
        except Exception:
            return Retry(traceback.format_exc())

    def count(self, doc: Document) -> Counted:
        tally = _Tally()
        self._count_into(doc, tally)
        return tally.counted()

    def count_many(self, texts: list[str]) -> tuple[Counted, array[int]]:
        """Every text's chunks in one :class:`Counted`, and how many chunks each
        text has: a handful of arrays to pickle instead of six per text."""
        tally = _Tally()
        per_text: array[int] = array("i")
        sizes = tally.sizes
        for text in texts:
            before = len(sizes)
            self._count_into(Document(text, None, "", ""), tally)
            per_text.append(len(sizes) - before)
        return tally.counted(), per_text

    def _count_into(self, doc: Document, tally: _Tally) -> None:
        bounds, labels, sizes, known = tally.bounds, tally.labels, tally.sizes, tally.known
        keys, tfs = tally.keys, tally.tfs
        term_ids, analyzer, numbers = self.term_ids, self.analyzer, self.numbers
        for span in self.chunker.split(doc.text, doc.sections):
            counts = span_counts(span, term_ids, analyzer, numbers)
            keys += counts
            tfs += counts.values()
            sizes.append(len(counts))
            known.append(len(numbers))
            bounds += (span.start, span.end, span.start_line, span.end_line)
            labels.append(span.label)


class _Tally:
    """A :class:`Counted` being filled: lists, which grow by a dict's keys or
    values about a third faster than arrays do, made arrays once at the end."""

    __slots__ = ("bounds", "keys", "known", "labels", "sizes", "tfs")

    def __init__(self) -> None:
        self.bounds: list[int] = []
        self.labels: list[str | None] = []
        self.sizes: list[int] = []
        self.known: list[int] = []
        self.keys: list[int] = []
        self.tfs: list[int] = []

    def counted(self) -> Counted:
        # The counts are >= 0: filled unsigned, the array module's conversion that parses no
        # format (see _engine._fill; a pass over every posting, twice).
        return Counted(
            array("q", self.bounds),
            self.labels,
            int32s(self.sizes),
            int32s(self.known),
            int32s(self.keys),
            int32s(self.tfs),
        )


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
    return BatchResult(worker.token, fresh, outcomes)


def count_texts(texts: list[str], name: str) -> str:
    """Run in a worker: chunk and count each text of a bulk add; the worker's
    token, its fresh terms and the counts go to the spool file ``name``."""
    worker = _worker
    assert worker is not None, "count_texts runs in a pool started by Pool()"
    with collector_paused():
        counted, per_text = worker.count_many(texts)
    fresh = worker.numbers.fresh
    worker.numbers.fresh = []
    with open(os.path.join(_spool, name), "wb") as fh:
        pickle.dump((worker.token, fresh, counted, per_text), fh, protocol=pickle.HIGHEST_PROTOCOL)
    return name


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def can_parallel(analyzer: Analyzer, chunker: Chunker) -> str | None:
    """Why a knowledge base with this analyser and chunker must be ingested in
    this process, or None when workers can count for it."""
    if type(analyzer) is not Analyzer or analyzer.custom is not None:
        return "a custom analyser"
    if type(chunker) is not Chunker:
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
    """Worker processes that read and count with ``analyzer`` and ``chunker``.

    Results come back through files in a private spool folder, not through
    the executor's pipe: a worker writing a large result into a pipe would
    wait for this process's result thread, and that thread waits for the
    interpreter lock, which the main thread keeps while it adds chunks.
    """

    def __init__(self, analyzer: Analyzer, chunker: Chunker, workers: int, method: str) -> None:
        self.spool = tempfile.mkdtemp(prefix="clanker-rag-ingest-")  # only this user can read it
        try:
            self.executor = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_start_worker,
                initargs=(analyzer.settings(), chunker.settings(), self.spool),
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
        result = pickle.loads(data)
        assert isinstance(result, BatchResult)
        return result

    def submit_texts(self, texts: list[str]) -> Future[str]:
        """Chunk and count ``texts`` (a bulk add's, no sections) in a worker."""
        return self.executor.submit(count_texts, texts, f"{next(self._names)}.pickle")

    def counted(self, future: Future[str]) -> tuple[str, list[str], Counted, array[int]]:
        """A :meth:`submit_texts` batch's worker token, fresh terms, counts and
        chunks per text (see :meth:`Worker.count_many`), waiting for them."""
        path = os.path.join(self.spool, future.result())
        with open(path, "rb") as fh:
            data = fh.read()
        os.unlink(path)
        token, fresh, counted, per_text = pickle.loads(data)
        assert isinstance(counted, Counted) and isinstance(per_text, array)
        return str(token), list(fresh), counted, per_text

    def close(self) -> None:
        try:
            self.executor.shutdown(wait=True, cancel_futures=True)
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)


# -- the scheduler ------------------------------------------------------------

# A batch is at most 16 files or about a megabyte, some 50 ms of work: few
# round trips, and small enough to keep every process busy to the end.
BATCH_FILES = 16
BATCH_BYTES = 1 << 20
# Batches per worker handed out and not back yet: one running, one queued,
# so a worker never waits while this process is busy adding chunks.
WORKER_QUEUE = 2
# Worker processes start once this much reading is planned; to find out,
# planning (a stat per file) runs up to PLAN_AHEAD files ahead of settling.
POOL_MIN_BYTES = 2 << 20
PLAN_AHEAD = 4096
# Larger files are read here, when their turn comes: shipping their text and
# counts back costs more than it saves.
INLINE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A file to read: whether its source existed, its size cap, the indexed content's hash."""

    existed: bool
    cap: int
    sha: str | None
    size: int


@dataclass(frozen=True, slots=True)
class StatOutcome:
    """A file settled from its metadata and stat alone, before any read."""

    unchanged: bool
    reason: str = ""  # why it is skipped, when it is not unchanged
    keep: bool = False  # whether its indexed chunks stay (unreadable only for the moment)


@dataclass(slots=True)
class Ready:
    """One file whose turn has come, with what is known of it.

    ``plan`` is None for a file planned after the pool broke (plan and read
    it here); ``outcome`` is None when the file is to be read here.
    """

    cand: Candidate
    source: str
    plan: ReadPlan | StatOutcome | None
    outcome: Outcome | None = None
    terms: WorkerTerms | None = None  # the numbering of the process that prepared it

    def chunks(self, vocab: Mapping[str, int]) -> Iterator[CountedChunk]:
        """A :class:`Prepared` file's chunks with the index's term ids."""
        assert isinstance(self.outcome, Prepared) and self.terms is not None
        return self.outcome.counted.chunks(self.terms, vocab)


@dataclass(slots=True)
class _Entry:
    """One file of a parallel ingest, from planning to settling."""

    cand: Candidate
    source: str
    plan: ReadPlan | StatOutcome | None  # None: not planned (the pool broke first)
    task: Task | None = None
    batch: _Batch | None = None
    slot: int = 0


@dataclass(slots=True)
class _Batch:
    """Files read and counted together, by a worker process or by this one."""

    limit: int  # files; fewer bytes than BATCH_BYTES
    entries: list[_Entry] = field(default_factory=list)
    size: int = 0  # bytes
    future: Future[str] | None = None  # handed to the workers
    result: BatchResult | None = None  # prepared (here, or collected from a worker)
    local: bool = False  # prepared here while waiting for an earlier batch
    settled: int = 0

    def add(self, entry: _Entry, size: int) -> None:
        entry.batch, entry.slot = self, len(self.entries)
        self.entries.append(entry)
        self.size += size

    def full(self) -> bool:
        return len(self.entries) >= self.limit or self.size >= BATCH_BYTES

    def tasks(self) -> list[Task]:
        # Only files with a task join a batch.
        return [entry.task for entry in self.entries if entry.task is not None]


class ParallelReader:
    """Reads files ahead of an ingest in ``workers - 1`` processes and this one.

    One reader serves a whole ingest (every root); :meth:`close` stops its
    processes.  When the pool fails (a worker killed, no processes allowed)
    it is ``broken`` and the remaining files are left to the ingest to read.
    """

    def __init__(self, analyzer: Analyzer, chunker: Chunker, workers: int, method: str, budget: int | None) -> None:
        self.analyzer = analyzer
        self.chunker = chunker
        self.workers = workers  # processes that read, this one included
        self.method = method
        self.budget = budget
        self.started = 0  # worker processes started
        self.pool: Pool | None = None
        self.local: Worker | None = None  # reads and counts here while the workers are busy
        self.broken = False
        self.terms: dict[str, WorkerTerms] = {}  # worker token -> its term numbers

    def read(
        self, files: list[tuple[Candidate, str]], plan: Callable[[Candidate, str], ReadPlan | StatOutcome]
    ) -> Iterator[Ready]:
        """Yield each of ``files`` (candidate, source name) in order, ready to settle.

        Files are planned with ``plan`` (stat, unchanged check) as they are
        handed out.  Full batches go to the workers, two per worker at most;
        when the next file's batch is not back yet, this process reads and
        counts the next batch nobody has taken instead of waiting (it must
        add every chunk anyway, so it has less time for reading than a
        worker).  A batch whose turn comes before anyone took it, and every
        file over ``INLINE_BYTES``, is left to the caller to read, exactly as
        in a one-process ingest.  The caller settles each file before asking
        for the next.
        """
        fifo: deque[_Entry] = deque()  # planned, not settled, in order
        ready: deque[_Batch] = deque()  # full batches nobody has taken yet
        handed: deque[_Batch] = deque()  # batches given to the workers, not settled yet
        workers = self.workers - 1
        pending = iter(files)
        left = len(files)

        def new_batch() -> _Batch:
            # Smaller batches towards the end, so no process is left with
            # a big one while the others have run out of work.
            return _Batch(limit=max(1, min(BATCH_FILES, left // (4 * self.workers))))

        open_batch = new_batch()
        more = True
        to_read = bytes_to_read = 0  # files planned for reading so far, and their bytes
        here_ahead = 0  # batches prepared here ahead of their turn, not yet settled

        def free_slots() -> int:
            # Two batches per worker in the works (one running, one queued)
            # keep it busy while this process is away adding chunks; more
            # finished ones than that waiting to be settled only use memory.
            busy = sum(1 for b in handed if b.future is not None and not b.future.done())
            return max(0, min(WORKER_QUEUE * workers - busy, 3 * WORKER_QUEUE * workers - len(handed)))

        def pool_worth() -> bool:
            # Starting processes pays only for a few batches' worth of
            # reading: not for a small run, nor for a re-ingest that finds a
            # few dozen new or changed files.  Until that much is planned,
            # planning runs ahead (a stat per file) to find out.
            return to_read >= 2 * BATCH_FILES and bytes_to_read >= POOL_MIN_BYTES

        def plan_more() -> None:
            # Plan files until a batch is ready for every free worker slot
            # and one more to take here, then hand batches out.
            nonlocal more, open_batch, left, to_read, bytes_to_read
            while more and (
                len(ready) <= free_slots() or (self.pool is None and not pool_worth() and len(fifo) < PLAN_AHEAD)
            ):
                item = next(pending, None)
                if item is None:
                    more = False
                    if open_batch.entries:
                        ready.append(open_batch)
                        open_batch = new_batch()
                    break
                left -= 1
                cand, source = item
                entry = _Entry(cand, source, plan(cand, source))
                fifo.append(entry)
                planned = entry.plan
                if isinstance(planned, ReadPlan) and planned.size <= INLINE_BYTES:
                    to_read += 1
                    bytes_to_read += planned.size
                    entry.task = Task(cand.path, cand.fmt, planned.cap, self.budget, planned.sha, source)
                    open_batch.add(entry, planned.size)
                    if open_batch.full():
                        ready.append(open_batch)
                        open_batch = new_batch()
            slots = free_slots()
            while ready and slots > 0 and not self.broken:
                if self.pool is None and not pool_worth():
                    break
                batch = ready.popleft()
                batch.future = self._submit(batch.tasks())
                if batch.future is None:
                    ready.appendleft(batch)
                    break
                handed.append(batch)
                slots -= 1

        while True:
            plan_more()
            if not fifo:
                break
            entry = fifo.popleft()
            batch = entry.batch
            if batch is not None and batch.result is None and batch.future is not None and not self.broken:
                while not batch.future.done() and ready and here_ahead < 2:
                    self._prepare_here(ready.popleft())
                    here_ahead += 1
                    plan_more()
                self._collect(batch)
            elif batch is not None and ready and ready[0] is batch:
                # Its turn came before anyone took it (a small run, the start
                # of a large one): its files are read by the caller one by
                # one, as in a one-process ingest.
                ready.popleft()
            yield self._ready(entry)
            if batch is not None:
                batch.settled += 1
                if batch.settled == len(batch.entries):
                    if batch.future is not None:
                        first = handed.popleft()  # batches settle in order
                        assert first is batch
                        batch.future = None  # let the result go
                    elif batch.local:
                        here_ahead -= 1
            if self.broken and more:
                # The pool is gone: the rest is read by the caller, in order.
                for cand, source in pending:
                    fifo.append(_Entry(cand, source, None))
                more = False

    def _ready(self, entry: _Entry) -> Ready:
        plan = entry.plan
        if not isinstance(plan, ReadPlan):
            return Ready(entry.cand, entry.source, plan)
        batch = entry.batch
        if batch is None or batch.result is None or (self.broken and not batch.local):
            return Ready(entry.cand, entry.source, plan)
        result = batch.result
        terms = self.terms.get(result.token)
        if terms is None:
            terms = self.terms[result.token] = WorkerTerms()
        if entry.slot == 0:
            # A preparer's new term numbers, learnt before any of its batch is used.
            terms.strings.extend(result.fresh)
        return Ready(entry.cand, entry.source, plan, result.outcomes[entry.slot], terms)

    def _prepare_here(self, batch: _Batch) -> None:
        if self.local is None:
            self.local = Worker(self.analyzer, self.chunker)
        batch.result = prepare_with(self.local, batch.tasks())
        batch.local = True

    def _collect(self, batch: _Batch) -> None:
        if self.pool is None or batch.future is None:  # the pool broke meanwhile: read here
            return
        try:
            batch.result = self.pool.result(batch.future)
        except Exception as exc:  # a worker died (killed, out of memory) or its result did not arrive
            self._break(exc)

    def _submit(self, tasks: list[Task]) -> Future[str] | None:
        try:
            if self.pool is None:
                self.pool = Pool(self.analyzer, self.chunker, self.workers - 1, self.method)
                self.started = self.workers - 1
            return self.pool.submit(tasks)
        except Exception as exc:  # cannot start processes here (limits, sandbox): read serially
            self._break(exc)
            return None

    def _break(self, exc: BaseException) -> None:
        if not self.broken:
            logger.warning(
                "worker processes failed (%s: %s); reading the remaining files in this process", type(exc).__name__, exc
            )
        self.broken = True
        self._stop_pool()

    def _stop_pool(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()

    def close(self) -> None:
        """At the end of the run: stop the workers, drop the term maps and this process's worker."""
        self._stop_pool()
        self.local = None
        self.terms.clear()
