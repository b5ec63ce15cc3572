"""Speed benchmark on the stdlib corpus: clanker_rag against bm25s, tantivy, rank_bm25.

Each system runs in its own subprocess, twice: once to build (timed) and save,
once to load (timed), measure the resident memory the loaded index added, and
answer the queries (single thread, top-10).  Peers come from the ``bench``
extra: ``pip install -e '.[bench]'``.

    python bench/bench_search.py                     # all systems, 500 queries
    python bench/bench_search.py --systems clanker_rag,bm25s --queries 200

Prints a table and writes ``bench/results/search.json``.  Times are wall-clock
(``time.perf_counter``) and process CPU (``time.process_time``); on a shared
machine the CPU column is the steadier one.
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
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402

SYSTEMS = ["clanker_rag", "bm25s", "tantivy", "rank_bm25"]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Clock:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> dict[str, float]:
        return {"wall": time.perf_counter() - self.wall, "cpu": time.process_time() - self.cpu}


# -- per-system build / load / query -----------------------------------------------------------
def build(system: str, texts: list[str], folder: str) -> dict[str, float]:
    if system == "clanker_rag":
        from clanker_rag import KnowledgeBase

        clock = Clock()
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((text, str(i)) for i, text in enumerate(texts))
        kb._index.refresh()  # impacts included in the build time
        out = clock.stop()
        kb.save(folder)
        return out
    if system == "bm25s":
        import bm25s
        import Stemmer

        clock = Clock()
        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        out = clock.stop()
        retriever.save(folder, corpus=texts)
        return out
    if system == "tantivy":
        import tantivy

        clock = Clock()
        schema_builder = tantivy.SchemaBuilder()
        schema_builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
        schema_builder.add_integer_field("id", stored=True, indexed=False)
        schema = schema_builder.build()
        index = tantivy.Index(schema, path=folder)
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for i, text in enumerate(texts):
            writer.add_document(tantivy.Document(body=text, id=i))
        writer.commit()
        writer.wait_merging_threads()
        return clock.stop()
    if system == "rank_bm25":
        import pickle
        import re

        from rank_bm25 import BM25Okapi

        clock = Clock()
        tokenized = [re.findall(r"\w+", t.lower()) for t in texts]
        model = BM25Okapi(tokenized)
        out = clock.stop()
        with open(Path(folder) / "model.pkl", "wb") as fh:  # the peer's own way; never ours
            pickle.dump((model, texts), fh)
        return out
    raise SystemExit(f"unknown system {system}")


def load_and_query(system: str, folder: str, queries: list[str]) -> dict[str, float]:
    base = rss_bytes()
    clock = Clock()
    if system == "clanker_rag":
        from clanker_rag import KnowledgeBase

        kb = KnowledgeBase.load(folder)

        def search(q: str) -> object:
            return [h.text for h in kb.search(q, 10)]

    elif system == "bm25s":
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25.load(folder, load_corpus=True)

        def search(q: str) -> object:
            tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
            if not tokens.vocab:
                return []
            k = min(10, retriever.scores["num_docs"])
            docs, _ = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
            return docs

    elif system == "tantivy":
        import tantivy

        index = tantivy.Index.open(folder)
        index.reload()
        searcher = index.searcher()

        def search(q: str) -> object:
            query = index.parse_query(q, ["body"])
            return [searcher.doc(addr)["body"] for _, addr in searcher.search(query, 10).hits]

    else:
        import pickle
        import re

        with open(Path(folder) / "model.pkl", "rb") as fh:
            model, texts = pickle.load(fh)

        def search(q: str) -> object:
            return model.get_top_n(re.findall(r"\w+", q.lower()), texts, n=10)

    load = clock.stop()
    memory = rss_bytes() - base
    search(queries[0])  # warm-up
    clock = Clock()
    for q in queries:
        search(q)
    spent = clock.stop()
    return {
        "load_wall": load["wall"],
        "load_cpu": load["cpu"],
        "memory_mb": memory / 2**20,
        "qps_wall": len(queries) / spent["wall"],
        "qps_cpu": len(queries) / spent["cpu"],
        "queries": len(queries),
    }


def child(args: argparse.Namespace) -> None:
    texts = corpus.chunks()
    if args.phase == "build":
        result = build(args.system, texts, args.folder)
        result["chunks"] = len(texts)
    else:
        queries = corpus.queries(texts, 500)[: args.queries]
        del texts
        result = load_and_query(args.system, args.folder, queries)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--rank-bm25-queries", type=int, default=30, help="rank_bm25 is ~2 q/s: fewer queries")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        child(args)
        return
    results = {}
    for system in args.systems.split(","):
        folder = tempfile.mkdtemp(prefix=f"bench-{system}-")
        try:
            n_queries = args.rank_bm25_queries if system == "rank_bm25" else args.queries
            row = {}
            for phase in ("build", "query"):
                cmd = [
                    sys.executable,
                    __file__,
                    "--phase",
                    phase,
                    "--system",
                    system,
                    "--folder",
                    folder,
                    "--queries",
                    str(n_queries),
                ]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(f"{system} {phase} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                    break
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            size = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())
            row["disk_mb"] = size / 2**20
            results[system] = row
            print(
                system, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print()
    print(f"{'system':12} {'build s (cpu)':>14} {'load s':>8} {'mem MB':>8} {'q/s wall':>9} {'q/s cpu':>9}")
    for system, r in results.items():
        if "qps_cpu" not in r:
            continue
        print(
            f"{system:12} {r['wall']:7.2f} ({r['cpu']:5.2f}) {r['load_wall']:8.2f} {r['memory_mb']:8.1f}"
            f" {r['qps_wall']:9.1f} {r['qps_cpu']:9.1f}"
        )
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "search.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
