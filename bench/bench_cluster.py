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

``--deployment`` measures instead, on a cluster of separate processes (``dask
scheduler`` and 3 ``dask worker`` commands on 127.0.0.1, as a deployment runs
them), with a sharded index of ``--chunks`` chunks saved to disk:

- the client's memory growth opening it (``ShardedKnowledgeBase.load`` in a
  fresh process; resident memory after the load less before it), with and
  without the client's term tables, beside the index's size on disk;
- the wall time of one ``clanker-rag search --cluster`` (a fresh process:
  start, connect, open, search, print), median of ``--searches`` runs;
- median search time with one and two copies of each shard (``replicas``),
  and with two while one worker is stopped (SIGSTOP);
- ``--writer-runs`` runs of two ``clanker-rag ingest --cluster`` started
  together into one index: runs where both exited 0, and files missing.

``--coordinator`` measures what the client costs as the shard count and the index grow (see
``bench/bench_coordinator.py``).

``--baseline PATH`` repeats the first two on a second cluster running the
clanker_rag tree at PATH (an older commit), so both figures come from one run.

    python bench/bench_cluster.py --deployment --chunks 22400 --writer-runs 10

Prints a table and writes ``bench/results/cluster.json``.  Keep runs short on
a shared machine: every figure is wall-clock.
"""

from __future__ import annotations

import argparse
import contextlib
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

import bench_coordinator  # noqa: E402
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


# Run with ``python -c`` in a fresh process whose clanker_rag is the deployment's tree: the resident
# memory a ``load`` on the cluster adds to the client (VmRSS after, less before; and the peak, VmHWM,
# reset before the load: it counts what passed through and went, such as shards gathered and dropped).
OPEN_PROBE = """
import contextlib, gc, json, sys, time
from distributed import Client
from clanker_rag.cluster import ShardedKnowledgeBase

def status(field):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field + ":"))

folder, address, tables = sys.argv[1], sys.argv[2], sys.argv[3] == "True"
with Client(address, timeout=30) as client:
    client.wait_for_workers(3, timeout=120)
    gc.collect()
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = status("VmRSS")
    t = time.perf_counter()
    kb = ShardedKnowledgeBase.load(folder, client=client, term_tables=tables)
    seconds = time.perf_counter() - t
    gc.collect()
    after, peak = status("VmRSS"), status("VmHWM")
    hits = [(h.source, h.score) for h in kb.search("def return self", 10)]
    kb.close()
print(json.dumps({"grew_bytes": after - before, "peak_bytes": peak - before, "open_s": round(seconds, 3),
                  "hits": hits}))
"""


# In a fresh process: median search time with one and two copies of each shard, and with two while
# the worker holding shard 0's first copy is stopped (SIGSTOP: a hung machine, connected and silent).
REPLICA_PROBE = """
import json, os, signal, statistics, sys, time
from distributed import Client
from clanker_rag.cluster import ShardedKnowledgeBase

folder, address, queries = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read())

def median_ms(kb):
    ms = []
    for q in queries:
        t = time.perf_counter()
        kb.search(q, 10)
        ms.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(ms), 2), round(max(ms), 1)

out = {}
with Client(address, timeout=30) as client:
    client.wait_for_workers(3, timeout=120)
    for replicas in (1, 2):
        kb = ShardedKnowledgeBase.load(folder, client=client, replicas=replicas, timeout=30)
        median_ms(kb)  # warm up
        want = [[(h.source, h.score) for h in kb.search(q, 10)] for q in queries]
        out[f"replicas_{replicas}_ms"] = median_ms(kb)
        if replicas == 2:
            victim = kb.shard_workers()[0][0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGSTOP)
            try:
                out["replicas_2_one_worker_stopped_ms"] = median_ms(kb)
                got = [[(h.source, h.score) for h in kb.search(q, 10)] for q in queries]
                out["same_hits_while_stopped"] = got == want
            finally:
                os.kill(pid, signal.SIGCONT)
        kb.close()
print(json.dumps(out))
"""


class Deployment:
    """A scheduler and 3 workers, separate processes on 127.0.0.1, running the clanker_rag at ``tree``."""

    def __init__(self, tree: Path, n_workers: int = 3) -> None:
        import socket
        import subprocess

        self.tree = tree
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
            "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "inf",
        }
        loopback = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
        cmds = [[sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", str(port), *loopback]]
        cmds += [
            [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--nthreads", "1", *loopback]
        ] * n_workers
        self.procs = [
            # In the tree: ``python -m`` puts the working folder first on the path.
            subprocess.Popen(
                c, cwd=tree, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            for c in cmds
        ]
        from distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(n_workers, timeout=120)

    def run(self, *args: str, timeout: float = 600) -> tuple[int, str, float]:
        """``args`` in a fresh Python with this deployment's tree: exit code, stdout, seconds."""
        import subprocess

        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, *args], cwd=self.tree, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        return done.returncode, done.stdout if done.returncode == 0 else done.stderr, time.perf_counter() - t

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def measure_open(dep: Deployment, folder: Path, searches: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for tables in (True, False):
        code, text, _ = dep.run("-c", OPEN_PROBE, str(folder), dep.address, str(tables))
        assert code == 0, text
        probe = json.loads(text.strip().splitlines()[-1])
        out["term_tables" if tables else "no_term_tables"] = {
            "client_grew_mb": round(probe["grew_bytes"] / 1e6, 1),
            "client_peak_grew_mb": round(probe["peak_bytes"] / 1e6, 1),
            "open_s": probe["open_s"],
        }
        out.setdefault("hits", probe["hits"])
    walls = []
    for _ in range(searches):
        code, text, seconds = dep.run(
            "-m", "clanker_rag", "search", "def return self", "--index", str(folder), "--cluster", dep.address, "--json"
        )
        assert code == 0, text
        walls.append(seconds)
    out["cli_search_s"] = {"median": round(statistics.median(walls), 2), "min": round(min(walls), 2)}
    # The floor of any such command: a fresh Python importing Dask's client and the sharded index.
    floor = [dep.run("-c", "import distributed, clanker_rag.cluster")[2] for _ in range(searches)]
    out["python_and_dask_import_s"] = round(statistics.median(floor), 2)
    return out


def writer_runs(dep: Deployment, runs: int, tmp: Path) -> dict[str, object]:
    """Two ingests at once into one index, ``runs`` times: both exit 0 with files missing must never happen."""
    import subprocess

    trees = {}
    for tag, n in (("a", 20), ("b", 31), ("c", 31)):
        for i in range(n):
            page = tmp / "trees" / tag / f"page{i}.md"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(f"# {tag} {i}\n\nproxy streams {tag}{i} tokens " + "word " * (i % 30))
        trees[tag] = (tmp / "trees" / tag, n)
    both_ok = lost = refused = 0
    for run in range(runs):
        index = tmp / f"writers-{run}"
        ingest = ["-m", "clanker_rag", "ingest", "--index", str(index), "--cluster", dep.address, "--no-progress"]
        code, text, _ = dep.run(*ingest, str(trees["a"][0]))
        assert code == 0, text
        procs = {
            tag: subprocess.Popen(
                [sys.executable, *ingest, str(trees[tag][0]), "--prefix", f"{tag}/"],
                cwd=dep.tree,
                env=dep.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for tag in ("b", "c")
        }
        codes = {tag: (p.wait(timeout=600), p.communicate()[1]) for tag, p in procs.items()}
        sources = set(ShardedKnowledgeBase.load(index).sources())
        both_ok += all(c == 0 for c, _ in codes.values())
        for tag, (c, err) in codes.items():
            want = {f"{tag}/page{i}.md" for i in range(trees[tag][1])}
            if c == 0:
                lost += len(want - sources)
            else:
                refused += 1
                print(f"run {run}: ingest {tag} exited {c}: {err.strip()}", file=sys.stderr)
        lost += len({f"page{i}.md" for i in range(trees["a"][1])} - sources)
    return {"runs": runs, "both_exit_0": both_ok, "refused_runs": refused, "files_lost": lost}


def deployment(args: argparse.Namespace) -> None:
    texts = corpus.chunks()[: args.chunks]
    result: dict[str, object] = {"chunks": len(texts), "cpus": os.cpu_count(), "load": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-", dir=args.tmp) as tmp:
        sk = ShardedKnowledgeBase(3, chunk_size=None)
        sk.add_texts((text, f"chunk/{i}") for i, text in enumerate(texts))
        folder = sk.save(Path(tmp) / "idx")
        del sk
        gc.collect()
        result["index_mb"] = round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6, 1)
        trees = {"this": HERE.parent}
        if args.baseline:
            trees["baseline"] = Path(args.baseline).resolve()
        for name, tree in trees.items():
            dep = Deployment(tree)
            try:
                # (An older tree reads this folder too: it ignores the identity files.)
                result[name] = measure_open(dep, folder, args.searches)
                if name == "this" and args.replica_queries:
                    qfile = Path(tmp) / "queries.json"
                    qfile.write_text(json.dumps(corpus.queries(texts, args.replica_queries)))
                    code, text, _ = dep.run("-c", REPLICA_PROBE, str(folder), dep.address, str(qfile))
                    assert code == 0, text
                    result["replicas"] = json.loads(text.strip().splitlines()[-1])
                if name == "this" and args.writer_runs:
                    result["writers"] = writer_runs(dep, args.writer_runs, Path(tmp))
            finally:
                dep.close()
        if "baseline" in result:
            same_hits = result["baseline"]["hits"] == result["this"]["hits"]  # type: ignore[index]
            result["same_hits_as_baseline"] = same_hits
    for r in ("this", "baseline"):
        if isinstance(result.get(r), dict):
            result[r].pop("hits", None)  # type: ignore[union-attr]
    print(json.dumps(result, indent=1))
    out = HERE / "results" / "cluster_deployment.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=30_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest throughput runs")
    ap.add_argument("--deployment", action="store_true", help="open, CLI search and writers on separate processes")
    ap.add_argument("--searches", type=int, default=5, help="--deployment: CLI searches timed")
    ap.add_argument("--writer-runs", type=int, default=10, help="--deployment: concurrent-writer runs")
    ap.add_argument("--replica-queries", type=int, default=100, help="--deployment: queries of the replica runs")
    ap.add_argument("--baseline", metavar="TREE", help="--deployment: also measure the clanker_rag tree at TREE")
    ap.add_argument("--tmp", default=None, help="--deployment: folder for the index (default: the system's)")
    bench_coordinator.add_arguments(ap)
    args = ap.parse_args()
    if args.coordinator and args.walk:
        bench_coordinator.walk_syscalls(args)
        return
    if args.coordinator:
        bench_coordinator.run(args, Deployment)
        return
    if args.deployment:
        deployment(args)
        return
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
