"""Ingesting files and folders into a knowledge base, and keeping them in sync.

One ingest walks its roots (see :mod:`._discovery`), reads each selected file
(see :mod:`._readers`) and replaces the file's source in the knowledge base
as a whole, so a changed file never leaves chunks of its old version behind.
Unchanged files are recognised by size and mtime, then by content hash, and
are not parsed again.  After a complete walk of a folder, the sources that
came from that folder and were not selected this time are removed (sync).

Sync is keyed so that its result is that of a fresh ingest of the same path.
Each source records its root three ways (:class:`RootKey`): the folder
resolved (``root``), the path as given, made absolute (``root_path``), and
the resolved folder's device and inode (``root_node``).  A source belongs to
this run's root if any of the three match, so sources stay behind neither
when the path now leads elsewhere (a ``current`` symlink switched with
``ln -sfn``, a watched folder briefly replaced by a symlink: same path,
another target) nor when the folder was renamed (same inode, another
path); sources of other roots ingested into the same index match none.

With ``index_path`` the knowledge base is saved every few files or seconds:
an ingest killed midway keeps what was saved, and running it again finishes
the rest (the saved files come back as unchanged).  An interrupt (Ctrl-C)
saves what was indexed so far and says how much that is: run in the main
thread, the ingest holds a Ctrl-C off while a file is being added or removed
or the index saved (``_Interrupts``), so it always lands between two changes
and the index in memory is whole.  A second Ctrl-C stops at once; a save it
stops leaves the folder with the last checkpoint (saves are atomic).  An
error in the middle of a change keeps the last checkpoint too, since the
index in memory may then hold part of a source under the whole file's
fingerprint (which a re-run would call unchanged).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import IO, Any, NamedTuple

from .._engine._prepared import Counted, PreparedWriter
from .._exceptions import ConfigError, IngestError
from .._gc_pause import collector_paused
from .._types import Sources, StrPath
from ._discovery import Candidate, DiscoveryOptions, Skipped, discover, single_file
from ._options import DEFAULT_CHECKPOINT_FILES, IngestOptions, ProgressHook
from ._parallel import (
    Failed,
    ParallelReader,
    Prepared,
    ReadPlan,
    Ready,
    Refused,
    StatOutcome,
    Unchanged,
    can_parallel,
    start_method,
    usable_cpus,
)
from ._readers import (
    READER_ERRORS,
    READER_VERSION,
    STREAMED_FORMATS,
    Document,
    SkipFile,
    content_known,
    has_private_key,
    read_document,
)
from ._report import IngestReport

__all__ = ["IngestReport", "Progress", "ProgressHook", "ingest"]

logger = logging.getLogger(__name__)


class Progress:
    """A one-line progress bar on stderr: files done, files/s, ETA.

    With ``hook``, ``hook(done, total)`` is called instead (at most ten times
    a second, and at the end): a sharded ingest sends each shard's progress
    to the client, which draws one bar for them all.
    """

    def __init__(self, total: int, stream: IO[str] | None, hook: ProgressHook | None = None) -> None:
        self.total = total
        self.stream = stream
        self.hook = hook
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = 0  # the length of the line last drawn (a shorter one pads over it)
        self.done = 0

    def update(self, done: int, *, force: bool = False) -> None:
        self.done = done
        if self.stream is None and self.hook is None:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        if self.hook is not None:
            self.hook(done, self.total)
        if self.stream is None:
            return
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else 0.0
        width = 24
        filled = int(width * done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        mins, secs = divmod(int(eta), 60)
        self._draw(f"[{bar}] {done}/{self.total} files  {rate:.0f} files/s  ETA {mins}:{secs:02d} ")

    def _draw(self, line: str) -> None:
        assert self.stream is not None
        self.stream.write("\r" + line.ljust(self.shown))
        self.stream.flush()
        self.shown = len(line)

    def note(self, what: str) -> None:
        """Say on the bar's line what holds it up (a checkpoint save); the next update draws over it."""
        if self.stream is None:
            return
        self._draw(f"{self.done}/{self.total} files  {what}")
        self.last = 0.0  # the next update draws the bar again at once

    def stop(self) -> None:
        """End the bar's line where it is (an interrupt): what is said next starts a line of its own."""
        if self.stream is not None and self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = 0

    def close(self, done: int) -> None:
        if self.stream is None and self.hook is None:
            return
        self.update(done, force=True)
        self.stop()


def ingest(
    kb: Sources,
    path: StrPath | Sequence[StrPath],
    options: IngestOptions,
    *,
    writer: PreparedWriter | None = None,
    chunk_size: int | None = None,
    listing: Sequence[Candidate | Skipped] | None = None,
) -> IngestReport:
    """Ingest files and folders into ``kb``; returns an :class:`IngestReport`.

    ``path`` is a file, a folder, or a list of them.  Sources are named by
    their path relative to the folder given (posix separators); a file given
    on its own is named by its file name.  With several folders, each
    folder's sources start with the folder's name (``docs/guide.md``).
    ``options``: see :class:`IngestOptions`.

    ``writer`` is the knowledge base's own index writer (a
    ``KnowledgeBase`` passes it): files go in as read, or as counted by
    worker processes, and the writer says whether a save would replace
    another index and whether an interrupted change left the index whole.
    Without it every file goes through ``kb.add_text`` and an interrupted
    run does not save.  The readers size sections by the chunk size of the
    writer's chunker, else by ``chunk_size`` (the knowledge base's).

    ``listing`` is the walk of the one root ``path`` names, made elsewhere
    (a sharded ingest walks the tree once and gives each shard its files):
    the run takes its files and skips instead of walking.
    """
    paths: list[StrPath] = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise IngestError("nothing to ingest: no path given")
    roots = [os.fspath(p) for p in paths]
    if listing is not None and len(roots) != 1:
        raise ConfigError(f"a listing is the walk of one root, not of {len(roots)}")
    for p in roots:
        if not os.path.exists(p):
            raise IngestError(f"cannot ingest {p!r}: no such file or folder")
    index_path = options.index_path
    if index_path is not None and not options.overwrite and writer is not None and writer.would_replace(index_path):
        # Checked before any work, not at the first checkpoint minutes later.
        raise ConfigError(
            f"{os.fspath(index_path)}: already holds an index that this knowledge base was not loaded from; "
            "ingesting would replace its documents (load it and ingest into it, or pass overwrite=True)"
        )
    run = _Run(kb, options, writer, chunk_size)
    progress = options.progress
    show: bool | ProgressHook = sys.stderr.isatty() if progress is None else progress
    run.say = bool(show) and not callable(show)
    started = time.monotonic()
    run.report.chunks_before = len(kb)
    interrupted = False
    try:
        with run.interrupts:
            try:
                with collector_paused():
                    try:
                        for root in roots:
                            # Several roots: each one's sources start with its folder name
                            # ("docs/guide.md", "src/app.py") so equal relative paths
                            # (two __init__.py) cannot overwrite each other.
                            several = len(roots) > 1 and os.path.isdir(root)
                            run.prefix = options.prefix + _root_name(root) + "/" if several else options.prefix
                            run.ingest_root(root, sync=options.sync, show_progress=show, listing=listing)
                    finally:
                        # Before the collector resumes: what only the run needed
                        # (the local worker's caches) is freed, not walked.
                        run.close_pool()
            except KeyboardInterrupt:
                interrupted = True
                raise
            finally:
                try:
                    _last_save(run, interrupted)
                finally:
                    # The whole run, its last save included.
                    run.report.seconds = time.monotonic() - started
    finally:
        run.report.chunks_total = len(kb)
    return run.report


class RootKey(NamedTuple):
    """What names an ingest root, recorded in each of its sources' metadata (see the module docstring)."""

    resolved: str  # metadata "root"
    given: str  # "root_path": the path as given, absolute, its symlinks not followed
    node: str  # "root_node": "device:inode" of the resolved folder ("" when it cannot be stat'ed)

    @classmethod
    def of(cls, root: str, is_dir: bool) -> RootKey:
        folder = root if is_dir else os.path.dirname(os.path.abspath(root))
        resolved = os.path.realpath(folder)
        try:
            st = os.stat(resolved)
            node = f"{st.st_dev}:{st.st_ino}"
        except OSError:
            node = ""
        return cls(resolved, os.path.abspath(folder), node)

    def metadata(self) -> dict[str, str]:
        return {"root": self.resolved, "root_path": self.given, "root_node": self.node}

    def owns(self, meta: dict[str, Any]) -> bool:
        """Whether a source with metadata ``meta`` came from this root (under any of its names)."""
        return (
            meta.get("root") == self.resolved
            or meta.get("root_path") == self.given
            or (bool(self.node) and meta.get("root_node") == self.node)
        )


def _last_save(run: _Run, interrupted: bool) -> None:
    """At the end of a run, stopped or not: save what it changed since the last checkpoint
    (held off from a Ctrl-C like every save), and after an interrupt say what the folder keeps."""
    index_path = run.index_path
    if index_path is None:
        return
    where = os.fspath(index_path)
    # A checkpoint save that was stopped is not tried again: the folder
    # holds the last checkpoint or that one, both whole.
    if run.save_stopped:
        logger.warning(
            "stopped while saving: %s keeps its last checkpoint, if any; run the same command again to continue",
            where,
        )
        return
    if run.dirty:
        if run.torn and not run.intact():
            # Stopped (an error) in the middle of changing the index: what is
            # in memory may hold part of a source under its whole file's
            # fingerprint, which a re-run would call unchanged.  The last
            # checkpoint on disk is whole: keep it.
            logger.warning(
                "stopped while changing the index: not saving; %s keeps its last checkpoint "
                "(run the ingest again to finish)",
                where,
            )
            return
        if run.say:
            print(f"saving the index to {where} ...", file=sys.stderr, flush=True)
        run.save(last=True)
    if interrupted:
        files, chunks = len(run.kb.sources()), len(run.kb)
        logger.warning(
            "interrupted: kept %d file%s (%d chunk%s) in %s; run the same command again to continue",
            files, "" if files == 1 else "s", chunks, "" if chunks == 1 else "s", where,
        )  # fmt: skip


class _Interrupts:
    """Ctrl-C held off while the index is changed or saved, so it lands between two changes.

    Entered in the main thread with Python's own SIGINT handler in place (an
    application's handler is left alone, and so is the behaviour then); the
    first Ctrl-C that arrives during a held-off part is raised as
    ``KeyboardInterrupt`` when that part ends, any later one at once.
    """

    def __init__(self) -> None:
        self.depth = 0  # held-off parts under way
        self.pending = False  # a Ctrl-C arrived
        self.due = False  # and is raised when the held-off part ends
        self.previous: Any = None
        self.active = False

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._on_signal)
            self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self.previous)
            self.active = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first, self.pending = not self.pending, True
        if self.depth and first:
            self.due = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def held_off(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if self.due and not self.depth:
            self.due = False
            raise KeyboardInterrupt


def _root_name(root: str) -> str:
    return os.path.basename(os.path.realpath(root)) or "root"


def _workers_for(writer: PreparedWriter, jobs: int | None) -> tuple[int, str]:
    """Processes that read and count for an ingest, this one included (1: this
    one alone), and the start method of the others."""
    if jobs == 1:
        return 1, ""
    reason = can_parallel(writer.analyzer, writer.chunker)
    if reason is not None:
        logger.log(logging.INFO if jobs else logging.DEBUG, "ingesting in one process: %s", reason)
        return 1, ""
    method = start_method(explicit=jobs is not None)
    if method is None:
        logger.debug("ingesting in one process: other threads are running (pass jobs=N to use workers anyway)")
        return 1, ""
    cpus = usable_cpus()
    if jobs is not None and jobs > cpus:
        # Honoured (reading from slow network storage can gain from it), but
        # usually a mistake: more processes than cores add forks and memory.
        # The CLI caps -j at the usable CPUs.
        logger.warning("jobs=%d is more than the %d usable CPUs", jobs, cpus)
    n = cpus if jobs is None else jobs
    return (n, method) if n > 1 else (1, "")


class _Run:
    def __init__(
        self, kb: Sources, options: IngestOptions, writer: PreparedWriter | None, chunk_size: int | None
    ) -> None:
        self.kb = kb
        self.writer = writer
        self.options: DiscoveryOptions = options.discovery()
        self.max_file_size = options.max_file_size
        self.max_record_file_size = options.max_record_file_size
        self.prefix = options.prefix
        self.index_path = options.index_path
        self.overwrite = options.overwrite
        self.checkpoint_files = options.checkpoint_files
        self.checkpoint_seconds = options.checkpoint_seconds
        self.budget = writer.chunker.chunk_size if writer is not None else chunk_size
        self.report = IngestReport()
        self.interrupts = _Interrupts()
        self.say = False  # tell the terminal what holds the run up (a save)
        self.bar: Progress | None = None
        self.dirty = 0
        # Set when an add, a removal or a save was stopped midway (an
        # interrupt, an error): the knowledge base in memory may then hold a
        # source only in part, and must not be saved.
        self.torn = False
        self.save_stopped = False  # a save raised or was interrupted
        self.last_save = time.monotonic()
        self.save_seconds = 0.0  # how long the last save took
        self.root_id = ""
        self.root_key = RootKey("", "", "")
        # A knowledge base's own writer takes chunks counted by workers and the
        # file hash for its change check; otherwise kb.add_text is called.
        self.plain = writer if writer is not None and writer.takes_prepared() else None
        self.reader: ParallelReader | None = None
        if self.plain is not None:
            workers, method = _workers_for(self.plain, options.jobs)
            if workers > 1:
                self.reader = ParallelReader(self.plain.analyzer, self.plain.chunker, workers, method, self.budget)

    def intact(self) -> bool:
        """After a change stopped midway: whether the knowledge base's writer can tell it
        was left whole (without a writer it is not trusted)."""
        return self.writer is not None and self.writer.is_intact()

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Around every change of the knowledge base: held off from a Ctrl-C, and one stopped
        midway (an error, a second Ctrl-C) marks the run torn."""
        with self.interrupts.held_off():
            try:
                yield
            except BaseException:
                self.torn = True
                raise

    def save(self, *, last: bool = False) -> None:
        """Save what the run changed: a checkpoint commits it as a new segment (its cost
        that of the change; a run's saves would otherwise each merge the whole index,
        once its changes pass the merge policy's share), the ``last`` save lets the
        policy merge."""
        assert self.index_path is not None
        started = time.monotonic()
        # A save packs the index in memory before writing it (a refresh):
        # stopped there, what is in memory is not known to be whole.  Nor is
        # another save tried: the folder holds the old index or the new one.
        self.save_stopped = True
        with self.interrupts.held_off():  # (a Ctrl-C meanwhile is raised once it is recorded below)
            if self.writer is not None:
                self.writer.commit(self.index_path, overwrite=self.overwrite, merge=last)
            else:
                self.kb.save(self.index_path)
            self.save_stopped = False
            self.overwrite = False  # after the first save the folder is this knowledge base's own
            self.report.saves += 1
            self.dirty = 0
            self.last_save = time.monotonic()
            self.save_seconds = self.last_save - started
        logger.debug("checkpoint saved to %s in %.2fs", self.index_path, self.save_seconds)

    def _checkpoint(self) -> None:
        """A save during the run, said on the progress bar's line (the bar stands still meanwhile)."""
        if self.bar is not None:
            self.bar.note("saving a checkpoint ...")
        self.save()

    def _maybe_checkpoint(self) -> None:
        if self.index_path is None or not self.dirty:
            return
        if self.checkpoint_files is not None and self.dirty >= self.checkpoint_files:
            self._checkpoint()
            return
        # A save's cost grows with what it writes (the first of a new index
        # writes it whole) and a load's with the segments saved: spacing saves
        # by four of their durations keeps them under a fifth of a long run.
        # The first save comes after a few hundred files, so even a short run
        # killed early keeps most of its work; later ones come by the clock.
        elapsed = time.monotonic() - self.last_save
        first = self.checkpoint_files is None and self.report.saves == 0 and self.dirty >= DEFAULT_CHECKPOINT_FILES
        if first or (elapsed >= self.checkpoint_seconds and elapsed >= 4 * self.save_seconds):
            self._checkpoint()

    def skip(self, rel: str, reason: str, *, level: int = logging.DEBUG) -> None:
        self.report.skipped.append((rel, reason))
        logger.log(level, "skipped %s: %s", rel, reason)

    def ingest_root(
        self,
        root: str,
        *,
        sync: bool,
        show_progress: bool | ProgressHook,
        listing: Sequence[Candidate | Skipped] | None = None,
    ) -> None:
        is_dir = os.path.isdir(root)
        key = RootKey.of(root, is_dir)
        root_id = key.resolved
        self.report.roots.append(root_id)
        candidates: list[Candidate] = []
        # Files whose indexed chunks must survive this run: read fine, or
        # failed only for the moment (unreadable, vanished, changed meanwhile).
        keep: set[str] = set()
        keep_folders: list[str] = []  # folders that could not be listed this time
        walk = dataclasses.replace(self.options, source_prefix=self.prefix)
        if listing is not None:
            entries: Iterable[Candidate | Skipped] = listing
        else:
            entries = discover(root, walk) if is_dir else iter([single_file(root, walk)])
        for item in entries:
            if isinstance(item, Skipped):
                self.skip(
                    self.prefix + item.rel, item.reason, level=logging.WARNING if item.transient else logging.DEBUG
                )
                if item.transient:
                    keep.add(self.prefix + item.rel)
                    if item.rel.endswith("/"):
                        keep_folders.append("" if item.rel == "./" else self.prefix + item.rel)
            else:
                candidates.append(item)
        self.report.selected += len(candidates)
        hook = show_progress if callable(show_progress) else None
        bar = Progress(len(candidates), sys.stderr if show_progress and hook is None else None, hook)
        self.root_id = root_id
        self.root_key = key
        self.bar = bar
        try:
            if self.reader is not None and not self.reader.broken:
                files = [(cand, self.prefix + cand.rel) for cand in candidates]
                for done, ready in enumerate(self.reader.read(files, self._plan), start=1):
                    if self._settle_ready(ready):
                        keep.add(ready.source)
                    bar.done = done
                    self._maybe_checkpoint()
                    bar.update(done)
                self.report.workers = max(self.report.workers, self.reader.started)
            else:
                for done, cand in enumerate(candidates, start=1):
                    source = self.prefix + cand.rel
                    if self._one(cand, source):
                        keep.add(source)
                    bar.done = done
                    self._maybe_checkpoint()
                    bar.update(done)
        except BaseException:
            bar.stop()  # what is said next (what the folder keeps) on a line of its own
            raise
        finally:
            self.bar = None
        bar.close(len(candidates))
        if sync and is_dir:
            self._sync(key, keep, tuple(keep_folders))

    def _one(self, cand: Candidate, source: str) -> bool:
        """Index one file; True if its source should stay in the index."""
        plan = self._plan(cand, source)
        if isinstance(plan, StatOutcome):
            return self._settle(source, plan)
        return self._read_here(cand, source, plan)

    def _read_here(self, cand: Candidate, source: str, plan: ReadPlan) -> bool:
        try:
            doc = read_document(
                cand.path,
                cand.fmt,
                max_bytes=plan.cap,
                budget=self.budget,
                known_hash=content_known(plan.sha),
                name=source,
            )
        except SkipFile as exc:
            return self._skipped(cand, source, exc.reason, exc.transient)
        except READER_ERRORS as exc:
            logger.warning("reading %s failed", source, exc_info=True)
            return self._failed(source, f"{type(exc).__name__}: {exc}")
        return self._apply(cand, source, plan, doc, None)

    def _plan(self, cand: Candidate, source: str) -> ReadPlan | StatOutcome:
        """What a file needs: a read, or an outcome known from its metadata and stat alone.

        Nothing is recorded yet, so a parallel ingest can plan files ahead of
        settling them in order.
        """
        root_id = self.root_id
        old = self.kb.source_metadata(source)
        if old is not None and old.get("root") not in (None, root_id) and not self.root_key.owns(old):
            logger.warning(
                "%s from %s replaces the source of the same name from %s; use prefix= to keep both",
                source,
                root_id,
                old.get("root"),
            )
        same_origin = old is not None and old.get("root") == root_id and old.get("reader") == READER_VERSION
        try:
            st = os.stat(cand.path)
        except FileNotFoundError:
            return StatOutcome(False, "vanished before it could be read")
        except OSError as exc:
            # A file that cannot be read for the moment keeps its old chunks.
            return StatOutcome(False, f"unreadable: {exc.strerror or exc}", keep=True)
        if same_origin and old is not None and old.get("size") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            return StatOutcome(True)
        cap = self.max_record_file_size if cand.fmt in STREAMED_FORMATS else self.max_file_size
        sha = old.get("sha256") if same_origin and old is not None else None
        return ReadPlan(old is not None, cap, sha if isinstance(sha, str) else None, st.st_size)

    def _settle(self, source: str, outcome: StatOutcome) -> bool:
        if outcome.unchanged:
            self.report.unchanged.append(source)
            return True
        self.skip(source, outcome.reason, level=logging.WARNING)
        return outcome.keep

    def _skipped(self, cand: Candidate, source: str, reason: str, transient: bool) -> bool:
        self.skip(source, reason, level=logging.WARNING if transient else logging.INFO)
        # A passing failure keeps the old chunks, unless the file is gone.
        return transient and os.path.exists(cand.path)

    def _failed(self, source: str, what: str) -> bool:
        self.skip(source, f"reader failed: {what}", level=logging.WARNING)
        return True

    def _apply(
        self,
        cand: Candidate,
        source: str,
        plan: ReadPlan,
        doc: Document | None,
        counted: Counted | None,
    ) -> bool:
        if doc is None:
            self.report.unchanged.append(source)
            return True
        self.report.bytes_read += doc.size
        if self.options.secret_guard and has_private_key(doc.text):
            self.skip(source, "secret guard: contains a private-key block", level=logging.WARNING)
            return False
        metadata: dict[str, Any] = {
            "path": cand.rel,
            **self.root_key.metadata(),
            "format": cand.fmt,
            "size": doc.size,
            "mtime_ns": doc.mtime_ns,
            "sha256": doc.sha256,
            "encoding": doc.encoding,
            "reader": READER_VERSION,
        }
        # (The change is recorded inside: a Ctrl-C held off meanwhile is raised as the block ends.)
        with self._changing():
            # An add replaces the source's old chunks: what the sizes before and
            # after show beyond the new ones is what it dropped.
            before = len(self.kb)
            if self.plain is not None:
                n = self.plain.add_prepared(
                    doc.text, source, metadata, doc.sections, content=doc.sha256, counted=counted
                )
            else:
                n = self.kb.add_text(doc.text, source, metadata, sections=doc.sections)
            self.report.chunks_added += n
            replaced = before + n - len(self.kb)
            self.report.chunks_replaced += replaced
            self.report.chunks_removed += replaced
            (self.report.updated if plan.existed else self.report.added).append(source)
            self.dirty += 1
        return True

    def close_pool(self) -> None:
        """At the end of the run: stop the workers and drop what only they needed."""
        if self.reader is not None:
            self.reader.close()

    def _settle_ready(self, item: Ready) -> bool:
        """Settle one file of a parallel ingest with what its worker prepared."""
        cand, source, plan, outcome = item.cand, item.source, item.plan, item.outcome
        if plan is None:  # planned after the pool broke
            return self._one(cand, source)
        if isinstance(plan, StatOutcome):
            return self._settle(source, plan)
        if outcome is None:
            return self._read_here(cand, source, plan)
        if isinstance(outcome, Prepared):
            return self._apply(cand, source, plan, outcome.doc, item.chunks)
        if isinstance(outcome, Unchanged):
            return self._apply(cand, source, plan, None, None)
        if isinstance(outcome, Refused):
            return self._skipped(cand, source, outcome.reason, outcome.transient)
        if isinstance(outcome, Failed):
            logger.warning("reading %s failed:\n%s", source, outcome.trace)
            return self._failed(source, outcome.what)
        # Anything else went wrong while preparing it: read the file again
        # here, where it succeeds or fails exactly as in a serial ingest.
        logger.debug("could not prepare %s, reading it again:\n%s", source, outcome.trace)
        return self._read_here(cand, source, plan)

    def _sync(self, key: RootKey, keep: set[str], keep_folders: tuple[str, ...]) -> None:
        kb = self.kb
        for source in kb.sources():
            if source in keep or (keep_folders and source.startswith(keep_folders)):
                continue
            meta = kb.source_metadata(source)
            if meta is None or not key.owns(meta):
                continue
            if self.prefix and not source.startswith(self.prefix):
                continue
            with self._changing():
                removed = kb.remove(source)
                self.report.chunks_removed += removed
                self.report.removed.append(source)
                self.dirty += 1
            logger.info("removed %s: no longer selected in %s", source, key.given)
