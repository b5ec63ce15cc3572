"""The stream controller: knowledge reaches the model while it generates.

:class:`RagController` wraps a generation callable.  It watches the model's
output through an incremental scanner (:func:`~clanker_rag._stream._scanner.make_scanner`)
and injects retrieved passages in three ways:

* **tool calls** - the model writes ``<tool name="retrieve">query</tool>``
  (or its own family's call: :mod:`~clanker_rag._stream._dialects`); the
  controller stops generation, retrieves, appends the answer block in that
  dialect's format and resumes;
* **question boundaries** - the user's question and any question sentence the
  model writes trigger a ``<context>`` block (``questions=True``);
* **low confidence** (FLARE, ``triggers=Triggers(flare=...)``) - a sentence
  containing a token whose log-probability is under ``flare_threshold``
  triggers retrieval with the unsure tokens masked out; ``"rewind"``
  regenerates the sentence after the block, ``"append"`` keeps it.

A callable backend is resumed with ``prompt + generated text + block``: the
exact bytes the model has already seen plus the block, so a server's prompt
cache covers everything but the block.  A one-shot iterable cannot be resumed;
blocks are then only spliced into the visible stream.

The per-turn logic lives in the I/O-free :class:`_ControllerTurn`; the sync
and async drivers only move pieces and run retrieval.  Blocks are built and
retrieved text is neutralised by :mod:`clanker_rag._stream._blocks`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import threading
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import Any

from .._exceptions import RetrievalTimeoutError
from .._retrieval._fusion import hit_key, reciprocal_rank_fusion
from .._text._sentences import SentenceSplitter
from .._types import HitLike, Retriever
from .._validate import check_bool, check_int, out_of_range
from ._blocks import (
    BlockBuilder,
    is_question_sentence,
    last_question,
    neutralize,
    norm_query,
    squash_ws,
)
from ._dialects import DIALECTS, Dialect, DialectSpec, dialects_of, json_result
from ._events import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
from ._generate import AsyncGenerateFn, GenerateFn, Piece, piece_parts
from ._scanner import ToolCall, make_scanner
from ._settings import BlockLayout, Hooks, Limits, Triggers

__all__ = [
    "InjectEvent",
    "RagController",
    "RetrieveEvent",
    "StreamEvent",
    "TextEvent",
    "neutralize",
]

logger = logging.getLogger(__name__)

# The settings' defaults, shared by every controller (they are frozen).
_TRIGGERS, _LIMITS, _LAYOUT, _HOOKS = Triggers(), Limits(), BlockLayout(), Hooks()
_LABEL_RE = re.compile(r"^\s*\w+:\s")
# A thinking section: the tags reasoning models write (and templates that open one in the prompt).
_THINK_OPEN = ("<think>", "<thinking>", "<seed:think>")
_THINK_CLOSE = ("</think>", "</thinking>", "</seed:think>")
_THINK_LOOKBACK = 200
# A sentence runs on past a thinking tag ("...recall.</think> How ...?"): only what follows it is the sentence.
_THINK_TAG_RE = re.compile(r"</?(?:think|thinking|seed:think)>")


@dataclass(frozen=True, slots=True)
class _SentenceEnd:
    """A queue item: the sentence tracker's splitter ended a sentence here."""


_SENTENCE_END = _SentenceEnd()


@dataclass(frozen=True, slots=True)
class _Trigger:
    kind: str  # "tool", "question", "flare"
    query: str
    call: ToolCall | None = None


class _ControllerTurn:
    """State of one turn: the context built so far and what the scanner holds."""

    def __init__(self, ctl: RagController, prompt: str, resumable: bool) -> None:
        self.ctl = ctl
        self.prompt = prompt
        self.resumable = resumable
        self.gen: list[str] = []  # everything after the prompt, in order
        self.gen_len = 0
        self.scanner = make_scanner(ctl.dialects, ctl._tool_names, max_payload=ctl.limits.max_payload)
        self.queue: deque[tuple[str | ToolCall | _SentenceEnd, float | None]] = deque()
        self.injections = 0
        self.resumes = 0
        self.seen_keys: set[Hashable] = set()
        self.seen_queries: set[str] = set()
        self.track = ctl.questions or ctl.triggers.flare is not None or ctl.triggers.entropy_trend is not None
        # The last two tokens' surprisal, for the entropy-trend trigger (None: none yet).
        self.surprisal: tuple[float | None, float | None] = (None, None)
        self.hold = ctl.triggers.flare == "rewind" and resumable
        self.splitter = SentenceSplitter()
        self.ended = False  # the current generation has ended and the scanner is flushed
        self.question = ""
        self.question_searched = False  # tool_query="first": the question has had its search
        self._new_sentence()

    # -- context bookkeeping -------------------------------------------------
    def context(self) -> str:
        """The prompt for the next generation: prompt plus everything since."""
        if len(self.gen) > 1:
            self.gen[:] = ["".join(self.gen)]
        return self.prompt + (self.gen[0] if self.gen else "")

    def _append(self, text: str) -> None:
        if text:
            self.gen.append(text)
            self.gen_len += len(text)

    def _truncate(self, length: int) -> None:
        whole = "".join(self.gen)[:length]
        self.gen[:] = [whole] if whole else []
        self.gen_len = len(whole)

    def in_think(self) -> bool:
        """Whether the model is inside a ``<think>`` section it opened (in the prompt's end or since)."""
        text = self.prompt[-_THINK_LOOKBACK:] + "".join(self.gen)
        opened = max(text.rfind(tag) for tag in _THINK_OPEN)
        return opened != -1 and opened > max(text.rfind(tag) for tag in _THINK_CLOSE)

    # -- sentences -------------------------------------------------------------
    def _new_sentence(self) -> None:
        self.trend = False  # a token of this sentence had rising, accelerating uncertainty
        self.sent: list[tuple[str, float | None]] = []
        self.sent_start = self.gen_len
        self.held: list[str] = []

    def _release_held(self) -> str:
        text = "".join(self.held)
        self.held = []
        return text

    def _add_text(self, text: str, logprob: float | None, out: list[str]) -> None:
        if not text:
            return
        self._append(text)
        if self.track:
            self.sent.append((text, logprob))
            if logprob is not None and self.ctl.triggers.entropy_trend is not None:
                self._note_trend(-logprob, self.ctl.triggers.entropy_trend)
        if self.hold:
            self.held.append(text)
        else:
            out.append(text)

    def _note_trend(self, surprisal: float, threshold: float) -> None:
        """The entropy-trend check (ETC): uncertainty that rises and accelerates.

        Each token's surprisal (``-logprob``, whose expectation is the
        token entropy) is compared with the two before it: a first
        difference above zero and a second difference above ``threshold``
        mark the sentence.
        """
        before, last = self.surprisal
        if before is not None and last is not None:
            first = surprisal - last
            second = first - (last - before)
            if first > 0 and second > threshold:
                self.trend = True
        self.surprisal = (last, surprisal)

    def _end_sentence(self, out: list[str], *, questions: bool = True) -> _Trigger | None:
        ctl = self.ctl
        sentence = _THINK_TAG_RE.split("".join(t for t, _ in self.sent))[-1].strip()
        trig: _Trigger | None = None
        if sentence and self.injections < ctl.limits.max_injections:
            triggers = ctl.triggers
            if triggers.flare is not None and any(
                lp is not None and lp < triggers.flare_threshold for _, lp in self.sent
            ):
                masked = "".join(t for t, lp in self.sent if lp is None or lp >= triggers.flare_threshold)
                # If every token was unsure, the whole sentence is the best query left.
                query = squash_ws(masked) or squash_ws(sentence)
                trig = _Trigger("flare", query)
            if trig is None and self.trend:
                trig = _Trigger("entropy", squash_ws(sentence))
            if (
                trig is None
                and questions
                and ctl.questions
                and is_question_sentence(sentence)
                and (triggers.think_questions or not self.in_think())
            ):
                trig = _Trigger("question", sentence)
        if trig is None:
            out.append(self._release_held())
            self._new_sentence()
        return trig

    # -- pieces ----------------------------------------------------------------
    def feed(self, text: str, logprob: float | None) -> None:
        released, calls = self.scanner.feed(text)
        self._enqueue(released, calls, logprob)

    def _enqueue(self, released: str, calls: Sequence[ToolCall], logprob: float | None) -> None:
        pos = 0
        for call in calls:
            self._enqueue_text(released[pos : call.position], logprob)
            # The text before a call is over: the splitter lets go of the whitespace it held.
            self._enqueue_split(*self.splitter.flush(), logprob)
            self.queue.append((call, logprob))
            pos = call.position
        self._enqueue_text(released[pos:], logprob)

    def _enqueue_text(self, text: str, logprob: float | None) -> None:
        """Queue visible text, with a sentence end wherever the splitter puts one when sentences are tracked."""
        if self.track:
            self._enqueue_split(*self.splitter.feed(text), logprob)
        elif text:
            self.queue.append((text, logprob))

    def _enqueue_split(self, text: str, ends: Sequence[int], logprob: float | None) -> None:
        pos = 0
        for end in ends:
            if end > pos:
                self.queue.append((text[pos:end], logprob))
            self.queue.append((_SENTENCE_END, logprob))
            pos = end
        if pos < len(text):
            self.queue.append((text[pos:], logprob))

    def drain(self) -> tuple[str, _Trigger | None]:
        """Process queued scanner output up to the next trigger."""
        out: list[str] = []
        while self.queue:
            item, logprob = self.queue.popleft()
            if isinstance(item, ToolCall):
                # The sentence before the call is kept as written.
                out.append(self._release_held())
                self._new_sentence()
                self._append(item.raw)
                return "".join(out), _Trigger("tool", item.query, item)
            if isinstance(item, _SentenceEnd):
                trig = self._end_sentence(out)
                if trig is not None:
                    return "".join(out), trig
                continue
            self._add_text(item, logprob, out)
        if self.ended and self.sent:
            # The stream ended: its last sentence still gets its FLARE check.
            # A closing question is addressed to the user, so it triggers nothing.
            trig = self._end_sentence(out, questions=False)
            return "".join(out), trig
        return "".join(out), None

    def end(self, finish_reason: str | None, stop_word: str | None) -> None:
        """The current generation ended; queue what the scanner still holds."""
        call = None
        if self.resumable and self.scanner.in_call:
            stopped_on_close = (stop_word is not None and stop_word in self.ctl.stop) or (
                stop_word is None and finish_reason in (None, "stop")
            )
            if stopped_on_close:
                call = self.scanner.take_open_call()
        released, calls = self.scanner.flush()
        self._enqueue(released, calls, None)
        self._enqueue_split(*self.splitter.flush(), None)
        if call is not None:
            self.queue.append((call, None))
        self.ended = True

    def close(self) -> str:
        """The turn is over: release any held sentence."""
        return self._release_held()

    # -- injection ---------------------------------------------------------------
    def initial_trigger(self, question: str | None) -> _Trigger | None:
        if question is None and (self.ctl.questions or self.ctl.triggers.tool_query != "model"):
            # "Question: ...?" in a few-shot prompt: the label is not part of it.
            question = _LABEL_RE.sub("", last_question(self.prompt) or "")
        self.question = squash_ws(question or "")
        if not self.ctl.questions:
            return None
        return _Trigger("question", self.question) if self.question else None

    def queries(self, trig: _Trigger, query: str) -> list[str]:
        """What to search for ``query``: a tool call's own words, with the user's question if so configured."""
        mode, question = self.ctl.triggers.tool_query, self.question
        if trig.kind == "question":
            self.question_searched = True
        if trig.kind != "tool" or mode == "model" or not question or norm_query(question) == norm_query(query):
            return [query]
        if mode == "first":
            if self.question_searched:
                return [query]
            self.question_searched = True
            return [question]
        if mode == "merge":
            return [f"{query} {question}"]
        return [question, query]

    def plan(self, trig: _Trigger) -> str | None:
        """The query to retrieve for ``trig``, or None when no retrieval is due."""
        if trig.kind == "tool" and trig.call is not None and trig.call.name != "retrieve":
            return None
        if not trig.query or self.injections >= self.ctl.limits.max_injections:
            return None
        if norm_query(trig.query) in self.seen_queries:
            return None
        return trig.query

    def apply(
        self, trig: _Trigger, hits: Sequence[HitLike] | None, error: str | None
    ) -> tuple[list[StreamEvent], bool]:
        """Build and place the block for ``trig``; return events and whether to resume."""
        ctl = self.ctl
        events: list[StreamEvent] = []
        if hits is not None:
            self.seen_queries.add(norm_query(trig.query))
        fresh = [h for h in hits or () if hit_key(h) not in self.seen_keys]
        min_score = ctl.triggers.min_score
        if min_score is not None:
            fresh = [h for h in fresh if h.score >= min_score]
        fresh = fresh[: ctl.k]

        if trig.kind == "tool":
            call = trig.call
            assert call is not None
            dialect = DIALECTS.get(call.dialect) or ctl.dialects[0]
            if not any(call.raw.endswith(closer) for closer in dialect.closes):
                # The server stopped on the closer (and dropped it), or never streams it.
                self._append(dialect.closer_for(call.raw))
            if dialect.turn_frame and self.in_think():
                # The answer comes in a turn of its own: the thinking section ends first.
                self._append("</think>\n\n")
            r_open, r_close, as_json = dialect.result_frame(call.raw)
            # A JSON result's body is built bare and wrapped once it is complete.
            frame = ("", "") if as_json else (r_open, r_close)
            if call.name != "retrieve":
                body = self._run_handler(call)
                block = ctl.blocks.build("result", note=body, frame=frame)
            elif hits is None:
                note = (
                    "Empty query."
                    if not trig.query
                    else "Retrieval limit reached for this turn; answer with what you have."
                    if self.injections >= ctl.limits.max_injections
                    else "Already retrieved above."
                )
                block = ctl.blocks.build("result", note=note, frame=frame)
            elif not fresh:
                note = (
                    f"Retrieval failed: {error}."
                    if error
                    else "No new passages (anything relevant is already above)."
                    if hits
                    else "No relevant passages found."
                )
                block = ctl.blocks.build("result", note=note, frame=frame)
            else:
                block = ctl.blocks.build("result", fresh, frame=frame)
            if as_json:
                block = replace(block, text=r_open + json_result(block.text, call.raw, trig.query) + r_close)
            self._commit(fresh, hits is not None)
            self._append(block.text + ctl.layout.after_block)
            events.append(InjectEvent.of(block, trig.kind, trig.query))
            resume = self.resumable and self.resumes < ctl.limits.max_injections * 2 + 2
            if resume:
                self.resumes += 1
                self._reset_stream()
            return events, resume

        if not fresh:
            # Nothing worth injecting: the sentence stands and the stream goes on.
            text = self._release_held()
            if text:
                events.append(TextEvent(text))
            self._new_sentence()
            return events, False

        block = ctl.blocks.build("context", fresh)
        self._commit(fresh, True)
        rewind = trig.kind == "flare" and self.hold
        if rewind:
            # Drop the unsure sentence; the model writes it again after the block.
            self.held = []
            self._truncate(self.sent_start)
        else:
            text = self._release_held()
            if text:
                events.append(TextEvent(text))
        tail = ctl.layout.question_tail
        if tail and not self.gen and self.prompt.endswith(tail):
            # Nothing generated yet: the block goes before the prompt's question and answer cue.
            self.prompt = self.prompt[: len(self.prompt) - len(tail)] + block.text + tail
        else:
            self._append(block.text + ctl.layout.after_block)
        events.append(InjectEvent.of(block, trig.kind, trig.query))
        self._new_sentence()
        resume = self.resumable
        if resume:
            self.resumes += 1
            self._reset_stream()
        return events, resume

    def _commit(self, hits: Sequence[HitLike], counted: bool) -> None:
        self.seen_keys.update(hit_key(h) for h in hits)
        if counted:
            self.injections += 1

    def _reset_stream(self) -> None:
        # The old generation is abandoned: what it said after the trigger is gone.
        self.queue.clear()
        self.ended = False
        self.scanner.reset()
        self.splitter.flush()
        self._new_sentence()

    def _run_handler(self, call: ToolCall) -> str:
        handler = self.ctl.handlers[call.name]
        try:
            return str(handler(call.query))
        except Exception as exc:
            logger.warning("tool %r failed: %s", call.name, exc)
            return f"Tool error: {type(exc).__name__}: {exc}"


def _run_with_timeout(fn: Callable[[], Sequence[HitLike]], timeout: float | None) -> Sequence[HitLike]:
    if timeout is None:
        return fn()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    # A daemon thread per call: a retriever that hangs cannot block the stream
    # or keep the interpreter alive.
    thread = threading.Thread(target=run, name="clanker-rag-retrieve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RetrievalTimeoutError(f"retrieval timed out after {timeout:g} s")
    if "error" in box:
        raise box["error"]
    result: Sequence[HitLike] = box["value"]
    return result


async def _await_with_timeout(work: Awaitable[Sequence[HitLike]], timeout: float | None) -> Sequence[HitLike]:
    """:func:`_run_with_timeout` for the async driver: the same error, the same message."""
    if timeout is None:
        return await work
    try:
        return await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
        raise RetrievalTimeoutError(f"retrieval timed out after {timeout:g} s") from None


class RagController:
    """Inject knowledge-base passages into a model's generation as it streams.

    ``retriever`` is anything with ``search(query, k)`` (a ``KnowledgeBase``
    or any :class:`~clanker_rag.Retriever`).  ``k`` passages at most go into
    a block.  Modes can be combined:

    ``tools``
        React to retrieval calls written by the model (``<tool
        name="retrieve">query</tool>``, or ``dialect``'s form), inside a
        ``<think>`` section or not.
    ``questions``
        Retrieve for the user's question (``question=`` or the last ``?``
        sentence of the prompt) and for question sentences the model writes
        (inside ``<think>`` only with ``Triggers(think_questions=True)``).
        ``None`` (the default) takes the dialects' default: on for
        ``hermes``, ``llama3`` and ``mistral``, off for the others.
    ``triggers``
        :class:`~clanker_rag.Triggers`: FLARE (retrieve on a low-confidence
        sentence), ``min_score``, what a tool call searches for and a query
        rewriter.

    ``dialect`` says how the model writes a call and reads its answer: a
    name of :data:`~clanker_rag._stream._dialects.DIALECTS` (``"clanker"``,
    the default; ``"search-r1"``, ``"research"``, ``"r1-searcher"``,
    ``"hermes"``, ``"llama3"``, ``"mistral"``), a
    :class:`~clanker_rag._stream._dialects.Dialect`, or several of them
    (``("clanker", "hermes")``) when no two open a call alike.

    ``handlers`` maps other tool names to ``fn(payload) -> str``; their output
    is injected as a result block.  ``stop`` is passed to every generation
    (each dialect's stop strings, e.g. ``</tool>``, are added when the model
    may call a tool).
    :meth:`stream` yields the blocks with the text when ``show_blocks``.

    The rest is grouped in typed, frozen settings, each checked when built:
    ``limits`` (:class:`~clanker_rag.Limits`: blocks per turn, retrieval
    timeout, tool-call payload size), ``layout``
    (:class:`~clanker_rag.BlockLayout`: block size and what the model reads
    around a block) and ``hooks`` (:class:`~clanker_rag.Hooks`: callables
    told of each retrieval and block).  Passages and queries are
    de-duplicated within a turn.
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        k: int = 3,
        tools: bool = True,
        questions: bool | None = None,
        handlers: Mapping[str, Callable[[str], str]] | None = None,
        stop: Sequence[str] = (),
        show_blocks: bool = True,
        triggers: Triggers = _TRIGGERS,
        limits: Limits = _LIMITS,
        layout: BlockLayout = _LAYOUT,
        hooks: Hooks = _HOOKS,
        dialect: DialectSpec = "clanker",
    ) -> None:
        if not callable(getattr(retriever, "search", None)):
            raise out_of_range("retriever", retriever, "an object with a search(query, k) method")
        for name, value, kind in (
            ("triggers", triggers, Triggers),
            ("limits", limits, Limits),
            ("layout", layout, BlockLayout),
            ("hooks", hooks, Hooks),
        ):
            if not isinstance(value, kind):
                raise out_of_range(name, value, f"a {kind.__name__}")
        if handlers is not None and not isinstance(handlers, Mapping):
            raise out_of_range("handlers", handlers, "a mapping of tool name to fn(payload) -> str, or None")
        if isinstance(stop, str) or not all(isinstance(word, str) for word in stop):
            raise out_of_range("stop", stop, "a sequence of str")
        self.retriever = retriever
        self.k = check_int("k", k, 1)
        self.tools = check_bool("tools", tools)
        dialects = dialects_of(dialect)
        # None: the dialects say (on for the tool-calling families, whose small models call too rarely).
        self.questions = any(d.questions for d in dialects) if questions is None else check_bool("questions", questions)
        self.show_blocks = check_bool("show_blocks", show_blocks)
        self.triggers = triggers
        self.limits = limits
        self.layout = layout
        self.hooks = hooks
        self.dialects: tuple[Dialect, ...] = dialects
        self.blocks = BlockBuilder(layout.block_chars, layout.guard)
        self.handlers: dict[str, Callable[[str], str]] = {name.lower(): fn for name, fn in (handlers or {}).items()}
        names = set(self.handlers)
        if tools:
            names.add("retrieve")
        self._tool_names = frozenset(names)
        stops = list(stop)
        if names:
            stops += [word for d in self.dialects for word in d.stops if word not in stops]
        self.stop: tuple[str, ...] = tuple(stops)

    # -- retrieval -----------------------------------------------------------------
    def _search(self, queries: Sequence[str]) -> Sequence[HitLike]:
        if self.triggers.query_rewriter is not None:
            rewritten: list[str] = []
            for query in queries:
                rewritten.extend([r for r in self.triggers.query_rewriter(query) if r.strip()] or [query])
            queries = rewritten
        lists = [list(self.retriever.search(q, self.k * 3)) for q in queries]
        if len(lists) == 1:
            return lists[0]
        return [hit for hit, _ in reciprocal_rank_fusion(lists, key=hit_key)]

    def _retrieve(self, queries: Sequence[str]) -> tuple[Sequence[HitLike], str | None]:
        try:
            return _run_with_timeout(lambda: self._search(queries), self.limits.retrieval_timeout), None
        except RetrievalTimeoutError as exc:
            if self.limits.on_timeout == "raise":
                raise
            logger.warning("retrieval for %r timed out; going on without passages", queries[-1])
            return [], str(exc)

    async def _aretrieve(self, queries: Sequence[str]) -> tuple[Sequence[HitLike], str | None]:
        try:
            work = asyncio.to_thread(self._search, queries)
            return await _await_with_timeout(work, self.limits.retrieval_timeout), None
        except RetrievalTimeoutError as exc:
            if self.limits.on_timeout == "raise":
                raise
            logger.warning("retrieval for %r timed out; going on without passages", queries[-1])
            return [], str(exc)

    def _retrieved(self, trig: _Trigger, hits: Sequence[HitLike], error: str | None, seconds: float) -> RetrieveEvent:
        if self.hooks.on_retrieve is not None:
            self.hooks.on_retrieve(trig.query, hits)
        logger.debug("retrieved %d hits for %r in %.1f ms", len(hits), trig.query, seconds * 1e3)
        return RetrieveEvent(trig.query, tuple(hits), trig.kind, seconds, error)

    def _injected(self, events: list[StreamEvent]) -> list[StreamEvent]:
        for ev in events:
            if isinstance(ev, InjectEvent):
                if self.hooks.on_inject is not None:
                    self.hooks.on_inject(ev.block)
                if self.hooks.on_block is not None:
                    # Before the generation resumes: a backend reads the passages it is to answer from.
                    self.hooks.on_block(ev)
        return events

    # -- the drivers ----------------------------------------------------------------------
    # ``events`` and ``aevents`` are the same loop, line for line, one with ``for`` and one
    # with ``async for``: run a generation, feed its pieces to the turn, pump what the turn
    # lets out; a pump that handled a trigger needing a new context yields ``_RESUME``, and
    # the driver starts the next generation from that context.  ``_handle``/``_ahandle``
    # return the same pair (the events, whether to resume); only the retrieval differs.

    # -- sync driver -------------------------------------------------------------------
    def events(
        self,
        generate: GenerateFn | Iterable[Piece],
        prompt: str,
        *,
        question: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Run one turn and yield every event: text, retrievals and injected blocks."""
        resumable = callable(generate)
        turn = _ControllerTurn(self, prompt, resumable)
        trig = turn.initial_trigger(question)
        if trig is not None:
            events, _ = self._handle(turn, trig)  # nothing generated yet: the first generation has the block
            yield from events
        source: Iterator[Piece] | None = None
        if not resumable:
            source = iter(generate)  # type: ignore[arg-type]
        while True:
            if source is not None:
                it = source
            else:
                produced = generate(turn.context(), self.stop)  # type: ignore[operator]
                it = iter(produced)
            resume = False
            finish: str | None = None
            stop_word: str | None = None
            try:
                for piece in it:
                    text, logprob, fin, sw = piece_parts(piece)
                    if fin is not None:
                        finish, stop_word = fin, sw
                    turn.feed(text, logprob)
                    for ev in self._pump(turn):
                        if isinstance(ev, _Resume):
                            resume = True
                            break
                        yield ev
                    if resume:
                        break
            finally:
                if resumable:
                    closer = getattr(it, "close", None)
                    if callable(closer):
                        closer()
            if resume:
                continue
            turn.end(finish, stop_word)
            for ev in self._pump(turn):
                if isinstance(ev, _Resume):
                    resume = True
                    break
                yield ev
            if resume:
                continue
            tail = turn.close()
            if tail:
                yield TextEvent(tail)
            return

    def _pump(self, turn: _ControllerTurn) -> Iterator[StreamEvent | _Resume]:
        while True:
            out, trig = turn.drain()
            if out:
                yield TextEvent(out)
            if trig is None:
                return
            events, resume = self._handle(turn, trig)
            yield from events
            if resume:
                yield _RESUME
                return

    def _handle(self, turn: _ControllerTurn, trig: _Trigger) -> tuple[list[StreamEvent], bool]:
        query = turn.plan(trig)
        events: list[StreamEvent] = []
        hits: Sequence[HitLike] | None = None
        error: str | None = None
        if query is not None:
            t0 = time.perf_counter()
            hits, error = self._retrieve(turn.queries(trig, query))
            events.append(self._retrieved(trig, hits, error, time.perf_counter() - t0))
        more, resume = turn.apply(trig, hits, error)
        events.extend(self._injected(more))
        return events, resume

    def stream(
        self,
        generate: GenerateFn | Iterable[Piece],
        prompt: str,
        *,
        question: str | None = None,
    ) -> Iterator[str]:
        """Run one turn and yield the visible text (and blocks, if ``show_blocks``)."""
        for ev in self.events(generate, prompt, question=question):
            if isinstance(ev, TextEvent):
                yield ev.text
            elif isinstance(ev, InjectEvent) and self.show_blocks:
                yield ev.block

    # -- async driver ------------------------------------------------------------------
    async def aevents(
        self,
        agenerate: AsyncGenerateFn | AsyncIterable[Piece] | Iterable[Piece],
        prompt: str,
        *,
        question: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Async :meth:`events`: ``agenerate(prompt, stop)`` gives an async iterable."""
        resumable = callable(agenerate)
        turn = _ControllerTurn(self, prompt, resumable)
        trig = turn.initial_trigger(question)
        if trig is not None:
            events, _ = await self._ahandle(turn, trig)  # nothing generated yet: the first generation has the block
            for first in events:  # the sync driver's ``yield from events``
                yield first
        source: AsyncIterator[Piece] | None = None
        if not resumable:
            source = _as_async_iter(agenerate)
        while True:
            if source is not None:
                it = source
            else:
                produced = agenerate(turn.context(), self.stop)  # type: ignore[operator]
                if inspect.isawaitable(produced):
                    produced = await produced
                it = _as_async_iter(produced)
            resume = False
            finish: str | None = None
            stop_word: str | None = None
            try:
                async for piece in it:
                    text, logprob, fin, sw = piece_parts(piece)
                    if fin is not None:
                        finish, stop_word = fin, sw
                    turn.feed(text, logprob)
                    async for ev in self._apump(turn):
                        if isinstance(ev, _Resume):
                            resume = True
                            break
                        yield ev
                    if resume:
                        break
            finally:
                if resumable:
                    closer = getattr(it, "aclose", None)
                    if callable(closer):
                        await closer()
            if resume:
                continue
            turn.end(finish, stop_word)
            async for ev in self._apump(turn):
                if isinstance(ev, _Resume):
                    resume = True
                    break
                yield ev
            if resume:
                continue
            tail = turn.close()
            if tail:
                yield TextEvent(tail)
            return

    async def _apump(self, turn: _ControllerTurn) -> AsyncIterator[StreamEvent | _Resume]:
        while True:
            out, trig = turn.drain()
            if out:
                yield TextEvent(out)
            if trig is None:
                return
            events, resume = await self._ahandle(turn, trig)
            for ev in events:
                yield ev
            if resume:
                yield _RESUME
                return

    async def _ahandle(self, turn: _ControllerTurn, trig: _Trigger) -> tuple[list[StreamEvent], bool]:
        query = turn.plan(trig)
        events: list[StreamEvent] = []
        hits: Sequence[HitLike] | None = None
        error: str | None = None
        if query is not None:
            t0 = time.perf_counter()
            hits, error = await self._aretrieve(turn.queries(trig, query))
            events.append(self._retrieved(trig, hits, error, time.perf_counter() - t0))
        more, resume = turn.apply(trig, hits, error)
        events.extend(self._injected(more))
        return events, resume

    async def astream(
        self,
        agenerate: AsyncGenerateFn | AsyncIterable[Piece] | Iterable[Piece],
        prompt: str,
        *,
        question: str | None = None,
    ) -> AsyncIterator[str]:
        """Async :meth:`stream`, for ``async for``."""
        async for ev in self.aevents(agenerate, prompt, question=question):
            if isinstance(ev, TextEvent):
                yield ev.text
            elif isinstance(ev, InjectEvent) and self.show_blocks:
                yield ev.block


class _Resume:
    """What a pump yields when the turn needs a new generation: abandon this one and resume."""


_RESUME = _Resume()


async def _as_async_iter(source: object) -> AsyncIterator[Piece]:
    try:
        if hasattr(source, "__aiter__"):
            async for piece in source:
                yield piece
        else:
            for piece in source:  # type: ignore[attr-defined]
                yield piece
    finally:
        # Closing the wrapper must close the backend's stream too (an HTTP
        # backend drops the connection, which makes the server stop).
        closer = getattr(source, "aclose", None) or getattr(source, "close", None)
        if callable(closer):
            result = closer()
            if inspect.isawaitable(result):
                await result
