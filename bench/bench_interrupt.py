"""Ctrl-C during `clanker-rag ingest TREE --index DIR -j 1`, then a re-run: does it converge? (issue 27, item 1)

    PYTHONPATH=. python bench/bench_interrupt.py [FILES] [PARAGRAPHS]

Writes a random Markdown tree (FILES files of PARAGRAPHS 40-word paragraphs),
ingests it cleanly once, then for 13 moments spread over a clean run's
duration: ingest, SIGINT the process group at that moment, ingest again to
completion, and compare every chunk and the top 3 hits (with scores) of four
queries with the clean ingest.  Prints one line per moment and the count of
runs that stayed wrong.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clanker_rag import KnowledgeBase

QUERIES = ["w1 w2 w3", "w100 w2000", "w5 w77 w999", "w42"]


def tree(root: Path, files: int, paragraphs: int) -> None:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(3000)]
    for f in range(files):
        text = "\n\n".join(" ".join(rng.choice(words) for _ in range(40)) + "." for _ in range(paragraphs))
        (root / f"d{f % 4}").mkdir(parents=True, exist_ok=True)
        (root / f"d{f % 4}" / f"f{f:03d}.md").write_text(text)


def run(src: Path, index: Path, delay: float | None = None) -> int:
    cmd = [sys.executable, "-m", "clanker_rag", "ingest", str(src), "--index", str(index), "-j", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if delay is not None:
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=600)


def state(index: Path) -> object:
    kb = KnowledgeBase.load(index)
    chunks = sorted((h.source, h.text) for h in kb.chunks())
    return chunks, [[(h.source, h.text, h.score) for h in kb.search(q, 3)] for q in QUERIES]


def main() -> None:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    paragraphs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    base = Path(tempfile.mkdtemp(prefix="bench-interrupt-"))
    try:
        tree(base / "tree", files, paragraphs)
        started = time.monotonic()
        assert run(base / "tree", base / "clean") == 0
        took = time.monotonic() - started
        want = state(base / "clean")
        wrong = 0
        for i in range(1, 14):
            index = base / f"i{i}"
            code = run(base / "tree", index, took * i / 14)
            assert run(base / "tree", index) == 0
            ok = state(index) == want
            wrong += not ok
            print(f"SIGINT at {i / 14:4.0%} of {took:.1f}s: exit {code}, after a re-run {'same' if ok else 'WRONG'}")
        print(f"{wrong} of 13 stayed wrong after a complete re-run")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
