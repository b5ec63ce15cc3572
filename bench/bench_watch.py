"""Live sync: how long from saving a file to finding its new text (issue 28 item 4).

Starts ``clanker-rag ingest TREE --index IDX --watch`` as its own process on a
copy of a tree, then edits one file at a time (a new, unique word appended)
and times until the index folder holds a commit whose search finds that word
in that file, read the way ``serve`` and ``mcp`` follow an index
(``IndexFollower``: one stat, then a load when the index file changed).
Two trees: the ``docs/`` folder, and a larger one made of Cranfield's
abstracts, one file each, in folders of 100 (``--large-copies`` times the
1,400 abstracts).  Also measured per tree: a scan of the tree (what the watch
does every interval), the watcher's CPU while nothing changes, and a
``clanker-rag search`` process run after a commit (the contract's
"searchable by clanker-rag search within 3 s" is the edit-to-commit time plus
that).

    python bench/bench_watch.py [--edits 20] [--large-copies 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from clanker_rag._ingest._discovery import DiscoveryOptions  # noqa: E402
from clanker_rag._ingest._scan import Scanner, scan_roots  # noqa: E402
from clanker_rag._serve._follow import IndexFollower  # noqa: E402

SHARED = Path(os.environ.get("CLANKER_RAG_SHARED", "/work/shared"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def word(i: int) -> str:
    """A word no tree holds; letters only (the analyser splits at digits)."""
    letters = "".join(chr(ord("a") + int(d)) for d in f"{i:04d}")
    return f"zqxv{letters}"


def docs_tree(dest: Path) -> Path:
    shutil.copytree(ROOT / "docs", dest)
    return dest


def cranfield_tree(dest: Path, copies: int) -> Path:
    docs = [json.loads(line) for line in (SHARED / "datasets/cranfield/corpus.jsonl").open(encoding="utf-8")]
    n = 0
    for copy in range(copies):
        for doc in docs:
            folder = dest / f"c{copy}" / f"d{n // 100:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{doc['_id']}.md").write_text(f"# {doc.get('title', '')}\n\n{doc['text']}\n", encoding="utf-8")
            n += 1
    return dest


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def found(follower: IndexFollower, state: dict[str, object], query: str, source: str) -> bool:
    fresh = follower.fresh()
    if fresh is not None:
        state["kb"] = fresh
    kb = state.get("kb")
    if kb is None:
        return False
    hits = kb.search(query, 3)  # type: ignore[attr-defined]
    return any(hit.source == source for hit in hits)


def bench_tree(name: str, tree: Path, index: Path, edits: int, seed: int) -> dict[str, object]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clanker_rag", "ingest", str(tree), "--index", str(index), "--watch", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert proc.stderr is not None
    line = ""
    while "watching" not in line:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit(f"the watcher exited: {proc.stderr.read()}")
    first_ingest = time.perf_counter() - started
    try:
        files = sorted(p for p in tree.rglob("*.md"))
        options = DiscoveryOptions(skip_real=frozenset({os.path.realpath(index)}))
        scans, quick = [], []
        for _ in range(5):
            t = time.perf_counter()
            snap = scan_roots([str(tree)], options)
            scans.append(time.perf_counter() - t)
        scanner = Scanner([str(tree)], options, clock=lambda: 0.0)
        scanner.scan()
        for _ in range(5):
            t = time.perf_counter()
            assert scanner.scan() == snap
            quick.append(time.perf_counter() - t)
        time.sleep(1.0)
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(5.0)
        idle_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - t0)

        follower = IndexFollower(index)
        state: dict[str, object] = {}
        rng = random.Random(seed)
        latencies = []
        for i in range(edits):
            path = rng.choice(files)
            source = path.relative_to(tree).as_posix()
            token = word(i)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"\n\nEdited in round {token}.\n")
            t = time.perf_counter()
            while not found(follower, state, token, source):
                if time.perf_counter() - t > 60:
                    raise SystemExit(f"{name}: edit {i} of {source} not searchable after 60 s")
                time.sleep(0.01)
            latencies.append(time.perf_counter() - t)
            time.sleep(rng.uniform(0.3, 1.0))  # someone typing, then saving again
        searches = []
        for _ in range(5):
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "clanker_rag", "search", word(edits - 1), "--index", str(index), "-k", "1"],
                capture_output=True,
                text=True,
                env=ENV,
                check=True,
            ).stdout
            searches.append(time.perf_counter() - t)
            assert word(edits - 1) in out, out
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # Each commit's line ends "(N chunks, S.SSs)": the re-ingest and save.
    commits = [float(m) for m in re.findall(r"chunks, (\d+\.\d+)s\)$", out, re.M)]
    latencies.sort()
    return {
        "tree": name,
        "files": len(snap),
        "first_ingest_s": round(first_ingest, 2),
        "full_scan_ms": round(1000 * statistics.median(scans), 1),
        "quick_scan_ms": round(1000 * statistics.median(quick), 1),
        "idle_cpu": round(idle_cpu, 3),
        "edit_to_searchable_median_s": round(statistics.median(latencies), 3),
        "edit_to_searchable_p95_s": round(latencies[max(0, round(0.95 * len(latencies)) - 1)], 3),
        "edit_to_searchable_max_s": round(latencies[-1], 3),
        "commit_median_s": round(statistics.median(commits), 3) if commits else None,
        "cli_search_median_s": round(statistics.median(searches), 3),
        "edits": edits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--large-copies", type=int, default=4, help="copies of Cranfield's 1,400 abstracts")
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    try:
        rows = [
            bench_tree("docs/", docs_tree(work / "docs"), work / "docs-index", args.edits, args.seed),
            bench_tree(
                f"cranfield x{args.large_copies}",
                cranfield_tree(work / "cran", args.large_copies),
                work / "cran-index",
                args.edits,
                args.seed,
            ),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
