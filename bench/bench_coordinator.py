"""What a sharded index's client (the coordinator) costs, as the shard count and the index grow.

On a cluster of separate processes (``dask scheduler`` and ``--workers`` ``dask worker``
commands on 127.0.0.1), each index opened in a fresh client process, which measures:

- its resident memory (RSS) after connecting, and what the open and the queries add (and what an
  open with ``term_tables=True`` and its first query add);
- the bytes it received (the sum of ``tcpi_bytes_received`` over its TCP sockets) at the open
  and per query;
- its CPU time (every thread: process time) per query and per shard per query, without term
  figures kept (``term_tables=False``, as every CLI command, ``serve`` included) and with the
  bounded cache warm (``term_tables=True``, each query's terms searched once before);
- on each index: the first ``shard_stats()`` (what ``clanker-rag stats`` shows), ``len()``,
  ``source_count()`` and a first page of ``sources_page()``, wall seconds.

Indexes: ``--chunks`` chunks (the speed corpus, then ``.py`` files of site-packages, 180-word
windows, one source a chunk) saved with each of ``--shard-counts`` shards, and ``--large-chunks``
saved with ``--large-shards`` shards.  ``--baseline TREE`` opens the large index and the small one
with the same shard count on a second cluster running the clanker_rag tree at TREE.

    python bench/bench_cluster.py --coordinator --chunks 25000 --large-chunks 250000

Prints the figures and writes ``bench/results/cluster_coordinator.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import corpus

from clanker_rag.cluster import ShardedKnowledgeBase

HERE = Path(__file__).resolve().parent

# Run in a fresh process with the deployment's tree: argv = folder, address, queries file, workers.
PROBE = """
import gc, json, os, socket, struct, sys, time
from distributed import Client
from clanker_rag.cluster import ShardedKnowledgeBase

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def received():
    # tcpi_bytes_received (struct tcp_info, offset 128) of every TCP socket this process holds.
    total = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.family in (socket.AF_INET, socket.AF_INET6):
                total += struct.unpack_from("Q", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 128)[0]
        except OSError:
            pass
        finally:
            s.close()
    return total

folder, address, queries, workers = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read()), int(sys.argv[4])
out = {}
with Client(address, timeout=60) as client:
    client.wait_for_workers(workers, timeout=120)
    gc.collect()
    rss0, got0 = rss(), received()
    out["rss_connected_mb"] = round(rss0 / 1e6, 1)
    t = time.perf_counter()
    kb = ShardedKnowledgeBase.load(folder, client=client, term_tables=False, timeout=120)
    out["open_s"] = round(time.perf_counter() - t, 2)
    gc.collect()
    rss1, got1 = rss(), received()
    out["open_rss_grew_mb"] = round((rss1 - rss0) / 1e6, 2)
    out["open_received_kb"] = round((got1 - got0) / 1e3, 1)
    n = kb.n_shards
    for q in queries[:10]:
        kb.search(q, 10)  # warm up the workers' actors
    got2, cpu, t = received(), time.process_time(), time.perf_counter()
    for q in queries:
        kb.search(q, 10)
    wall, cpu, got3 = time.perf_counter() - t, time.process_time() - cpu, received()
    gc.collect()
    out["queries"] = len(queries)
    out["query_ms"] = round(wall * 1000 / len(queries), 2)
    out["client_cpu_ms_query"] = round(cpu * 1000 / len(queries), 3)
    out["client_cpu_ms_shard_query"] = round(cpu * 1000 / len(queries) / n, 3)
    out["received_kb_query"] = round((got3 - got2) / 1e3 / len(queries), 2)
    out["rss_after_queries_mb"] = round(rss() / 1e6, 1)
    for name, call in (
        ("first_stats_s", kb.shard_stats),
        ("len_s", lambda: len(kb)),
        ("source_count_s", lambda: kb.source_count() if hasattr(kb, "source_count") else len(kb.sources())),
        ("first_sources_page_s", lambda: kb.sources_page() if hasattr(kb, "sources_page") else kb.sources()[:1000]),
    ):
        got, t = received(), time.perf_counter()
        call()
        out[name] = round(time.perf_counter() - t, 3)
        out[name[:-2] + "_received_kb"] = round((received() - got) / 1e3, 1)
    out["chunks"] = len(kb)
    kb.close()
    # Opened with term_tables=True (the Python default; before issue 43 it fetched every term table here).
    gc.collect()
    rss2, got4 = rss(), received()
    kb = ShardedKnowledgeBase.load(folder, client=client, term_tables=True, timeout=120)
    kb.search(queries[0], 10)
    gc.collect()
    out["tables_open_rss_grew_mb"] = round((rss() - rss2) / 1e6, 2)
    out["tables_open_received_kb"] = round((received() - got4) / 1e3, 1)
    kb.close()
    if "--cached" in sys.argv:  # the bounded cache (term_tables=True), warm
        kb = ShardedKnowledgeBase.load(folder, client=client, term_tables=True, timeout=120)
        for q in queries:
            kb.search(q, 10)
        got, cpu, t = received(), time.process_time(), time.perf_counter()
        for q in queries:
            kb.search(q, 10)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - t
        out["cached_query_ms"] = round(wall * 1000 / len(queries), 2)
        out["cached_client_cpu_ms_shard_query"] = round(cpu * 1000 / len(queries) / n, 3)
        out["cached_received_kb_query"] = round((received() - got) / 1e3 / len(queries), 2)
        out["cached_rss_mb"] = round(rss() / 1e6, 1)
        kb.close()
print(json.dumps(out))
"""


def texts(n: int) -> list[str]:
    """``n`` chunks: the speed corpus, then 180-word windows of site-packages' ``.py`` files (sorted walk)."""
    out = corpus.chunks()[:n]
    if len(out) >= n:
        return out
    root = Path(sysconfig.get_paths()["purelib"])
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        paths = [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
        out.extend(corpus.windows(paths))
        if len(out) >= n:
            return out[:n]
    raise SystemExit(f"only {len(out)} chunks to be had, not {n}")


def build(chunks: list[str], shards: int, folder: Path) -> tuple[Path, float]:
    t = time.perf_counter()
    kb = ShardedKnowledgeBase(shards, chunk_size=None)
    kb.add_texts((text, f"chunk/{i}") for i, text in enumerate(chunks))
    saved = kb.save(folder)
    del kb
    gc.collect()
    return saved, time.perf_counter() - t


def folders(args: argparse.Namespace, tmp: Path) -> Iterator[tuple[str, int, int, Path]]:
    small = texts(args.chunks)
    for n in args.shard_counts:
        folder, seconds = build(small, n, tmp / f"small-{n}")
        print(f"built {len(small)} chunks, {n} shards in {seconds:.0f} s", flush=True)
        yield "small", len(small), n, folder
    del small
    if args.large_chunks:
        large = texts(args.large_chunks)
        folder, seconds = build(large, args.large_shards, tmp / "large")
        print(f"built {len(large)} chunks, {args.large_shards} shards in {seconds:.0f} s", flush=True)
        del large
        gc.collect()
        yield "large", args.large_chunks, args.large_shards, folder


def run(args: argparse.Namespace, deployment: Any) -> None:
    """``deployment(tree, workers)``: a cluster of separate processes (bench_cluster.Deployment)."""
    result: dict[str, Any] = {"workers": args.workers, "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-coord-", dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        qfile = tmp / "queries.json"
        qfile.write_text(json.dumps(corpus.queries(corpus.chunks(), args.queries)))
        built = list(folders(args, tmp))
        trees = {"this": HERE.parent}
        if args.baseline:
            trees["baseline"] = Path(args.baseline).resolve()
        for tree_name, tree in trees.items():
            dep = deployment(tree, args.workers)
            try:
                for size, _, n, folder in built:
                    if tree_name == "baseline" and n != args.large_shards:
                        continue
                    extra = ["--cached"] if tree_name == "this" else []
                    code, text, _ = dep.run(
                        "-c", PROBE, str(folder), dep.address, str(qfile), str(args.workers), *extra
                    )
                    if code != 0:
                        raise SystemExit(f"probe failed on {folder} ({tree_name}):\n{text}")
                    row = {"tree": tree_name, "index": size, "shards": n, **json.loads(text.strip().splitlines()[-1])}
                    row["load"] = round(os.getloadavg()[0], 1)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            finally:
                dep.close()
    result["rows"] = rows
    out = HERE / "results" / "cluster_coordinator.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


# Run under strace in a fresh process with a tree's clanker_rag: argv = shards, folder, "ingest" or "none".
WALK_PROBE = """
import sys
from clanker_rag.cluster import ShardedKnowledgeBase
import clanker_rag._ingest._run, clanker_rag._ingest._readers
kb = ShardedKnowledgeBase(int(sys.argv[1]))
kb.add_text("warm the import paths", "x.md")
if sys.argv[3] == "ingest":
    report = kb.ingest(sys.argv[2], progress=False)
    print(len(report.added), file=sys.stderr)
"""
WALK_CALLS = ("newfstatat", "statx", "openat", "getdents64")


def walk_syscalls(args: argparse.Namespace) -> None:
    """File-system calls of an in-process sharded ingest of ``--walk FOLDER`` (``strace -f -c``), less
    those of the same process without the ingest, for each shard count, here and at ``--baseline``."""
    import subprocess

    trees = {"this": HERE.parent, **({"baseline": Path(args.baseline).resolve()} if args.baseline else {})}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-walk-") as tmp:
        out = Path(tmp) / "strace.txt"

        def calls(tree: Path, shards: int, what: str) -> dict[str, int]:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            cmd = ["strace", "-f", "-c", "-o", str(out), "-e", "trace=" + ",".join(WALK_CALLS)]
            cmd += [sys.executable, "-c", WALK_PROBE, str(shards), args.walk, what]
            subprocess.run(cmd, env=env, cwd=tmp, check=True, capture_output=True)
            counted = {}
            for line in out.read_text().splitlines():
                fields = line.split()
                if fields and fields[-1] in WALK_CALLS:
                    counted[fields[-1]] = int(fields[3])
            return counted

        for name, tree in trees.items():
            for shards in args.shard_counts:
                base, run = calls(tree, shards, "none"), calls(tree, shards, "ingest")
                row = {"tree": name, "shards": shards, **{c: run.get(c, 0) - base.get(c, 0) for c in WALK_CALLS}}
                print(json.dumps(row), flush=True)
                rows.append(row)
    result = {"folder": args.walk, "load": os.getloadavg(), "rows": rows}
    (HERE / "results" / "cluster_walk.json").write_text(json.dumps(result, indent=1) + "\n")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--walk", metavar="FOLDER", help="--coordinator: count an ingest's file-system calls instead")
    ap.add_argument("--coordinator", action="store_true", help="the client's cost as shards and the index grow")
    ap.add_argument("--shard-counts", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--large-chunks", type=int, default=0, help="--coordinator: the large index's chunks")
    ap.add_argument("--large-shards", type=int, default=8, help="--coordinator: the large index's shards")
    ap.add_argument("--workers", type=int, default=4, help="--coordinator: dask worker processes")
