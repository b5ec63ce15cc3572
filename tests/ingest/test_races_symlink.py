"""A file or folder swapped for a symlink between the walk and the read is never read through the link.

The walk decides on what it saw (inside the root, not a symlink, not a
secret); the read must open that same file, or skip it.  The swaps are put
between the walk and the read deterministically (a wrapper around the walk),
then raced for real by a thread, a bounded number of times.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clanker_rag import KnowledgeBase
from clanker_rag._ingest import _run
from clanker_rag._ingest._discovery import Candidate, DiscoveryOptions, Skipped, discover, single_file

OUTSIDE = "zebraoutside confidential words that live outside the ingest root"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("alpha inside notes\n")
    (root / "sub" / "b.md").write_text("beta inside notes\n")
    (root / "z.md").write_text("omega inside notes\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.md").write_text(OUTSIDE + "\n")
    (outside / "secret.md").write_text(OUTSIDE + "\n")
    return root, outside


def _texts(kb: KnowledgeBase) -> str:
    return "\n".join(kb.source_text(s) or "" for s in kb.sources())


def _swap_in_link(path: Path, target: Path) -> None:
    """Replace ``path`` by a symlink to ``target`` in one rename (the name never disappears)."""
    tmp = path.with_name(path.name + ".swap")
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _hooked_walk(monkeypatch: pytest.MonkeyPatch, after: str | None, swap: object) -> list[bool]:
    """Run ``swap()`` once the walk has yielded ``after`` (None: once the walk is over)."""
    real = discover
    done: list[bool] = []

    def walk(root: str, options: DiscoveryOptions) -> Iterator[Candidate | Skipped]:
        for item in real(root, options):
            yield item
            if after is not None and item.rel == after and not done:
                swap()  # type: ignore[operator]
                done.append(True)
        if after is None and not done:
            swap()  # type: ignore[operator]
            done.append(True)

    monkeypatch.setattr(_run, "discover", walk)
    return done


def test_a_file_swapped_for_a_symlink_after_the_walk_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = _tree(tmp_path)
    done = _hooked_walk(monkeypatch, None, lambda: _swap_in_link(root / "a.md", outside / "secret.md"))
    kb = KnowledgeBase()
    report = kb.ingest(root, progress=False)
    assert done
    assert "zebraoutside" not in _texts(kb)
    assert not kb.search("zebraoutside")
    assert any(rel == "a.md" and "symlink" in reason for rel, reason in report.skipped)


@pytest.mark.parametrize("after", ["a.md", "z.md"])  # before the walk looks at sub/, and after it queued it
def test_a_folder_swapped_for_a_symlink_during_the_walk_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    root, outside = _tree(tmp_path)

    def swap() -> None:
        os.rename(root / "sub", tmp_path / "sub-moved")
        _swap_in_link(root / "sub", outside)

    done = _hooked_walk(monkeypatch, after, swap)
    kb = KnowledgeBase()
    report = kb.ingest(root, progress=False)
    assert done
    assert "zebraoutside" not in _texts(kb)
    assert not any(s.startswith("sub/") for s in kb.sources())
    assert any(rel.startswith("sub") for rel, _ in report.skipped)


def test_a_secret_swapped_in_under_an_inside_name_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The secret guard judged the inside name; the file read must be the one it judged.
    root, outside = _tree(tmp_path)
    (outside / "id_rsa").write_text(OUTSIDE)
    _hooked_walk(monkeypatch, None, lambda: _swap_in_link(root / "z.md", outside / "id_rsa"))
    kb = KnowledgeBase()
    kb.ingest(root, progress=False)
    assert "zebraoutside" not in _texts(kb)


def test_an_explicitly_named_file_swapped_after_the_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = _tree(tmp_path)
    real = single_file

    def decide(path: str, options: DiscoveryOptions) -> Candidate | Skipped:
        out = real(path, options)
        _swap_in_link(root / "a.md", outside / "secret.md")
        return out

    monkeypatch.setattr(_run, "single_file", decide)
    kb = KnowledgeBase()
    kb.ingest(root / "a.md", progress=False)
    assert "zebraoutside" not in _texts(kb)


def _racer(root: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap a.md and sub/ for symlinks out of the root and back, until told to stop."""
    keep_file, keep_dir = root.parent / "a.keep", root.parent / "sub.keep"
    pause = random.Random(swaps[0])
    while not stop.is_set():
        os.rename(root / "a.md", keep_file)
        _swap_in_link(root / "a.md", outside / "secret.md")
        os.rename(root / "sub", keep_dir)
        _swap_in_link(root / "sub", outside)
        stop.wait(pause.uniform(0, 0.002))  # (each state held a moment, so walks and reads land in both)
        os.replace(keep_file, root / "a.md")
        os.unlink(root / "sub")
        os.rename(keep_dir, root / "sub")
        swaps[0] += 1
        stop.wait(pause.uniform(0, 0.002))


@pytest.mark.parametrize("through", ["ingest", "mcp"])
def test_racing_symlink_swaps_never_index_outside_text(tmp_path: Path, through: str) -> None:
    root, outside = _tree(tmp_path)
    rounds = 20
    stop, swaps = threading.Event(), [0]
    racer = threading.Thread(target=_racer, args=(root, outside, stop, swaps))
    leaked = []
    index = tmp_path / "idx"
    service = None
    if through == "mcp":
        from clanker_rag.integrations._mcp import KnowledgeService

        KnowledgeBase().save(index)
        service = KnowledgeService(None, index, ingest_roots=[root])
    racer.start()
    try:
        for _ in range(rounds):
            if service is not None:
                service.ingest(str(root))
                kb = KnowledgeBase.load(index)
            else:
                kb = KnowledgeBase()
                kb.ingest(root, progress=False)
            if "zebraoutside" in _texts(kb):
                leaked.append(sorted(kb.sources()))
    finally:
        stop.set()
        racer.join()
    assert swaps[0] > 0
    assert not leaked, f"{len(leaked)} of {rounds} ingests indexed outside text: {leaked[:3]}"
