"""Cheap commits (issue 28): what a save costs when little changed, beside tantivy.

Each figure comes from a fresh process (``--child``), one engine per process,
timed inside it from before the load to after the save (imports excluded),
and as the whole process:

- build: the corpus indexed and saved whole (wall and CPU seconds, children
  included); the folder's size;
- add: load, add one new file (a 200-word note), save (a commit);
- remove: load, remove one source, save;
- after ``--commits`` commits without merging (``save(merge=False)``; each
  adds a note, every second one also removes a source: that many segments
  after the first), load time, memory and queries/s with the segments, the
  same after ``optimize()`` (one segment), and whether the top 10 of every
  query, scores included, equal those of one fresh build of the same content;
- the single-segment search path before this change: the same corpus built,
  saved and queried by the tree at ``--before`` (default /work/main, stdlib
  corpus only), if given.

tantivy (one thread, ``en_stem``, text stored, an ``id`` field for deletes)
does the same: open, add a document, commit; open, delete one, commit; the
same commits (its merge policy left on); load and 500 queries fetching the
hits' text.  Memory is the resident set after the load and the 500 queries
less that of the process before it imported the engine.

Corpora: the stdlib one (``corpus.py``, about 30k chunks), or with
``--scale`` the one of ``bench_scale.py`` (site-packages ``.py`` files,
180-word windows, 90-word stride, the first 225,000 windows).  Built folders
are copied, never rebuilt, between the steps of one run.

    python bench/bench_commits.py [--commits 20] [--max-chunks N] [--before /work/main]
    python bench/bench_commits.py --scale            # 225k chunks (~9 min on 2 busy cores)
    python bench/bench_commits.py --crash 100        # kill -9 during commits and merges

``--work DIR`` keeps the run's folders in DIR and, when DIR already holds the
built indexes of the same corpus, reuses them (the build figures are then
those of the earlier run, and say so). ``CLANKER_BENCH_PROFILE=FILE`` makes a
``--child`` write a cProfile of its timed part to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

NOTE = " ".join(f"note{i % 37} about the agent's work and word{i}" for i in range(25))
SCALE_CHUNKS = 225_000
N_QUERIES = 500


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def statm_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_so_far() -> float:
    """CPU seconds of this process (every thread) and of the children it waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def write_corpus(scale: bool, max_chunks: int, work: Path) -> int:
    """The chunks (one a line: windows hold no newline) and the queries, as files in ``work``."""
    if scale:
        from bench_scale import site_packages_files

        chunks = corpus.windows(site_packages_files())
        del chunks[max_chunks or SCALE_CHUNKS :]
    else:
        chunks = corpus.chunks()
        if max_chunks:
            del chunks[max_chunks:]
    (work / "chunks.txt").write_text("\n".join(chunks), encoding="utf-8", errors="surrogatepass")
    (work / "queries.json").write_text(json.dumps(corpus.queries(chunks, N_QUERIES)))
    return len(chunks)


def texts(data: Path) -> list[str]:
    return (data / "chunks.txt").read_text(encoding="utf-8", errors="surrogatepass").split("\n")


def child(step: str, folder: str, arg: str, data: Path) -> dict[str, object]:
    profile = os.environ.get("CLANKER_BENCH_PROFILE")
    if not profile:
        return _child(step, folder, arg, data)
    import cProfile

    prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    try:
        return _child(step, folder, arg, data, prof)
    finally:
        prof.disable()
        prof.dump_stats(profile)


def _child(step: str, folder: str, arg: str, data: Path, prof: Any = None) -> dict[str, object]:
    base = statm_mb()  # before the engine is imported: what the query step's memory is measured from
    # Imported, and the corpus read, before the clock starts, for both engines.
    if step.startswith("tantivy"):
        import tantivy
    else:
        from clanker_rag import KnowledgeBase
    corpus_texts = texts(data) if step in ("build", "tantivy-build") else []
    if prof is not None:  # profile only the timed part
        prof.enable()
    t0, c0 = time.perf_counter(), cpu_so_far()
    if step == "build":
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((text, str(i)) for i, text in enumerate(corpus_texts))
        kb.save(folder)
    elif step in ("add", "remove", "add-nomerge", "remove-nomerge", "both-nomerge"):
        kb = KnowledgeBase.load(folder)
        if step.startswith(("add", "both")):
            kb.add_text(NOTE + f" commit {arg}", f"notes/{arg}.md")
        if step.startswith(("remove", "both")):
            kb.remove(arg.rpartition("-")[2])
        kb.save(merge=not step.endswith("nomerge"))
        return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_so_far() - c0, "segments": kb.segments}
    elif step == "optimize":
        KnowledgeBase.load(folder).optimize()
    elif step == "load":
        KnowledgeBase.load(folder)
    elif step in ("query", "tantivy-query"):
        qs = json.loads((data / "queries.json").read_text())
        if step == "query":
            kb = KnowledgeBase.load(folder)

            def search(q: str) -> list[tuple[str, float]]:
                return [(h.source, h.score) for h in kb.search(q, 10) if h.text]

        else:
            index = tantivy.Index.open(folder)
            index.reload()
            searcher = index.searcher()

            def search(q: str) -> list[tuple[str, float]]:
                query = index.parse_query(q, ["body"])
                docs = [(searcher.doc(a), s) for s, a in searcher.search(query, 10).hits]
                return [(d["id"][0], s) for d, s in docs if d["body"][0]]

        load, load_cpu = time.perf_counter() - t0, cpu_so_far() - c0
        t1 = time.perf_counter()
        top = [search(q) for q in qs]
        wall = time.perf_counter() - t1
        return {
            "load_s": load, "load_cpu_s": load_cpu, "qps": len(qs) / wall, "memory_mb": statm_mb() - base,
            "top": json.dumps(top),
        }  # fmt: skip
    elif step == "fresh":  # one fresh build of a folder's content, saved elsewhere
        src = KnowledgeBase.load(folder)
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((hit.text, hit.source) for hit in src.chunks())
        kb.save(arg)
    elif step.startswith("tantivy"):
        if step == "tantivy-build":
            Path(folder).mkdir(parents=True, exist_ok=True)
            sb = tantivy.SchemaBuilder()
            sb.add_text_field("id", stored=True, tokenizer_name="raw")
            sb.add_text_field("body", stored=True, tokenizer_name="en_stem")
            index = tantivy.Index(sb.build(), path=folder)
            writer = index.writer(heap_size=256_000_000, num_threads=1)
            for i, text in enumerate(corpus_texts):
                writer.add_document(tantivy.Document(id=str(i), body=text))
            writer.commit()
            writer.wait_merging_threads()
        else:
            index = tantivy.Index.open(folder)
            writer = index.writer(heap_size=15_000_000, num_threads=1)
            if step.startswith(("tantivy-add", "tantivy-both")):
                writer.add_document(tantivy.Document(id=f"notes/{arg}.md", body=NOTE + f" commit {arg}"))
            if step.startswith(("tantivy-remove", "tantivy-both")):
                writer.delete_documents("id", arg.rpartition("-")[2])
            writer.commit()
            writer.wait_merging_threads()
    else:
        raise SystemExit(f"unknown step {step}")
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_so_far() - c0}


def run(step: str, folder: Path, data: Path, arg: str = "", pythonpath: str = str(ROOT)) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", step, str(folder), arg, str(data)],
        env=env, check=False, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"step {step} {folder} {arg} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def tantivy_segments(folder: Path) -> int:
    return len(json.loads((folder / "meta.json").read_text())["segments"])


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
    parser.add_argument(
        "--scale", action="store_true", help=f"the site-packages corpus, first {SCALE_CHUNKS:,} windows"
    )
    parser.add_argument("--max-chunks", type=int, default=0)
    parser.add_argument("--probes", type=int, default=5, help="load+add+save and load+remove+save runs per engine")
    parser.add_argument("--before", default=None, help="tree of the code before (default /work/main; empty: skip)")
    parser.add_argument("--work", help="keep the run's folders here (and reuse the builds found here)")
    parser.add_argument("--crash", type=int, default=0, help="only the kill -9 loop, this many runs")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crash:
        sys.path.insert(0, str(ROOT))
        crash(args.crash)
        return
    if args.child:
        step, folder, arg, data = args.child
        print(json.dumps(child(step, folder, arg, Path(data))))
        return
    before = ("" if args.scale else "/work/main") if args.before is None else args.before
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-commits-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        measure(args, before, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, before: str, work: Path) -> None:
    t0 = time.perf_counter()
    n_chunks = write_corpus(args.scale, args.max_chunks, work)
    print(f"corpus: {n_chunks} chunks ({time.perf_counter() - t0:.1f} s to read); load average {os.getloadavg()}")
    built, tbuilt = work / "ours-built", work / "tantivy-built"
    saved = work / "builds.json"
    if saved.exists() and built.exists() and tbuilt.exists() and json.loads(saved.read_text())["chunks"] == n_chunks:
        builds, reused = json.loads(saved.read_text()), " (reused from an earlier run)"
    else:
        for old in (built, tbuilt):
            shutil.rmtree(old, ignore_errors=True)
        builds = {"chunks": n_chunks, "ours": run("build", built, work), "tantivy": run("tantivy-build", tbuilt, work)}
        builds["ours"]["mb"], builds["tantivy"]["mb"] = folder_mb(built), folder_mb(tbuilt)
        saved.write_text(json.dumps(builds))
        reused = ""
    b, bt = builds["ours"], builds["tantivy"]
    print(
        f"build + save whole{reused}: clanker_rag {b['seconds']:.1f} s ({b['cpu_s']:.1f} s CPU), "
        f"folder {b['mb']:.1f} MB; tantivy {bt['seconds']:.1f} s ({bt['cpu_s']:.1f} s CPU), folder {bt['mb']:.1f} MB; "
        f"build {b['seconds'] / bt['seconds']:.2f}x, folder {b['mb'] / bt['mb']:.2f}x tantivy's",
        flush=True,
    )
    ours, tan = work / "ours", work / "tantivy"

    def fresh_copy(src: Path, dst: Path) -> Path:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
        return dst

    fresh_copy(built, ours)
    fresh_copy(tbuilt, tan)
    if before:
        old = work / "before"
        shutil.rmtree(old, ignore_errors=True)
        run("build", old, work, pythonpath=before)
        befores, nows = [], []
        for _ in range(3):
            befores.append(run("query", old, work, pythonpath=before))
            nows.append(run("query", ours, work))
        b_qps = sorted(r["qps"] for r in befores)
        n_qps = sorted(r["qps"] for r in nows)
        print(
            f"one segment, before this change: {b_qps[1]:.0f} q/s (runs {b_qps[0]:.0f}-{b_qps[2]:.0f}), "
            f"load {median([r['load_s'] for r in befores]):.3f} s, folder {folder_mb(old):.1f} MB; "
            f"now: {n_qps[1]:.0f} q/s ({n_qps[0]:.0f}-{n_qps[2]:.0f}), "
            f"load {median([r['load_s'] for r in nows]):.3f} s; "
            f"same top 10: {befores[0]['top'] == nows[0]['top']}",
            flush=True,
        )
    # The probes commit with the merge policy on, alternating engines.
    for kind in ("add", "remove"):
        ours_s, ours_p, ours_c, tan_s, tan_p, tan_c, segs = [], [], [], [], [], [], 0
        for i in range(args.probes):
            arg = f"probe{kind}{i}" if kind == "add" else str(1000 + i)
            r = run(kind, ours, work, arg)
            ours_s.append(r["seconds"])
            ours_p.append(r["process_s"])
            ours_c.append(r["cpu_s"])
            segs = r["segments"]
            rt = run(f"tantivy-{kind}", tan, work, arg)
            tan_s.append(rt["seconds"])
            tan_p.append(rt["process_s"])
            tan_c.append(rt["cpu_s"])
        print(
            f"load+{kind}+save (median of {args.probes}, runs {min(ours_s):.3f}-{max(ours_s):.3f}): clanker_rag "
            f"{median(ours_s):.3f} s in process, CPU {median(ours_c):.3f} s ({median(ours_p):.2f} s with interpreter "
            f"start), {segs} segments after; tantivy {median(tan_s):.3f} s, CPU {median(tan_c):.3f} s "
            f"({median(tan_p):.2f} s)",
            flush=True,
        )
    # The commits start again from the built folders: no probe and no merge in them.
    fresh_copy(built, ours)
    fresh_copy(tbuilt, tan)
    times, ttimes, cpus, tcpus = [], [], [], []
    for i in range(args.commits):
        kind = "add-nomerge" if i % 2 == 0 else "both-nomerge"
        arg = f"c{i}" if i % 2 == 0 else f"c{i}-{2000 + i}"
        r = run(kind, ours, work, arg)
        rt = run("tantivy-" + kind.partition("-")[0], tan, work, arg)
        times.append(r["seconds"])
        cpus.append(r["cpu_s"])
        ttimes.append(rt["seconds"])
        tcpus.append(rt["cpu_s"])
    n_segments = len(json.loads((ours / "index.json").read_text())["body"]["segments"])
    fresh = work / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    run("fresh", ours, work, str(fresh))
    ref = run("query", fresh, work)
    merged_dir = fresh_copy(ours, work / "merged")
    opt = run("optimize", merged_dir, work)
    # Alternating runs, each in a fresh process: the machine is shared and noisy.
    segs, merges, tans = [], [], []
    for _ in range(3):
        segs.append(run("query", ours, work))
        merges.append(run("query", merged_dir, work))
        tans.append(run("tantivy-query", tan, work))
    keys = ("load_s", "load_cpu_s", "qps", "memory_mb")
    seg, merged, tq = ({k: median([r[k] for r in rs]) for k in keys} for rs in (segs, merges, tans))
    print(
        f"{args.commits} commits without merging (each adds a note, every second also removes a source): "
        f"clanker_rag {median(times):.3f} s median ({min(times):.3f}-{max(times):.3f}), CPU {median(cpus):.3f} s, "
        f"{n_segments} segments, folder {folder_mb(ours):.1f} MB; tantivy {median(ttimes):.3f} s "
        f"({min(ttimes):.3f}-{max(ttimes):.3f}), CPU {median(tcpus):.3f} s, "
        f"{tantivy_segments(tan)} segments, folder {folder_mb(tan):.1f} MB"
    )
    print(f"optimize (merge everything): {opt['seconds']:.2f} s, folder {folder_mb(merged_dir):.1f} MB")
    print(
        f"{n_segments} segments (medians of 3): load {seg['load_s']:.3f} s (CPU {seg['load_cpu_s']:.3f}), "
        f"{seg['qps']:.0f} q/s, memory {seg['memory_mb']:.0f} MB; merged: load {merged['load_s']:.3f} s "
        f"(CPU {merged['load_cpu_s']:.3f}), {merged['qps']:.0f} q/s, "
        f"memory {merged['memory_mb']:.0f} MB; segments/merged q/s {seg['qps'] / merged['qps']:.2f}; "
        f"tantivy ({tantivy_segments(tan)} segments): load {tq['load_s']:.3f} s (CPU {tq['load_cpu_s']:.3f}), "
        f"{tq['qps']:.0f} q/s, "
        f"memory {tq['memory_mb']:.0f} MB"
    )
    same = all(r["top"] == ref["top"] for r in segs)
    print(
        f"top 10 of {N_QUERIES} queries, scores included, with segments == one fresh build: {same}; "
        f"merged == fresh build: {all(r['top'] == ref['top'] for r in merges)}; load average {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
