"""Start-up cost of the ``clanker-rag`` command.

Measures, as separate processes (median of several runs):

* the import time of ``clanker_rag._cli._main`` (``python -X importtime``), and of
  plain ``python -c pass`` for reference;
* the wall time of ``clanker-rag --help``;
* the wall time of ``clanker-rag search QUERY`` on the shipped ``data/kb``.

Target: ``--help`` and ``search`` each under 0.3 s.

    python bench/bench_cli.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=ENV, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def import_time(module: str, runs: int) -> float:
    """Cumulative import time of ``module`` in seconds, as ``-X importtime`` reports it."""
    values = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            check=True,
            capture_output=True,
            text=True,
            env=ENV,
            cwd=ROOT,
        )
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s+(\S+)$", line)
            if m and m.group(2) == module:
                values.append(int(m.group(1)) / 1e6)
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--query", default="how do I ingest a folder")
    args = parser.parse_args()
    py = sys.executable
    rows = [
        ("python -c pass", wall([py, "-c", "pass"], args.runs)),
        ("import clanker_rag._cli._main (importtime, cumulative)", import_time("clanker_rag._cli._main", args.runs)),
        ("import clanker_rag (importtime, cumulative)", import_time("clanker_rag", args.runs)),
        ("clanker-rag --help", wall([py, "-m", "clanker_rag", "--help"], args.runs)),
        (
            f"clanker-rag search {args.query!r} (data/kb)",
            wall([py, "-m", "clanker_rag", "search", args.query], args.runs),
        ),
        (
            f"clanker-rag search {args.query!r} --json",
            wall([py, "-m", "clanker_rag", "search", args.query, "--json"], args.runs),
        ),
    ]
    print(f"median of {args.runs} runs, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for name, seconds in rows:
        print(f"  {name:<58} {seconds * 1e3:8.1f} ms")
    print("target: --help and search each < 300 ms")


if __name__ == "__main__":
    main()
