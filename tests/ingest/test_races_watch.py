"""A symlink that changes while a scan resolves it never ends ``ingest --watch``.

``os.path.realpath`` raises ``OSError`` when a symlink it is reading is
replaced by a regular file between its ``lstat`` and its ``readlink``.  The
walk takes that as a transient skip, and the watch loop survives any scan
that fails with ``OSError`` (it logs and looks again).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._ingest._discovery import Candidate, DiscoveryOptions, Skipped, discover
from clanker_rag._ingest._scan import Scanner
from clanker_rag._ingest._watch import Changes, FileStamp, watch


def _flaky_realpath(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = os.path.realpath

    def realpath(path: str | os.PathLike[str], **kwargs: Any) -> str:
        if os.fspath(path).endswith(os.sep + name):
            raise OSError(22, "Invalid argument", os.fspath(path))  # readlink on what is a file now
        return real(os.fspath(path), **kwargs)

    monkeypatch.setattr(os.path, "realpath", realpath)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("alpha notes\n")
    (root / "sub" / "b.md").write_text("beta notes\n")
    os.symlink(root / "a.md", root / "link.md")
    os.symlink(root / "sub", root / "linkdir")
    return root


@pytest.mark.parametrize("name", ["link.md", "linkdir"])
def test_a_symlink_changing_while_resolved_is_a_transient_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    root = _tree(tmp_path)
    _flaky_realpath(monkeypatch, name)
    items = list(discover(str(root), DiscoveryOptions()))
    found = {i.rel for i in items if isinstance(i, Candidate)}
    # (sub/ is walked once: as linkdir/ when that link resolves, it comes first in order)
    assert "a.md" in found and found & {"sub/b.md", "linkdir/b.md"}
    skipped = [i for i in items if isinstance(i, Skipped) and i.rel.rstrip("/") == name]
    assert len(skipped) == 1 and skipped[0].transient


def test_a_full_scan_survives_a_symlink_changing_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    _flaky_realpath(monkeypatch, "linkdir")
    scanner = Scanner([str(root)], DiscoveryOptions(skip_real=frozenset({str(tmp_path / "idx")})))
    stamps = scanner.full()
    assert {"a.md", "sub/b.md"} <= set(stamps)
    assert "linkdir/b.md" not in stamps


def test_the_watch_survives_a_scan_that_fails() -> None:
    now = [0.0]
    snapshots: list[dict[str, FileStamp] | OSError | None] = [
        {"a.md": FileStamp(1, 1, 1)},
        OSError(40, "Too many levels of symbolic links"),
        None,
    ]
    scans: list[float] = []

    def scan() -> dict[str, FileStamp]:
        scans.append(now[0])
        step = snapshots[min(len(scans) - 1, len(snapshots) - 1)]
        if isinstance(step, OSError):
            raise step
        return {"a.md": FileStamp(1, 1, 1), "b.md": FileStamp(2, 2, 2)} if step is None else step

    def sleep(seconds: float) -> None:
        now[0] += seconds

    committed: list[Changes] = []
    stats = watch(
        scan,
        committed.append,
        interval=0.25,
        quiet=0.3,
        stop=lambda: now[0] >= 5.0,
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert len(scans) > 3  # it kept scanning after the failure
    assert committed == [Changes(added=("b.md",))]
    assert stats.commits == 1
