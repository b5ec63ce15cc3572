"""Hugging Face transformers backend that resumes from its KV cache.

The controller resumes a turn with ``prompt + generated text + block``.  This
backend keeps the KV cache of its previous call together with the token ids
it holds; on the next call it keeps the longest common prefix of ids, crops
the cache to it and runs the model only over the new tokens, so a resume
costs a prefill of the appended block, not of the whole prompt.

Needs ``torch`` and ``transformers`` (extra ``transformers``), imported when
the backend is constructed.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .._exceptions import ConfigError, MissingExtraError, install_hint
from .._stream._generate import RequestStats, Token

__all__ = ["TransformersBackend"]

logger = logging.getLogger(__name__)


def _import_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401 - checked here so the error names the extra
    except ImportError as exc:
        raise MissingExtraError(
            f"TransformersBackend needs torch and transformers: {install_hint('transformers')}"
        ) from exc
    return torch


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # a minimal tokenizer without the keyword
        ids = tokenizer.encode(text)
    return [int(i) for i in ids]


def _stop_hold(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could begin a stop string."""
    hold = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:n]):
                hold = n
                break
    return hold


class TransformersBackend:
    """``generate(prompt, stop)`` over a causal LM, greedy unless ``temperature > 0``.

    ``model`` is a transformers causal LM (or anything whose forward takes
    ``input_ids``, ``past_key_values``, ``use_cache`` and returns ``logits``
    and ``past_key_values``); ``tokenizer`` needs ``encode`` and ``decode``.
    Each piece carries the sampled token's log-probability.  ``last_stats``
    reports how many prompt tokens came from the cache.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        reuse_cache: bool = True,
    ) -> None:
        self._torch = _import_torch()
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.reuse_cache = reuse_cache
        self._generator = self._torch.Generator().manual_seed(seed) if seed is not None else None
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            eos = getattr(getattr(model, "config", None), "eos_token_id", None)
        self._eos: set[int] = set(eos) if isinstance(eos, (list, tuple)) else ({eos} if isinstance(eos, int) else set())
        self._cache: Any = None
        self._cache_ids: list[int] = []
        # transformers 5 renamed the forward argument past_key_values to cache.
        try:
            params = inspect.signature(model.forward).parameters
        except (AttributeError, TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.last_stats: RequestStats | None = None

    def _device(self) -> Any:
        try:
            return next(self.model.parameters()).device
        except (AttributeError, StopIteration):
            return "cpu"

    def _prepare(self, ids: list[int]) -> tuple[list[int], int]:
        """Crop the cache to the shared prefix; return the ids still to run and the kept count."""
        keep = 0
        if self.reuse_cache and self._cache is not None:
            limit = min(len(ids) - 1, len(self._cache_ids))  # always run at least one token
            while keep < limit and ids[keep] == self._cache_ids[keep]:
                keep += 1
        if keep == 0:
            self._cache = None
            self._cache_ids = []
            return ids, 0
        extra = len(self._cache_ids) - keep
        if extra:
            self._cache.crop(-extra)
            del self._cache_ids[keep:]
        return ids[keep:], keep

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Token]:
        torch = self._torch
        ids = _encode(self.tokenizer, prompt)
        if not ids:
            raise ConfigError("the prompt encodes to no tokens")
        stops = [s for s in stop if s]
        feed, kept = self._prepare(ids)
        stats = RequestStats(prompt_tokens=len(feed), cached_tokens=kept, generated_tokens=0)
        self.last_stats = stats
        device = self._device()
        generated: list[int] = []
        emitted = ""  # decoded text already yielded (plus held stop prefix excluded)
        t0 = time.perf_counter()
        finish = "length"
        stop_word: str | None = None
        with torch.no_grad():
            for step in range(self.max_new_tokens):
                out = self.model(
                    input_ids=torch.tensor([feed], dtype=torch.long, device=device),
                    use_cache=True,
                    **{self._cache_kw: self._cache},
                )
                new_cache = getattr(out, "cache", None)
                self._cache = new_cache if new_cache is not None else out.past_key_values
                self._cache_ids.extend(feed)
                if step == 0:
                    stats.prompt_ms = (time.perf_counter() - t0) * 1e3
                logits = out.logits[0, -1].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                if self.temperature > 0:
                    probs = torch.softmax(logits / self.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=self._generator).item())
                else:
                    token = int(torch.argmax(logits).item())
                logprob = float(logprobs[token].item())
                if token in self._eos:
                    finish = "stop"
                    break
                generated.append(token)
                stats.generated_tokens = len(generated)
                feed = [token]
                text = self.tokenizer.decode(generated)
                if text.endswith("\ufffd"):
                    continue  # an incomplete UTF-8 sequence; wait for the next token
                hit = None
                for s in stops:
                    at = text.find(s, max(len(emitted) - len(s), 0))
                    if at != -1 and (hit is None or at < hit[0]):
                        hit = (at, s)
                if hit is not None:
                    piece = text[len(emitted) : hit[0]]
                    finish, stop_word = "stop", hit[1]
                    if piece:
                        yield Token(piece, logprob)
                    emitted = text[: hit[0]]
                    break
                safe = len(text) - _stop_hold(text, stops)
                if safe > len(emitted):
                    yield Token(text[len(emitted) : safe], logprob if math.isfinite(logprob) else None)
                    emitted = text[:safe]
            else:
                text = self.tokenizer.decode(generated) if generated else ""
                if len(text) > len(emitted):
                    yield Token(text[len(emitted) :])
        stats.generation_ms = (time.perf_counter() - t0) * 1e3 - (stats.prompt_ms or 0.0)
        stats.finish_reason = finish
        stats.stop = stop_word
        if finish == "stop" and stop_word is None:
            tail = self.tokenizer.decode(generated) if generated else ""
            if len(tail) > len(emitted):
                yield Token(tail[len(emitted) :])
        yield Token("", None, finish, stop_word)
