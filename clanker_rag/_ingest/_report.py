"""What one ingest did: :class:`IngestReport` (``clanker_rag.IngestReport``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IngestReport"]


@dataclass
class IngestReport:
    """What one ingest did.  Paths are source names (relative to their root).

    ``skipped`` lists ``(path, reason)`` for every file or pruned folder that
    was not indexed; folders end with ``/``.  The chunk counts add up:
    ``chunks_total == chunks_before + chunks_added - chunks_removed``.
    ``chunks_added`` counts every chunk written (those of added files and the
    new chunks of updated files); ``chunks_removed`` every chunk dropped (those
    of removed files and the old chunks of updated files), of which
    ``chunks_replaced`` are the old chunks of updated files.
    """

    roots: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    selected: int = 0  # files the walk selected (before reading): 0 when the paths and globs match no file
    chunks_added: int = 0
    chunks_removed: int = 0
    chunks_replaced: int = 0  # of chunks_removed: the old chunks of updated files
    chunks_before: int = 0  # chunks in the knowledge base when the run started
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
            helpers = f", {_counted(self.workers, 'worker process', 'es')}" if self.workers else ""
            rate = f" in {self.seconds:.1f}s ({mb / self.seconds:.1f} MB/s{helpers})"
        replaced = f" ({self.chunks_replaced} replaced)" if self.chunks_replaced else ""
        return (
            ", ".join(parts)
            + f"; {_counted(self.chunks_added, 'chunk')} added, {self.chunks_removed} removed{replaced},"
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
            "selected": self.selected,
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "chunks_replaced": self.chunks_replaced,
            "chunks_before": self.chunks_before,
            "chunks_total": self.chunks_total,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "workers": self.workers,
        }


def _counted(n: int, noun: str, plural: str = "s") -> str:
    # (The CLI's ``counted``; the library's layers do not import the CLI.)
    return f"{n} {noun}{'' if n == 1 else plural}"


def _reason_kind(reason: str) -> str:
    if reason.endswith("not in the allow-list"):
        return "not in the allow-list"
    for sep in (" (", ": "):
        if sep in reason:
            reason = reason.split(sep, 1)[0]
    return reason
