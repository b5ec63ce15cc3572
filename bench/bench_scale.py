"""The index at scale: build, load, memory and cold queries on ~225k chunks.

The corpus is every ``.py`` file of the interpreter's site-packages (with
torch, transformers and sentence-transformers installed: about 225k chunks,
40M words), split on whitespace into 180-word windows with a 90-word stride,
each window its own source, cut to the first 225,000 windows of the sorted
walk when there are more (``--max-chunks``); 500 queries of 2-6 lowercase word tokens drawn
with ``random.Random(0)`` (see ``corpus.py``).  ``--small`` uses the stdlib
corpus of ``bench_search.py`` instead (about 30k chunks).

Each engine runs in its own processes: one builds (timed) and saves, a fresh
one loads (timed), then answers the 500 queries one at a time, each once
(cold: nothing warmed up), top-10, returning the hit texts.  Memory is the
resident set (``/proc/self/statm``) after loading and the 500 queries, minus
that of the same process before it imported the engine (a bare interpreter
with the query list).  Pages of a mapped index file count as resident once
touched; the shared part is reported beside.  Build CPU is the building process's
(every thread) plus that of the child processes it waited for (clanker_rag's
workers): on a shared machine the steadier figure.

    python bench/bench_scale.py --small
    python bench/bench_scale.py                       # the 225k corpus
    python bench/bench_scale.py --engines clanker_rag,tantivy
    python bench/bench_scale.py --baseline DIR        # also DIR's clanker_rag (before/after)
    python bench/bench_scale.py --rounds 3            # queries 3 times, engines alternating

With ``--rounds N`` every engine is built once, then each answers the queries
N times in fresh processes, the engines alternating round by round, so load
swings hit each alike; the table shows the median round (and every round's
queries/s beside it in the JSON).

Engines: clanker_rag, tantivy (one indexing thread, ``en_stem``), bm25s with
numpy (``n_threads=0``: no thread pool per call) and, when numba is
installed, bm25s with numba.  Writes ``bench/results/scale[-small].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

ENGINES = ["clanker_rag", "tantivy", "bm25s", "bm25s-numba"]
N_QUERIES = 500
# The size the targets of issue 16 are set for.  A site-packages with more
# than torch, transformers and sentence-transformers holds more windows: the
# corpus is then the first MAX_CHUNKS of the sorted walk.
MAX_CHUNKS = 225_000


def statm() -> tuple[int, int]:
    """(resident, shared) bytes of this process."""
    with open("/proc/self/statm") as fh:
        fields = fh.read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, int(fields[2]) * page


def site_packages_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["purelib"])
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                out.append(Path(dirpath) / name)
    return out


def write_corpus(small: bool, max_chunks: int, work: Path) -> tuple[Path, Path, int]:
    """The chunks (one per line: windows hold no newline) and the queries, as files."""
    chunks = corpus.chunks() if small else corpus.windows(site_packages_files())
    if max_chunks:
        del chunks[max_chunks:]
    chunks_file, queries_file = work / "chunks.txt", work / "queries.json"
    chunks_file.write_text("\n".join(chunks), encoding="utf-8", errors="surrogatepass")
    queries_file.write_text(json.dumps(corpus.queries(chunks, N_QUERIES)))
    return chunks_file, queries_file, len(chunks)


# -- one engine, one phase, in a child process ----------------------------------------------------
def cpu_so_far() -> float:
    """CPU seconds of this process (every thread) and of its children waited for
    (clanker_rag's worker processes and forked helpers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def build(engine: str, texts: list[str], folder: str) -> dict[str, float]:
    t0, c0 = time.perf_counter(), cpu_so_far()
    if engine == "clanker_rag":
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((text, str(i)) for i, text in enumerate(texts))
        kb._index.refresh()  # impacts and orders count as build, as in bench_search.py
        built, built_cpu = time.perf_counter(), cpu_so_far()
        kb.save(folder)
    elif engine.startswith("bm25s"):
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(backend="numba" if engine == "bm25s-numba" else "numpy")
        retriever.index(tokens, show_progress=False)
        built, built_cpu = time.perf_counter(), cpu_so_far()
        retriever.save(folder, corpus=texts)
    elif engine == "tantivy":
        import tantivy

        schema_builder = tantivy.SchemaBuilder()
        schema_builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
        schema = schema_builder.build()
        index = tantivy.Index(schema, path=folder)
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for text in texts:
            writer.add_document(tantivy.Document(body=text))
        writer.commit()
        writer.wait_merging_threads()
        built, built_cpu = time.perf_counter(), cpu_so_far()
    else:
        raise SystemExit(f"unknown engine {engine}")
    return {"build_s": built - t0, "build_cpu_s": built_cpu - c0, "save_s": time.perf_counter() - built}


def load_and_query(engine: str, folder: str, qs: list[str]) -> dict[str, float]:
    base, base_shared = statm()
    t0, c0 = time.perf_counter(), time.process_time()
    if engine == "clanker_rag":
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase.load(folder)

        def search(q: str) -> list[str]:
            return [h.text for h in kb.search(q, k=10)]

    elif engine.startswith("bm25s"):
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25.load(folder, load_corpus=True, show_progress=False)
        backend = "numba" if engine == "bm25s-numba" else "numpy"

        def search(q: str) -> list[str]:
            tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
            if not tokens.vocab:
                return []
            docs, _ = retriever.retrieve(tokens, k=10, show_progress=False, n_threads=0, backend_selection=backend)
            return [d["text"] if isinstance(d, dict) else d for d in docs[0]]

    else:
        import tantivy

        index = tantivy.Index.open(folder)
        index.reload()
        searcher = index.searcher()

        def search(q: str) -> list[str]:
            query = index.parse_query(q, ["body"])
            return [searcher.doc(addr)["body"][0] for _, addr in searcher.search(query, 10).hits]

    load, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    after_load = statm()[0] - base
    t1, c1 = time.perf_counter(), time.process_time()
    n_hits = sum(len(search(q)) for q in qs)
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    resident, shared = statm()
    return {
        "load_s": load,
        "load_cpu_s": load_cpu,
        "memory_after_load_mb": after_load / 2**20,
        "memory_mb": (resident - base) / 2**20,
        "shared_mb": (shared - base_shared) / 2**20,
        "qps_wall": len(qs) / wall,
        "qps_cpu": len(qs) / cpu,
        "hits": n_hits,
        "load_average": os.getloadavg()[0],
    }


def child(args: argparse.Namespace) -> None:
    if args.phase == "build":
        texts = Path(args.chunks).read_text(encoding="utf-8", errors="surrogatepass").split("\n")
        result = build(args.engine, texts, args.folder)
    else:
        result = load_and_query(args.engine, args.folder, json.loads(Path(args.queries).read_text()))
    print(json.dumps(result))


def run_phase(
    phase: str, name: str, folder: Path, chunks_file: Path, queries_file: Path, env: dict[str, str] | None
) -> dict[str, Any]:
    """One engine's build or query phase in a child process: its JSON line, or ``{"failed": phase}``."""
    cmd = [sys.executable, __file__, "--phase", phase, "--engine", name, "--folder", str(folder)]
    cmd += ["--chunks", str(chunks_file), "--queries", str(queries_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        print(f"{name} {phase} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"failed": phase}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def available(engine: str) -> bool:
    module = {"clanker_rag": "clanker_rag", "tantivy": "tantivy", "bm25s": "bm25s", "bm25s-numba": "numba"}[engine]
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, check=False)
    return probe.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the ~30k-chunk stdlib corpus")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--max-chunks",
        type=int,
        default=MAX_CHUNKS,
        help=f"keep the first N windows of the sorted walk (default {MAX_CHUNKS}; 0: all)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="query rounds, engines alternating (median shown)")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also time the clanker_rag package found in DIR (e.g. an older commit's `git archive`), "
        "as engine clanker_rag-baseline, first",
    )
    for hidden in ("--phase", "--engine", "--folder", "--chunks", "--queries"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        child(args)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        t0 = time.perf_counter()
        chunks_file, queries_file, n_chunks = write_corpus(args.small, args.max_chunks, work)
        print(f"corpus: {n_chunks} chunks ({time.perf_counter() - t0:.1f} s to read)", flush=True)
        engines = args.engines.split(",")
        if args.baseline:
            engines.insert(0, "clanker_rag-baseline")
        built: dict[str, tuple[Path, dict[str, str] | None, dict[str, Any]]] = {}
        for engine in engines:
            # The baseline is clanker_rag imported from another folder.
            name, env = engine, None
            if engine == "clanker_rag-baseline":
                name, env = "clanker_rag", {**os.environ, "PYTHONPATH": str(Path(args.baseline).resolve())}
            if not available(name):
                results[engine] = {"skipped": "not installed"}
                print(f"{engine}: not installed, skipped", flush=True)
                continue
            folder = work / engine
            folder.mkdir()
            row = run_phase("build", name, folder, chunks_file, queries_file, env)
            row["disk_mb"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
            results[engine] = row
            if "failed" not in row:
                built[engine] = (folder, env, row)
        # Every engine built first, then the query rounds alternate between them.
        rounds: dict[str, list[dict[str, Any]]] = {engine: [] for engine in built}
        for _ in range(max(1, args.rounds)):
            for engine, (folder, env, _row) in built.items():
                name = "clanker_rag" if engine == "clanker_rag-baseline" else engine
                rounds[engine].append(run_phase("query", name, folder, chunks_file, queries_file, env))
        for engine, (folder, _env, row) in built.items():
            done = [r for r in rounds[engine] if "failed" not in r]
            if not done:
                row["failed"] = "query"
            else:
                row.update(sorted(done, key=lambda r: r["qps_wall"])[len(done) // 2])
                row["qps_wall_rounds"] = [round(r["qps_wall"], 1) for r in done]
                row["qps_cpu_rounds"] = [round(r["qps_cpu"], 1) for r in done]
            print(engine, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{n_chunks} chunks; load average {os.getloadavg()[0]:.1f}; median of {max(1, args.rounds)} round(s)")
    print(f"{'engine':20} {'build s':>8} {'cpu s':>6} {'load s':>7} {'mem MB':>7} {'q/s':>7} {'q/s cpu':>8}")
    for engine, r in results.items():
        if "qps_wall" in r:
            print(
                f"{engine:20} {r['build_s']:8.1f} {r.get('build_cpu_s', 0.0):6.1f} {r['load_s']:7.2f}"
                f" {r['memory_mb']:7.0f}"
                f" {r['qps_wall']:7.0f} {r['qps_cpu']:8.0f}"
            )
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    name = "scale-small.json" if args.small else "scale.json"
    (out / name).write_text(json.dumps({"chunks": n_chunks, "engines": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
