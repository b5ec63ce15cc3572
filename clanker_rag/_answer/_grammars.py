"""Constrained copying: a base model's answer may only use words of its passage.

A 270M base model given the right line still garbles it about one time in
three: it writes "10M" for "10 MiB", a run of zeros, or a word from the
prompt's examples.  llama.cpp's ``/completion`` takes a GBNF ``grammar`` that
limits what it may sample; :func:`copy_grammar` allows only whitespace-split
words of the passages injected in the turn, joined by single spaces, on one
line.  :class:`CopyingBackend` wraps a llama.cpp backend; the controller
hands it each injected block as a typed value (``on_block``, the passages as
shown), and it sends that grammar with every request whose prompt ends with
the answer label after a block, and :data:`TOOL_GRAMMAR` (one closed retrieve call) with every
request that ends with the search label; every other request goes out
unchanged.

The grammar only narrows the choice of tokens, so the prompt (and the
server's prompt cache) is exactly the one the model would get without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._stream._controller import InjectEvent
from .._text._analysis import Analyzer
from ._answer_types import expected_types, head_noun, types_in
from ._prompts import ANSWER_LABEL, SEARCH_LABEL

__all__ = ["LEAD_WORDS", "TOOL_GRAMMAR", "CopyingBackend", "closest_typed", "copy_grammar"]

# After the search label the model may only write one closed retrieve call:
# left free, it sometimes writes a source line and never closes the tag.
TOOL_GRAMMAR = 'root ::= " <tool name=\\"retrieve\\">" [^<>\\n]{1,100} "</tool>"\n'

# The prompt's examples answer in at most ten words; a longer answer is a copy running on.
_MAX_WORDS = 24
# Words an answer may write before the typed word it must hold: a short lead, as in the
# prompt's examples ("The server listens on port 6120"); a model looping on a table row's
# other cells reaches the asked-for token within it.
LEAD_WORDS = 8


def _literal(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _forms(word: str) -> tuple[str, ...]:
    """The ways an answer may write ``word``: as written, and without its trailing punctuation."""
    bare = word.rstrip(".,;:!?|)")
    return (word, bare) if bare else (word,)


def closest_typed(
    passage: str, question: str, expected: frozenset[str], analyzer: Callable[[str], list[str]] | None = None
) -> list[str]:
    """The words of ``passage`` of an ``expected`` type that the question's words point at.

    One line often holds several tokens of the asked-for type ("1 for
    errors, 2 for usage mistakes"; "ollama listens on 11434 ... --port
    8765").  The candidates kept are those whose clause (the words between
    ``,;:.`` or brackets) holds the most distinct question terms; among
    those, the ones nearest a word holding the question's head noun
    (:func:`~clanker_rag._answer._answer_types.head_noun`: "port"), when the passage
    says it, and at equal distance the ones after it.  Words of the type never count as evidence (a list of error
    names would vouch for each other).  Ties keep every candidate.
    """
    words = passage.split()
    typed = [i for i, word in enumerate(words) if expected & types_in(word)]
    if len(typed) <= 1:
        return [words[i] for i in typed]
    analyze = analyzer or Analyzer()
    candidates = set(typed)
    held: list[set[str]] = [set() if i in candidates else set(analyze(word)) for i, word in enumerate(words)]
    clause, at = [], 0
    for word in words:
        at += word.startswith(("(", "["))
        clause.append(at)
        at += word.endswith((",", ";", ":", ".", ")", "]"))
    terms = set(analyze(question))
    found: dict[int, set[str]] = {}
    for i, word_terms in enumerate(held):
        found.setdefault(clause[i], set()).update(word_terms & terms)
    most = max(len(found[clause[i]]) for i in typed)
    typed = [i for i in typed if len(found[clause[i]]) == most]
    head = head_noun(question)
    head_terms = set(analyze(head)) if head else set()
    anchors = [j for j, word_terms in enumerate(held) if word_terms & head_terms]
    if anchors:
        # At equal distance the word after the anchor: a value follows its name ("--port 7000").
        distance = {i: min((abs(i - j), i < j) for j in anchors) for i in typed}
        typed = [i for i in typed if distance[i] == min(distance.values())]
    return list(dict.fromkeys(words[i] for i in typed))


def copy_grammar(
    passage: str,
    question: str = "",
    expected: frozenset[str] = frozenset(),
    analyzer: Callable[[str], list[str]] | None = None,
) -> str:
    """A GBNF grammar: one line of up to 24 words taken from ``passage`` (or ``question`` if it has none).

    Each word is allowed as written and without its trailing punctuation
    (so "8765." may end a sentence and "8765" sit inside one).  With
    ``expected`` answer types (:func:`~clanker_rag._answer._answer_types.expected_types`
    of the question), an answer must hold a passage word of such a type when
    the passage has one, and of several, one nearest the question's words
    (:func:`closest_typed`): asked "which status", the model cannot answer
    with the row's error name alone.
    """
    words: dict[str, None] = {}
    # The question's own words only when the passage has none: free to use them, a small model
    # echoes the question ("How do I X" answered "I X") instead of copying the answer.
    for text in (passage,) if passage.split() else (question,):
        for word in text.split():
            words.update(dict.fromkeys(_forms(word)))
    if not words:
        return 'root ::= [^\\n]* "\\n"'
    alternatives = " | ".join(_literal(word) for word in words)
    typed = closest_typed(passage, question, expected, analyzer) if expected else []
    if not typed:
        return f'root ::= " " word (" " word){{0,{_MAX_WORDS - 1}}} "\\n"\nword ::= {alternatives}\n'
    forms = dict.fromkeys(f for w in typed for f in _forms(w))
    return (
        f'root ::= " " (word " "){{0,{LEAD_WORDS}}} typed (" " word){{0,{_MAX_WORDS - LEAD_WORDS - 1}}} "\\n"\n'
        f"word ::= {alternatives}\ntyped ::= {' | '.join(_literal(f) for f in forms)}\n"
    )


class CopyingBackend:
    """A llama.cpp backend whose answers after a block copy words of the turn's passages (see the module doc).

    Pass :meth:`observe` to the controller as ``on_block``: each injected
    block's passages, as shown, become words an answer may use.
    ``typed=True`` also makes an answer hold a passage word of the type the
    question asks for, when the passages have one (:func:`copy_grammar`).

    ``inner`` is called as ``inner(prompt, stop, options=...)``: the
    :class:`~clanker_rag.backends.LlamaCppBackend` signature.
    """

    def __init__(self, inner: Callable[..., Iterator[Any]], question: str = "", *, typed: bool = False) -> None:
        self.inner = inner
        self.question = question
        self.expected = expected_types(question) if typed else frozenset()
        self.analyzer = Analyzer()
        self.passages: list[str] = []

    def observe(self, event: InjectEvent) -> None:
        """Remember the passages an injected block shows (a note shows none)."""
        self.passages.extend(p.text for p in event.passages)

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Any]:
        options: Mapping[str, Any] | None = None
        if prompt.rstrip(" ").endswith(SEARCH_LABEL):
            options = {"grammar": TOOL_GRAMMAR}
        elif prompt.rstrip(" ").endswith(ANSWER_LABEL) and self.passages:
            passage = "\n".join(self.passages)
            options = {"grammar": copy_grammar(passage, self.question, self.expected, self.analyzer)}
        return self.inner(prompt, stop, options=options)
