"""How ``ask`` answers with a model: one typed settings object, passed in (bench builds its own to compare)."""

from __future__ import annotations

from dataclasses import dataclass

from .._exceptions import ConfigError
from .._stream._settings import TOOL_QUERIES
from .._validate import positive_int
from ._prompts import MODES

__all__ = ["AnswerSettings"]


@dataclass(frozen=True)
class AnswerSettings:
    """The answering path's settings (``ask``, ``demo``, the proxy's base-model branch).

    A base model reads ``k`` short windows (one sentence and what it
    introduces, chosen by :mod:`._learned`) and, on llama.cpp, copies their
    words (``copy``); a chat model gets ``chat_k`` whole passages and writes
    freely.  The defaults are what ``bench/bench_answers.py`` and
    ``bench/bench_docs.py`` measured best on development data (bench/RESULTS.md).
    """

    mode: str = "both"  # the few-shot layout a base model is asked in (MODES)
    k: int = 1  # windows per block for a base model
    chat_k: int = 3  # passages per block for a chat model
    block_chars: int = 700  # the most characters a base model's block holds
    tool_query: str = "first"  # what the model's tool call retrieves (TOOL_QUERIES)
    window_chars: int = 200  # the characters of a sentence shown
    attach_chars: int = 320  # ... widened to the block it introduces or the definition it is in, within this
    copy: bool = True  # on llama.cpp, an answer uses only the block's words (a GBNF grammar)
    typed_copy: bool = True  # ... and holds a block word of the type the question asks for, when there is one
    max_words: int = 24  # the longest copied answer, in words
    lead_words: int = 8  # ... and the most it writes before the asked-for word

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.tool_query not in TOOL_QUERIES:
            raise ConfigError(f"tool_query must be one of {', '.join(TOOL_QUERIES)}, got {self.tool_query!r}")
        for name in ("k", "chat_k", "block_chars", "attach_chars", "max_words"):
            positive_int(name, getattr(self, name))
        if positive_int("window_chars", self.window_chars) < 40:
            raise ConfigError(f"window_chars must be >= 40 characters, got {self.window_chars}")
        if isinstance(self.lead_words, bool) or not isinstance(self.lead_words, int):
            raise ConfigError(f"lead_words must be an integer, got {self.lead_words!r}")
        if not 0 <= self.lead_words < self.max_words:
            raise ConfigError(f"lead_words must be 0..max_words-1, got {self.lead_words}")
