"""``clanker-rag ingest PATH... --watch``: the ingest, then live sync until Ctrl-C.

The first ingest runs as without ``--watch`` (and prints the same report);
then the folders are scanned and each settled burst of changes is one
re-ingest and save (:mod:`clanker_rag._ingest._watch`), shown as one line.

Ctrl-C (or SIGTERM) asks the watch to stop: a commit under way finishes, so
the index is left whole (the command says so at once, since a commit can take
a while), and the command exits 130 (143 after SIGTERM), as any command
stopped by Ctrl-C does.  A second Ctrl-C aborts at once (exit 130); the index
then holds the last complete commit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from .._ingest._run import IngestReport
from .._ingest._watch import Changes, FolderSync, watch
from .._kb import KnowledgeBase
from .._validate import check_number
from ._terminal import counted, one_line, teller

__all__ = ["cycle_line", "watch_command"]

PROG = "clanker-rag"
_NAMES_SHOWN = 5  # per kind in a cycle's line; the rest are counted


def watch_command(
    args: argparse.Namespace,
    path: Path,
    options: dict[str, Any],
    print_report: Callable[[argparse.Namespace, IngestReport, Path], None],
) -> int:
    """Ingest ``args.paths`` into the index at ``path``, then follow them until stopped."""
    for flag, value in (("--interval", args.interval), ("--debounce", args.debounce)):
        check_number(flag, value, 0, 3600, low_open=True)  # seconds
    with KnowledgeBase.edit(path) as kb:
        sync = FolderSync(kb, args.paths, path, **options)
        # Scanned before the first ingest reads anything: an edit made while
        # it runs differs from this and is synced by the first cycle.
        baseline = sync.scan()
        report = kb.ingest(args.paths, index_path=path, **options)
    print_report(args, report, path)
    shown = ", ".join(one_line(str(p)) for p in args.paths)
    print(f"{PROG}: watching {shown} ({counted(len(baseline), 'file')}; Ctrl-C to stop)", file=sys.stderr, flush=True)

    tell = teller(args)
    with _stop_on_signals() as stopping:

        def commit(diff: Changes) -> IngestReport:
            started = time.monotonic()
            # A commit of many changes takes a while: said before it starts, its line comes after.
            tell(f"committing {diff.describe()} ...")
            stopping.committing = True
            try:
                cycle = sync.commit(diff)
            finally:
                stopping.committing = False
            line = cycle_json(cycle, diff) if args.json else cycle_line(cycle, diff, time.monotonic() - started)
            if line:
                print(line, flush=True)
            return cycle

        stats = watch(
            sync.scan,
            commit,
            baseline=baseline,
            interval=args.interval,
            quiet=args.debounce,
            stop=stopping,
            sleep=_napper(stopping),
        )
    print(f"{PROG}: stopped watching after {counted(stats.commits, 'commit')}; index: {path}", file=sys.stderr)
    # Stopped by a signal, so the exit code says which (130 for Ctrl-C), as for every command.
    return 128 + stopping.signum if stopping.signum else 0


def _renames(report: IngestReport, diff: Changes) -> list[tuple[str, str]]:
    """The scan's renames that the ingest carried out (old name removed, new one added)."""
    removed, added = set(report.removed), set(report.added)
    return [(old, new) for old, new in diff.renamed if old in removed and new in added]


def _names(label: str, names: Sequence[str]) -> str:
    shown = ", ".join(one_line(name) for name in names[:_NAMES_SHOWN])
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return f"{label} {shown}{more}"


def cycle_line(report: IngestReport, diff: Changes, seconds: float) -> str:
    """One line for a commit: what changed in the index, what could not be read; ``""`` when nothing did."""
    renamed = _renames(report, diff)
    moved_from = {old for old, _ in renamed}
    moved_to = {new for _, new in renamed}
    parts = []
    for label, names in (
        ("updated", report.updated),
        ("added", [n for n in report.added if n not in moved_to]),
        ("removed", [n for n in report.removed if n not in moved_from]),
    ):
        if names:
            parts.append(_names(label, names))
    if renamed:
        pairs = [f"{one_line(old)} -> {one_line(new)}" for old, new in renamed[:_NAMES_SHOWN]]
        more = f" and {len(renamed) - _NAMES_SHOWN} more" if len(renamed) > _NAMES_SHOWN else ""
        parts.append("renamed " + ", ".join(pairs) + more)
    # A file the scan saw change but the ingest passed over says why.
    touched = set(diff.added) | set(diff.modified) | {new for _, new in diff.renamed}
    for name, reason in report.skipped:
        if name in touched:
            parts.append(f"skipped {one_line(name)} ({one_line(reason)})")
    if not parts:
        return ""
    stamp = time.strftime("%H:%M:%S")
    return f"{stamp} {'; '.join(parts)} ({counted(report.chunks_total, 'chunk')}, {seconds:.2f}s)"


def cycle_json(report: IngestReport, diff: Changes) -> str:
    """A commit as one JSON line (``--json``): the ingest report and the renames; ``""`` when nothing changed."""
    if not (report.added or report.updated or report.removed):
        return ""
    data = report.to_dict()
    data["renamed"] = [list(pair) for pair in _renames(report, diff)]
    return json.dumps(data, ensure_ascii=False)


class _StopRequest:
    """The watch's stop condition: true once the first SIGINT or SIGTERM came (``signum``)."""

    def __init__(self) -> None:
        self.signum = 0
        self.committing = False  # a commit is under way: a stop waits for it

    def __call__(self) -> bool:
        return self.signum != 0


_FINISHING = f"{PROG}: finishing the commit in progress; Ctrl-C again to abort"


def _say(line: str) -> None:
    """Write ``line`` to stderr from a signal handler (not through the buffer the interrupted code may be using)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stand-in stderr (tests, IDEs) has no descriptor
        print(line, file=sys.stderr, flush=True)
        return
    os.write(fd, (line + "\n").encode("utf-8", "replace"))


@contextmanager
def _stop_on_signals() -> Iterator[_StopRequest]:
    """A stop condition set by the first SIGINT or SIGTERM; a second one raises KeyboardInterrupt."""
    stop = _StopRequest()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.signum:
            raise KeyboardInterrupt
        stop.signum = signum
        if stop.committing:
            # A commit can take a while; silence would look like a hang.
            _say(_FINISHING)

    if threading.current_thread() is not threading.main_thread():
        # Signals reach only the main thread: Ctrl-C stays a KeyboardInterrupt.
        yield stop
        return
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _napper(stopping: Callable[[], bool]) -> Callable[[float], None]:
    """``time.sleep`` in short naps, so a stop request is seen within 0.1 s."""

    def nap(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not stopping():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    return nap
