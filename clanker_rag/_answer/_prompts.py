"""Prompts that make small base models answer from injected passages.

A base model (no chat template) follows the pattern of its prompt, so the
prompt is a few worked examples in exactly the layout the controller
produces: the question, the block of numbered passages (a ``<context>``
block injected up front, or a ``<result>`` block after the model's own
``<tool name="retrieve">`` call), then ``Answer:`` and a short answer copied
from the passages.  The examples are about a made-up tool ("lumen"), so
nothing in them can answer a real question by accident, and each answer is
one short sentence that repeats the exact words of the fact (number, option,
name) from its passage.

With several windows per block (``windows``: the learned chooser's best
windows, best first, as ``ask`` shows them), each example's block shows two:
the one that answers and a neighbour sharing the question's words, the
answering one first in half of them and second in the other half, so the
model learns to look past the first window and not to copy the neighbour.

``mode`` picks the layout:

* ``"none"``: question, then ``Answer:`` (no retrieval: the baseline);
* ``"context"``: the controller injects a ``<context>`` block after the
  question (``questions=True``), the model writes ``Answer:``;
* ``"tools"``: the model writes ``Search: <tool name="retrieve">...</tool>``,
  the controller answers with a ``<result>`` block, the model writes
  ``Answer:``;
* ``"both"``: a ``<context>`` block up front and the tool available.

:data:`STOP` ends an answer at its line's end: every example answers in one
line, and a small model that goes on writes the next question or copies the
block again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._exceptions import ConfigError
from .._stream._blocks import BlockBuilder, BlockTag, Passage
from .._validate import positive_int

__all__ = [
    "ANSWER_LABEL",
    "CHAT_PROMPT",
    "MODES",
    "SEARCH_LABEL",
    "STOP",
    "Example",
    "Window",
    "after_block",
    "base_prompt",
    "strip_label",
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
class Window:
    """One window an example's block shows when a block shows two."""

    source: str
    lines: tuple[int, int]
    text: str


@dataclass(frozen=True)
class Example:
    """One worked example: a question, the passage that answers it, the answer.

    ``pair`` is what its block shows when blocks hold several windows: two,
    exactly one of which holds the answer.
    """

    question: str
    query: str
    source: str
    lines: tuple[int, int]
    passage: str
    answer: str
    pair: tuple[Window, Window]


EXAMPLES = (
    Example(
        "Which port does the lumen server listen on by default?",
        "lumen server default port",
        "guide/server.md",
        (12, 15),
        "## Running the server\n\nStart it with `lumen serve`. The server listens on port 6120 by default;\n"
        "pass --port to change it.",
        "The server listens on port 6120 by default.",
        pair=(
            Window(
                "guide/server.md",
                (10, 11),
                "Start the server with `lumen serve` from the project folder; it reloads\n"
                "its configuration when lumen.toml changes.",
            ),
            Window(
                "guide/server.md", (12, 13), "The server listens on port 6120 by default;\npass --port to change it."
            ),
        ),
    ),
    Example(
        "Which option makes lumen skip hidden files?",
        "skip hidden files option",
        "guide/scan.md",
        (30, 33),
        "Symlinks are followed inside the root only. Hidden files are read\nunless you pass --no-hidden, "
        "which skips them.",
        "Pass --no-hidden, which skips hidden files.",
        pair=(
            Window("guide/scan.md", (31, 32), "Hidden files are read\nunless you pass --no-hidden, which skips them."),
            Window(
                "guide/config.md",
                (40, 41),
                "`exclude` lists the folders lumen never scans;\nits patterns use the syntax of .gitignore.",
            ),
        ),
    ),
    Example(
        "How long does lumen keep its log files?",
        "log files kept how long",
        "guide/logs.md",
        (41, 44),
        "| setting | default | meaning |\n|---|---|---|\n| `rotate_at` | 00:00 | when logs rotate |\n"
        "| `keep_days` | 14 days | how long old log files are kept |",
        "Old log files are kept for 14 days (`keep_days`).",
        pair=(
            Window(
                "guide/logs.md",
                (38, 39),
                "Log files are written to `~/.lumen/logs`, one file a day,\nand are rotated at midnight.",
            ),
            Window(
                "guide/logs.md",
                (41, 43),
                "| setting | default | meaning |\n|---|---|---|\n"
                "| `keep_days` | 14 days | how long old log files are kept |",
            ),
        ),
    ),
    Example(
        "Which error does lumen raise when the cache file is damaged?",
        "damaged cache file error",
        "guide/cache.md",
        (7, 10),
        "The cache is rebuilt on demand. A damaged or truncated cache file\nraises CacheCorruptError, "
        "which names the file.",
        "A damaged cache file raises CacheCorruptError.",
        pair=(
            Window(
                "guide/cache.md",
                (7, 8),
                "A damaged or truncated cache file\nraises CacheCorruptError, which names the file.",
            ),
            Window(
                "guide/cache.md",
                (9, 10),
                "The cache is rebuilt on demand: delete the file\nor run `lumen cache clear`.",
            ),
        ),
    ),
)


def _block(tag: BlockTag, example: Example, windows: int) -> str:
    # Built by the controller's own builder, so the model sees its examples and the real blocks in one layout.
    if windows > 1:
        passages = [Passage(w.source, w.text, *w.lines) for w in example.pair]
    else:
        passages = [Passage(example.source, example.passage, *example.lines)]
    return BlockBuilder().build_passages(tag, passages).text


def after_block(question: str) -> str:
    """What the model reads after each block: the question again, then the answer label.

    A small model answers the question it read last; restated after the
    passages, the question sits right before the answer it asks for.
    """
    return f"Question: {' '.join(question.split())}\n{ANSWER_LABEL}"


def _shot(example: Example, mode: str, windows: int) -> str:
    head = f"Question: {example.question}\n"
    answer = f" {example.answer}\n"
    if mode == "none":
        return head + ANSWER_LABEL + answer
    if mode == "context" or mode == "both":
        return head + _block("context", example, windows) + after_block(example.question) + answer
    call = f'{SEARCH_LABEL} <tool name="retrieve">{example.query}</tool>'
    return head + call + _block("result", example, windows) + after_block(example.question) + answer


def base_prompt(
    question: str,
    mode: str = "tools",
    *,
    history: Sequence[tuple[str, str]] = (),
    system: str = "",
    windows: int = 1,
) -> str:
    """The few-shot prompt for ``question``; see the module doc for ``mode`` and ``windows``.

    A chat rendered for a base model (``serve``) brings its ``system`` text,
    which leads the prompt, and its earlier turns as ``history`` (question,
    answer) pairs, written after the examples in their layout (without
    passages: those were read in their own turn).
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    positive_int("windows", windows)
    question = " ".join(question.split())
    shots = "\n".join(_shot(example, mode, windows) for example in EXAMPLES)
    # Each earlier turn on its own two lines: the answer stop (STOP) ends answers at a line's end.
    earlier = "".join(f"Question: {' '.join(q.split())}\n{ANSWER_LABEL} {' '.join(a.split())}\n\n" for q, a in history)
    tail = f"Question: {question}\n"
    if mode == "none":
        tail += ANSWER_LABEL
    elif mode == "tools":
        tail += SEARCH_LABEL
    lead = f"{' '.join(system.split())}\n\n" if system.strip() else ""
    return f"{lead}{_INTRO}\n\n{shots}\n{earlier}{tail}"


def strip_label(text: str) -> str:
    """The answer without the ``Answer:`` label the examples teach the model to write."""
    stripped = text.strip()
    if stripped.startswith(ANSWER_LABEL):
        stripped = stripped[len(ANSWER_LABEL) :].strip()
    return stripped
