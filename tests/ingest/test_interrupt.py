"""Ctrl-C during an ingest: the folder keeps the previous index or a checkpoint whose every
source is whole, and running the ingest again gives what one clean ingest gives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._exceptions import IndexFormatError
from clanker_rag._ingest._report import IngestReport
from clanker_rag._kb import KnowledgeBase
from tests.helpers._serve import default_sigint
from tests.helpers._trees import write


def ingest(kb: KnowledgeBase, path: Any, **options: Any) -> IngestReport:
    """The ingest as ``kb.ingest`` runs it (with the knowledge base's own writer)."""
    return kb.ingest(path, **options)


ROOT = Path(__file__).resolve().parents[2]
QUERIES = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota", "kappa", "lambda mu nu xi omicron"]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
]


def random_tree(root: Path, files: int, paragraphs: int, seed: int = 5) -> None:
    rng = random.Random(seed)
    vocab = WORDS + [f"term{c}{d}" for c in "abcdefghij" for d in "klmnopqrst"]
    for f in range(files):
        text = "\n\n".join(" ".join(rng.choices(vocab, k=30)) + "." for _ in range(paragraphs))
        write(root, f"part{f % 3}/file{f:03d}.md", text)


def state(index: Path) -> tuple[list[tuple[str, str]], list[list[tuple[str, str, float]]]]:
    """Every chunk (source, text) and the top 3 hits of each query."""
    kb = KnowledgeBase.load(index)
    chunks = sorted((hit.source, hit.text) for hit in kb.chunks())
    hits = [[(h.source, h.text, h.score) for h in kb.search(q, 3)] for q in QUERIES]
    return chunks, hits


def whole_sources(index: Path, clean: Path) -> None:
    """Every source saved in ``index`` has exactly the chunks a clean ingest gives it."""
    got, want = KnowledgeBase.load(index), KnowledgeBase.load(clean)
    for source in got.sources():
        assert [h.text for h in got.chunks(source)] == [h.text for h in want.chunks(source)], source


def test_an_interrupt_inside_an_add_keeps_the_last_checkpoint_and_a_rerun_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    random_tree(tree, files=9, paragraphs=40)
    clean = tmp_path / "clean"
    order = ingest(KnowledgeBase(), tree, index_path=clean).added
    done = KnowledgeBase.load(clean)
    # Three chunks into the fifth file (one span_counts call a chunk).
    stop_at = sum(len(list(done.chunks(source))) for source in order[:4]) + 3
    index = tmp_path / "index"
    import clanker_rag._engine._writing as writing_module
    from clanker_rag._engine._counting import span_counts

    real = span_counts
    calls = 0

    def interrupted(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == stop_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writing_module, "span_counts", interrupted)
    kb = KnowledgeBase()
    with pytest.raises(KeyboardInterrupt):
        ingest(kb, tree, index_path=index, checkpoint_files=2, jobs=1)
    monkeypatch.setattr(writing_module, "span_counts", real)
    # The half-added file is in memory only: nothing saves it.
    assert not kb._writer.is_intact()
    with pytest.raises(IndexFormatError, match="stopped midway"):
        kb.save(tmp_path / "elsewhere")
    saved = KnowledgeBase.load(index)
    assert 0 < len(saved.sources()) < 9
    whole_sources(index, clean)
    ingest(saved, tree, index_path=index)
    assert state(index) == state(clean)


def test_an_interrupt_between_files_saves_what_was_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    random_tree(tree, files=6, paragraphs=5)
    index = tmp_path / "index"
    kb = KnowledgeBase()
    real = kb.source_metadata
    asked: list[str] = []

    def stop_at_the_fourth(source: str) -> object:
        asked.append(source)
        if len(asked) == 4:
            raise KeyboardInterrupt
        return real(source)

    monkeypatch.setattr(kb, "source_metadata", stop_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        ingest(kb, tree, index_path=index, jobs=1)
    assert kb._writer.is_intact()
    assert len(KnowledgeBase.load(index).sources()) == 3


def ingest_command(tree: Path, index: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "clanker_rag", "ingest", str(tree), "--index", str(index), "-j", "1", "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches it
        preexec_fn=default_sigint,  # and Ctrl-C's default action, even when this run is a background job
    )


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_at_any_moment_then_a_rerun_equals_a_clean_ingest(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    # Few big files: most of the run is spent adding one, where an interrupt
    # used to leave a source in part under its whole file's fingerprint.
    random_tree(tree, files=16, paragraphs=600)
    clean = tmp_path / "clean"
    started = time.monotonic()
    proc = ingest_command(tree, clean)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    took = time.monotonic() - started
    want = state(clean)
    interrupted = 0
    for i, share in enumerate((0.25, 0.4, 0.55, 0.7, 0.85)):
        index = tmp_path / f"index{i}"
        proc = ingest_command(tree, index)
        time.sleep(took * share)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        # 130: the CLI caught the interrupt; -SIGINT: it landed while the interpreter was still
        # importing, before the CLI's handler, and Python exits as killed by it (nothing written yet).
        assert proc.returncode in (0, 130, -signal.SIGINT), err.decode()
        interrupted += proc.returncode != 0
        if (index / "index.json").exists():
            whole_sources(index, clean)
        proc = ingest_command(tree, index)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert state(index) == want, f"interrupted at {share:.0%} of a clean ingest"
    assert interrupted, "no run was interrupted: the tree is too small for this machine"
