"""Queries/s on an index of many unmerged segments against the same index merged (issue 28).

Builds the speed corpus (``corpus.py``) whole, then ``--commits`` commits
without merging, each adding one note and removing one source (so the commit
holds ``--commits + 1`` segments), copies the folder and merges the copy
(``optimize``), and builds the same content fresh.  Then ``--rounds`` rounds
of cold query runs alternate between the segmented and the merged folder,
each in a fresh process (``bench_commits.py --child query``: load, then each
of the 500 queries once).  Prints medians and the ratio, and whether the top
10 of every query, scores included, equal the fresh build's.

    python bench/bench_segments.py [--commits 19] [--rounds 3] [--max-chunks N] [--keep DIR]

``--keep DIR`` keeps the folders in DIR and reuses them on the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_commits  # noqa: E402


def prepare(work: Path, commits: int, m: int) -> None:
    ours = work / "ours"
    bench_commits.run("build", ours, max_chunks=m)
    for i in range(commits):
        bench_commits.run("add-nomerge", ours, f"c{i}")
        bench_commits.run("remove-nomerge", ours, str(2000 + 7 * i))
    bench_commits.run("fresh", ours, str(work / "fresh"))
    shutil.copytree(ours, work / "merged", ignore=shutil.ignore_patterns(".lock"))
    bench_commits.run("optimize", work / "merged")
    (work / "done").write_text("ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=19)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-chunks", type=int, default=0)
    parser.add_argument("--keep", default="", help="keep (and reuse) the folders here")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-segments-"))
    m = args.max_chunks
    try:
        if not (work / "done").exists():
            work.mkdir(parents=True, exist_ok=True)
            prepare(work, args.commits, m)
        ours = work / "ours"
        n_segments = len(json.loads((ours / "index.json").read_text())["body"]["segments"])
        ref = bench_commits.run("query", work / "fresh", max_chunks=m)
        segs, merges = [], []
        for _ in range(args.rounds):
            segs.append(bench_commits.run("query", ours, max_chunks=m))
            merges.append(bench_commits.run("query", work / "merged", max_chunks=m))
        med = bench_commits.median
        s_qps, m_qps = [r["qps"] for r in segs], [r["qps"] for r in merges]
        ratios = sorted(s / q for s, q in zip(s_qps, m_qps))
        print(
            f"{n_segments} segments: {med(s_qps):.0f} q/s ({min(s_qps):.0f}-{max(s_qps):.0f}), "
            f"load {med([r['load_s'] for r in segs]):.3f} s, memory {med([r['memory_mb'] for r in segs]):.0f} MB"
        )
        print(
            f"merged: {med(m_qps):.0f} q/s ({min(m_qps):.0f}-{max(m_qps):.0f}), "
            f"load {med([r['load_s'] for r in merges]):.3f} s, memory {med([r['memory_mb'] for r in merges]):.0f} MB"
        )
        print(
            f"segments/merged q/s: {med(s_qps) / med(m_qps):.2f} (per round {ratios[0]:.2f}-{ratios[-1]:.2f}); "
            f"top 10 == fresh build: segments {all(r['top'] == ref['top'] for r in segs)}, "
            f"merged {all(r['top'] == ref['top'] for r in merges)}; load average {os.getloadavg()[0]:.1f}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
