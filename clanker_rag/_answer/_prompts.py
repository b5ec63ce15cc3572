"""Prompts that make small base models answer from injected passages.

A base model follows its prompt's pattern: a few worked examples, about a
made-up tool so that none answers a real question, in the controller's own
layout (question, block, ``Answer:``, one line copying the passage).
``mode``: ``"none"`` (no retrieval), ``"context"`` (a ``<context>`` block
after the question), ``"tools"`` (the model writes a ``Search:`` call and
gets a ``<result>`` block) or ``"both"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._exceptions import ConfigError
from .._stream._blocks import BlockBuilder, BlockTag, Passage

__all__ = [
    "ANSWER_LABEL",
    "CHAT_PROMPT",
    "MODES",
    "SEARCH_LABEL",
    "STOP",
    "Example",
    "after_block",
    "base_prompt",
]

MODES = ("none", "context", "tools", "both")
STOP = ("\n",)
ANSWER_LABEL = "Answer:"
SEARCH_LABEL = "Search:"

CHAT_PROMPT = (
    "Answer the question. Passages from a knowledge base may follow it in a <context> block; "
    "use them when they are relevant and cite them by their [number].\n\nQuestion: {question}\n"
)

_INTRO = (
    "Questions about software, each answered from the numbered passages of its documentation. "
    "An answer is one short line that repeats the exact words of the passage: the number, option or name asked for."
)


@dataclass(frozen=True)
class Example:
    """One worked example: a question, the passage that answers it, the answer."""

    question: str
    query: str
    source: str
    lines: tuple[int, int]
    passage: str
    answer: str


EXAMPLES = (
    Example(
        "Which port does the lumen server listen on by default?",
        "lumen server default port",
        "guide/server.md",
        (12, 15),
        "## Running the server\n\nStart it with `lumen serve`. The server listens on port 6120 by default;\n"
        "pass --port to change it.",
        "The server listens on port 6120 by default.",
    ),
    Example(
        "Which option makes lumen skip hidden files?",
        "skip hidden files option",
        "guide/scan.md",
        (30, 33),
        "Symlinks are followed inside the root only. Hidden files are read\nunless you pass --no-hidden, "
        "which skips them.",
        "Pass --no-hidden, which skips hidden files.",
    ),
    Example(
        "How long does lumen keep its log files?",
        "log files kept how long",
        "guide/logs.md",
        (41, 44),
        "| setting | default | meaning |\n|---|---|---|\n| `rotate_at` | 00:00 | when logs rotate |\n"
        "| `keep_days` | 14 days | how long old log files are kept |",
        "Old log files are kept for 14 days (`keep_days`).",
    ),
    Example(
        "Which error does lumen raise when the cache file is damaged?",
        "damaged cache file error",
        "guide/cache.md",
        (7, 10),
        "The cache is rebuilt on demand. A damaged or truncated cache file\nraises CacheCorruptError, "
        "which names the file.",
        "A damaged cache file raises CacheCorruptError.",
    ),
)


def _block(tag: BlockTag, example: Example) -> str:
    # Built by the controller's own builder, so the model sees its examples and the real blocks in one layout.
    passages = [Passage(example.source, example.passage, *example.lines)]
    return BlockBuilder().build_passages(tag, passages).text


def after_block(question: str) -> str:
    """What the model reads after each block: the question again (a small model answers the
    question it read last), then the answer label."""
    return f"Question: {' '.join(question.split())}\n{ANSWER_LABEL}"


def _shot(example: Example, mode: str) -> str:
    head = f"Question: {example.question}\n"
    answer = f" {example.answer}\n"
    if mode == "none":
        return head + ANSWER_LABEL + answer
    if mode == "context" or mode == "both":
        return head + _block("context", example) + after_block(example.question) + answer
    call = f'{SEARCH_LABEL} <tool name="retrieve">{example.query}</tool>'
    return head + call + _block("result", example) + after_block(example.question) + answer


def base_prompt(
    question: str,
    mode: str = "tools",
    *,
    history: Sequence[tuple[str, str]] = (),
    system: str = "",
) -> str:
    """The few-shot prompt for ``question`` in layout ``mode``.

    A chat rendered for a base model (``serve``) brings its ``system`` text,
    leading the prompt, and ``history`` (question, answer) pairs after the examples.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    question = " ".join(question.split())
    shots = "\n".join(_shot(example, mode) for example in EXAMPLES)
    # Each earlier turn on its own two lines: the answer stop (STOP) ends answers at a line's end.
    earlier = "".join(f"Question: {' '.join(q.split())}\n{ANSWER_LABEL} {' '.join(a.split())}\n\n" for q, a in history)
    tail = f"Question: {question}\n"
    if mode == "none":
        tail += ANSWER_LABEL
    elif mode == "tools":
        tail += SEARCH_LABEL
    lead = f"{' '.join(system.split())}\n\n" if system.strip() else ""
    return f"{lead}{_INTRO}\n\n{shots}\n{earlier}{tail}"
