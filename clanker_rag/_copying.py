"""Constrained copying: a base model's answer may only use words of its passage.

A 270M base model given the right line still garbles it about one time in
three: it writes "10M" for "10 MiB", a run of zeros, or a word from the
prompt's examples.  llama.cpp's ``/completion`` takes a GBNF ``grammar`` that
limits what it may sample; :func:`copy_grammar` allows only whitespace-split
words of the last injected block and of the question, joined by single
spaces, on one line.  :class:`CopyingBackend` wraps a llama.cpp backend and
sends that grammar with every request whose prompt ends with the answer label
after a block, and :data:`TOOL_GRAMMAR` (one closed retrieve call) with every
request that ends with the search label; every other request goes out
unchanged.

The grammar only narrows the choice of tokens, so the prompt (and the
server's prompt cache) is exactly the one the model would get without it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ._answer_types import expected_types, types_in
from ._prompts import ANSWER_LABEL, SEARCH_LABEL

__all__ = ["TOOL_GRAMMAR", "CopyingBackend", "copy_grammar", "last_block"]

# After the search label the model may only write one closed retrieve call:
# left free, it sometimes writes a source line and never closes the tag.
TOOL_GRAMMAR = 'root ::= " <tool name=\\"retrieve\\">" [^<>\\n]{1,100} "</tool>"\n'

_BLOCK_RE = re.compile(r"<(context|result)>\n(.*?)</\1>", re.S)
_HEADER_RE = re.compile(r"^\[\d+\] \S+$")
_MAX_WORDS = 40


def last_block(prompt: str) -> str | None:
    """The passage text of the prompt's last ``<context>``/``<result>`` block, source lines dropped."""
    found = list(_BLOCK_RE.finditer(prompt))
    if not found:
        return None
    lines = found[-1].group(2).splitlines()
    return "\n".join(line for line in lines if not _HEADER_RE.match(line.strip()))


def _literal(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _forms(word: str) -> tuple[str, ...]:
    """The ways an answer may write ``word``: as written, and without its trailing punctuation."""
    bare = word.rstrip(".,;:!?|)")
    return (word, bare) if bare else (word,)


def copy_grammar(passage: str, question: str = "", expected: frozenset[str] = frozenset()) -> str:
    """A GBNF grammar: one line of up to 40 words taken from ``passage`` or ``question``.

    Each word is allowed as written and without its trailing punctuation
    (so "8765." may end a sentence and "8765" sit inside one).  With
    ``expected`` answer types (:func:`~clanker_rag._answer_types.expected_types`
    of the question), an answer must hold at least one passage word of such a
    type when the passage has one: asked "which status", the model cannot
    answer with the row's error name alone.
    """
    words: dict[str, None] = {}
    for text in (passage, question):
        for word in text.split():
            words.update(dict.fromkeys(_forms(word)))
    if not words:
        return 'root ::= [^\\n]* "\\n"'
    alternatives = " | ".join(_literal(word) for word in words)
    typed = [w for w in dict.fromkeys(passage.split()) if expected & types_in(w)] if expected else []
    if not typed:
        return f'root ::= " " word (" " word){{0,{_MAX_WORDS - 1}}} "\\n"\nword ::= {alternatives}\n'
    forms = dict.fromkeys(f for w in typed for f in _forms(w))
    half = _MAX_WORDS // 2
    return (
        f'root ::= " " (word " "){{0,{half}}} typed (" " word){{0,{half - 1}}} "\\n"\n'
        f"word ::= {alternatives}\ntyped ::= {' | '.join(_literal(f) for f in forms)}\n"
    )


class CopyingBackend:
    """A llama.cpp backend whose answers after a block copy words of that block (see the module doc).

    ``typed=True`` also makes an answer hold a block word of the type the
    question asks for, when the block has one (:func:`copy_grammar`).

    ``inner`` is called as ``inner(prompt, stop, options=...)``: the
    :class:`~clanker_rag.backends.LlamaCppBackend` signature.
    """

    def __init__(self, inner: Callable[..., Iterator[Any]], question: str = "", *, typed: bool = False) -> None:
        self.inner = inner
        self.question = question
        self.expected = expected_types(question) if typed else frozenset()

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Any]:
        options: Mapping[str, Any] | None = None
        if prompt.rstrip(" ").endswith(SEARCH_LABEL):
            options = {"grammar": TOOL_GRAMMAR}
        elif prompt.rstrip(" ").endswith(ANSWER_LABEL):
            passage = last_block(prompt)
            if passage is not None:
                options = {"grammar": copy_grammar(passage, self.question, self.expected)}
        return self.inner(prompt, stop, options=options)
