"""Ingest benchmarks: the stdlib tree, a re-ingest of it, a generated 32 MB CSV.

Run: ``python bench/bench_ingest.py [--skip-bm25s] [--all-files] [--csv-mb 32] [--tree PATH] [--jobs N]``

Prints files/s and MB/s for an end-to-end ingest of the Python standard
library's .py files (site-packages excluded, about 1,800 files), in one
process (``jobs=1``) and with the default worker processes, the same texts tokenised and indexed by
bm25s (when installed) for comparison, the unchanged re-ingest as a fraction
of the first, and the time to ingest a generated CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clanker_rag._ingest._parallel import usable_cpus
from clanker_rag._kb import KnowledgeBase


def timed_ingest(tree: str, include: list[str], jobs: int | None) -> tuple[float, int, int]:
    """One ingest in a fresh interpreter, as a script or the command would run it:
    (seconds, chunks, worker processes)."""
    code = (
        "import sys, time, json; sys.path.insert(0, sys.argv[1]);"
        "from clanker_rag._kb import KnowledgeBase;"
        "kb = KnowledgeBase(); t = time.perf_counter();"
        "r = kb.ingest(sys.argv[2], progress=False, include=json.loads(sys.argv[3]), jobs=json.loads(sys.argv[4]));"
        "print(time.perf_counter() - t, len(kb), r.workers)"
    )
    root = str(Path(__file__).resolve().parent.parent)
    run = subprocess.run(
        [sys.executable, "-c", code, root, tree, json.dumps(include), json.dumps(jobs)],
        check=True,
        capture_output=True,
        text=True,
    )
    if run.stderr.strip():
        print(run.stderr.strip(), file=sys.stderr)
    seconds, chunks, workers = run.stdout.split()
    return float(seconds), int(chunks), int(workers)


def bench_tree(tree: str, with_bm25s: bool, include: list[str], jobs: int | None) -> None:
    print(f"stdlib tree: {tree} (include={include or 'default allow-list'}); {usable_cpus()} usable cores")
    # Each timed ingest runs in a fresh process: a worker forked from a
    # process still holding an earlier run's heap would pay for it.
    single, serial_chunks, _ = timed_ingest(tree, include, 1)
    kb = KnowledgeBase()
    report = kb.ingest(tree, progress=False, include=include, jobs=1)
    n = len(report.added)
    mb = report.bytes_read / 1e6
    assert len(kb) == serial_chunks, (len(kb), serial_chunks)
    print(
        f"  clanker_rag ingest, jobs=1 : {n} files, {mb:.1f} MB, {len(kb)} chunks in {single:.2f}s"
        f" -> {n / single:.0f} files/s, {mb / single:.2f} MB/s"
    )
    first, chunks, workers = timed_ingest(tree, include, jobs)
    assert chunks == serial_chunks, (chunks, serial_chunks)
    label = "default" if jobs is None else f"jobs={jobs}"
    print(
        f"  clanker_rag ingest, {label:7}: {n} files, {mb:.1f} MB, {chunks} chunks in {first:.2f}s"
        f" -> {n / first:.0f} files/s, {mb / first:.2f} MB/s ({workers} worker processes and this one)"
    )
    print(f"  skipped            : {len(report.skipped)} ({report.skip_reasons()})")

    t0 = time.perf_counter()
    again = kb.ingest(tree, progress=False, include=include)
    second = time.perf_counter() - t0
    print(
        f"  unchanged re-ingest: {len(again.unchanged)} unchanged, {len(again.added) + len(again.updated)}"
        f" re-read in {second:.2f}s = {100 * second / first:.1f}% of the first ingest"
    )

    # The command-line path (default jobs): a fresh process, the writer lock, the final save.
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "clanker_rag", "ingest", tree, "--index", tmp, "--no-progress"]
        for pattern in include:
            cmd += ["--include", pattern]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        cli = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in Path(tmp).iterdir() if f.is_file()) / 1e6
    print(f"  clanker-rag ingest --index (start-up, ingest and save of {size:.0f} MB): {cli:.2f}s")

    if not with_bm25s:
        return
    try:
        import bm25s  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        print("  bm25s              : not installed (pip install bm25s)")
        return
    try:
        import Stemmer  # type: ignore[import-untyped,import-not-found,unused-ignore]

        stemmer = Stemmer.Stemmer("english")  # clanker_rag stems too: compare like with like
    except ImportError:
        stemmer = None
    print(f"  bm25s stemmer      : {'PyStemmer english' if stemmer else 'none (pip install PyStemmer)'}")
    texts = [hit.text for hit in kb.chunks()]
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    other = time.perf_counter() - t0
    print(
        f"  bm25s tokenise+index of the same {len(texts)} chunk texts (already read and chunked):"
        f" {other:.2f}s -> {n / other:.0f} files/s, {mb / other:.2f} MB/s"
    )
    # Reading + decoding the files is part of clanker_rag's figure, so add it for bm25s too.
    t0 = time.perf_counter()
    raw = []
    for source in report.added:
        with open(os.path.join(tree, source), "rb") as fh:
            raw.append(fh.read().decode("utf-8", "replace"))
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(raw, stopwords="en", stemmer=stemmer, show_progress=False)
    bm25s.BM25().index(tokens, show_progress=False)
    whole = time.perf_counter() - t0
    print(
        f"  bm25s read+tokenise+index of the whole files (one doc per file): {read + whole:.2f}s"
        f" -> {n / (read + whole):.0f} files/s, {mb / (read + whole):.2f} MB/s"
    )


def bench_csv(megabytes: int) -> None:
    rng = random.Random(7)
    words = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
        "mike",
        "november",
        "oscar",
        "papa",
        "quebec",
        "romeo",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "name", "city", "score", "comment"])
            i = 0
            while fh.tell() < megabytes * 1_000_000:
                for _ in range(1000):
                    writer.writerow(
                        [
                            i,
                            rng.choice(words).title(),
                            rng.choice(words),
                            rng.randint(0, 999),
                            " ".join(rng.choices(words, k=8)),
                        ]
                    )
                    i += 1
        size = path.stat().st_size / 1e6
        kb = KnowledgeBase()
        t0 = time.perf_counter()
        report = kb.ingest(path, progress=False)
        took = time.perf_counter() - t0
        assert report.added == ["big.csv"], report.skipped
        print(f"generated CSV: {size:.1f} MB, {i} rows -> {len(kb)} chunks in {took:.2f}s ({size / took:.2f} MB/s)")
        t0 = time.perf_counter()
        hits = kb.search("romeo quebec", 3)
        print(f"  search after ingest: {len(hits)} hits in {1000 * (time.perf_counter() - t0):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--csv-mb", type=int, default=32)
    parser.add_argument("--skip-bm25s", action="store_true")
    parser.add_argument(
        "--all-files", action="store_true", help="ingest every allow-listed file, not only the .py files"
    )
    parser.add_argument("--skip-tree", action="store_true")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes for the second tree ingest (default: the library's choice)",
    )
    parser.add_argument("--skip-csv", action="store_true")
    args = parser.parse_args()
    if not args.skip_tree:
        bench_tree(args.tree, not args.skip_bm25s, [] if args.all_files else ["*.py"], args.jobs)
    if not args.skip_csv:
        bench_csv(args.csv_mb)


if __name__ == "__main__":
    main()
