"""The stream controller's settings, as typed frozen values.

:class:`~clanker_rag._stream._controller.RagController` takes its common
options (``k``, ``tools``, ``questions``, ``handlers``, ``stop``,
``show_blocks``) as plain keywords and the rest grouped by what they govern:

* :class:`Triggers` - when a retrieval runs and what it searches for;
* :class:`Limits` - what one turn may spend;
* :class:`BlockLayout` - what the model reads around each block;
* :class:`Hooks` - callables told about each retrieval and block.

Each class checks its values when it is built and raises
:class:`~clanker_rag.ConfigError` in the one shape of
:func:`clanker_rag._validate.out_of_range`, so a bad value fails where it is
written, before any controller exists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from .._types import HitLike
from .._validate import check_bool, check_callable, check_int, check_number, check_str, one_of, out_of_range
from ._blocks import DEFAULT_BLOCK_CHARS, MIN_BLOCK_CHARS
from ._events import InjectEvent

__all__ = ["BlockLayout", "FlareMode", "Hooks", "Limits", "ToolQuery", "Triggers"]

FlareMode = Literal["rewind", "append"]
ToolQuery = Literal["model", "merge", "fuse", "first"]

FLARE_MODES: tuple[FlareMode | None, ...] = (None, "rewind", "append")
TOOL_QUERIES: tuple[ToolQuery, ...] = ("model", "merge", "fuse", "first")


@dataclass(frozen=True, slots=True)
class Triggers:
    """When the controller retrieves (besides tool calls and questions) and what it searches for.

    ``flare``
        ``"rewind"`` or ``"append"``: retrieve when a sentence has a token
        with log-probability below ``flare_threshold`` (needs a backend that
        yields :class:`~clanker_rag.Token` pieces with ``logprob``);
        ``"rewind"`` regenerates the sentence after the block, ``"append"``
        keeps it.  ``None`` (the default) turns FLARE off.
    ``min_score``
        Passages scoring below it are dropped; a question or FLARE trigger
        whose passages are all dropped injects nothing.
    ``tool_query``
        What a tool call searches for: ``"model"`` the model's own words;
        ``"fuse"`` those and the user's question, fused by reciprocal rank;
        ``"merge"`` one search for both joined; ``"first"`` the question
        alone for the turn's first search and the model's words after it.
        Small models write poor queries; the question keeps retrieval on topic.
    ``query_rewriter``
        Turns one query into several; each is retrieved and the lists are
        fused by reciprocal rank.
    ``think_questions``
        Question sentences inside a ``<think>`` section trigger retrieval
        too (off: a model's thinking asks itself many questions).
    ``entropy_trend``
        The entropy-trend trigger (ETC): retrieve after a sentence in which
        a token's uncertainty (its surprisal, ``-logprob``) rose over the
        token before and rose faster than before, by more than this many
        nats (first difference above zero, second above the threshold); the
        block follows the sentence.  Needs :class:`~clanker_rag.Token`
        pieces with ``logprob``.  ``None`` (the default) turns it off.
    """

    flare: FlareMode | None = None
    flare_threshold: float = math.log(0.3)
    min_score: float | None = None
    tool_query: ToolQuery = "model"
    query_rewriter: Callable[[str], list[str]] | None = None
    think_questions: bool = False
    entropy_trend: float | None = None

    def __post_init__(self) -> None:
        one_of("flare", self.flare, FLARE_MODES)
        check_bool("think_questions", self.think_questions)
        check_number("entropy_trend", self.entropy_trend, 0, none=True)
        check_number("flare_threshold", self.flare_threshold)
        check_number("min_score", self.min_score, none=True)
        one_of("tool_query", self.tool_query, TOOL_QUERIES)
        check_callable("query_rewriter", self.query_rewriter, "a callable str -> list[str]")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one turn may spend.

    ``max_injections``
        Blocks per turn (0 retrieves nothing; a tool call past the limit is
        answered with a note).
    ``retrieval_timeout``
        Seconds one retrieval may take (``None``: no limit); ``on_timeout``
        says what happens then: ``"skip"`` goes on without passages,
        ``"raise"`` raises :class:`~clanker_rag.RetrievalTimeoutError`.
    ``max_payload``
        Characters a tool call's payload may hold before the scanner gives
        up on it and lets the text through.
    """

    max_injections: int = 4
    retrieval_timeout: float | None = 10.0
    on_timeout: Literal["skip", "raise"] = "skip"
    max_payload: int = 1000

    def __post_init__(self) -> None:
        check_int("max_injections", self.max_injections, 0)
        check_number("retrieval_timeout", self.retrieval_timeout, 0, low_open=True, none=True)
        one_of("on_timeout", self.on_timeout, ("skip", "raise"))
        check_int("max_payload", self.max_payload, 1)


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """What each block holds and what the model reads around it.

    ``block_chars``
        Characters per block (passages are cut to fit; at least
        ``MIN_BLOCK_CHARS``).
    ``after_block``
        Text the model reads after every block (not shown, not scanned): a
        few-shot prompt's ``"Answer:"`` starts a base model's answer right
        after the passages.
    ``question_tail``
        When the prompt ends with it, the block for the prompt's own
        question goes before it instead (before anything is generated): a
        completion prompt ending ``"Q: ...?\\nA:"`` reads the passages, then
        its question and answer cue; a block after ``"A:"`` is read by a
        base model as the end of its answer.
    ``guard``
        A served model's own control tokens, kept out of retrieved text
        besides the families' markers the guard always knows
        (:func:`~clanker_rag._stream._blocks.neutralize`).
    """

    block_chars: int = DEFAULT_BLOCK_CHARS
    after_block: str = ""
    question_tail: str | None = None
    guard: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_int("block_chars", self.block_chars, MIN_BLOCK_CHARS)
        check_str("after_block", self.after_block)
        check_str("question_tail", self.question_tail, none=True)
        if not isinstance(self.guard, tuple) or not all(isinstance(t, str) for t in self.guard):
            raise out_of_range("guard", self.guard, "a tuple of str")


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callables told what the controller does, in the order it does it.

    ``on_retrieve(query, hits)`` runs after each retrieval;
    ``on_inject(text)`` and ``on_block(event)`` run with each injected block
    before the generation resumes.  The event carries the passages as shown
    (typed), so a backend that answers from them never parses the prompt.
    """

    on_retrieve: Callable[[str, Sequence[HitLike]], None] | None = None
    on_inject: Callable[[str], None] | None = None
    on_block: Callable[[InjectEvent], None] | None = None

    def __post_init__(self) -> None:
        check_callable("on_retrieve", self.on_retrieve, "a callable (query, hits)")
        check_callable("on_inject", self.on_inject, "a callable (block text)")
        check_callable("on_block", self.on_block, "a callable (InjectEvent)")
