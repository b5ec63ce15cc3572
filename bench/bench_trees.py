"""Same search, two source trees: query speed, answers and saved bytes on the stdlib corpus.

For a refactor that must change nothing: each tree (a checkout of clanker_rag)
builds the stdlib corpus (``corpus.py``), saves it, loads it and answers the
queries twice (cold: first pass after the load; warm: the same queries again),
each run in its own process with ``PYTHONPATH`` at that tree, the trees
alternating ``--rounds`` times so machine noise hits both.  Reports process
CPU per query (median over rounds), and checks that both trees return the same
top-10 ids and scores bit for bit and save byte-identical files.

    git archive HEAD~3 | tar -x -C /tmp/before
    python bench/bench_trees.py /tmp/before . --queries 500 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def child(folder: str, n_queries: int) -> None:
    import corpus

    from clanker_rag import KnowledgeBase

    texts = corpus.chunks()
    queries = corpus.queries(texts, 500)[:n_queries]
    kb = KnowledgeBase(chunk_size=None)
    kb.add_texts((text, str(i)) for i, text in enumerate(texts))
    kb.save(folder)
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.name != "index.json":  # the manifest holds a save time
            digest.update(path.name.encode() + path.read_bytes())
    kb = KnowledgeBase.load(folder)
    out: dict[str, object] = {"files": digest.hexdigest()}
    answers = hashlib.sha256()
    for phase in ("cold", "warm"):
        start = time.process_time()
        for q in queries:
            hits = kb.search(q, 10)
            answers.update(repr([(h.source, h.score) for h in hits]).encode())
        out[phase] = (time.process_time() - start) / len(queries) * 1e6
    out["answers"] = answers.hexdigest()
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.queries)
        return
    runs: dict[str, list[dict[str, object]]] = {tree: [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            with tempfile.TemporaryDirectory() as folder:
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                cmd = [sys.executable, __file__, *args.trees, "--queries", str(args.queries), "--child", folder]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs[tree].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for tree, rows in runs.items():
        cold = statistics.median(float(str(r["cold"])) for r in rows)
        warm = statistics.median(float(str(r["warm"])) for r in rows)
        print(f"{tree}: cold {cold:.0f} us/query, warm {warm:.0f} us/query (CPU, median of {len(rows)})")
    seen = {(r["files"], r["answers"]) for rows in runs.values() for r in rows}
    print("same saved files and answers in every run:", len(seen) == 1)


if __name__ == "__main__":
    main()
