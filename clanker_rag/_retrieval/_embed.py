"""Loading sentence-transformers models and turning their output into plain arrays.

The only module that imports ``sentence_transformers`` (lazily, on first use),
so the rest of clanker_rag stays dependency-free.  Models are loaded from a
local folder; set ``HF_HUB_OFFLINE=1`` to be sure nothing is fetched.

Vectors travel as flat ``array('f')`` buffers of unit length, row after row,
so cosine similarity is a dot product.  numpy is used for the maths when it
is importable (sentence-transformers always brings it) and plain Python
otherwise (small fake models in tests, tiny corpora).
"""

from __future__ import annotations

import json
import logging
import math
import os
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .._exceptions import ConfigError, MissingExtraError, install_hint
from .._types import HitLike

__all__ = ["ModelKind", "dot_all", "encode", "load_model", "model_id", "passage_text"]

log = logging.getLogger(__name__)

ModelKind = Literal["auto", "bi", "cross"]


def _sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError:
        raise MissingExtraError(
            f"reranking and hybrid search need sentence-transformers: {install_hint('rerank')}"
        ) from None
    return sentence_transformers


def _folder_kind(folder: Path) -> Literal["bi", "cross"]:
    """A sentence-transformers bi-encoder folder has modules.json; a CrossEncoder is a bare classifier."""
    if (folder / "modules.json").is_file():
        return "bi"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "bi"
    archs = config.get("architectures") or [] if isinstance(config, dict) else []
    if any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in archs):
        return "cross"
    return "bi"


def model_kind(model: Any) -> Literal["bi", "cross"]:
    """What a loaded model object can do: ``encode`` texts or ``predict`` pairs."""
    if callable(getattr(model, "encode", None)):
        return "bi"
    if callable(getattr(model, "predict", None)):
        return "cross"
    raise ConfigError(f"{type(model).__name__} has neither encode() (bi-encoder) nor predict() (cross-encoder)")


def load_model(
    model: str | os.PathLike[str] | Any, *, kind: ModelKind = "auto", device: str | None = None
) -> tuple[Any, Literal["bi", "cross"]]:
    """A ready model and its kind.

    ``model`` is a local model folder, a model name sentence-transformers can
    resolve, or an already-loaded object (anything with ``encode`` or
    ``predict``), which is used as is.
    """
    if kind not in ("auto", "bi", "cross"):
        raise ConfigError(f"kind={kind!r} must be 'auto', 'bi' or 'cross'")
    if not isinstance(model, (str, os.PathLike)):
        found = model_kind(model)
        if kind != "auto" and kind != found:
            raise ConfigError(f"kind={kind!r} but the given model object is a {found}-encoder")
        return model, found
    st = _sentence_transformers()  # first: without the extra, no path would work either
    path = Path(model).expanduser()
    text = str(model)
    if not path.exists() and (path.is_absolute() or text.startswith((".", "~"))):
        raise ConfigError(f"{text}: no such model folder")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path}: a model must be a folder (a sentence-transformers model directory)")
    if kind == "auto":
        kind = _folder_kind(path) if path.is_dir() else "bi"
    where = str(path) if path.is_dir() else str(model)
    try:
        if kind == "cross":
            loaded = st.CrossEncoder(where, device=device)
        else:
            loaded = st.SentenceTransformer(where, device=device)
    except Exception as exc:  # many libraries' errors; one clear message
        raise ConfigError(f"cannot load the {kind}-encoder model {where!r}: {type(exc).__name__}: {exc}") from None
    log.info("loaded %s-encoder %s on %s", kind, where, getattr(loaded, "device", device))
    return loaded, kind


def model_id(model: str | os.PathLike[str] | Any) -> str:
    """A stable name for a model, recorded with stored embeddings."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        return str(path.resolve()) if path.is_dir() else str(model)
    name = getattr(model, "model_id", None) or getattr(model, "name_or_path", None)
    if isinstance(name, str) and name:
        return name
    card = getattr(getattr(model, "model_card_data", None), "base_model", None)
    if isinstance(card, str) and card:
        return card
    return type(model).__module__ + "." + type(model).__qualname__


def passage_text(hit: HitLike) -> str:
    """What a model reads for a chunk: the section label (heading path) and the text."""
    section = getattr(hit, "section", None)
    return f"{section}\n{hit.text}" if isinstance(section, str) and section else hit.text


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def encode(model: Any, texts: Sequence[str], *, batch_size: int = 32, query: bool = False) -> tuple[array[float], int]:
    """Unit-length embeddings of ``texts`` as one flat ``array('f')`` and the dimension.

    Uses the model's query/document prompts when it has them
    (``encode_query``/``encode_document`` in sentence-transformers >= 5).
    """
    out: array[float] = array("f")
    if not texts:
        return out, 0
    method = getattr(model, "encode_query" if query else "encode_document", None)
    if not callable(method):
        method = model.encode
    result = method(list(texts), batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
    np = _numpy()
    if np is not None:
        mat = np.asarray(result, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(texts):
            raise ConfigError(f"the model returned embeddings of shape {mat.shape} for {len(texts)} texts")
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        mat = mat / np.where(norms > 0, norms, 1.0)
        out.frombytes(np.ascontiguousarray(mat, dtype="=f4").tobytes())
        return out, int(mat.shape[1])
    rows = [list(map(float, row)) for row in result]
    if len(rows) != len(texts) or not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ConfigError(f"the model returned {len(rows)} ragged or missing embeddings for {len(texts)} texts")
    for row in rows:
        norm = math.sqrt(sum(x * x for x in row)) or 1.0
        out.extend(x / norm for x in row)
    return out, len(rows[0])


def dot_all(matrix: array[float], dim: int, vector: array[float]) -> list[float]:
    """Dot product of ``vector`` with every ``dim``-wide row of the flat ``matrix``."""
    if dim <= 0 or not matrix:
        return []
    np = _numpy()
    if np is not None:
        mat = np.frombuffer(matrix, dtype=np.float32).reshape(-1, dim)
        vec = np.frombuffer(vector, dtype=np.float32)
        # einsum, not @: BLAS sgemv may wake OpenBLAS threads that spin after
        # the call and steal the cores torch needs for the next query.
        return [float(x) for x in np.einsum("ij,j->i", mat, vec)]
    vec_l = list(vector)
    return [sum(a * b for a, b in zip(matrix[i : i + dim], vec_l, strict=True)) for i in range(0, len(matrix), dim)]
