"""Live sync: keeping an index in step with its folders while they change (``ingest --watch``).

The watch polls.  Each scan stamps the files the ingest would select
(:mod:`._scan`: a full walk now and then, one ``stat`` per file and folder in
between); two scans are compared by size, modification time and inode
(:func:`changes`).  A burst of edits is
let settle (:class:`Debounce`), then one re-ingest of the roots brings the
knowledge base in step and saves it (:class:`FolderSync`): unchanged files
are passed over by their metadata, a changed file replaces its source whole,
a deleted one is removed by the ingest's sync, a rename is both.

Why polling and not inotify or FSEvents: the standard library only, the same
on every platform and on network filesystems, and one ``stat`` per file; the
interval grows with what a scan costs, so a large tree is not scanned more
than a fifth of the time.

The loop (:func:`watch`) takes its scan, commit, clock, sleep and stop
condition as arguments, so its timing is tested on a fake clock.  A
Ctrl-C that lands between cycles ends it cleanly; one that lands inside a
commit is raised to the caller, and the index folder holds the last
complete commit (saves are atomic).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import ClankerRagError, ConfigError, IndexLockedError, IngestError
from .._types import KnowledgeBaseLike, StrPath
from ._options import IngestOptions
from ._report import IngestReport
from ._scan import FileStamp, Scanner, Snapshot

__all__ = [
    "Changes",
    "Debounce",
    "FileStamp",
    "FolderSync",
    "Snapshot",
    "WatchStats",
    "changes",
    "watch",
]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.25
DEFAULT_QUIET = 0.3
DEFAULT_MAX_DELAY = 2.0
# A scan may take at most this share of the time: the interval stretches to
# scan cost / share on a tree too large to walk four times a second.
SCAN_SHARE = 0.2
# Never less between two scans: no spin, whatever the clock says.
MIN_NAP = 0.01
# A failed commit is tried again after this long, doubling up to the cap.
RETRY_FIRST = 1.0
RETRY_MAX = 60.0


@dataclass(frozen=True, slots=True)
class Changes:
    """What differs between two scans, by source name (each tuple sorted)."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name)

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed or self.renamed)

    def __len__(self) -> int:
        """Files touched (a rename counts once)."""
        return len(self.added) + len(self.modified) + len(self.removed) + len(self.renamed)

    def describe(self) -> str:
        """``2 modified, 1 renamed`` (``no change`` when empty)."""
        parts = [
            f"{len(names)} {label}"
            for label, names in (
                ("added", self.added),
                ("modified", self.modified),
                ("removed", self.removed),
                ("renamed", self.renamed),
            )
            if names
        ]
        return ", ".join(parts) or "no change"


def changes(old: Snapshot, new: Snapshot) -> Changes:
    """What changed from scan ``old`` to scan ``new``.

    A file that left one name and appeared under another with the same
    stamp (inode, size and mtime: what a rename keeps) is a rename; the
    stamp as a whole, not the inode alone, so a new file that reuses a
    deleted one's inode is an addition.
    """
    gone = sorted(old.keys() - new.keys())
    came = sorted(new.keys() - old.keys())
    modified = tuple(sorted(name for name in old.keys() & new.keys() if old[name] != new[name]))
    # Pair one-to-one, in name order: hard links share a stamp.
    arrivals: dict[FileStamp, list[str]] = {}
    for name in came:
        arrivals.setdefault(new[name], []).append(name)
    renamed: list[tuple[str, str]] = []
    removed: list[str] = []
    for name in gone:
        candidates = arrivals.get(old[name])
        if candidates:
            renamed.append((name, candidates.pop(0)))
        else:
            removed.append(name)
    paired = {new_name for _, new_name in renamed}
    added = tuple(name for name in came if name not in paired)
    return Changes(added, modified, tuple(removed), tuple(renamed))


class Debounce:
    """When a scan's changes are committed: once they settle, but not later than a bound.

    ``baseline`` is what the index holds (the scan last committed).  Changes
    are due once a scan ``quiet`` seconds after the last one that saw a
    difference sees none (a burst of saves, a file still being written,
    settles first), or ``max_delay`` seconds after the first unsettled one,
    so a stream of edits that never pauses still commits.  Pure: times are
    passed in.
    """

    def __init__(self, baseline: Snapshot, *, quiet: float, max_delay: float) -> None:
        _check_seconds("quiet", quiet, allow_zero=True)
        _check_seconds("max_delay", max_delay)
        self.quiet = quiet
        self.max_delay = max_delay
        self.baseline: Snapshot = baseline
        self.latest: Snapshot = baseline
        self.first_change: float | None = None  # when the oldest uncommitted change was seen
        self.last_change: float | None = None  # when a scan last saw something new

    @property
    def pending(self) -> bool:
        return self.first_change is not None

    def observe(self, snapshot: Snapshot, now: float) -> None:
        """Take a scan made at ``now``."""
        if snapshot != self.latest:
            self.latest = snapshot
            self.last_change = now
            if self.first_change is None:
                self.first_change = now
        if snapshot == self.baseline:
            # Back to what the index holds (an edit undone): nothing to commit.
            self.first_change = self.last_change = None

    def due(self, now: float) -> bool:
        # Compared with the deadline itself, so a scan woken at the deadline
        # finds the changes due whatever the floating-point rounding.
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def deadline(self) -> float | None:
        """The soonest moment a scan could find the pending changes due."""
        if self.first_change is None or self.last_change is None:
            return None
        return min(self.last_change + self.quiet, self.first_change + self.max_delay)

    def committed(self, snapshot: Snapshot) -> None:
        """``snapshot`` is in the index now; later scans are compared with it."""
        self.baseline = snapshot
        if snapshot == self.latest:
            self.first_change = self.last_change = None


@dataclass
class WatchStats:
    """What one watch did."""

    scans: int = 0
    commits: int = 0
    failures: int = 0  # commits that raised and were tried again
    interrupted: bool = False  # ended by Ctrl-C between cycles
    scan_seconds: float = 0.0  # the last scan's duration


def _check_seconds(name: str, value: object, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok or value != value:  # NaN
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name}={value!r} is out of range: expected a number of seconds {bound}")


def watch(
    scan: Callable[[], Snapshot],
    commit: Callable[[Changes], object],
    *,
    baseline: Snapshot | None = None,
    interval: float = DEFAULT_INTERVAL,
    quiet: float = DEFAULT_QUIET,
    max_delay: float = DEFAULT_MAX_DELAY,
    stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> WatchStats:
    """Scan every ``interval`` seconds and ``commit`` what changed since the last commit, until ``stop()``.

    ``baseline`` is what the index already holds (default: a first scan).
    ``commit(changes)`` is called with the changes since the last commit it
    completed; if it raises a :class:`ClankerRagError` or ``OSError`` the
    failure is logged and the same changes (and any since) are committed
    again after 1 s, then 2 s, 4 s... up to a minute.  A ``KeyboardInterrupt``
    while scanning or sleeping ends the watch (``interrupted`` in the
    returned :class:`WatchStats`); one during a commit is raised.
    """
    _check_seconds("interval", interval)
    _check_seconds("quiet", quiet, allow_zero=True)
    _check_seconds("max_delay", max_delay)
    stats = WatchStats()
    committing = False
    try:
        if baseline is None:
            started = clock()
            baseline = scan()
            stats.scans += 1
            stats.scan_seconds = clock() - started
            if not stop():
                sleep(max(interval, stats.scan_seconds / SCAN_SHARE) - stats.scan_seconds)
        state = Debounce(baseline, quiet=quiet, max_delay=max_delay)
        retry_at = 0.0
        backoff = RETRY_FIRST
        while not stop():
            started = clock()
            try:
                snapshot = scan()
            except OSError as exc:  # the tree changed under the walk (a symlink swapped): look again
                logger.warning("the scan failed (%s); scanning again in %.2gs", exc, interval)
                sleep(interval)
                continue
            now = clock()
            stats.scans += 1
            stats.scan_seconds = now - started
            state.observe(snapshot, now)
            if state.due(now) and now >= retry_at:
                diff = changes(state.baseline, snapshot)
                committing = True
                try:
                    commit(diff)
                except (ClankerRagError, OSError) as exc:
                    stats.failures += 1
                    logger.warning("could not sync the index (%s); trying again in %.0fs", exc, backoff)
                    retry_at = clock() + backoff
                    backoff = min(backoff * 2, RETRY_MAX)
                else:
                    stats.commits += 1
                    state.committed(snapshot)
                    backoff = RETRY_FIRST
                    retry_at = 0.0
                committing = False
                now = clock()
            if stop():
                break
            # Scan no more than SCAN_SHARE of the time, but look again as
            # soon as pending changes may be due.
            step = max(interval, stats.scan_seconds / SCAN_SHARE)
            wake = started + step
            deadline = state.deadline()
            if deadline is not None:
                wake = min(wake, max(deadline, retry_at))
            sleep(max(wake - now, MIN_NAP))
    except KeyboardInterrupt:
        if committing:
            raise
        stats.interrupted = True
    return stats


# -- a folder's scans and commits ----------------------------------------------------------


class FolderSync:
    """Keeps ``kb`` and the index folder ``index_path`` in step with ``paths``.

    :meth:`scan` stamps the files an ingest of ``paths`` selects;
    :meth:`commit` re-ingests them into ``kb`` and saves (only what changed is
    read; with a segmented index the save is a small commit).  ``options`` are
    ``kb.ingest``'s keywords (:class:`IngestOptions`' fields).

    Another process may save the same index between two commits (an MCP
    server's ``ingest``, a second writer): the commit's save is then refused
    as stale, so the index is loaded again (``reload``, by default
    ``type(kb).load(index_path)``) and the failed commit, raised to
    :func:`watch`, is redone on it, keeping the other writer's changes.  After
    any other failure the knowledge base may hold changes that are not
    saved; the next commit saves even if it finds nothing new.
    """

    def __init__(
        self,
        kb: KnowledgeBaseLike,
        paths: StrPath | Sequence[StrPath],
        index_path: StrPath,
        *,
        reload: Callable[[], KnowledgeBaseLike] | None = None,
        **options: Any,
    ) -> None:
        self.kb = kb
        self.paths = [os.fspath(p) for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
        if not self.paths:
            raise ConfigError("nothing to watch: no path given")
        self.index_path = index_path
        options.pop("progress", None)  # no progress bar for each commit
        options.pop("index_path", None)
        self.options = options
        # The commits' selection, checked now: the scans watch exactly the files an ingest reads.
        selection = IngestOptions(index_path=index_path, **options)
        self.scanner = Scanner(self.paths, selection.discovery(), prefix=selection.prefix)
        self._reload = reload if reload is not None else self._load_again
        self._unsaved = False

    def _load_again(self) -> KnowledgeBaseLike:
        loaded: KnowledgeBaseLike = type(self.kb).load(self.index_path)  # type: ignore[attr-defined]
        return loaded

    def scan(self) -> dict[str, FileStamp]:
        return self.scanner.scan()

    def commit(self, diff: Changes | None = None) -> IngestReport:
        """Re-ingest the paths into the knowledge base and save it; ``diff`` only labels the log line."""
        started = time.monotonic()
        unsaved, self._unsaved = self._unsaved, True
        try:
            report = self.kb.ingest(self.paths, index_path=self.index_path, progress=False, **self.options)
            if unsaved and not report.saves:
                self.kb.save(self.index_path)
                report.saves += 1
        except (IngestError, ConfigError):
            # Refused before anything was read (a root gone): nothing new unsaved.
            self._unsaved = unsaved
            raise
        except IndexLockedError:
            # Stale (another process saved) or busy: start again from what is on disk.
            self.kb = self._reload()
            self._unsaved = False
            raise
        self._unsaved = False
        logger.info(
            "synced %s (%s): %d added, %d updated, %d removed in %.2fs",
            os.fspath(self.index_path),
            diff.describe() if diff is not None else "full scan",
            len(report.added),
            len(report.updated),
            len(report.removed),
            time.monotonic() - started,
        )
        return report
