"""Constrained copying: a base model's answer may only use words of its passage.

A 270M base model given the right line still garbles it about one time in
three: it writes "5M" for "5 MiB", a run of zeros, or a word from the
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

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._stream._controller import InjectEvent
from .._text._analysis import Analyzer
from ._answer_types import ERROR, IDENT, expected_types, head_noun, types_in
from ._prompts import ANSWER_LABEL, SEARCH_LABEL

__all__ = ["TOOL_GRAMMAR", "CopyingBackend", "closest_typed", "copy_grammar", "name_fit", "one_of"]

# After the search label the model may only write one closed retrieve call:
# left free, it sometimes writes a source line and never closes the tag.
TOOL_GRAMMAR = 'root ::= " <tool name=\\"retrieve\\">" [^<>\\n]{1,100} "</tool>"\n'

# What a name asked for by its head noun looks like: the Sphinx roles that mark such a name
# (``:class:`X```), and its shape in code (a class is CamelCase, a function is called).
_CLASS_HEADS = frozenset({"class", "loader", "middleware", "converter", "extension", "exception", "error", "warning"})
_FUNCTION_HEADS = frozenset({"function", "method", "decorator", "helper", "filter", "signal"})
_VALUE_HEADS = frozenset({"parameter", "setting", "attribute", "key", "keyword", "argument", "option", "flag"})
_ROLE_HEADS = {
    "class": _CLASS_HEADS,
    "exc": _CLASS_HEADS,
    "func": _FUNCTION_HEADS,
    "meth": _FUNCTION_HEADS,
    "deco": _FUNCTION_HEADS,
    "attr": _VALUE_HEADS,
    "data": _VALUE_HEADS,
    "option": _VALUE_HEADS,
    "envvar": _VALUE_HEADS,
}
# Roles that link to a page or a glossary entry: the word names a document, never the thing asked for.
_LINK_ROLES = frozenset({"doc", "ref", "download", "term", "numref"})
_ROLE_RE = re.compile(r":(?:py:)?([a-z]+):`")
_CAMEL_RE = re.compile(r"\b[A-Z][a-z0-9]+[A-Z]\w*")
_CALL_RE = re.compile(r"\b[A-Za-z_]\w*\(")
_SNAKE_RE = re.compile(r"\b[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9]\b")
_KEYWORD_RE = re.compile(r"\b[a-z_]\w*=")


def _role(word: str) -> str | None:
    found = _ROLE_RE.search(word)
    return found.group(1) if found else None


def name_fit(word: str, head: str | None) -> int:
    """How well ``word`` looks like the name a question about a ``head`` noun asks for: 0, 1 or 2.

    0: a link to a page (``:doc:``, ``:ref:``, a path), markup or a quoted
    string: words that name a document or hold a value, not a name.  2: its
    Sphinx role or its shape is that of the head noun's kind (a ``class`` is
    ``:class:`` or CamelCase, a ``function`` is ``:func:``, called or
    snake_case, a ``parameter`` is ``:attr:``, snake_case or ``name=``).
    1: nothing tells.
    """
    role = _role(word)
    bare = word.strip("`'\".,;:()[]")
    if role in _LINK_ROLES or "/" in word or word.startswith(("<", "'", '"')) or '="' in word:
        return 0
    if head is None:
        return 1
    if role is not None:
        return 2 if head in _ROLE_HEADS.get(role, frozenset()) else 1
    if head in _CLASS_HEADS:
        return 2 if _CAMEL_RE.search(bare) else 1
    if head in _FUNCTION_HEADS:
        return 2 if _CALL_RE.search(word) or (_SNAKE_RE.search(bare) and not _KEYWORD_RE.search(word)) else 1
    if head in _VALUE_HEADS:
        return 2 if _SNAKE_RE.search(bare) or _KEYWORD_RE.search(word) else 1
    return 1


def _literal(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def one_of(words: Sequence[str]) -> str:
    """A GBNF expression matching exactly ``words`` (non-empty strings), as a prefix tree.

    ``"port" | "ports" | "post"`` is written ``"po" ("rt" ("s")? | "st")``: the
    same strings, but llama.cpp keeps one parse stack per open alternative and
    checks every token of the vocabulary against each, so a flat list of a
    passage's few hundred words costs a few hundred checks per token where the
    tree costs one per distinct next character.
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


def _bare(word: str) -> str:
    """``word`` without its quoting, markup and surrounding punctuation, lower case."""
    return word.strip("`'\".,;:!?()[]{}*").lower()


def _forms(word: str) -> tuple[str, ...]:
    """The ways an answer may write ``word``: as written, and without its trailing punctuation."""
    bare = word.rstrip(".,;:!?|)")
    return (word, bare) if bare else (word,)


def _typed(word: str, expected: frozenset[str]) -> bool:
    """Whether ``word`` is a token of an ``expected`` type.  A name a Sphinx role marks is a name
    whatever its shape (``:class:`Pool```), and an exception one an error name (``:exc:`JobLost```)."""
    if expected & types_in(word):
        return True
    role = _role(word)
    return (ERROR in expected and role == "exc") or (IDENT in expected and role in _ROLE_HEADS)


def closest_typed(
    passage: str, question: str, expected: frozenset[str], analyzer: Callable[[str], list[str]] | None = None
) -> list[str]:
    """The words of ``passage`` of an ``expected`` type that the question's words point at.

    One line often holds several tokens of the asked-for type ("3 for
    timeouts, 4 for refusals"; "the upstream listens on 9000 ... --port
    7000"), and several injected passages more.  Asked for a name, the
    candidates kept first are those that look like the name asked for
    (:func:`name_fit`: not a page link, and of the head noun's kind when it
    says one).  Then those with the most distinct question terms in their
    clause (the words between ``,;:.`` or brackets) and in their own name
    (documentation names a thing after what it does: a reader of records
    from a list is a ``ListReader``); among those, the ones nearest a word
    holding the question's head noun
    (:func:`~clanker_rag._answer._answer_types.head_noun`: "port"), when the
    passage says it, and at equal distance the ones after it.  Other words of
    the type never count as evidence for a candidate (a list of error names
    would vouch for each other).  Ties keep every candidate.
    """
    words = passage.split()
    typed = [i for i, word in enumerate(words) if _typed(word, expected)]
    # A token the question writes itself is what it asks about, not the answer ("apart
    # from ``a.cfg``, which file ..."): the others go first, when there are others.
    asked = {bare for word in question.split() if (bare := _bare(word))}
    new = [i for i in typed if _bare(words[i]) not in asked]
    typed = new or typed
    if len(typed) <= 1:
        return [words[i] for i in typed]
    analyze = analyzer or Analyzer()
    candidates = set(typed)
    head = head_noun(question)
    if IDENT in expected or ERROR in expected:
        fit = {i: name_fit(words[i], head) for i in typed}
        typed = [i for i in typed if fit[i] == max(fit.values())]
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
    evidence = {i: found[clause[i]] | (set(analyze(words[i])) & terms) for i in typed}
    most = max(len(evidence[i]) for i in typed)
    typed = [i for i in typed if len(evidence[i]) == most]
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
    typed_from: str | None = None,
    *,
    max_words: int = 24,
    lead_words: int = 8,
) -> str:
    """A GBNF grammar: one line of up to ``max_words`` words taken from ``passage`` (or ``question`` if it has none).

    Each word is allowed as written and without its trailing punctuation
    (so "8765." may end a sentence and "8765" sit inside one).  With
    ``expected`` answer types (:func:`~._answer_types.expected_types` of the
    question), an answer must hold, within its first ``lead_words`` + 1 words,
    a word of such a type from ``typed_from`` (default: ``passage``) when it
    has one, and of several one nearest the question's words
    (:func:`closest_typed`).  Every word the grammar allows comes from the
    text, and the line ends within ``max_words`` words: the answer always
    makes progress and always ends.
    """
    words: dict[str, None] = {}
    # The question's own words only when the passage has none: free to use them, a small model
    # echoes the question instead of copying the answer.
    for word in (passage if passage.split() else question).split():
        words.update(dict.fromkeys(_forms(word)))
    if not words:
        return 'root ::= [^\\n]* "\\n"'
    alternatives = one_of(list(words))
    source = passage if typed_from is None else typed_from
    typed = closest_typed(source, question, expected, analyzer) if expected else []
    if not typed:
        return f'root ::= " " word (" " word){{0,{max_words - 1}}} "\\n"\nword ::= {alternatives}\n'
    forms = dict.fromkeys(f for w in typed for f in _forms(w))
    return (
        f'root ::= " " (word " "){{0,{lead_words}}} typed (" " word){{0,{max_words - lead_words - 1}}} "\\n"\n'
        f"word ::= {alternatives}\ntyped ::= {one_of(list(forms))}\n"
    )


class CopyingBackend:
    """A llama.cpp backend whose answers after a block copy words of the turn's passages (see the module doc).

    Pass :meth:`observe` to the controller as ``on_block``: each injected
    block's passages, as shown, become words an answer may use.  ``typed``
    also makes an answer hold a word of the type the question asks for, from
    the earliest passage that has one (passages come best first).
    ``inner`` is called as ``inner(prompt, stop, options=...)``: the
    :class:`~clanker_rag.backends.LlamaCppBackend` signature.
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
        self.expected = expected_types(question) if typed else frozenset()
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
            found = (p for p in self.passages if closest_typed(p, self.question, self.expected, self.analyzer))
            typed_from = next(found, None) if self.expected else None
            grammar = copy_grammar(
                "\n".join(self.passages), self.question, self.expected, self.analyzer, typed_from,
                max_words=self.max_words, lead_words=self.lead_words,
            )  # fmt: skip
            options = {"grammar": grammar}
        return self.inner(prompt, stop, options=options)
