"""Queries/s on an index of many unmerged segments against the same index merged (issue 28).

Builds the speed corpus (``corpus.py``) whole, then ``--commits`` commits
without merging, each adding one note and removing one source (so the commit
holds ``--commits + 1`` segments), copies the folder and merges the copy
(``optimize``), and builds the same content fresh.  Then ``--rounds`` rounds
of cold query runs alternate between the segmented and the merged folder,
each in a fresh process (load, then each of the 500 queries once), timed
in wall-clock and in CPU time (user + system of the query loop: the machine
is shared, and wall-clock is what the other processes leave).  Prints
medians and the ratios, and whether the top 10 of every query, scores
included, equal the fresh build's.

    python bench/bench_segments.py [--commits 19] [--rounds 3] [--max-chunks N] [--keep DIR]

``--keep DIR`` keeps the folders in DIR and reuses them on the next run; a folder
``bench_commits.py --work`` left (``ours``, ``merged``, ``fresh``, ``queries.json``:
e.g. its ``--scale`` run, 225k chunks, 21 segments) is reused as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_commits  # noqa: E402

REUSED = ("ours", "merged", "fresh", "queries.json")


def query(folder: Path, work: Path) -> dict[str, object]:
    """One cold run in a fresh process: load, then each query once."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(folder), str(work)], check=True, capture_output=True, text=True
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def child(folder: str, work: Path) -> dict[str, object]:
    from clanker_rag import KnowledgeBase

    qs = json.loads((work / "queries.json").read_text())
    t0 = time.perf_counter()
    kb = KnowledgeBase.load(folder)
    load = time.perf_counter() - t0
    c1, t1 = time.process_time(), time.perf_counter()
    top = [[(h.source, h.score) for h in kb.search(q, 10) if h.text] for q in qs]  # texts fetched, as a caller would
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    return {"load_s": load, "qps": len(qs) / wall, "cpu_qps": len(qs) / cpu, "top": json.dumps(top)}


def prepare(work: Path, commits: int, m: int) -> None:
    ours = work / "ours"
    bench_commits.write_corpus(False, m, work)  # the chunks and queries every step reads
    bench_commits.run("build", ours, work)
    for i in range(commits):
        bench_commits.run("add-nomerge", ours, work, f"c{i}")
        bench_commits.run("remove-nomerge", ours, work, str(2000 + 7 * i))
    bench_commits.run("fresh", ours, work, str(work / "fresh"))
    shutil.copytree(ours, work / "merged", ignore=shutil.ignore_patterns(".lock"))
    bench_commits.run("optimize", work / "merged", work)
    (work / "done").write_text("ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=19)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-chunks", type=int, default=0)
    parser.add_argument("--keep", default="", help="keep (and reuse) the folders here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-segments-"))
    m = args.max_chunks
    try:
        if not (work / "done").exists() and not all((work / f).exists() for f in REUSED):
            work.mkdir(parents=True, exist_ok=True)
            prepare(work, args.commits, m)
        ours = work / "ours"
        n_segments = len(json.loads((ours / "index.json").read_text())["body"]["segments"])
        ref = query(work / "fresh", work)
        segs: list[dict[str, object]] = []
        merges: list[dict[str, object]] = []
        for _ in range(args.rounds):
            segs.append(query(ours, work))
            merges.append(query(work / "merged", work))
        med = bench_commits.median

        def col(runs: list[dict[str, object]], key: str) -> list[float]:
            return [float(r[key]) for r in runs]  # type: ignore[arg-type]

        for name, runs in ((f"{n_segments} segments", segs), ("merged", merges)):
            qps, cpu = col(runs, "qps"), col(runs, "cpu_qps")
            print(
                f"{name}: {med(qps):.0f} q/s wall ({min(qps):.0f}-{max(qps):.0f}), {med(cpu):.0f} q/s of CPU "
                f"({min(cpu):.0f}-{max(cpu):.0f}), load {med(col(runs, 'load_s')):.3f} s"
            )
        for key, what in (("qps", "wall"), ("cpu_qps", "CPU")):
            ratios = sorted(s / q for s, q in zip(col(segs, key), col(merges, key)))
            print(
                f"segments/merged q/s ({what}): {med(col(segs, key)) / med(col(merges, key)):.2f} "
                f"(per round {ratios[0]:.2f}-{ratios[-1]:.2f})"
            )
        print(
            f"top 10 == fresh build: segments {all(r['top'] == ref['top'] for r in segs)}, "
            f"merged {all(r['top'] == ref['top'] for r in merges)}; load average {os.getloadavg()[0]:.1f}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
