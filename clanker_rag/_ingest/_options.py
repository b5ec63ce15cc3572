"""How an ingest selects, reads and saves: :class:`IngestOptions`, checked once when made.

``KnowledgeBase.ingest(path, **options)`` and ``ShardedKnowledgeBase.ingest``
take these fields as keywords and build one :class:`IngestOptions` of them;
the run (``_run``), the watcher's scans (``_scan``, ``_watch``) and the
cluster's shards all read that one object, so a keyword means the same
everywhere and a bad value is refused before any file is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .._exceptions import ConfigError
from .._types import StrPath
from ._discovery import DEFAULT_SKIP_DIRS, DiscoveryOptions
from ._readers import DEFAULT_EXTENSIONS

__all__ = [
    "DEFAULT_CHECKPOINT_FILES",
    "DEFAULT_MAX_FILE_SIZE",
    "DEFAULT_MAX_RECORD_FILE_SIZE",
    "IngestOptions",
    "ProgressHook",
]

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024
DEFAULT_MAX_RECORD_FILE_SIZE = 256 * 1024 * 1024
# Files indexed before the first checkpoint when no checkpoint_files is given.
DEFAULT_CHECKPOINT_FILES = 500

ProgressHook = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """An ingest's settings (the keywords of ``KnowledgeBase.ingest``).

    ``include``, ``exclude``
        Globs.  ``include`` globs are those of ``search --filter`` (``*``
        crosses folders) on the source name or the path in the root; a file
        is selected only if it matches one (even if its extension is not on
        the allow-list).  ``exclude`` globs are gitignore-style, on the path
        in the root (``*.md``, ``docs/**``), and always win.
    ``extensions``
        Replaces the default allow-list of extensions (``[".md", "py"]``).
    ``skip_dirs``
        Replaces the folder names that are never entered (``.git``,
        ``node_modules``, ``__pycache__``, ``dist``, ``build``...).
        Virtual environments (folders holding ``pyvenv.cfg`` or ``conda-meta``)
        are always skipped, whatever their name.
    ``gitignore``
        Honour ``.gitignore`` files in the tree and in the enclosing repository.
    ``secret_guard``
        Refuse credential files by name (``.env*``, ``*.pem``, ``id_rsa*``...)
        and any file whose text holds a private-key block.  On by default.
    ``follow_symlinks``
        Follow symlinks that point outside the root (inside ones always are;
        loops are detected either way).
    ``max_file_size``, ``max_record_file_size``
        Size caps in bytes, checked before reading; the second applies to the
        streamed record formats (CSV, TSV, JSON, JSONL).
    ``sync``
        After walking a folder completely, remove the sources of that folder
        that were not selected this time (deleted, now ignored, now skipped).
    ``prefix``
        Put before every source name (``"docs/"``) to keep roots apart.
    ``index_path``
        Save the knowledge base there as it goes and at the end: every
        ``checkpoint_files`` indexed files when that is given; otherwise
        after the first 500 files, then every ``checkpoint_seconds`` seconds
        but never sooner than four times the last save took, so saving a
        large index stays under a fifth of the run.
    ``progress``
        Show a progress bar on stderr; ``None`` shows it when stderr is a
        terminal; a callable is called as ``progress(files done, files)`` instead.
    ``jobs``
        Worker processes that read, chunk and count files while this one
        indexes them; ``1`` reads everything here.  ``None`` (the default)
        uses one per core when there are enough files to be worth it, the
        platform forks (Linux, BSD), no other thread is running and the
        knowledge base is a :class:`KnowledgeBase` with the built-in
        analyser.  An explicit ``jobs`` above 1 in a program running threads
        (or on macOS and Windows) starts workers by spawning, which needs the
        usual ``if __name__ == "__main__":`` guard.  The index is the same
        either way.  More than the usable CPUs is honoured with a logged
        warning (the command line caps ``-j`` at them).
    ``overwrite``
        Let ``index_path`` name a folder that already holds an index the
        knowledge base was not loaded from; without it such an ingest is
        refused before any file is read, so an existing index is never
        replaced by accident.

    The globs, extensions and folder names may be given as any iterable of
    strings; they are kept as tuples and frozen sets.
    """

    include: Iterable[str] = ()
    exclude: Iterable[str] = ()
    extensions: Iterable[str] | None = None
    skip_dirs: Iterable[str] | None = None
    gitignore: bool = True
    secret_guard: bool = True
    follow_symlinks: bool = False
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    max_record_file_size: int = DEFAULT_MAX_RECORD_FILE_SIZE
    sync: bool = True
    prefix: str = ""
    index_path: StrPath | None = None
    checkpoint_files: int | None = None
    checkpoint_seconds: float = 30.0
    progress: bool | ProgressHook | None = None
    jobs: int | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        _check_positive("max_file_size", self.max_file_size)
        _check_positive("max_record_file_size", self.max_record_file_size)
        if self.checkpoint_files is not None:
            _check_positive("checkpoint_files", self.checkpoint_files)
        _check_positive("checkpoint_seconds", self.checkpoint_seconds, allow_float=True)
        if self.jobs is not None:
            _check_positive("jobs", self.jobs)
        # (A frozen dataclass sets its own fields through object.__setattr__.)
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        if self.extensions is not None:
            object.__setattr__(self, "extensions", DiscoveryOptions.normalise_extensions(self.extensions))
        if self.skip_dirs is not None:
            object.__setattr__(self, "skip_dirs", frozenset(self.skip_dirs))

    def discovery(self) -> DiscoveryOptions:
        """What the walk selects (the index folder itself left out): the ingest's and the watcher's scans alike."""
        index_path = self.index_path
        return DiscoveryOptions(
            include=tuple(self.include),
            exclude=tuple(self.exclude),
            extensions=DEFAULT_EXTENSIONS if self.extensions is None else frozenset(self.extensions),
            skip_dirs=DEFAULT_SKIP_DIRS if self.skip_dirs is None else frozenset(self.skip_dirs),
            gitignore=self.gitignore,
            secret_guard=self.secret_guard,
            follow_symlinks=self.follow_symlinks,
            skip_real=frozenset({os.path.realpath(index_path)}) if index_path is not None else frozenset(),
        )


def _check_positive(name: str, value: object, *, allow_float: bool = False) -> None:
    types: tuple[type, ...] = (int, float) if allow_float else (int,)
    if isinstance(value, bool) or not isinstance(value, types) or value <= 0:  # type: ignore[operator]
        kind = "number" if allow_float else "integer"
        raise ConfigError(f"{name}={value!r} is out of range: expected a positive {kind}")
