"""Ingesting files and folders into a knowledge base, and keeping them in sync.

One ingest walks its roots (see :mod:`._discovery`), reads each selected file
(see :mod:`._readers`) and replaces the file's source in the knowledge base
as a whole, so a changed file never leaves chunks of its old version behind.
Unchanged files are recognised by size and mtime, then by content hash, and
are not parsed again.  After a complete walk of a folder, the sources that
came from that folder and were not selected this time are removed (sync).

With ``index_path`` the knowledge base is saved every few files or seconds:
an ingest killed midway keeps what was saved, and running it again finishes
the rest (the saved files come back as unchanged).  An interrupt (Ctrl-C)
between files saves what was indexed so far; one that lands while a file is
being added or removed, or the index saved, keeps the last checkpoint instead,
since the index in memory may then hold part of a source under the whole
file's fingerprint (which a re-run would call unchanged).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, TypeGuard, Union

from .._engine._counting import CountedChunk
from .._exceptions import ConfigError, IngestError
from .._gc_pause import collector_paused
from .._text._analysis import Analyzer
from .._text._chunking import Chunker
from ._discovery import (
    DEFAULT_SKIP_DIRS,
    Candidate,
    DiscoveryOptions,
    Skipped,
    discover,
    single_file,
)
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
    DEFAULT_EXTENSIONS,
    READER_ERRORS,
    READER_VERSION,
    STREAMED_FORMATS,
    Document,
    SkipFile,
    content_known,
    has_private_key,
    read_document,
)

__all__ = ["IngestReport", "Progress", "ProgressHook", "ingest"]

logger = logging.getLogger(__name__)

StrPath = Union[str, "os.PathLike[str]"]

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024
DEFAULT_MAX_RECORD_FILE_SIZE = 256 * 1024 * 1024


class _KnowledgeBaseLike(Protocol):
    def add_text(
        self,
        text: str,
        source: str,
        metadata: dict[str, Any] | None = None,
        *,
        sections: Sequence[tuple[int, int, str | None]] | None = None,
    ) -> int: ...

    def remove(self, source: str) -> int: ...

    def sources(self) -> list[str]: ...

    def source_metadata(self, source: str) -> Mapping[str, Any] | None: ...

    def save(self, path: StrPath, *, overwrite: bool = False) -> Any: ...


class _TakesPrepared(_KnowledgeBaseLike, Protocol):
    """A :class:`KnowledgeBase`: it takes files already read, and chunks counted elsewhere."""

    analyzer: Analyzer
    chunker: Chunker

    def add_prepared(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sequence[tuple[int, int, str | None]] | None,
        *,
        content: str,
        counted: Callable[[Mapping[str, int]], Iterable[CountedChunk]] | None = None,
    ) -> int: ...

    def takes_prepared(self) -> bool: ...


@dataclass
class IngestReport:
    """What one ingest did.  Paths are source names (relative to their root).

    ``skipped`` lists ``(path, reason)`` for every file or pruned folder that
    was not indexed; folders end with ``/``.  ``chunks_total`` is the size of
    the knowledge base afterwards.
    """

    roots: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    chunks_added: int = 0
    chunks_removed: int = 0
    chunks_total: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    saves: int = 0
    workers: int = 0  # worker processes that read and counted files (0: all done in this process)

    def skip_reasons(self) -> dict[str, int]:
        """How many skips of each kind (reasons without their specifics)."""
        return dict(Counter(_reason_kind(reason) for _, reason in self.skipped).most_common())

    def summary(self) -> str:
        """One line for people: counts, chunks, time."""
        parts = [
            f"{len(self.added)} added",
            f"{len(self.updated)} updated",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.removed)} removed",
            f"{len(self.skipped)} skipped",
        ]
        rate = ""
        if self.seconds > 0:
            mb = self.bytes_read / 1e6
            helpers = f", {self.workers} worker process{'es' if self.workers != 1 else ''}" if self.workers else ""
            rate = f" in {self.seconds:.1f}s ({mb / self.seconds:.1f} MB/s{helpers})"
        return (
            ", ".join(parts)
            + f"; {self.chunks_added} chunks added, {self.chunks_removed} removed,"
            + f" {self.chunks_total} in the index{rate}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``clanker-rag ingest --json``)."""
        return {
            "roots": list(self.roots),
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "removed": list(self.removed),
            "skipped": [[path, reason] for path, reason in self.skipped],
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "chunks_total": self.chunks_total,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "workers": self.workers,
        }


def _reason_kind(reason: str) -> str:
    if reason.endswith("not in the allow-list"):
        return "not in the allow-list"
    for sep in (" (", ": "):
        if sep in reason:
            reason = reason.split(sep, 1)[0]
    return reason


ProgressHook = Callable[[int, int], None]


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

    def update(self, done: int, *, force: bool = False) -> None:
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
        self.stream.write(f"\r[{bar}] {done}/{self.total} files  {rate:.0f} files/s  ETA {mins}:{secs:02d} ")
        self.stream.flush()

    def close(self, done: int) -> None:
        if self.stream is None and self.hook is None:
            return
        self.update(done, force=True)
        if self.stream is None:
            return
        self.stream.write("\n")
        self.stream.flush()


def _chunk_budget(kb: object) -> int | None:
    for owner in (kb, getattr(kb, "chunker", None)):
        size = getattr(owner, "chunk_size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    return None


def _check_positive(name: str, value: object, *, allow_float: bool = False) -> None:
    types: tuple[type, ...] = (int, float) if allow_float else (int,)
    if isinstance(value, bool) or not isinstance(value, types) or value <= 0:  # type: ignore[operator]
        kind = "number" if allow_float else "integer"
        raise ConfigError(f"{name}={value!r} is out of range: expected a positive {kind}")


DEFAULT_CHECKPOINT_FILES = 500


def ingest(
    kb: _KnowledgeBaseLike,
    path: StrPath | Sequence[StrPath],
    *,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    extensions: Iterable[str] | None = None,
    skip_dirs: Iterable[str] | None = None,
    gitignore: bool = True,
    secret_guard: bool = True,
    follow_symlinks: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    max_record_file_size: int = DEFAULT_MAX_RECORD_FILE_SIZE,
    sync: bool = True,
    prefix: str = "",
    index_path: StrPath | None = None,
    checkpoint_files: int | None = None,
    checkpoint_seconds: float = 30.0,
    progress: bool | ProgressHook | None = None,
    jobs: int | None = None,
    overwrite: bool = False,
) -> IngestReport:
    """Ingest files and folders into ``kb``; returns an :class:`IngestReport`.

    Parameters
    ----------
    path:
        A file, a folder, or a list of them.  Sources are named by their path
        relative to the folder given (posix separators); a file given on its
        own is named by its file name.  With several folders, each folder's
        sources start with the folder's name (``docs/guide.md``).
    include, exclude:
        gitignore-style globs on the relative path (``*.md``, ``docs/**``).
        With ``include``, a file is selected only if it matches one (even if
        its extension is not on the allow-list); ``exclude`` always wins.
    extensions:
        Replaces the default allow-list of extensions (``[".md", "py"]``).
    skip_dirs:
        Replaces the folder names that are never entered (``.git``,
        ``node_modules``, ``__pycache__``, ``dist``, ``build``...).
        Virtualenvs (folders holding ``pyvenv.cfg``) are always skipped.
    gitignore:
        Honour ``.gitignore`` files in the tree and in the enclosing repository.
    secret_guard:
        Refuse credential files by name (``.env*``, ``*.pem``, ``id_rsa*``...)
        and any file whose text holds a private-key block.  On by default;
        ``False`` turns it off.
    follow_symlinks:
        Follow symlinks that point outside the root (inside ones always are;
        loops are detected either way).
    max_file_size, max_record_file_size:
        Size caps in bytes, checked before reading; the second applies to the
        streamed record formats (CSV, TSV, JSON, JSONL).
    sync:
        After walking a folder completely, remove the sources of that folder
        that were not selected this time (deleted, now ignored, now skipped).
    prefix:
        Put before every source name (``"docs/"``) to keep roots apart.
    index_path:
        Save the knowledge base there as it goes and at the end: every
        ``checkpoint_files`` indexed files when that is given; otherwise
        after the first 500 files, then every ``checkpoint_seconds`` seconds
        but never sooner than four times the last save took, so saving a
        large index stays under a fifth of the run.
    progress:
        Show a progress bar on stderr; ``None`` shows it when stderr is a
        terminal; a callable is called as ``progress(files done, files)`` instead.
    jobs:
        Worker processes that read, chunk and count files while this one
        indexes them; ``1`` reads everything here.  ``None`` (the default)
        uses one per core when there are enough files to be worth it, the
        platform forks (Linux, BSD), no other thread is running and ``kb``
        is a :class:`KnowledgeBase` with the built-in analyser.  An explicit
        ``jobs`` above 1 in a program running threads (or on macOS and
        Windows) starts workers by spawning, which needs the usual
        ``if __name__ == "__main__":`` guard.  The index is the same either way.
        More than the usable CPUs is honoured with a logged warning (the
        command line caps ``-j`` at them).
    overwrite:
        Let ``index_path`` name a folder that already holds an index ``kb``
        was not loaded from; without it such an ingest is refused before any
        file is read, so an existing index is never replaced by accident.
    """
    _check_positive("max_file_size", max_file_size)
    _check_positive("max_record_file_size", max_record_file_size)
    if checkpoint_files is not None:
        _check_positive("checkpoint_files", checkpoint_files)
    _check_positive("checkpoint_seconds", checkpoint_seconds, allow_float=True)
    if jobs is not None:
        _check_positive("jobs", jobs)
    paths: list[StrPath] = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise IngestError("nothing to ingest: no path given")
    roots = [os.fspath(p) for p in paths]
    for p in roots:
        if not os.path.exists(p):
            raise IngestError(f"cannot ingest {p!r}: no such file or folder")
    if index_path is not None and not overwrite:
        # Checked before any work, not at the first checkpoint minutes later.
        would_replace = getattr(kb, "would_replace", None)
        if callable(would_replace) and would_replace(index_path):
            raise ConfigError(
                f"{os.fspath(index_path)}: already holds an index that this knowledge base was not loaded from; "
                "ingesting would replace its documents (load it and ingest into it, or pass overwrite=True)"
            )
    options = DiscoveryOptions(
        include=tuple(include),
        exclude=tuple(exclude),
        extensions=DEFAULT_EXTENSIONS if extensions is None else DiscoveryOptions.normalise_extensions(extensions),
        skip_dirs=DEFAULT_SKIP_DIRS if skip_dirs is None else frozenset(skip_dirs),
        gitignore=gitignore,
        secret_guard=secret_guard,
        follow_symlinks=follow_symlinks,
        skip_real=frozenset({os.path.realpath(index_path)}) if index_path is not None else frozenset(),
    )
    run = _Run(
        kb, options, max_file_size, max_record_file_size, prefix, index_path, checkpoint_files, checkpoint_seconds, jobs
    )
    run.overwrite = overwrite
    show: bool | ProgressHook = sys.stderr.isatty() if progress is None else progress
    started = time.monotonic()
    try:
        with collector_paused():
            try:
                for root in roots:
                    # Several roots: each one's sources start with its folder name
                    # ("docs/guide.md", "src/app.py") so equal relative paths
                    # (two __init__.py) cannot overwrite each other.
                    run.prefix = prefix + _root_name(root) + "/" if len(roots) > 1 and os.path.isdir(root) else prefix
                    run.ingest_root(root, sync=sync, show_progress=show)
            finally:
                # Before the collector resumes: what only the run needed
                # (the local worker's caches) is freed, not walked.
                run.close_pool()
    finally:
        run.report.seconds = time.monotonic() - started
        # A checkpoint save that was stopped is not tried again: the folder
        # holds the last checkpoint or that one, both whole.
        if run.dirty and index_path is not None and not run.save_stopped:
            if run.torn and not run.intact():
                # Stopped (Ctrl-C, an error) in the middle of changing the
                # index: what is in memory may hold part of a source under
                # its whole file's fingerprint, which a re-run would call
                # unchanged.  The last checkpoint on disk is whole: keep it.
                logger.warning(
                    "stopped while changing the index: not saving; %s keeps its last checkpoint "
                    "(run the ingest again to finish)",
                    os.fspath(index_path),
                )
            else:
                run.save()
        size = getattr(kb, "__len__", None)
        run.report.chunks_total = size() if callable(size) else 0
    return run.report


def _root_name(root: str) -> str:
    return os.path.basename(os.path.realpath(root)) or "root"


def _plain_kb(kb: object) -> TypeGuard[_TakesPrepared]:
    """Whether ``kb`` is a KnowledgeBase whose add_text is its own (not overridden or wrapped)."""
    takes = getattr(kb, "takes_prepared", None)
    return callable(takes) and takes() is True


def _workers_for(kb: _TakesPrepared, jobs: int | None) -> tuple[int, str]:
    """Processes that read and count for an ingest, this one included (1: this
    one alone), and the start method of the others."""
    if jobs == 1:
        return 1, ""
    reason = can_parallel(kb.analyzer, kb.chunker)
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
        self,
        kb: _KnowledgeBaseLike,
        options: DiscoveryOptions,
        max_file_size: int,
        max_record_file_size: int,
        prefix: str,
        index_path: StrPath | None,
        checkpoint_files: int | None,
        checkpoint_seconds: float,
        jobs: int | None = 1,
    ) -> None:
        self.kb = kb
        self.options = options
        self.max_file_size = max_file_size
        self.max_record_file_size = max_record_file_size
        self.prefix = prefix
        self.index_path = index_path
        self.overwrite = False
        self.checkpoint_files = checkpoint_files
        self.checkpoint_seconds = checkpoint_seconds
        self.budget = _chunk_budget(kb)
        self.report = IngestReport()
        self.dirty = 0
        # Set when an add, a removal or a save was stopped midway (an
        # interrupt, an error): the knowledge base in memory may then hold a
        # source only in part, and must not be saved.
        self.torn = False
        self.save_stopped = False  # a save raised or was interrupted
        self.last_save = time.monotonic()
        self.save_seconds = 0.0  # how long the last save took
        self.root_id = ""
        # A plain KnowledgeBase takes chunks counted by workers and the file
        # hash for its change check; anything else gets add_text calls.
        self.plain: _TakesPrepared | None = kb if _plain_kb(kb) else None
        self.reader: ParallelReader | None = None
        if self.plain is not None:
            workers, method = _workers_for(self.plain, jobs)
            if workers > 1:
                self.reader = ParallelReader(self.plain.analyzer, self.plain.chunker, workers, method, self.budget)

    def intact(self) -> bool:
        """After a change stopped midway: whether the knowledge base can tell it
        was left whole (a :class:`KnowledgeBase` knows; anything else is not trusted)."""
        is_intact = getattr(self.kb, "is_intact", None)
        return callable(is_intact) and is_intact() is True

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Around every change of the knowledge base: one stopped midway marks the run torn."""
        try:
            yield
        except BaseException:
            self.torn = True
            raise

    def save(self) -> None:
        assert self.index_path is not None
        started = time.monotonic()
        # A save packs the index in memory before writing it (a refresh):
        # stopped there, what is in memory is not known to be whole.  Nor is
        # another save tried: the folder holds the old index or the new one.
        self.save_stopped = True
        self.kb.save(self.index_path, overwrite=self.overwrite)
        self.save_stopped = False
        self.overwrite = False  # after the first save the folder is this knowledge base's own
        self.report.saves += 1
        self.dirty = 0
        self.last_save = time.monotonic()
        self.save_seconds = self.last_save - started
        logger.debug("checkpoint saved to %s in %.2fs", self.index_path, self.save_seconds)

    def _maybe_checkpoint(self) -> None:
        if self.index_path is None or not self.dirty:
            return
        if self.checkpoint_files is not None and self.dirty >= self.checkpoint_files:
            self.save()
            return
        # A save rewrites the whole index, so its cost grows with the index:
        # spacing saves by four of their durations keeps them under a fifth
        # of a long run, however large the index gets.
        # The first save comes after a few hundred files, so even a short run
        # killed early keeps most of its work; later ones come by the clock.
        elapsed = time.monotonic() - self.last_save
        first = self.checkpoint_files is None and self.report.saves == 0 and self.dirty >= DEFAULT_CHECKPOINT_FILES
        if first or (elapsed >= self.checkpoint_seconds and elapsed >= 4 * self.save_seconds):
            self.save()

    def skip(self, rel: str, reason: str, *, level: int = logging.DEBUG) -> None:
        self.report.skipped.append((rel, reason))
        logger.log(level, "skipped %s: %s", rel, reason)

    def ingest_root(self, root: str, *, sync: bool, show_progress: bool | ProgressHook) -> None:
        is_dir = os.path.isdir(root)
        root_id = os.path.realpath(root if is_dir else os.path.dirname(os.path.abspath(root)))
        self.report.roots.append(root_id)
        candidates: list[Candidate] = []
        # Files whose indexed chunks must survive this run: read fine, or
        # failed only for the moment (unreadable, vanished, changed meanwhile).
        keep: set[str] = set()
        keep_folders: list[str] = []  # folders that could not be listed this time
        entries = discover(root, self.options) if is_dir else iter([single_file(root, self.options)])
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
        hook = show_progress if callable(show_progress) else None
        bar = Progress(len(candidates), sys.stderr if show_progress and hook is None else None, hook)
        self.root_id = root_id
        if self.reader is not None and not self.reader.broken:
            files = [(cand, self.prefix + cand.rel) for cand in candidates]
            for done, ready in enumerate(self.reader.read(files, self._plan), start=1):
                if self._settle_ready(ready):
                    keep.add(ready.source)
                self._maybe_checkpoint()
                bar.update(done)
            self.report.workers = max(self.report.workers, self.reader.started)
        else:
            for done, cand in enumerate(candidates, start=1):
                source = self.prefix + cand.rel
                if self._one(cand, source):
                    keep.add(source)
                self._maybe_checkpoint()
                bar.update(done)
        bar.close(len(candidates))
        if sync and is_dir:
            self._sync(root_id, keep, tuple(keep_folders))

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
        if old is not None and old.get("root") not in (None, root_id):
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
        counted: Callable[[Mapping[str, int]], Iterable[CountedChunk]] | None,
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
            "root": self.root_id,
            "format": cand.fmt,
            "size": doc.size,
            "mtime_ns": doc.mtime_ns,
            "sha256": doc.sha256,
            "encoding": doc.encoding,
            "reader": READER_VERSION,
        }
        with self._changing():
            if self.plain is not None:
                n = self.plain.add_prepared(
                    doc.text, source, metadata, doc.sections, content=doc.sha256, counted=counted
                )
            else:
                n = self.kb.add_text(doc.text, source, metadata, sections=doc.sections)
        self.report.chunks_added += n
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

    def _sync(self, root_id: str, keep: set[str], keep_folders: tuple[str, ...]) -> None:
        kb = self.kb
        for source in kb.sources():
            if source in keep or (keep_folders and source.startswith(keep_folders)):
                continue
            meta = kb.source_metadata(source)
            if meta is None or meta.get("root") != root_id:
                continue
            if self.prefix and not source.startswith(self.prefix):
                continue
            with self._changing():
                removed = kb.remove(source)
            self.report.chunks_removed += removed
            self.report.removed.append(source)
            self.dirty += 1
            logger.info("removed %s: no longer selected in %s", source, root_id)
