"""Constrained copying: a base model's answer may only use words of its passages.

A 270M base model given the right line still garbles it about one time in
three.  llama.cpp's ``/completion`` takes a GBNF ``grammar`` that limits what
it may sample: :func:`copy_grammar` allows only the passages' words, on one
line, at most ``max_words`` of them, so the answer always progresses and
ends; asked for a number, a flag or a name, the answer holds such a word
(:func:`typed_words`) early.  :class:`CopyingBackend` sends that grammar with
every answer request after a block, and :data:`TOOL_GRAMMAR` after the search
label; the prompt, and so the server's prompt cache, stays as it would be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._stream._controller import InjectEvent
from .._text._analysis import Analyzer
from ._kinds import FLAG_RE, code_names, has_number, question_kinds
from ._prompts import ANSWER_LABEL, SEARCH_LABEL

__all__ = ["TOOL_GRAMMAR", "CopyingBackend", "copy_grammar", "one_of", "typed_words"]

# After the search label, one closed retrieve call: left free, the model sometimes never closes the tag.
TOOL_GRAMMAR = 'root ::= " <tool name=\\"retrieve\\">" [^<>\\n]{1,100} "</tool>"\n'


def _literal(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def one_of(words: Sequence[str]) -> str:
    """A GBNF expression matching exactly ``words`` (non-empty strings), as a prefix tree.

    ``"po" ("rt" ("s")? | "st")`` for port, ports, post: llama.cpp checks each
    token against every open alternative, so a tree costs one check per
    distinct next character where a flat list costs one per word.
    """
    trie: dict[str, Any] = {}
    end = ""  # the key marking a word's end (no word character is empty)
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[end] = {}

    def expr(node: dict[str, Any]) -> str:
        alternatives = []
        for ch in sorted(k for k in node if k != end):
            text, child = ch, node[ch]
            while end not in child and len(child) == 1:
                (more, child), *_ = child.items()
                text += more
            rest = expr(child)
            alternatives.append(_literal(text) + (f" {rest}" if rest else ""))
        if not alternatives:
            return ""
        body = " | ".join(alternatives)
        if end in node:
            return f"({body})?"
        return f"({body})" if len(alternatives) > 1 else body

    return expr(trie)


def _forms(word: str) -> tuple[str, ...]:
    """The ways an answer may write ``word``: as written, and without its trailing punctuation."""
    bare = word.rstrip(".,;:!?|)")
    return (word, bare) if bare else (word,)


def _bare(word: str) -> str:
    return word.strip("`'\".,;:!?()[]{}*").lower()


def _of_kind(word: str, kinds: frozenset[str]) -> bool:
    return (
        ("number" in kinds and has_number(word))
        or ("flag" in kinds and FLAG_RE.search(word) is not None)
        or ("name" in kinds and bool(code_names(word)))
    )


def typed_words(passage: str, question: str, analyzer: Callable[[str], list[str]] | None = None) -> list[str]:
    """The words of ``passage`` of the kind ``question`` asks for (a number, a flag, a name) that it points at.

    Words the question writes itself come last (they are what it asks
    about).  Of several, those whose clause holds the most question terms,
    then those nearest such a term, after it on a tie ("--port 7000").
    """
    kinds = question_kinds(question)
    words = passage.split()
    typed = [i for i, word in enumerate(words) if _of_kind(word, kinds)]
    asked = {_bare(word) for word in question.split()}
    typed = [i for i in typed if _bare(words[i]) not in asked] or typed
    if len(typed) > 1:
        analyze = analyzer or Analyzer()
        terms, candidates = set(analyze(question)), set(typed)
        held = [set() if j in candidates else terms.intersection(analyze(word)) for j, word in enumerate(words)]
        clause, at = [], 0
        for word in words:
            at += word.startswith(("(", "["))
            clause.append(at)
            at += word.endswith((",", ";", ":", ".", ")", "]"))
        said: dict[int, set[str]] = {}
        for j, found in enumerate(held):
            said.setdefault(clause[j], set()).update(found)
        most = max(len(said[clause[i]]) for i in typed)
        typed = [i for i in typed if len(said[clause[i]]) == most]
        anchors = [j for j, found in enumerate(held) if found]
        if anchors:
            distance = {i: min((abs(i - j), i < j) for j in anchors) for i in typed}
            typed = [i for i in typed if distance[i] == min(distance.values())]
    return list(dict.fromkeys(words[i] for i in typed))


def copy_grammar(
    passage: str, question: str = "", typed: Sequence[str] = (), *, max_words: int = 24, lead_words: int = 8
) -> str:
    """A GBNF grammar: one line of 1 to ``max_words`` words of ``passage`` (of ``question`` if it has none).

    Each word as written or without trailing punctuation; with ``typed``
    words, one of them within the first ``lead_words`` + 1.  Allowed the
    question's words, a small model echoes the question instead of answering.
    """
    words: dict[str, None] = {}
    for word in (passage if passage.split() else question).split():
        words.update(dict.fromkeys(_forms(word)))
    if not words:
        return 'root ::= [^\\n]* "\\n"'
    alternatives = one_of(list(words))
    if not typed:
        return f'root ::= " " word (" " word){{0,{max_words - 1}}} "\\n"\nword ::= {alternatives}\n'
    forms = one_of(list(dict.fromkeys(f for word in typed for f in _forms(word))))
    return (
        f'root ::= " " (word " "){{0,{lead_words}}} typed (" " word){{0,{max_words - lead_words - 1}}} "\\n"\n'
        f"word ::= {alternatives}\ntyped ::= {forms}\n"
    )


class CopyingBackend:
    """A llama.cpp backend whose answers after a block copy the turn's passages' words (see the module doc).

    Pass :meth:`observe` as the controller's ``on_block``.  ``typed``: the
    answer holds a word of the asked-for kind from the best passage with one.
    ``inner`` is called as ``inner(prompt, stop, options=...)``.
    """

    def __init__(
        self,
        inner: Callable[..., Iterator[Any]],
        question: str = "",
        *,
        typed: bool = True,
        max_words: int = 24,
        lead_words: int = 8,
    ) -> None:
        self.inner = inner
        self.question = question
        self.typed = typed
        self.max_words = max_words
        self.lead_words = lead_words
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
            found = (typed_words(p, self.question, self.analyzer) for p in self.passages) if self.typed else iter(())
            typed = next((words for words in found if words), [])
            grammar = copy_grammar(
                "\n".join(self.passages), self.question, typed, max_words=self.max_words, lead_words=self.lead_words
            )
            options = {"grammar": grammar}
        return self.inner(prompt, stop, options=options)
