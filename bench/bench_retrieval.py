"""What ``ask`` retrieves on documentation we did not write: is the answer in the top passages at all?

Model-free and fast (no focusing, no model): for every question of
``bench/bench_docs.py`` (the same collections, fetched into the same cache),
whether the top 1, 3, 5 and 10 passages that ``ask``'s retrieval returns hold
an accepted answer, with the term-proximity reranking
(:class:`~clanker_rag._retrieval._proximity.ProximityRetriever`) at each
``--weights`` value (0: plain BM25).  Prints how many questions have the answer
within the top 1, 3, 5 and 10 per collection and weight.

``--loco`` decides the weight leave-one-collection-out: for each collection,
the weight with the most answers in the top 3 over the *other* collections
(ties: the smaller weight), reported on the one left out.  ``--cranfield
FOLDER`` also scores each weight on a BEIR-layout collection (nDCG@10 of
whole documents, the top ``depth`` reranked), a check on data no question here
was written from.

    python bench/bench_retrieval.py --collections click flask ... --loco
    python bench/bench_retrieval.py --weights 0 0.4 --depth 15 --gap 1
    python bench/bench_retrieval.py --weights 0 0.2 0.4 0.6 --cranfield ../shared/datasets/cranfield
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import correct  # noqa: E402
from bench.bench_docs import COLLECTIONS, DEFAULT_COLLECTIONS, Item, knowledge_base, load  # noqa: E402
from clanker_rag._retrieval._proximity import DEFAULT_DEPTH, DEFAULT_GAP, ProximityRetriever  # noqa: E402

AT = (1, 3, 5, 10)


def reach(retriever: Any, item: Item) -> int | None:
    """The smallest k of :data:`AT` whose top k (``search(question, k)``) holds an accepted answer, else None.

    Asked for each k: the reranking decides which k hits come back, not where in them the answer sits.
    """
    qa = item.qa()
    return next((k for k in AT if any(correct(hit.text, qa) for hit in retriever.search(item.question, k))), None)


def within(reached: Sequence[int | None], at: int) -> int:
    return sum(1 for k in reached if k is not None and k <= at)


def loco(ranks: dict[float, dict[str, list[int | None]]], collections: Sequence[str]) -> None:
    weights = sorted(ranks)
    print("\nleave-one-collection-out (weight chosen by top 3 on the others, reported on the one left out)")
    print(f"{'held out':<12} {'chosen':>6} {'top3 BM25':>10} {'top3 chosen':>12} {'of':>4}")
    base = min(weights)
    total_base = total_chosen = n = 0
    for held in collections:
        others = [c for c in collections if c != held]
        chosen = max(weights, key=lambda w: (sum(within(ranks[w][c], 3) for c in others), -w))
        b, c = within(ranks[base][held], 3), within(ranks[chosen][held], 3)
        total_base, total_chosen, n = total_base + b, total_chosen + c, n + len(ranks[base][held])
        print(f"{held:<12} {chosen:>6} {b:>10} {c:>12} {len(ranks[base][held]):>4}")
    print(f"{'total':<12} {'':>6} {total_base:>10} {total_chosen:>12} {n:>4}")


def cranfield(folder: str, weights: Sequence[float], depth: int, gap: int) -> None:
    from clanker_rag._retrieval._eval import evaluate_dataset

    print(f"\n{folder}: nDCG@10 (whole documents, top {depth} reranked)")
    for weight in weights:

        def search(kb: Any, query: str, k: int, weight: float = weight) -> list[Any]:
            # A ranking measure: the reranked order itself (ask keeps BM25's order among the hits it keeps).
            top = ProximityRetriever(kb, weight=weight, depth=depth, gap=gap, keep_order=False).search(query, depth)
            seen = {hit.source for hit in top}
            return top + [hit for hit in kb.search(query, k) if hit.source not in seen][: k - len(top)]

        result = evaluate_dataset(folder, search=search)
        print(f"  weight {weight:<5} nDCG@10 {result.metrics['ndcg@10']:.4f}  MRR@10 {result.metrics['mrr@10']:.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=list(DEFAULT_COLLECTIONS), choices=COLLECTIONS)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8])
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help="candidates reranked")
    parser.add_argument("--gap", type=int, default=DEFAULT_GAP, help="how far apart (in terms) a pair may be")
    parser.add_argument("--loco", action="store_true", help="decide the weight leave-one-collection-out")
    parser.add_argument("--cranfield", metavar="FOLDER", help="also score each weight on this BEIR collection")
    args = parser.parse_args()
    weights = sorted(set(args.weights))
    items = load(args.collections)
    ranks: dict[float, dict[str, list[int | None]]] = {w: {} for w in weights}
    seconds: dict[float, float] = dict.fromkeys(weights, 0.0)
    for name in args.collections:
        kb = knowledge_base(name, args.cache)
        asked = [item for item in items if item.collection == name]
        for w in weights:
            retriever = ProximityRetriever(kb, weight=w, depth=args.depth, gap=args.gap)
            started = time.process_time()
            ranks[w][name] = [reach(retriever, item) for item in asked]
            seconds[w] += time.process_time() - started
    n = len(items)
    print(f"answer within the top 3, per collection (depth {args.depth}, gap {args.gap})")
    print(f"{'collection':<12} {'n':>3} " + " ".join(f"{'w=' + str(w):>7}" for w in weights))
    for name in args.collections:
        row = " ".join(f"{within(ranks[w][name], 3):>7}" for w in weights)
        print(f"{name:<12} {len(ranks[weights[0]][name]):>3} {row}")
    for at in AT:
        print(
            f"{'top ' + str(at):<12} {n:>3} "
            + " ".join(f"{sum(within(r, at) for r in ranks[w].values()):>7}" for w in weights)
        )
    print(f"{'ms/question':<12} {'':>3} " + " ".join(f"{1e3 * seconds[w] / max(1, n):>7.2f}" for w in weights))
    if args.loco:
        loco(ranks, args.collections)
    if args.cranfield:
        cranfield(args.cranfield, weights, args.depth, args.gap)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CLANKER_RAG_SHARED", str(ROOT.parent / "shared"))
    sys.exit(main())
