"""Recovery targets of issue 43 on a cluster of separate processes on 127.0.0.1 (``dask scheduler`` and
``dask worker`` commands, as a deployment runs them), with a 3-shard index of ``--chunks`` chunks on disk:

- a worker lost for good with ``replicas=2``: median search before, in the 10 s after the kill and in
  the ``--after`` seconds after that (target: within 2x the healthy median within 10 s), and the
  placement the client ends with (copies apart, every worker holding one);
- one worker hung (SIGSTOP): the wall time of ``clanker-rag search`` and ``stats --cluster`` with
  ``--cluster-timeout T``, and of ``ShardedKnowledgeBase.load(timeout=T)`` (target: at most T + 5 s);
- ``--kills`` workers (6 by default) killed for good and replaced, then a rolling restart of every worker:
  after each step, the shards whose two copies share a worker and the workers holding nothing (target: 0
  and 0) once the open index has placed its copies;
- the scheduler and its workers gone for ``--outage`` seconds (120 by default), then started again: the
  time from their restart to the first search that answers with the hits from before (target: 10 s),
  for a client from ``connect()``.

    python bench/bench_cluster_recovery.py --chunks 20000 --outage 120

Prints JSON and writes ``bench/results/cluster_recovery.json``.  Every figure is wall-clock: say the load.
(A file of its own rather than a mode of ``bench_cluster.py``: that one measures the coordinator.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402

from clanker_rag import RetrievalTimeoutError  # noqa: E402
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect  # noqa: E402

ENV = {
    **os.environ,
    "PYTHONPATH": str(HERE.parent),
    "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
    "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "inf",
}
LOOPBACK = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]


class Procs:
    """A scheduler and workers on a fixed loopback port, each its own process group."""

    def __init__(self, n_workers: int) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.start(n_workers)

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", *cmd], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def start(self, n_workers: int) -> None:
        self.scheduler = self._spawn(["distributed.cli.dask_scheduler", "--port", str(self.port), *LOOPBACK])
        worker = ["distributed.cli.dask_worker", self.address, "--nthreads", "1", *LOOPBACK]
        for _ in range(n_workers):
            self.workers.append(self._spawn(worker))

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in [*self.workers, *([self.scheduler] if self.scheduler else [])]:
            self.kill(proc)
        self.workers, self.scheduler = [], None


def wait_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=60) as c:
        c.wait_for_workers(n, timeout=120)


def hits(kb: Any, queries: list[str]) -> list[list[tuple[str, float]]]:
    return [[(h.source, h.score) for h in kb.search(q, 10)] for q in queries]


def timed(kb: Any, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t = time.perf_counter()
        kb.search(q, 10)
        out.append((time.perf_counter() - t) * 1000)
    return out


def group_of(pgid: int) -> set[int]:
    pids = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[2]) == pgid:
                        pids.add(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return pids


def lost_for_good(folder: Path, queries: list[str], after: float) -> dict[str, object]:
    procs = Procs(3)
    try:
        wait_workers(procs.address, 3)
        client = connect(procs.address, timeout=30)
        kb = ShardedKnowledgeBase.load(folder, client=client, replicas=2, timeout=30)
        timed(kb, queries[:20])  # warm up
        want = hits(kb, queries)
        healthy = statistics.median(timed(kb, queries))
        dead = kb.shard_workers()[0][0]
        pid = client.run(os.getpid, workers=[dead])[dead]
        victim = next(p for p in procs.workers if pid in group_of(p.pid))
        killed = time.monotonic()
        procs.kill(victim)
        first: list[float] = []
        later: list[float] = []
        errors = 0
        while time.monotonic() - killed < 10 + after:
            for q in queries:
                t = time.perf_counter()
                try:
                    kb.search(q, 10)
                except RetrievalTimeoutError:
                    errors += 1
                ms = (time.perf_counter() - t) * 1000
                (first if time.monotonic() - killed < 10 else later).append(ms)
                if time.monotonic() - killed >= 10 + after:
                    break
        same = hits(kb, queries) == want
        holders = kb.shard_workers()
        health = kb.health().status
        kb.close()
        close_client(client)
        return {
            "healthy_median_ms": round(healthy, 2),
            "first_10_s_median_ms": round(statistics.median(first), 2),
            "first_10_s_searches": len(first),
            f"next_{after:g}_s_median_ms": round(statistics.median(later), 2) if later else None,
            "later_vs_healthy": round(statistics.median(later) / healthy, 2) if later else None,
            "errors": errors,
            "same_hits_after": same,
            "copies_apart_after": all(len(c) == 2 and len(set(c)) == 2 for c in holders),
            "health_after": health,
        }
    finally:
        procs.stop()


def hung_worker(folder: Path, timeout: float) -> dict[str, object]:
    procs = Procs(3)
    try:
        wait_workers(procs.address, 3)
        client = connect(procs.address, timeout=30)
        hung = sorted(client.scheduler_info()["workers"])[0]
        pid = client.run(os.getpid, workers=[hung])[hung]
        os.kill(pid, signal.SIGSTOP)
        out: dict[str, object] = {"cluster_timeout_s": timeout}
        try:
            t = time.perf_counter()
            try:
                kb = ShardedKnowledgeBase.load(folder, client=client, timeout=timeout)
                out["python_load"] = {"s": round(time.perf_counter() - t, 2), "ok": True}
                t = time.perf_counter()
                got = kb.search("index shard", 10, allow_partial=True)
                out["python_search_partial"] = {"s": round(time.perf_counter() - t, 2), "missing": list(got.missing)}
                kb.close()
            except RetrievalTimeoutError as exc:
                out["python_load"] = {"s": round(time.perf_counter() - t, 2), "ok": False, "error": str(exc)[:200]}
            for name, cmd in {
                "cli_search": ["search", "index shard", "--json"],
                "cli_stats": ["stats"],
            }.items():
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "clanker_rag", *cmd, "--index", str(folder), "--cluster", procs.address,
                     "--cluster-timeout", f"{timeout:g}"],
                    env=ENV, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                out[name] = {
                    "s": round(time.perf_counter() - t, 2),
                    "exit": done.returncode,
                    "error": done.stderr.strip()[:200] if done.returncode else None,
                }
        finally:
            os.kill(pid, signal.SIGCONT)
            close_client(client)
        return out
    finally:
        procs.stop()


def outage(folder: Path, seconds: float, queries: list[str]) -> dict[str, object]:
    procs = Procs(2)
    try:
        wait_workers(procs.address, 2)
        client = connect(procs.address, timeout=30)
        kb = ShardedKnowledgeBase.load(folder, client=client, timeout=30)
        want = hits(kb, queries[:5])
        procs.stop()
        gone = time.monotonic()
        failed = 0
        while time.monotonic() - gone < seconds:
            try:
                kb.search(queries[0], 10)
            except RetrievalTimeoutError:
                failed += 1
            time.sleep(0.5)
        status = client.status
        procs.start(2)
        back = time.monotonic()
        answered = None
        while time.monotonic() - back < 120:
            try:
                if hits(kb, queries[:5]) == want:
                    answered = time.monotonic() - back
                    break
            except RetrievalTimeoutError:
                time.sleep(0.2)
        kb.close()
        close_client(client)
        return {
            "outage_s": seconds,
            "client_status_during": status,
            "searches_failed_during": failed,
            "answered_s_after_restart": None if answered is None else round(answered, 2),
        }
    finally:
        procs.stop()


def _placement(kb: Any, workers: set[str]) -> dict[str, int]:
    holders = kb.shard_workers()
    held = {w for copies in holders for w in copies}
    return {
        "shards_with_copies_together": sum(len(set(c)) < len(c) for c in holders),
        "shards_short_of_copies": sum(len(c) < 2 for c in holders),
        "workers_holding_nothing": len(workers - held),
    }


def _settled(kb: Any, client: Any, queries: list[str], wait: float) -> tuple[dict[str, int], float]:
    """Search while the index's placement keeps its copies; the placement once it is whole, or at ``wait``."""
    t = time.monotonic()
    while True:
        with contextlib.suppress(RetrievalTimeoutError):
            kb.search(queries[0], 10)
        now = _placement(kb, set(client.scheduler_info()["workers"]))
        if not any(now.values()) or time.monotonic() - t > wait:
            return now, round(time.monotonic() - t, 2)
        time.sleep(0.5)


def churn(folder: Path, queries: list[str], kills: int, wait: float) -> dict[str, object]:
    """``kills`` workers killed for good, each replaced by a new one, then every worker restarted in turn:
    after each step, how long the copies took to be apart with every worker holding one."""
    procs = Procs(3)
    try:
        wait_workers(procs.address, 3)
        client = connect(procs.address, timeout=30)
        kb = ShardedKnowledgeBase.load(folder, client=client, replicas=2, timeout=30)
        want = hits(kb, queries[:10])
        steps: list[dict[str, object]] = []

        def replace(victim: subprocess.Popen[bytes], what: str) -> None:
            procs.kill(victim)
            procs.workers.remove(victim)
            procs.workers.append(procs._spawn(["distributed.cli.dask_worker", procs.address, "--nthreads", "1",
                                               *LOOPBACK]))  # fmt: skip
            client.wait_for_workers(3, timeout=120)
            placement, took = _settled(kb, client, queries, wait)
            steps.append({"step": what, "settled_s": took, **placement})

        for k in range(kills):
            holder = kb.shard_workers()[k % 3][0]
            pid = client.run(os.getpid, workers=[holder])[holder]
            replace(next(p for p in procs.workers if pid in group_of(p.pid)), f"kill {k + 1}")
        for k, victim in enumerate(list(procs.workers)):
            replace(victim, f"rolling restart {k + 1}")
        same = hits(kb, queries[:10]) == want
        final = steps[-1]
        kb.close()
        close_client(client)
        return {
            "kills": kills,
            "steps": steps,
            "same_hits_after": same,
            "after_all": {k: final[k] for k in ("shards_with_copies_together", "workers_holding_nothing")},
        }
    finally:
        procs.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--after", type=float, default=50.0, help="seconds of searches after the first 10")
    ap.add_argument("--timeout", type=float, default=10.0, help="--cluster-timeout of the hung-worker runs")
    ap.add_argument("--outage", type=float, default=120.0, help="seconds the scheduler is gone (0: skip)")
    ap.add_argument("--kills", type=int, default=6, help="workers killed and replaced, then all restarted (0: skip)")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds a churn step may take to place its copies")
    ap.add_argument("--only", default="", help="comma-separated scenarios (lost,hung,outage,churn); all by default")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    texts = corpus.chunks()[: args.chunks]
    queries = corpus.queries(texts, args.queries)
    result: dict[str, object] = {"chunks": len(texts), "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-recovery-", dir=args.tmp) as tmp:
        kb = ShardedKnowledgeBase(3, chunk_size=None)
        kb.add_texts((text, f"chunk/{i}") for i, text in enumerate(texts))
        folder = kb.save(Path(tmp) / "idx")
        del kb
        only = set(filter(None, args.only.split(","))) or {"lost", "hung", "outage", "churn"}
        if "lost" in only:
            result["lost_for_good"] = lost_for_good(folder, queries, args.after)
        if "hung" in only:
            result["hung_worker"] = hung_worker(folder, args.timeout)
        if args.outage and "outage" in only:
            result["scheduler_outage"] = outage(folder, args.outage, queries)
        if args.kills and "churn" in only:
            result["churn"] = churn(folder, queries, args.kills, args.settle)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    out = HERE / "results" / ("cluster_recovery.json" if not args.only else f"cluster_recovery-{args.only}.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
