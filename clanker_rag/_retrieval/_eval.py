"""Evaluation on BEIR-layout data sets, in pure Python.

Metrics follow trec_eval / pytrec_eval as BEIR reports them:

* nDCG@k: gain = graded relevance, discount = log2(rank + 1), ideal ranking
  from every judged-relevant document of the query (Järvelin and Kekäläinen 2002).
* Recall@k: relevant documents retrieved in the top k / relevant documents.
* MAP@k: sum of precision@r over the ranks r <= k holding a relevant document,
  divided by the number of relevant documents.
* MRR@k: 1 / rank of the first relevant document in the top k, else 0.

"Relevant" means a qrels grade > 0.  Queries without judgements are skipped;
each metric is the mean over the judged queries.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError, IngestError
from .._validate import check_int

log = logging.getLogger(__name__)

__all__ = [
    "BeirDataset",
    "EvalResult",
    "average_precision",
    "evaluate_dataset",
    "evaluate_run",
    "load_beir",
    "mrr",
    "ndcg",
    "recall",
]


def ndcg(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    dcg = sum(qrels.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]) if qrels.get(doc, 0) > 0)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 100) -> float:
    relevant = {doc for doc, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def average_precision(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 100) -> float:
    relevant = {doc for doc, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    hits = 0
    total = 0.0
    for rank, doc in enumerate(ranking[:k], start=1):
        if doc in relevant:
            hits += 1
            total += hits / rank
    return total / len(relevant)


def mrr(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    for rank, doc in enumerate(ranking[:k], start=1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


@dataclass
class BeirDataset:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    name: str = ""


@dataclass
class EvalResult:
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    n_queries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.metrics)


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise IngestError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


SHARED_ENV = "CLANKER_RAG_SHARED"


def dataset_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder`` itself if it exists; else, for a relative path, the first of
    ``$CLANKER_RAG_SHARED/folder`` and ``$CLANKER_RAG_SHARED/datasets/folder``
    that exists (so ``cranfield`` or ``datasets/cranfield`` work from anywhere)."""
    root = Path(folder)
    shared = os.environ.get(SHARED_ENV)
    if root.exists() or root.is_absolute() or not shared:
        return root
    for candidate in (Path(shared) / root, Path(shared) / "datasets" / root):
        if candidate.is_dir():
            return candidate
    raise IngestError(f"{root}: no such data set folder (nor under ${SHARED_ENV}={shared}, or its datasets/)")


def load_beir(folder: str | os.PathLike[str], split: str = "test") -> BeirDataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` from
    ``folder`` (looked up under ``$CLANKER_RAG_SHARED`` too: :func:`dataset_folder`)."""
    root = dataset_folder(folder)
    for name in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / name).is_file():
            raise IngestError(f"{root}: not a BEIR data set (missing {name})")
    corpus = {
        str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or "")) for d in _read_jsonl(root / "corpus.jsonl")
    }
    queries = {str(q["_id"]): str(q["text"]) for q in _read_jsonl(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with open(root / "qrels" / f"{split}.tsv", encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        header = next(rows, None)
        if header and header[0].strip().isdigit():
            rows_list: Iterable[list[str]] = [header, *rows]
        else:
            rows_list = rows
        for row in rows_list:
            if len(row) < 3:
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return BeirDataset(corpus, queries, qrels, root.name)


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> EvalResult:
    """Mean metrics of a run (query id -> ranked doc ids) against the judgements."""
    per_query: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not any(g > 0 for g in judged.values()):
            continue
        ranking = list(run.get(qid, ()))
        per_query[qid] = {
            "ndcg@10": ndcg(ranking, judged, 10),
            "recall@100": recall(ranking, judged, 100),
            "map@100": average_precision(ranking, judged, 100),
            "mrr@10": mrr(ranking, judged, 10),
        }
    n = len(per_query)
    keys = ("ndcg@10", "recall@100", "map@100", "mrr@10")
    metrics = {key: (sum(q[key] for q in per_query.values()) / n if n else 0.0) for key in keys}
    return EvalResult(metrics, per_query, n)


def evaluate_dataset(
    folder: str | os.PathLike[str],
    *,
    search: Callable[[Any, str, int], Sequence[Any]] | None = None,
    k: int = 100,
    feedback: bool = False,
    rerank: str | os.PathLike[str] | Any | None = None,
    hybrid: str | os.PathLike[str] | Any | None = None,
    hybrid_feedback: bool | None = None,
    candidates: int | None = None,
    batch_size: int = 32,
    device: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    **kb_options: Any,
) -> EvalResult:
    """Index a BEIR corpus whole-document and evaluate retrieval on its queries.

    Plain BM25 by default (``feedback=True`` adds RM3 pseudo-relevance
    feedback).  ``hybrid=MODEL`` fuses BM25 with dense retrieval by a
    sentence-transformers bi-encoder (:class:`~clanker_rag._retrieval._dense.HybridRetriever`;
    its lexical lists are plain BM25 and BM25 with RM3 feedback, or only the
    feedback list with ``hybrid_feedback=True``, only plain BM25 with ``False``); the corpus
    embeddings are kept in ``cache_dir`` when given, so a second run computes
    none.  ``rerank=MODEL`` reranks the top ``candidates`` (default 50) hits of
    the first stage (:class:`~clanker_rag._retrieval._rerank.Reranker`).  ``MODEL`` is a
    local model folder or a loaded model; ``batch_size`` and ``device`` go to
    the model.  ``search(kb, query, k)`` replaces all of this with your own
    retrieval.
    """
    from .._kb import KnowledgeBase

    check_int("k", k, 100)  # the metrics read the top 100
    if search is not None and (rerank is not None or hybrid is not None):
        raise ConfigError("give search= or rerank=/hybrid=, not both")
    data = load_beir(folder)
    kb = KnowledgeBase(chunk_size=None, stride=None, **kb_options)
    for doc_id, (title, text) in data.corpus.items():
        kb.add_text(f"{title}\n{text}" if title else text, doc_id)
    if search is None and (rerank is not None or hybrid is not None):
        search = _model_search(
            kb,
            feedback,
            rerank,
            hybrid,
            hybrid_feedback=hybrid_feedback,
            candidates=candidates,
            batch_size=batch_size,
            device=device,
            cache_dir=cache_dir,
        )
    run: dict[str, list[str]] = {}
    asked = [qid for qid in data.qrels if qid in data.queries]
    log.info("indexed %d documents; searching %d queries", len(data.corpus), len(asked))
    every = max(1, len(asked) // 10)
    # Plain BM25 answers every query in a second or two; a model takes minutes: worth progress lines.
    progress = log.info if search is not None else log.debug
    for done, qid in enumerate(asked):
        if done and done % every == 0:
            progress("searched %d of %d queries", done, len(asked))
        query = data.queries[qid]
        hits = search(kb, query, k) if search is not None else kb.search(query, k, feedback=feedback)
        run[qid] = [h.source for h in hits]
    return evaluate_run(run, data.qrels)


def _model_search(
    kb: Any,
    feedback: bool,
    rerank: Any,
    hybrid: Any,
    *,
    hybrid_feedback: bool | None,
    candidates: int | None,
    batch_size: int,
    device: str | None,
    cache_dir: str | os.PathLike[str] | None,
) -> Callable[[Any, str, int], Sequence[Any]]:
    from ._dense import HybridRetriever
    from ._rerank import DEFAULT_CANDIDATES, Reranker, RerankingRetriever

    first: Any = kb
    if hybrid is not None:
        first = HybridRetriever(
            kb,
            hybrid,
            feedback=hybrid_feedback,
            batch_size=batch_size,
            device=device,
            folder=cache_dir,
        )
        first.refresh()  # embed the corpus up front, not inside the first query
    elif feedback:
        base = kb

        class _Feedback:
            def search(self, query: str, k: int = 10) -> list[Any]:
                return list(base.search(query, k, feedback=True))

        first = _Feedback()
    retriever: Any = first
    if rerank is not None:
        same = hybrid is not None and (rerank is hybrid or str(rerank) == str(hybrid))
        reranker = Reranker(
            # One bi-encoder for both stages: reuse the loaded model and its corpus embeddings.
            first.model if same else rerank,
            candidates=DEFAULT_CANDIDATES if candidates is None else candidates,
            batch_size=batch_size,
            device=device,
            embeddings=first.store if same else None,
        )
        _ = reranker.model  # load now: a bad model path fails before any query, not silently never
        retriever = RerankingRetriever(first, reranker)
    return lambda _kb, query, k: retriever.search(query, k)
