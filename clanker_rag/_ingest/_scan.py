"""Scanning the files an ingest would read, cheaply and often (for ``ingest --watch``).

A scan is a snapshot: source name -> :class:`FileStamp` (size, modification
time, inode) of every file the ingest's selection takes (allow-list,
``.gitignore``, skipped folders, the secret guard, the index folder left
out), named as the ingest names its sources.

:func:`scan_roots` is the full scan: the ingest's own walk, then a ``stat``
per file.  :class:`Scanner` repeats it cheaply: between full scans it stats
only what the last one found: the selected files, every folder entered
(whose modification time moves when an entry is added, removed or renamed
in it) and the ``.gitignore`` files in them.  Any of those changing makes
the scan a full one, so its answer is the full scan's.  What none of those
stats can see (an ignore file above the root, ``.git/info/exclude``, the far
side of a symlinked folder, a folder changed within the filesystem clock's
tick of being stamped) is caught by a full scan at least every
``full_every`` seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ._discovery import Candidate, DiscoveryOptions, Skipped, discover, resolved, single_file, skipped_by_name

__all__ = ["FULL_SCAN_SECONDS", "FileStamp", "Scanner", "Snapshot", "scan_roots"]

FULL_SCAN_SECONDS = 5.0
# A folder stamped less than this after its last change may change again
# within the same clock tick unseen: it is not trusted (the next scan is full).
_RACY_NS = 50_000_000
_UNTRUSTED = -1

StatFn = Callable[[str], os.stat_result]


class FileStamp(NamedTuple):
    """What a scan records of one file: enough to tell an edit, and a rename, apart."""

    size: int
    mtime_ns: int
    inode: int


Snapshot = Mapping[str, FileStamp]
"""Source name -> stamp of every file a scan selected."""


def _name_prefixes(roots: Sequence[str], prefix: str) -> list[str]:
    # The ingest's naming: with several roots, a folder's sources start with
    # its name (tests/ingest/test_watch.py checks the two agree).
    if len(roots) < 2:
        return [prefix for _ in roots]
    return [
        prefix + (os.path.basename(os.path.realpath(root)) or "root") + "/" if os.path.isdir(root) else prefix
        for root in roots
    ]


@dataclass
class _Walk:
    stamps: dict[str, FileStamp] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # source name -> file path
    pruned: dict[str, set[str]] = field(default_factory=dict)  # root -> folders the walk did not enter ("a/b/")


def _walk(roots: Sequence[str], options: DiscoveryOptions, prefix: str, stat: StatFn) -> _Walk:
    walk = _Walk()
    for root, name_prefix in zip(roots, _name_prefixes(roots, prefix), strict=True):
        entries: Iterable[Candidate | Skipped]
        if os.path.isdir(root):
            entries = discover(root, options)
        elif os.path.exists(root):
            entries = [single_file(root, options)]
        else:
            continue
        pruned = walk.pruned.setdefault(root, set())
        for item in entries:
            if isinstance(item, Skipped):
                if item.rel.endswith("/"):
                    pruned.add(item.rel)
                continue
            try:
                st = stat(item.path)
            except OSError:
                continue
            name = name_prefix + item.rel
            walk.stamps[name] = FileStamp(st.st_size, st.st_mtime_ns, st.st_ino)
            walk.paths[name] = item.path
    return walk


def scan_roots(
    roots: Sequence[str], options: DiscoveryOptions, *, prefix: str = "", stat: StatFn = os.stat
) -> dict[str, FileStamp]:
    """The full scan: stamp every file an ingest of ``roots`` would select, by the source name it would get.

    A file that goes away between the walk and its ``stat`` is left out, as
    if the walk had not seen it; so is a root that does not exist now.
    """
    return _walk(roots, options, prefix, stat).stamps


Mark = tuple[int, int] | None  # a folder's or ignore file's (mtime_ns, inode); None: absent or not trusted


def _mark(path: str, stat: StatFn, now_ns: int) -> Mark:
    try:
        st = stat(path)
    except OSError:
        return None
    if now_ns - st.st_mtime_ns < _RACY_NS:
        return (_UNTRUSTED, st.st_ino)  # the next look is a full scan
    return (st.st_mtime_ns, st.st_ino)


def _folders(root: str, pruned: set[str], options: DiscoveryOptions) -> Iterable[str]:
    """The folders under ``root`` a walk enters (the real ones; symlinked folders are left to full scans).

    ``pruned`` are the folders the last walk did not enter; folders skipped by
    name and the index folder are left out before any walk has said so (the
    index folder changes at every commit, ``node_modules`` can be huge).
    """
    stack = [(root, "")]
    while stack:
        path, rel = stack.pop()
        yield path
        try:
            with os.scandir(path) as it:
                subdirs = [(e.path, e.name, rel + e.name + "/") for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for sub, name, sub_rel in subdirs:
            if sub_rel in pruned or skipped_by_name(name, sub, options):
                continue
            if options.skip_real and resolved(sub) in options.skip_real:
                continue
            stack.append((sub, sub_rel))


class Scanner:
    """Scans of ``roots`` as the ingest selects them; full only when something says so.

    ``clock`` (seconds) times the full scans; ``stat`` is ``os.stat`` unless a
    test injects one.  ``full_scans`` counts them.
    """

    def __init__(
        self,
        roots: Sequence[str],
        options: DiscoveryOptions,
        *,
        prefix: str = "",
        full_every: float = FULL_SCAN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        stat: StatFn = os.stat,
    ) -> None:
        self.roots = list(roots)
        self.options = options
        self.prefix = prefix
        self.full_every = full_every
        self.clock = clock
        self.stat = stat
        self.full_scans = 0
        self._last_full: float | None = None
        self._paths: dict[str, str] = {}
        self._marks: dict[str, Mark] = {}
        self._pruned: dict[str, set[str]] = {}

    def scan(self) -> dict[str, FileStamp]:
        if self._last_full is None or self.clock() - self._last_full >= self.full_every:
            return self.full()
        quick = self._quick()
        return self.full() if quick is None else quick

    def full(self) -> dict[str, FileStamp]:
        self._last_full = self.clock()
        self.full_scans += 1
        # Folders are stamped before the walk: a change after their stamp,
        # even one the walk below misses, moves a stamp the next look compares.
        now_ns = time.time_ns()
        marks: dict[str, Mark] = {}
        for root in self.roots:
            if not os.path.isdir(root):
                marks[root] = _mark(root, self.stat, now_ns)
                continue
            for folder in _folders(root, self._pruned.get(root, set()), self.options):
                marks[folder] = _mark(folder, self.stat, now_ns)
                if self.options.gitignore:
                    ignore = os.path.join(folder, ".gitignore")
                    marks[ignore] = _mark(ignore, self.stat, now_ns)
        walk = _walk(self.roots, self.options, self.prefix, self.stat)
        self._marks, self._paths, self._pruned = marks, walk.paths, walk.pruned
        return walk.stamps

    def _quick(self) -> dict[str, FileStamp] | None:
        """The files' stamps, or None when a folder or ignore file changed (a full scan is due)."""
        now_ns = time.time_ns()
        for path, mark in self._marks.items():
            if mark is None:
                # Absent then: present now is a change (a root or ignore file appeared).
                if os.path.lexists(path):
                    return None
            elif mark[0] == _UNTRUSTED or _mark(path, self.stat, now_ns) != mark:
                return None
        stamps: dict[str, FileStamp] = {}
        for name, path in self._paths.items():
            try:
                st = self.stat(path)
            except OSError:
                return None
            stamps[name] = FileStamp(st.st_size, st.st_mtime_ns, st.st_ino)
        return stamps
