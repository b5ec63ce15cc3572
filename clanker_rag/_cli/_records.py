"""``clanker-rag ingest FILE.jsonl --text-field FIELD``: each record of a JSON Lines file its own source.

A plain ingest indexes a ``.jsonl`` file as one source, a section a line
(the whole JSON text of each record is searchable).  With ``--text-field``
each record becomes a source of its own, as bm25s's one-file shortcut makes
one document a record: its text is the field's value, its other fields its
metadata, its name ``<file name>#<id>`` (the ``--id-field`` value, else the
line number).  Run again, it updates what changed and removes the records
gone from the file, as an ingest of a folder does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import ConfigError
from .._kb import KnowledgeBase
from .._types import StrPath
from ._terminal import counted, one_line

__all__ = ["RecordsReport", "ingest_records", "records_command"]

_SUFFIXES = (".jsonl", ".ndjson")


@dataclass
class RecordsReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[str] = field(default_factory=list)  # "file:line: why"

    def summary(self, chunks: int) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, {self.removed} removed, "
            f"{counted(len(self.skipped), 'skipped record')}; {counted(chunks, 'chunk')} in the index"
        )


def _records(path: str, text_field: str, report: RecordsReport) -> Iterator[tuple[int, dict[str, Any], str]]:
    """Each record of ``path`` with its line number and its text; the others go to ``report.skipped``."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                report.skipped.append(f"{path}:{number}: not JSON ({exc.msg})")
                continue
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                report.skipped.append(f"{path}:{number}: no string field {text_field!r}")
                continue
            yield number, record, text


def ingest_records(
    kb: KnowledgeBase, paths: Sequence[StrPath], text_field: str, *, id_field: str | None = None, prefix: str = ""
) -> RecordsReport:
    """Index every record of the JSON Lines files ``paths`` as its own source (see the module docstring)."""
    report = RecordsReport()
    for given in paths:
        path = os.fspath(given)
        if not path.endswith(_SUFFIXES) or not os.path.isfile(path):
            raise ConfigError(f"--text-field reads JSON Lines files (.jsonl, .ndjson): {path!r} is not one")
        head = f"{prefix}{os.path.basename(path)}#"
        seen: set[str] = set()
        for number, record, text in _records(path, text_field, report):
            key = record.get(id_field) if id_field else None
            name = head + (str(key) if isinstance(key, str | int) and not isinstance(key, bool) else str(number))
            if name in seen:
                report.skipped.append(f"{path}:{number}: a second record named {name!r}")
                continue
            seen.add(name)
            metadata = {k: v for k, v in record.items() if k != text_field}
            existed = name in kb
            if existed and kb.source_text(name) == text and kb.source_metadata(name) == metadata:
                report.unchanged += 1
                continue
            kb.add_text(text, name, metadata)
            if existed:
                report.updated += 1
            else:
                report.added += 1
        for source in kb.sources():
            if source.startswith(head) and source not in seen:
                kb.remove(source)
                report.removed += 1
    return report


def records_command(args: argparse.Namespace, path: os.PathLike[str]) -> int:
    """``ingest --text-field``: the records of ``args.paths`` into the index at ``path``, and the report."""
    if args.watch:
        raise ConfigError("--text-field reads the files once: drop --watch")
    with KnowledgeBase.edit(path) as kb:
        report = ingest_records(kb, args.paths, args.text_field, id_field=args.id_field, prefix=args.prefix)
    print(report.summary(len(kb)))
    for skipped in report.skipped if args.verbose else ():
        print(f"  skipped {one_line(skipped)}", file=sys.stderr)
    if report.skipped and not args.verbose:
        print(f"skipped: {counted(len(report.skipped), 'record')} (-v lists them)", file=sys.stderr)
    print(f"index: {one_line(os.fspath(path))}", file=sys.stderr)
    return 0
