"""The window an answer comes from, chosen by the model: several windows answered alone, the surest kept.

The learned chooser (:mod:`._learned`) ranks windows by their words, and the right
one is often its second or third; shown two windows at once, a 270M model copies
from the wrong one.  Here each of the chooser's best windows is answered alone,
exactly as one window is (the same few-shot prompt, one block, the copying
grammar), and the answer kept is the one the model was surest of: the mean
log-probability of its tokens under the model's raw distribution (llama.cpp's
``n_probs``, which reports the probabilities before the grammar narrows the
choice, so a word the grammar forced on an unwilling model counts against it),
less a penalty for each rank below the first.  The prompt before the block is
the same for every candidate, so a server's prompt cache leaves each extra
candidate only its block and its answer to evaluate.

A server that sends no probabilities ends the search after the first window:
its answer stands, as it would without candidates.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._stream._controller import RetrieveEvent, StreamEvent, TextEvent
from .._stream._generate import piece_parts
from .._types import HitLike, Retriever

__all__ = ["Confidence", "OneWindow", "RankedWindows", "surest_events"]


class RankedWindows:
    """A focused retriever's windows for a query, best first, searched once for all the candidates."""

    def __init__(self, retriever: Retriever, depth: int) -> None:
        self.retriever = retriever
        self.depth = depth
        self._found: dict[tuple[str, str], list[HitLike]] = {}

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        key = (query, repr(sorted(kwargs.items())))
        if key not in self._found:
            self._found[key] = list(self.retriever.search(query, max(k, self.depth), **kwargs))
        return self._found[key]


class OneWindow:
    """The ``index``-th window of a shared ranking, alone (nothing when the ranking has fewer)."""

    def __init__(self, ranked: RankedWindows, index: int) -> None:
        self.ranked = ranked
        self.index = index

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        hits = self.ranked.search(query, k, **kwargs)
        return [hits[self.index]] if self.index < len(hits) else []


class Confidence:
    """A llama.cpp ``generate`` asked for each token's raw log-probability (``n_probs``), which it records.

    Called as ``inner(prompt, stop, options=...)`` (the
    :class:`~clanker_rag.backends.LlamaCppBackend` signature, which the
    copying grammar uses too); :meth:`score` is the mean log-probability
    of the visible tokens of the last generation, or None when the server
    sent none.
    """

    def __init__(self, inner: Callable[..., Iterator[Any]]) -> None:
        self.inner = inner
        self.logprobs: list[float | None] = []

    def __call__(
        self, prompt: str, stop: Sequence[str] = (), *, options: Mapping[str, Any] | None = None
    ) -> Iterator[Any]:
        self.logprobs = []
        for piece in self.inner(prompt, stop, options={**(options or {}), "n_probs": 1}):
            text, logprob, _, _ = piece_parts(piece)
            # A line's end or a space says nothing about the words the model chose.
            if text.strip():
                self.logprobs.append(logprob)
            yield piece

    def score(self) -> float | None:
        if not self.logprobs or any(lp is None for lp in self.logprobs):
            return None
        return statistics.fmean(lp for lp in self.logprobs if lp is not None)


def surest_events(
    answer: Callable[[Retriever, Callable[..., Iterator[Any]]], Iterator[StreamEvent]],
    ranked: RankedWindows,
    generate: Callable[..., Iterator[Any]],
    *,
    candidates: int,
    penalty: float,
) -> Iterator[StreamEvent]:
    """The events of the surest of the answers to each of ``ranked``'s first ``candidates`` windows.

    ``answer(retriever, generate)`` is the one-window answering path; it is
    run once per window, each with a retriever that finds that window alone,
    and its events are held until every candidate has answered.  The one
    kept has the highest mean raw token log-probability less ``penalty``
    per rank below the first (ties: the higher window).  When the first
    answer carries no probabilities (a server without ``n_probs``) its
    events are the answer and no other window is asked.
    """
    confident = Confidence(generate)
    best: list[StreamEvent] = []
    best_score = float("-inf")
    for index in range(candidates):
        events, shown = _answered(answer(OneWindow(ranked, index), confident), first=index == 0)
        if not shown:
            break  # the ranking has no more windows
        score = confident.score()
        if score is None:
            if index == 0:
                yield from events
                return
            continue
        if score - penalty * index > best_score:
            best, best_score = events, score - penalty * index
    yield from best


def _answered(events: Iterator[StreamEvent], *, first: bool) -> tuple[list[StreamEvent], bool]:
    """``events`` run to their end, and whether a window was shown: a later candidate whose
    retrieval found none is stopped before its generation starts."""
    held: list[StreamEvent] = []
    try:
        for ev in events:
            if not first and isinstance(ev, RetrieveEvent) and not ev.hits and not held:
                return held, False
            held.append(ev)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    return held, True


# The visible answer of held events (for tests and benches).
def answer_of(events: Sequence[StreamEvent]) -> str:
    return "".join(ev.text for ev in events if isinstance(ev, TextEvent)).strip()
