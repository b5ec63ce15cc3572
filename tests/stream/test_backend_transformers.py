"""TransformersBackend on a tiny randomly initialised GPT-2 built offline.

Needs torch and transformers (extra ``transformers``); the whole module is
skipped only when they are not installed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clanker_rag._stream._controller import InjectEvent, RagController  # noqa: E402
from clanker_rag._types import Hit  # noqa: E402
from clanker_rag.backends import Token, TransformersBackend  # noqa: E402

CHARS = "\n" + "".join(chr(c) for c in range(32, 127))


class CharTokenizer:
    """One token per character; id len(CHARS) is end-of-sequence."""

    eos_token_id = len(CHARS)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [CHARS.index(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(CHARS[i] for i in ids if i < len(CHARS))


def tiny_model(seed: int = 0) -> object:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=len(CHARS) + 1,
        n_positions=1024,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=len(CHARS),
    )
    model = transformers.GPT2LMHeadModel(config)
    model.eval()
    return model


def test_resume_reuses_the_cache_and_matches_a_fresh_run() -> None:
    model, tok = tiny_model(), CharTokenizer()
    cached = TransformersBackend(model, tok, max_new_tokens=12)
    fresh = TransformersBackend(model, tok, max_new_tokens=12, reuse_cache=False)
    prompt = "Question: what is the port?\nAnswer:"
    first = "".join(p.text for p in cached(prompt, []))
    assert len(first) > 0
    resumed_prompt = prompt + first + "\n<result>\n[1] port 8080\n</result>\n"
    again = list(cached(resumed_prompt, []))
    stats = cached.last_stats
    assert stats is not None and stats.cached_tokens is not None and stats.prompt_tokens is not None
    # Only the appended block (and the last generated token, never fed) is prefilled.
    assert stats.cached_tokens >= len(prompt) + len(first) - 1
    assert stats.prompt_tokens + stats.cached_tokens == len(resumed_prompt)
    assert stats.prompt_tokens <= len(resumed_prompt) - len(prompt)
    reference = list(fresh(resumed_prompt, []))
    assert fresh.last_stats is not None and fresh.last_stats.cached_tokens == 0
    assert "".join(p.text for p in again) == "".join(p.text for p in reference)
    for a, b in zip(again, reference, strict=True):
        if a.logprob is not None and b.logprob is not None:
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)


@pytest.mark.slow
def test_stop_string_ends_generation_before_it() -> None:
    model, tok = tiny_model(1), CharTokenizer()
    backend = TransformersBackend(model, tok, max_new_tokens=30, reuse_cache=False)
    full = "".join(p.text for p in backend("abc", []))
    assert len(full) >= 6
    stop = full[3:5]
    first = full.find(stop)
    pieces = list(backend("abc", [stop]))
    assert "".join(p.text for p in pieces) == full[:first]
    assert pieces[-1] == Token("", None, "stop", stop)
    assert all(p.logprob is None or p.logprob <= 0 for p in pieces)


def test_controller_drives_the_transformers_backend() -> None:
    model, tok = tiny_model(2), CharTokenizer()
    backend = TransformersBackend(model, tok, max_new_tokens=8)

    class Retriever:
        def search(self, query: str, k: int = 10) -> list[Hit]:
            return [Hit("port 8080", "docs/server.md", 1.0)]

    prompt = "Q: Which port is it?\nA:"
    events = list(RagController(Retriever(), tools=False, questions=True).events(backend, prompt))
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    assert "docs/server.md" in block
    stats = backend.last_stats
    assert stats is not None and stats.prompt_tokens == len(prompt + block)
