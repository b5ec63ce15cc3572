"""What ``clanker-rag mcp`` costs an agent, over stdio with the official SDK client.

Measures, on the shipped knowledge base ``data/kb``:

* start-up: from spawning ``python -m clanker_rag mcp`` to an initialised session;
* one ``search`` tool call (k=5), round trip, median and p95 over the queries;
* the same searches in process (``KnowledgeBase.search``), for the MCP overhead.

    python bench/bench_mcp.py [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "data" / "kb"
QUERIES = [
    "how do I ingest a folder",
    "remove a source from an index",
    "secret guard credential files",
    "MCP client configuration",
    "BM25 variants and parameters",
    "proxy in front of llama.cpp",
    "named knowledge bases",
    "chunk size and stride",
]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(calls: int) -> tuple[float, list[float]]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "clanker_rag", "mcp", "--index", str(KB)],
        env={"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        startup = time.perf_counter() - t0
        times = []
        for i in range(calls):
            t = time.perf_counter()
            result = await session.call_tool("search", {"query": QUERIES[i % len(QUERIES)], "k": 5})
            times.append(time.perf_counter() - t)
            assert not result.is_error
    return startup, times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    startup, times = anyio.run(_measure, args.calls)

    sys.path.insert(0, str(ROOT))
    from clanker_rag import KnowledgeBase

    kb = KnowledgeBase.load(KB)
    local = []
    for i in range(args.calls):
        t = time.perf_counter()
        kb.search(QUERIES[i % len(QUERIES)], 5)
        local.append(time.perf_counter() - t)
    ms = 1e3
    print(f"start-up to initialised session: {startup * ms:.0f} ms")
    print(f"search tool call (k=5): median {statistics.median(times) * ms:.2f} ms, p95 {_pct(times, 0.95) * ms:.2f} ms")
    print(f"in-process search (k=5): median {statistics.median(local) * ms:.3f} ms")


if __name__ == "__main__":
    main()
