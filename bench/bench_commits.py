"""Cheap commits (issue 28): what a save costs when little changed, beside tantivy, on the stdlib corpus.

Each figure comes from a fresh process (``--child``), timed inside it from
before the load to after the save, and as the whole process:

- build: the corpus (``corpus.py``, 30k chunks) indexed and saved whole; the folder's size;
- add: load, add one new file (a 200-word note), save (a commit);
- remove: load, remove one source, save;
- after ``--commits`` such commits (alternating, no merges: that many segments),
  load time, memory and queries/s with the segments, the same after
  ``optimize()`` (one segment), and whether the top 10 of every query, scores
  included, equal those of one fresh build of the same content;
- the single-segment search path before this change: the same corpus built,
  saved and queried by the tree at ``--before`` (default /work/main), if given.

tantivy (one thread, ``en_stem``, text stored, an ``id`` field for deletes)
does the same: open, add a document, commit; open, delete one, commit.

    python bench/bench_commits.py [--commits 20] [--max-chunks N] [--before /work/main]
    python bench/bench_commits.py --crash 100   # kill -9 during commits and merges
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
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

NOTE = " ".join(f"note{i % 37} about the agent's work and word{i}" for i in range(25))


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def statm_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def texts(max_chunks: int) -> list[str]:
    return corpus.chunks()[:max_chunks] if max_chunks else corpus.chunks()


def child(step: str, folder: str, arg: str, max_chunks: int) -> dict[str, object]:
    # Imported before the clock starts, for both engines.
    if step.startswith("tantivy"):
        import tantivy
    else:
        from clanker_rag import KnowledgeBase
    t0 = time.perf_counter()
    if step == "build":
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((text, str(i)) for i, text in enumerate(texts(max_chunks)))
        kb.save(folder)
    elif step in ("add", "remove", "add-nomerge", "remove-nomerge"):
        kb = KnowledgeBase.load(folder)
        if step.startswith("add"):
            kb.add_text(NOTE + f" commit {arg}", f"notes/{arg}.md")
        else:
            kb.remove(arg)
        kb.save(merge=not step.endswith("nomerge"))
    elif step == "optimize":
        KnowledgeBase.load(folder).optimize()
    elif step == "query":
        base = statm_mb()
        kb = KnowledgeBase.load(folder)
        load = time.perf_counter() - t0
        qs = corpus.queries(texts(max_chunks), 500)
        t1 = time.perf_counter()
        top = [[(h.source, h.score) for h in kb.search(q, 10)] for q in qs]
        wall = time.perf_counter() - t1
        digest = json.dumps(top)
        return {"load_s": load, "qps": len(qs) / wall, "memory_mb": statm_mb() - base, "top": digest}
    elif step == "fresh":  # one fresh build of a folder's content, saved elsewhere
        src = KnowledgeBase.load(folder)
        kb = KnowledgeBase(chunk_size=None)
        for hit in src.chunks():
            kb.add_text(hit.text, hit.source)
        kb.save(arg)
    elif step.startswith("tantivy"):
        if step == "tantivy-build":
            Path(folder).mkdir(parents=True, exist_ok=True)
            sb = tantivy.SchemaBuilder()
            sb.add_text_field("id", stored=True, tokenizer_name="raw")
            sb.add_text_field("body", stored=True, tokenizer_name="en_stem")
            index = tantivy.Index(sb.build(), path=folder)
            writer = index.writer(heap_size=256_000_000, num_threads=1)
            for i, text in enumerate(texts(max_chunks)):
                writer.add_document(tantivy.Document(id=str(i), body=text))
            writer.commit()
            writer.wait_merging_threads()
        else:
            index = tantivy.Index.open(folder)
            writer = index.writer(heap_size=15_000_000, num_threads=1)
            if step == "tantivy-add":
                writer.add_document(tantivy.Document(id=f"notes/{arg}.md", body=NOTE + f" commit {arg}"))
            else:
                writer.delete_documents("id", arg)
            writer.commit()
            writer.wait_merging_threads()
    else:
        raise SystemExit(f"unknown step {step}")
    return {"seconds": time.perf_counter() - t0}


def run(step: str, folder: Path, arg: str = "", max_chunks: int = 0, pythonpath: str = str(ROOT)) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--child", step, str(folder), arg, str(max_chunks)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


COMMITTER = """
import sys
sys.path.insert(0, {root!r})
from clanker_rag import KnowledgeBase
from clanker_rag._storage import _segments
_segments.POLICY = _segments.Policy(merge_factor=2, full_share=0.5, full_below=0)
kb = KnowledgeBase.load({folder!r})
print("ready", flush=True)
i = 0
while True:
    i += 1
    kb.add_text("generation " + str(i) + " " + "filler words " * 50, "gen" + str(i % 7) + ".txt")
    if i % 3 == 0:
        kb.remove("gen" + str((i + 2) % 7) + ".txt")
    kb.optimize() if i % 11 == 0 else kb.save()
"""


def crash(runs: int) -> None:
    """kill -9 a process that commits, merges and optimizes in a loop, ``runs`` times at random moments."""
    import random
    import signal

    from clanker_rag import KnowledgeBase

    folder = tempfile.mkdtemp(prefix="bench-crash-")
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for i in range(30):
        kb.add_text(f"base text number {i} alpha beta gamma", f"base{i}.txt")
    kb.save(folder)
    rng = random.Random(0)
    corrupt = 0
    script = COMMITTER.format(root=str(ROOT), folder=folder)
    for _ in range(runs):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        try:
            loaded = KnowledgeBase.load(folder)
            loaded.verify()
            assert {f"base{i}.txt" for i in range(30)} <= set(loaded.sources())
            for source in loaded.sources():
                loaded.source_text(source)
        except Exception as exc:
            corrupt += 1
            print(f"corrupt: {exc}")
    shutil.rmtree(folder, ignore_errors=True)
    print(f"kill -9 during commits, merges and optimize: {runs} runs, {corrupt} corrupt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--max-chunks", type=int, default=0)
    parser.add_argument("--before", default="/work/main", help="tree of the code before (empty: skip)")
    parser.add_argument("--crash", type=int, default=0, help="only the kill -9 loop, this many runs")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crash:
        sys.path.insert(0, str(ROOT))
        crash(args.crash)
        return
    if args.child:
        step, folder, arg, max_chunks = args.child
        print(json.dumps(child(step, folder, arg, int(max_chunks))))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-commits-"))
    m = args.max_chunks
    try:
        ours, tan = work / "ours", work / "tantivy"
        print(f"chunks: {len(texts(m))}")
        b = run("build", ours, max_chunks=m)
        print(f"build+save: clanker_rag {b['seconds']:.1f} s, folder {folder_mb(ours):.1f} MB")
        bt = run("tantivy-build", tan, max_chunks=m)
        print(f"build+commit: tantivy {bt['seconds']:.1f} s, folder {folder_mb(tan):.1f} MB")
        merged0 = run("query", ours, max_chunks=m)
        if args.before:
            old = work / "before"
            run("build", old, max_chunks=m, pythonpath=args.before)
            befores, nows = [], [merged0]
            for i in range(3):
                befores.append(run("query", old, max_chunks=m, pythonpath=args.before))
                if i:
                    nows.append(run("query", ours, max_chunks=m))
            b_qps = sorted(r["qps"] for r in befores)
            n_qps = sorted(r["qps"] for r in nows)
            print(
                f"one segment, before this change: {b_qps[1]:.0f} q/s (runs {b_qps[0]:.0f}-{b_qps[2]:.0f}), "
                f"load {median([r['load_s'] for r in befores]):.3f} s, folder {folder_mb(old):.1f} MB; "
                f"now: {n_qps[1]:.0f} q/s ({n_qps[0]:.0f}-{n_qps[2]:.0f}), "
                f"load {median([r['load_s'] for r in nows]):.3f} s; "
                f"same top 10: {befores[0]['top'] == merged0['top']}"
            )
        for kind in ("add", "remove"):
            ours_s, ours_p, tan_s = [], [], []
            for i in range(5):
                arg = f"probe{kind}{i}" if kind == "add" else str(1000 + i)
                r = run(kind, ours, arg)
                ours_s.append(r["seconds"])
                ours_p.append(r["process_s"])
                tan_s.append(run(f"tantivy-{kind}", tan, arg)["seconds"])
            print(
                f"load+{kind}+save (median of 5): clanker_rag {median(ours_s):.3f} s in process "
                f"({median(ours_p):.2f} s with interpreter start), tantivy {median(tan_s):.3f} s"
            )
        KB_opt = run("optimize", ours)
        print(f"optimize (merge everything): {KB_opt['seconds']:.2f} s, folder {folder_mb(ours):.1f} MB")
        times = []
        for i in range(args.commits):
            kind = "add-nomerge" if i % 2 == 0 else "remove-nomerge"
            times.append(run(kind, ours, f"c{i}" if i % 2 == 0 else str(2000 + i))["seconds"])
        n_segments = len(json.loads((ours / "index.json").read_text())["body"]["segments"])
        fresh = work / "fresh"
        run("fresh", ours, str(fresh))
        ref = run("query", fresh, max_chunks=m)
        shutil.copytree(ours, work / "merged", ignore=shutil.ignore_patterns(".lock"))
        run("optimize", work / "merged")
        # Alternating runs, each in a fresh process: the machine is shared and noisy.
        segs, merges = [], []
        for _ in range(3):
            segs.append(run("query", ours, max_chunks=m))
            merges.append(run("query", work / "merged", max_chunks=m))
        seg = {k: median([r[k] for r in segs]) for k in ("load_s", "qps", "memory_mb")} | {"top": segs[0]["top"]}
        merged = {k: median([r[k] for r in merges]) for k in ("load_s", "qps", "memory_mb")} | {"top": merges[0]["top"]}
        print(
            f"{args.commits} commits without merging ({min(times):.3f}-{max(times):.3f} s each): {n_segments} "
            "segments (medians of 3), "
            f"load {seg['load_s']:.3f} s, {seg['qps']:.0f} q/s, memory {seg['memory_mb']:.0f} MB, "
            f"folder {folder_mb(ours):.1f} MB"
        )
        print(
            f"merged (medians of 3 alternating runs): load {merged['load_s']:.3f} s, {merged['qps']:.0f} q/s, "
            f"memory {merged['memory_mb']:.0f} MB; "
            f"segments/merged q/s {seg['qps'] / merged['qps']:.2f}; top 10 with segments == fresh build: "
            f"{seg['top'] == ref['top']}, merged == fresh build: {merged['top'] == ref['top']}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
