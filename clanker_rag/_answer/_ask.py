"""Answering one question with a model server: what ``clanker-rag ask`` and the demo run.

:func:`probe_server` asks a llama.cpp server (``GET /props``) which chat
template it would apply.  A base model has none of its own: llama.cpp then
falls back to ChatML, whose ``<|im_start|>`` markers the model has never
seen, and it streams ``<|im_end|>`` tokens as text.  Such a server is driven
with raw completions and a few-shot prompt (:mod:`._prompts`) instead.

:func:`answer_controller` is the controller configured for a prompt mode;
:func:`answer_text` strips the prompt's labels off the visible stream, so
stdout holds the answer alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .._exceptions import BackendError, ConfigError
from .._http import ModelServer
from .._retrieval._proximity import DEFAULT_WEIGHT as PROXIMITY_WEIGHT
from .._retrieval._proximity import ProximityRetriever
from .._stream._controller import InjectEvent, RagController, StreamEvent, TextEvent
from .._stream._settings import BlockLayout, Hooks, Triggers
from .._types import Retriever
from ._focusing import FocusedRetriever, check_windows
from ._grammars import LEAD_WORDS, CopyingBackend
from ._learned import PICK as LEARNED_PICK
from ._learned import learned_sentence, learned_sentences
from ._prompts import ANSWER_LABEL, CHAT_PROMPT, STOP, after_block, base_prompt
from ._repetition import loops_at_end

__all__ = [
    "BASE_MODE",
    "ServerInfo",
    "answer_controller",
    "answer_retriever",
    "answer_text",
    "ask_events",
    "base_model_events",
    "copying",
    "probe_server",
    "windows_shown",
]

logger = logging.getLogger(__name__)

# The mode base models are asked in: measured best by bench/bench_answers.py.
BASE_MODE = "both"
# Per passage and per block: measured with bench/bench_answers.py (RESULTS.md); k=1 against k=3 (the
# grammar copying from all three) decided again on click and flask with bench/bench_docs.py: 23 vs 19 of 46.
# k=2 against k=1 on click, flask, jinja2 and werkzeug (the model through ask_events, the same 75
# questions): 41 vs 47 answered, though the injected text held the answer more often (of the top 3,
# k=2 64 and k=1 61 of 78): the model copies from the wrong passage.
ANSWER_K = 1
ANSWER_BLOCK_CHARS = 700
ANSWER_TOOL_QUERY = "first"
ANSWER_FOCUS_CHARS = 200
ANSWER_SENTENCE = True
# The sentence chosen prefers one holding the kind of token the question asks for (_answer_types).
ANSWER_TYPED_SENTENCE = True
# The sentence keeps the block its colon introduces and the definition it belongs to, within this
# many characters (None: the sentence alone); release notes go after the passages that explain.
# Decided on click and flask (bench/bench_docs.py, injected text: 21 -> 23 of 40 in the top 3; 240-480 alike).
ANSWER_ATTACH_CHARS: int | None = 320
ANSWER_CHANGELOG_LAST = True
# The sentence shown is the best of the top ANSWER_PICK passages' sentences, its score scaled by
# (passage score / first passage's score) ** ANSWER_RANK_PRIOR. Decided on jinja2, werkzeug, click
# and flask together (bench/bench_docs.py, injected of 78 in the top 3): pick 1: 51; pick 2 prior
# 0.5/0.75/1/1.5: 59/60/61/59; pick 3 prior 0.5/1: 59/59; pick 4 prior 1: 59. A lower passage must answer
# clearly better: the third one rarely holds the answer when it outscores the first two.
# Decided again on those four and the tune half of bench/answers_qa.jsonl together (injected of 104
# in the top 3): pick 1: 76 (our docs 22 of 26, the four 54); pick 2 prior 0.5/1/2: 82/83/82; pick 3
# prior 0.5/1/2: 82/82/81. Pick 2 costs our docs two (a second passage's near-tie) and gains the four nine.
ANSWER_PICK = 2
ANSWER_RANK_PRIOR = 1.0
# How that sentence is chosen: "rules" (best_sentence, above) or "learned" (_learned.learned_sentence,
# a linear score fitted by bench/train_selector.py over the top _learned.PICK passages). Learned, decided
# before the third held-out set was run: leave-one-collection-out over the nine development collections
# (bench/results/h26learn.md), injected holds the answer in 132 (nested) / 140 of 221 against the rules'
# 133, and the rules' figure is in-sample on the five collections they were written on; on the four
# they were not, learned 53 (nested) / 62 against 50. The weights use all nine collections.
ANSWER_CHOOSER = "learned"
CHOOSERS = ("rules", "learned")
# The shown sentence takes the whole sentences after it while the span fits this many characters
# (0: the sentence alone). On the nine dev collections of bench/bench_docs.py (bench/results/h26two.md)
# 400 lifts the injected text holding the answer from 135 to 158 of 223 in the top 3, but the model
# answers 124 of 256 either way (16 won, 16 lost: it copies the wrong sentence of the longer block).
ANSWER_FOLLOW_CHARS = 0
# With the learned chooser, the block shows its best this many windows (the best-scoring sentences
# whose windows do not overlap, best first), each as one passage; the block holds at least that many,
# and the few-shot examples then show two windows each (_prompts: the answering one first in half).
# Two windows, measured on the 18 development collections of bench/bench_docs.py with those examples and
# ANSWER_FIRST_TYPED (bench/results/h26two2.md): the injected text holds the answer for 378 against 313
# of the 493 questions whose answer is in the top 3, but Gemma-3-270M answers 280 against 275 of 571 there
# and 19 against 24 of our docs' tune half (bench/bench_answers.py: 40 against 47 of all 56): no gain in
# what the model answers, and slower. 1 for the base-model path; 2 serves a reader that tells windows apart.
ANSWER_WINDOWS = 1
# With several windows (best first), the asked-for word comes from the earliest one that holds one:
# with 2 windows on the seven collections of h26two2.md, 122 against 113 answered of 238. With one
# window per block it changes nothing (a block of one passage has one earliest passage).
ANSWER_FIRST_TYPED = True
# What ask retrieves: BM25's top _proximity.DEFAULT_DEPTH chunks reranked with this weight on the question's
# adjacent words written together (_retrieval/_proximity.py; 0: BM25's order); the k kept are shown in BM25's
# order (keep_order: the learned chooser was fitted on it). Decided leave-one-collection-out over the 15
# collections of bench/bench_docs.py by top-3 recall (bench/bench_retrieval.py --loco; weights 0-1,
# bench/results/h26retr.md): 14 folds chose 0.4, the one leaving coverage out 0.5; on the collection left out
# the top 3 hold the answer for 403 against BM25's 397 of 466 questions (406 at 0.4 throughout), the
# injected text for 266 against 263 (266); Gemma-3-270M answers 15 against 10 of the 58 questions whose
# injected block changes (the other 408 blocks are identical). On Cranfield, used for nothing else, the same
# reranking of the top 30 lifts nDCG@10 from 0.375 to 0.382 at 0.4 (its best of 0-1 too).
ANSWER_PROXIMITY = PROXIMITY_WEIGHT
# Answers after a block limited to the injected passages' words (llama.cpp grammar, _grammars).
ANSWER_COPY = True
# ... and to hold a block word of the type the question asks for, when the block has one.
ANSWER_TYPED_COPY = True

_CHATML_MARK = "<|im_start|>"

G = TypeVar("G", bound=Callable[..., Iterator[Any]])


@dataclass(frozen=True)
class ServerInfo:
    """What a model server said about itself."""

    llama_cpp: bool  # answers llama.cpp's /props
    chat_template: str | None  # the template the server applies to chat requests
    base_model: bool  # no usable chat template: use raw completions


def probe_server(base_url: str, timeout: float = 5.0) -> ServerInfo:
    """Find out whether ``base_url`` serves a base model (llama.cpp only; others count as chat).

    The template is unusable when the server has none, or when it is the
    ChatML fallback and the model's vocabulary has no ``<|im_start|>`` token
    (it would be read as plain text, several tokens long).
    """
    server = ModelServer(base_url, timeout)
    try:
        props = server.json("GET", "/props")
    except BackendError as exc:
        logger.debug("no llama.cpp /props at %s (%s): assuming a chat server", server.url, exc)
        return ServerInfo(False, None, False)
    if not isinstance(props, dict):
        return ServerInfo(False, None, False)
    template = props.get("chat_template")
    template = template if isinstance(template, str) and template.strip() else None
    if template is None:
        return ServerInfo(True, None, True)
    if _CHATML_MARK not in template:
        return ServerInfo(True, template, False)
    try:
        tokens = server.json("POST", "/tokenize", {"content": _CHATML_MARK, "parse_special": True})
    except BackendError as exc:
        logger.debug("cannot tokenize at %s (%s): trusting the chat template", server.url, exc)
        return ServerInfo(True, template, False)
    ids = tokens.get("tokens") if isinstance(tokens, dict) else None
    special = isinstance(ids, list) and len(ids) == 1
    return ServerInfo(True, template, not special)


def copying(generate: G, question: str, first: bool | None = None) -> G | CopyingBackend:
    """``generate`` (a llama.cpp backend) with answers held to each block's words, as
    ``ask`` and ``serve`` answer a base model (:data:`ANSWER_COPY`, :data:`ANSWER_TYPED_COPY`);
    ``first`` (default :data:`ANSWER_FIRST_TYPED`): the typed word from the earliest passage holding one."""
    first = ANSWER_FIRST_TYPED if first is None else first
    return CopyingBackend(generate, question, typed=ANSWER_TYPED_COPY, first=first) if ANSWER_COPY else generate


def answer_retriever(retriever: Retriever, proximity: float | None = None) -> Retriever:
    """What ``ask`` retrieves from: ``retriever`` with its top hits reranked by term proximity.

    ``proximity`` (default :data:`ANSWER_PROXIMITY`, read when called) weighs
    the question's adjacent words written together
    (:class:`~clanker_rag._retrieval._proximity.ProximityRetriever`); 0 leaves
    the retriever as it is.
    """
    weight = ANSWER_PROXIMITY if proximity is None else proximity
    return ProximityRetriever(retriever, weight=weight) if weight else retriever


def windows_shown(
    chooser: str | None = None,
    focus_chars: int | None = ANSWER_FOCUS_CHARS,
    sentence: bool = ANSWER_SENTENCE,
    windows: int | None = None,
) -> int:
    """How many windows a block of :func:`answer_controller` shows first, for these of its options.

    ``windows`` (default :data:`ANSWER_WINDOWS`, read when called) with the
    learned chooser cutting sentences; 1 otherwise (the rules choose one
    sentence, and whole chunks are not windows).
    """
    chooser = ANSWER_CHOOSER if chooser is None else chooser
    if chooser not in CHOOSERS:
        raise ConfigError(f"chooser must be one of {', '.join(CHOOSERS)}, got {chooser!r}")
    windows = check_windows(ANSWER_WINDOWS if windows is None else windows)
    return windows if chooser == "learned" and focus_chars is not None and sentence else 1


def answer_controller(
    retriever: Retriever,
    mode: str = BASE_MODE,
    *,
    question: str,
    k: int = ANSWER_K,
    block_chars: int = ANSWER_BLOCK_CHARS,
    tool_query: str = ANSWER_TOOL_QUERY,
    focus_chars: int | None = ANSWER_FOCUS_CHARS,
    sentence: bool = ANSWER_SENTENCE,
    answer_types: bool = ANSWER_TYPED_SENTENCE,
    attach_chars: int | None = ANSWER_ATTACH_CHARS,
    changelog_last: bool = ANSWER_CHANGELOG_LAST,
    pick: int = ANSWER_PICK,
    rank_prior: float = ANSWER_RANK_PRIOR,
    chooser: str | None = None,
    follow_chars: int = ANSWER_FOLLOW_CHARS,
    windows: int | None = None,
    proximity: float | None = None,
    stop: Sequence[str] = STOP,
    **options: Any,
) -> RagController:
    """The controller for a :func:`~clanker_rag._answer._prompts.base_prompt` of ``mode``.

    ``focus_chars`` cuts each passage to the lines around the query's words
    (:class:`~clanker_rag._answer._focusing.FocusedRetriever`); ``None`` keeps whole chunks.
    ``chooser`` (one of :data:`CHOOSERS`, default :data:`ANSWER_CHOOSER`, read when called) says how
    the sentence shown is chosen among the top passages.
    ``windows`` (default :data:`ANSWER_WINDOWS`, read when called): with the learned chooser, the
    block shows that chooser's best this many windows first, and at least that many passages.
    ``proximity`` (default :data:`ANSWER_PROXIMITY`, read when called): how the retriever's hits are
    reranked first (:func:`answer_retriever`).
    ``options`` (``min_score``, ``show_blocks``...) go to the controller as they are.
    """
    chooser = ANSWER_CHOOSER if chooser is None else chooser
    windows = windows_shown(chooser, focus_chars, sentence, windows)
    learned = chooser == "learned"
    retriever = answer_retriever(retriever, proximity)
    if focus_chars is not None:
        retriever = FocusedRetriever(
            retriever,
            budget=focus_chars,
            sentence=sentence,
            answer_types=answer_types,
            attach=attach_chars,
            changelog_last=changelog_last,
            pick=LEARNED_PICK if learned else pick,
            rank_prior=rank_prior,
            chooser=learned_sentence if learned else None,
            follow=follow_chars,
            ranker=learned_sentences if learned else None,
            windows=windows,
        )
    # The path's own settings go into the controller's typed settings; a caller's
    # ``triggers``/``layout``/``hooks``/``limits`` keep their other fields.
    triggers = replace(options.pop("triggers", Triggers()), tool_query=tool_query)
    layout = replace(options.pop("layout", BlockLayout()), block_chars=block_chars, after_block=after_block(question))
    hooks = options.pop("hooks", Hooks())
    on_block = options.pop("on_block", None)
    if on_block is not None:
        hooks = replace(hooks, on_block=on_block)
    return RagController(
        retriever,
        k=max(k, windows),
        tools=mode in ("tools", "both"),
        questions=mode in ("context", "both"),
        stop=stop,
        triggers=triggers,
        layout=layout,
        hooks=hooks,
        **options,
    )


# Words an answer may hold before a loop in it ends it: the typed copying
# grammar may still owe the asked-for word up to the word after LEAD_WORDS, and
# a model looping over a table row's cells reaches it there.
LOOP_AFTER_WORDS = LEAD_WORDS + 1


def answer_text(events: Iterable[StreamEvent], loop_after_words: int = LOOP_AFTER_WORDS) -> Iterator[StreamEvent]:
    """The events with the few-shot label (``Answer:``) taken out of the visible text.

    After each block, text is held only while it could still be the label.
    An answer of more than ``loop_after_words`` words that has turned into a
    loop (one piece written over and over, or one phrase twice:
    :func:`~clanker_rag._answer._repetition.loops_at_end`) ends there: ``events`` is closed, which stops the generation.
    """
    held: str | None = ""  # None: the label question is settled until the next block
    answer = ""  # the visible answer since the last block
    it = iter(events)
    try:
        for ev in it:
            if isinstance(ev, InjectEvent):
                held, answer = "", ""
            if not isinstance(ev, TextEvent):
                yield ev
                continue
            if held is None:
                yield ev
                answer += ev.text
            else:
                held += ev.text
                head = held.lstrip()
                if len(head) < len(ANSWER_LABEL) and ANSWER_LABEL.startswith(head):
                    continue
                if head.startswith(ANSWER_LABEL):
                    head = head[len(ANSWER_LABEL) :].lstrip(" ")
                held = None
                if head:
                    yield TextEvent(head)
                    answer += head
            if len(answer.split()) > loop_after_words and loops_at_end(answer):
                logger.debug("the answer repeats itself; generation stopped after %d characters", len(answer))
                return
        if held and held.strip():
            yield TextEvent(held.strip())
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def base_model_events(
    retriever: Retriever,
    question: str,
    generate: Callable[..., Iterator[Any]],
    *,
    llama_cpp: bool,
    mode: str = BASE_MODE,
    asked: str | None = None,
    history: Sequence[tuple[str, str]] = (),
    system: str = "",
    k: int = ANSWER_K,
    stop: Sequence[str] = STOP,
    **options: Any,
) -> Iterator[StreamEvent]:
    """A base model's answer to ``question``: the one answering path of ``ask``, ``demo`` and ``serve``.

    The few-shot prompt of ``mode`` (``asked``, the question as the prompt
    shows it, defaults to ``question``; ``history`` and ``system`` as in
    :func:`~clanker_rag._answer._prompts.base_prompt`), the controller of
    :func:`answer_controller`, and on llama.cpp (``llama_cpp``: its
    completions take a GBNF grammar) answers held to the injected passages'
    words (:func:`copying`; the controller hands it each block's passages).
    ``generate`` is called as ``generate(prompt, stop)``, or with
    ``options=`` under the grammar.  The events have the answer label
    stripped and end when the answer loops (:func:`answer_text`).
    """
    backend: Callable[..., Iterator[Any]] = copying(generate, question) if llama_cpp else generate
    observe = backend.observe if isinstance(backend, CopyingBackend) else None
    ctl = answer_controller(retriever, mode, question=question, k=k, stop=stop, on_block=observe, **options)
    # The examples show as many windows as the blocks will.
    shown = windows_shown(
        options.get("chooser"),
        options.get("focus_chars", ANSWER_FOCUS_CHARS),
        options.get("sentence", ANSWER_SENTENCE),
        options.get("windows"),
    )
    prompt = base_prompt(asked if asked is not None else question, mode, history=history, system=system, windows=shown)
    return answer_text(ctl.events(backend, prompt, question=question))


def ask_events(
    retriever: Retriever,
    question: str,
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    k: int | None = None,
    max_tokens: int = 512,
    api: str = "auto",
) -> Iterator[StreamEvent]:
    """The events of ``clanker-rag ask``: chat or raw completions, as the server needs.

    ``api="auto"`` probes the server: a base model (no usable chat template)
    gets the few-shot prompt of :data:`BASE_MODE` through llama.cpp's native
    ``/completion`` (or ``/v1/completions`` elsewhere), by
    :func:`base_model_events`; anything else gets a chat request.
    ``"completions"`` forces the first; ``"chat"`` the second, except on a
    server that says its model has no chat template: that is logged as a
    warning and answered with completions.
    """
    from ..backends import ChatBackend, CompletionsBackend, LlamaCppBackend

    base = base_url.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    info = probe_server(base) if api in ("auto", "chat") else None
    if api == "chat" and info is not None and info.base_model:
        # Its chat template would be ChatML the model has never seen: it streams "<|im_end|>" as text.
        logger.warning("the model at %s has no chat template of its own: asking with completions instead of chat", base)
    raw = api == "completions" or (info is not None and info.base_model)
    if not raw:
        ctl = RagController(answer_retriever(retriever), k=k or 3, questions=True, tools=True)
        chat = ChatBackend(base, model, max_tokens=max_tokens, api_key=api_key)
        return ctl.events(chat, CHAT_PROMPT.format(question=question), question=question)
    llama_cpp = info is not None and info.llama_cpp
    generate: Callable[..., Iterator[Any]]
    if llama_cpp:
        generate = LlamaCppBackend(base, n_predict=max_tokens, temperature=0.0, cache_prompt=True, api_key=api_key)
    else:
        generate = CompletionsBackend(base, model, max_tokens=max_tokens, temperature=0.0, api_key=api_key)
    return base_model_events(retriever, question, generate, llama_cpp=llama_cpp, k=k or ANSWER_K)
