"""llama-cpp-python backend: a GGUF model in process.

``llama_cpp.Llama`` keeps its KV cache between calls and reuses the longest
common token prefix of the next prompt, so the controller's resumed prompt
(the old prompt plus generated text plus a block) is only evaluated from the
block on.  Needs ``llama-cpp-python`` (extra ``llama-cpp``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from .._exceptions import ConfigError, MissingExtraError, install_hint
from .._stream._generate import RequestStats, Token

__all__ = ["LlamaCppPythonBackend"]


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise MissingExtraError(f"LlamaCppPythonBackend needs llama-cpp-python: {install_hint('llama-cpp')}") from exc
    return llama_cpp


class LlamaCppPythonBackend:
    """``generate(prompt, stop)`` over ``llama_cpp.Llama``.

    Pass a ready ``Llama`` as ``llm``, or a GGUF path as ``model_path`` (plus
    any ``Llama`` keyword arguments).  ``logprobs=True`` makes pieces carry
    the token log-probability (the model must be created with
    ``logits_all=True`` for that).
    """

    def __init__(
        self,
        llm: Any = None,
        *,
        model_path: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        logprobs: bool = False,
        **llama_kwargs: Any,
    ) -> None:
        if (llm is None) == (model_path is None):
            raise ConfigError("pass exactly one of llm or model_path")
        if llm is None:
            llama_cpp = _import_llama_cpp()
            llm = llama_cpp.Llama(model_path=model_path, verbose=False, **llama_kwargs)
        self.llm = llm
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.logprobs = logprobs
        self.last_stats: RequestStats | None = None

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Token]:
        stats = RequestStats()
        self.last_stats = stats
        stream = self.llm.create_completion(
            prompt,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stop=list(stop) or None,
            stream=True,
            logprobs=1 if self.logprobs else None,
        )
        generated = 0
        for chunk in stream:
            choice = chunk["choices"][0]
            text = choice.get("text") or ""
            finish = choice.get("finish_reason")
            logprob = None
            lp = choice.get("logprobs")
            if isinstance(lp, dict):
                values = [v for v in lp.get("token_logprobs") or () if isinstance(v, (int, float))]
                if values and all(math.isfinite(v) for v in values):
                    logprob = float(min(values))
            generated += 1 if text else 0
            if finish is not None:
                stats.finish_reason = finish
                stats.generated_tokens = generated
            if text or finish is not None:
                yield Token(text, logprob, finish)
