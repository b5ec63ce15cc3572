"""Sharded knowledge base on a loopback Dask cluster, on the stdlib corpus.

Measures, against one in-process ``KnowledgeBase`` over the same chunks:

- memory per chunk of one knowledge base (resident memory the build added);
- per-query latency of 3 shards in this process and on a ``LocalCluster``
  (3 worker processes), so the fan-out overhead is the difference, with the
  client's CPU time a query beside it, and the floor: a bare Dask round trip
  to the 3 workers (3 trivial tasks gathered; 3 trivial actor calls);
- ingest throughput of the stdlib tree (site-packages excluded) with 1 and 3
  workers (one shard each);
- recovery: a worker holding a shard is killed with SIGKILL during searches;
  the time until a search answers again (identical hits), and the chunks
  still there afterwards, over ``--kills`` runs.

    python bench/bench_cluster.py --chunks 30000 --queries 200 --kills 50
    python bench/bench_cluster.py --chunks 10000 --queries 50 --kills 2

Prints a table and writes ``bench/results/cluster.json``.  Keep runs short on
a shared machine: every figure is wall-clock.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402

from clanker_rag import KnowledgeBase, RetrievalTimeoutError  # noqa: E402
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def per_query_ms(kb: object, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t = time.perf_counter()
        kb.search(q, 10)  # type: ignore[attr-defined]
        out.append((time.perf_counter() - t) * 1000)
    return out


def _noop(x: int) -> int:
    return x


class _Echo:
    """A trivial actor: the floor of one call to a worker that skips the scheduler (a
    coroutine, run on the worker's event loop, as the sharded search's actor)."""

    async def call(self, x: int) -> int:
        return x


async def _all(calls: list[Any]) -> list[Any]:
    return [await call for call in calls]


def bare_round_trips(client: Any, n: int) -> dict[str, float]:
    """Median ms of the floor: 3 trivial tasks (one a worker) submitted and gathered, and 3
    trivial actor calls (one a worker, as the sharded search makes them) waited for."""
    from distributed.utils import sync

    workers = sorted(client.ncores())
    actors = [client.submit(_Echo, workers=[w], actor=True).result() for w in workers]
    tasks, calls = [], []
    for i in range(n):
        t = time.perf_counter()
        client.gather([client.submit(_noop, i, workers=[w], pure=False) for w in workers])
        tasks.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        pending: list[Any] = [a.call(i) for a in actors]
        sync(client.loop, _all, pending)  # one wait for the three, as the sharded search waits
        calls.append((time.perf_counter() - t) * 1000)
    del actors
    return {
        "3_tasks_gathered_ms": round(statistics.median(tasks), 3),
        "3_actor_calls_ms": round(statistics.median(calls), 3),
    }


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"median_ms": round(statistics.median(ms), 3), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3)}


def hits(kb: object, queries: list[str]) -> list[list[tuple[str, float]]]:
    return [[(h.source, round(h.score, 6)) for h in kb.search(q, 10)] for q in queries]  # type: ignore[attr-defined]


def same(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> bool:
    """The same scores rank by rank, and the same sources apart from ties (chunks of equal
    score come in insertion order from one knowledge base, by source name from shards)."""
    for xs, ys in zip(a, b):
        if [x[1] for x in xs] != [y[1] for y in ys]:
            return False
        if sorted(xs) != sorted(ys) and xs:
            last = xs[-1][1]
            if {x for x in xs if x[1] != last} != {y for y in ys if y[1] != last}:
                return False
    return len(a) == len(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=30_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest throughput runs")
    args = ap.parse_args()
    texts = corpus.chunks()[: args.chunks]
    queries = corpus.queries(texts, args.queries)
    items = [(text, f"chunk/{i}") for i, text in enumerate(texts)]
    result: dict[str, object] = {"chunks": len(texts), "queries": len(queries), "cpus": os.cpu_count()}

    gc.collect()
    before = rss_bytes()
    one = KnowledgeBase(chunk_size=None)
    one.add_texts(items)
    one.search("warm up", 10)
    gc.collect()
    result["bytes_per_chunk_one_kb"] = round((rss_bytes() - before) / len(texts))
    cpu = time.process_time()
    one_ms = summary(per_query_ms(one, queries))
    one_ms["cpu_ms_a_query"] = round((time.process_time() - cpu) * 1000 / len(queries), 3)
    result["one_kb"] = one_ms
    want = hits(one, queries)

    local = ShardedKnowledgeBase(3, chunk_size=None)
    local.add_texts(items)
    assert same(hits(local, queries), want), "in-process shards disagree with one knowledge base"
    result["three_shards_in_process"] = summary(per_query_ms(local, queries))

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        folder = local.save(Path(tmp) / "idx")
        del local
        client = connect("local", n_workers=3)
        try:
            t = time.perf_counter()
            kb = ShardedKnowledgeBase.load(folder, client=client)
            result["open_on_cluster_s"] = round(time.perf_counter() - t, 2)
            per_query_ms(kb, queries[:10])  # warm up the workers
            assert same(hits(kb, queries), want), "cluster shards disagree with one knowledge base"
            cpu = time.process_time()
            cluster_ms = summary(per_query_ms(kb, queries))
            cluster_ms["client_cpu_ms_a_query"] = round((time.process_time() - cpu) * 1000 / len(queries), 3)
            result["three_shards_cluster"] = cluster_ms
            result["bare_dask_round_trip"] = bare_round_trips(client, len(queries))
            result["fanout_overhead_ms"] = round(cluster_ms["median_ms"] - one_ms["median_ms"], 3)
            recoveries = []
            lost = []
            probe = queries[:5]
            for run in range(args.kills):
                shard = run % 3
                address = kb.shard_workers()[shard][0]
                pid = client.run(os.getpid, workers=[address])[address]
                os.kill(pid, signal.SIGKILL)
                t = time.perf_counter()
                try:
                    again = hits(kb, probe)
                except RetrievalTimeoutError as exc:
                    # Recorded, not hidden: the run stops at the first stall.
                    result["kill_stall"] = f"run {run}: {exc}"
                    break
                recoveries.append(time.perf_counter() - t)
                assert same(again, want[:5]), f"kill run {run}: different hits after recovery"
                lost.append(len(texts) - len(kb))
            result["kill_runs"] = len(recoveries)
            if recoveries:
                result["recovery_s"] = {
                    "median": round(statistics.median(recoveries), 2),
                    "max": round(max(recoveries), 2),
                }
            result["chunks_lost"] = sum(lost)
            kb.close()
            if "kill_stall" in result:
                close_client(client)  # a fresh cluster for the ingest runs
                client = connect("local", n_workers=3)
            if not args.no_ingest:
                stdlib = sysconfig.get_paths()["stdlib"]
                ingest: dict[str, object] = {"root": "stdlib, site-packages excluded"}
                for n in (1, 3):
                    sk = ShardedKnowledgeBase(n, client=client)
                    t = time.perf_counter()
                    report = sk.ingest(stdlib, exclude=["site-packages/"])
                    seconds = time.perf_counter() - t
                    files = len(report.added)
                    ingest[f"{n}_workers"] = {
                        "files": files,
                        "chunks": report.chunks_total,
                        "seconds": round(seconds, 2),
                        "files_per_s": round(files / seconds, 1),
                        "mb_per_s": round(report.bytes_read / 1e6 / seconds, 2),
                    }
                    sk.close()
                result["ingest"] = ingest
        finally:
            close_client(client)
    print(json.dumps(result, indent=1))
    out = HERE / "results" / "cluster.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
