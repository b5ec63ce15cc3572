"""Answering one question with a model server: what ``clanker-rag ask``, the demo and the proxy run.

:func:`probe_server` asks a llama.cpp server which chat template it applies.
A base model (none of its own) gets raw completions, a few-shot prompt
(:mod:`._prompts`), one short window per block
(:class:`~._focusing.FocusedRetriever`) and, on llama.cpp, a grammar that
makes it copy the block's words (:mod:`._grammars`).  Any other server gets a
chat request over whole passages and writes freely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._exceptions import BackendError
from .._http import ModelServer
from .._stream._controller import InjectEvent, RagController, StreamEvent, TextEvent
from .._stream._settings import BlockLayout, Hooks, Triggers
from .._types import Retriever
from ._focusing import FocusedRetriever
from ._grammars import CopyingBackend
from ._prompts import ANSWER_LABEL, CHAT_PROMPT, STOP, after_block, base_prompt
from ._repetition import loops_at_end
from ._settings import AnswerSettings

__all__ = [
    "AnswerSettings",
    "ServerInfo",
    "answer_controller",
    "answer_text",
    "ask_events",
    "base_model_events",
    "probe_server",
]

logger = logging.getLogger(__name__)

_CHATML_MARK = "<|im_start|>"
DEFAULT = AnswerSettings()


@dataclass(frozen=True)
class ServerInfo:
    """What a model server said about itself."""

    llama_cpp: bool  # answers llama.cpp's /props
    chat_template: str | None  # the template the server applies to chat requests
    base_model: bool  # no usable chat template: use raw completions


def probe_server(base_url: str, timeout: float = 5.0) -> ServerInfo:
    """Whether ``base_url`` serves a base model (llama.cpp only; others count as chat).

    It does when the server has no template, or only the ChatML fallback
    while the vocabulary has no ``<|im_start|>`` token.
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


def answer_controller(
    retriever: Retriever, question: str, settings: AnswerSettings = DEFAULT, **options: Any
) -> RagController:
    """The controller of a base model's few-shot prompt (``settings.mode``) for ``question``.

    Hits are cut to the chooser's windows; the question is restated after
    every block.  ``options`` go to the controller (``triggers``, ``layout``
    and ``hooks`` keep their other fields).
    """
    focused = FocusedRetriever(
        retriever,
        budget=settings.window_chars,
        sentence=True,
        attach=settings.attach_chars,
    )
    triggers = replace(options.pop("triggers", Triggers()), tool_query=settings.tool_query)
    layout = replace(
        options.pop("layout", BlockLayout()), block_chars=settings.block_chars, after_block=after_block(question)
    )
    hooks = options.pop("hooks", Hooks())
    on_block = options.pop("on_block", None)
    if on_block is not None:
        hooks = replace(hooks, on_block=on_block)
    return RagController(
        focused,
        k=settings.k,
        tools=settings.mode in ("tools", "both"),
        questions=settings.mode in ("context", "both"),
        stop=options.pop("stop", STOP),
        triggers=triggers,
        layout=layout,
        hooks=hooks,
        **options,
    )


def answer_text(events: Iterable[StreamEvent], loop_after_words: int = 9) -> Iterator[StreamEvent]:
    """The events without the few-shot label (``Answer:``), ended when the answer loops.

    After each block, text is held only while it could still be the label.
    An answer of more than ``loop_after_words`` words that loops
    (:func:`~._repetition.loops_at_end`) ends there: closing ``events``
    stops the generation.
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
    settings: AnswerSettings = DEFAULT,
    asked: str | None = None,
    history: Sequence[tuple[str, str]] = (),
    system: str = "",
    **options: Any,
) -> Iterator[StreamEvent]:
    """A base model's answer to ``question``: the one answering path of ``ask``, ``demo`` and ``serve``.

    The few-shot prompt (``asked``, ``history``, ``system``: see
    :func:`~._prompts.base_prompt`), :func:`answer_controller` (``options``
    go to it) and, on llama.cpp with ``settings.copy``, the copy grammar.
    ``generate`` is called as ``generate(prompt, stop)``, or with
    ``options=`` under the grammar; the events are :func:`answer_text`'s.
    """
    backend: Callable[..., Iterator[Any]] = generate
    if llama_cpp and settings.copy:
        backend = copying = CopyingBackend(
            generate, question, typed=settings.typed_copy, max_words=settings.max_words,
            lead_words=settings.lead_words,
        )  # fmt: skip
        options["on_block"] = copying.observe
    ctl = answer_controller(retriever, question, settings, **options)
    prompt = base_prompt(asked if asked is not None else question, settings.mode, history=history, system=system)
    return answer_text(ctl.events(backend, prompt, question=question), loop_after_words=settings.lead_words + 1)


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
    settings: AnswerSettings = DEFAULT,
) -> Iterator[StreamEvent]:
    """The events of ``clanker-rag ask``: chat or raw completions, as the server needs.

    ``api="auto"`` probes the server: a base model gets
    :func:`base_model_events`; anything else a chat request over ``k``
    (default ``settings.chat_k``) whole passages.  ``"completions"`` forces
    the first; ``"chat"`` the second unless the model has no chat template.
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
        ctl = RagController(retriever, k=k or settings.chat_k, questions=True, tools=True)
        chat = ChatBackend(base, model, max_tokens=max_tokens, api_key=api_key)
        return ctl.events(chat, CHAT_PROMPT.format(question=question), question=question)
    llama_cpp = info is not None and info.llama_cpp
    generate: Callable[..., Iterator[Any]]
    if llama_cpp:
        generate = LlamaCppBackend(base, n_predict=max_tokens, temperature=0.0, cache_prompt=True, api_key=api_key)
    else:
        generate = CompletionsBackend(base, model, max_tokens=max_tokens, temperature=0.0, api_key=api_key)
    if k:
        settings = replace(settings, k=k)
    return base_model_events(retriever, question, generate, llama_cpp=llama_cpp, settings=settings)
