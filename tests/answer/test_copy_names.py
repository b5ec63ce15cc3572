"""The copying grammar's choice of the name an answer must hold, among the injected passages' words."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._answer_types import expected_types, types_in
from clanker_rag._answer._grammars import closest_typed, copy_grammar, name_fit, one_of
from tests.helpers._gbnf import allows, regex


@pytest.mark.parametrize(
    ("passage", "question", "kept"),
    [
        # a link to a page names a document, even one whose path holds every question word
        (
            "See :doc:`guide/retry_policy` for retries; the RetryPolicy class sets them.",
            "Which class sets the retry policy?",
            ["RetryPolicy"],
        ),
        # a name holding the question's words: documentation names a thing after what it does
        (
            ".. autoclass:: lumen.ZipLoader .. autoclass:: lumen.MapLoader .. autoclass:: lumen.WebLoader",
            "Which loader reads templates from a map?",
            ["lumen.MapLoader"],
        ),
        # asked for a function: the call, not the script's file name in the same clause
        (
            "Write a small `serve.py` file that calls start_server(app) to run the server.",
            "Which function runs the server?",
            ["start_server(app)"],
        ),
        # asked for a parameter: the snake_case keyword, not the class around it
        (
            "Pass Lumen(retry_limit=3) to the client class to retry.",
            "Which parameter of the client sets how often to retry?",
            ["Lumen(retry_limit=3)"],
        ),
        # an exception marked by its role counts whatever its name, and its clause decides
        (
            "A missing route raises :exc:`Missing`, a bad method raises :exc:`BadVerb`.",
            "Which exception is raised for a missing route?",
            [":exc:`Missing`,"],
        ),
        # asked for a class, the role says which name is one
        (
            "Call :func:`make_pool` to get a :class:`Pool` of workers.",
            "Which class holds the workers?",
            [":class:`Pool`"],
        ),
    ],
)
def test_the_name_kept_is_the_one_asked_for(passage: str, question: str, kept: list[str]) -> None:
    assert closest_typed(passage, question, expected_types(question)) == kept


def test_the_typed_grammar_requires_the_name_asked_for_and_still_allows_the_others() -> None:
    passage = "Write a small `serve.py` file that calls start_server(app) to run the server."
    grammar = copy_grammar(
        passage, "Which function runs the server?", expected_types("Which function runs the server?")
    )
    assert allows(grammar, "typed", "start_server(app)") and not allows(grammar, "typed", "`serve.py`")
    assert allows(grammar, "word", "`serve.py`") and allows(grammar, "word", "server.")


@pytest.mark.parametrize(
    ("word", "head", "fit"),
    [
        (":doc:`../guide/pool`", "class", 0),
        (":ref:`pools`", None, 0),
        ("'sidebar.html'", "class", 0),
        ('href="style.css"', None, 0),
        ("Pool", "class", 1),  # one hump: not CamelCase
        ("WorkerPool", "class", 2),
        ("WorkerPool", "function", 1),
        ("make_pool(", "function", 2),
        ("make_pool", "function", 2),
        ("size=4", "function", 1),
        ("size=4", "parameter", 2),
        (":meth:`Pool.close`", "method", 2),
        (":meth:`Pool.close`", "class", 1),
        ("WorkerPool", None, 1),
    ],
)
def test_name_fit(word: str, head: str | None, fit: int) -> None:
    assert name_fit(word, head) == fit


@given(
    st.lists(
        st.sampled_from(
            [":doc:`a/b`", ":exc:`Gone`", "Pool,", "WorkerPool", "make_pool(", "size=4", "the", "pool", "x.py", "("]
        )
    ),
    st.sampled_from(["Which class is it?", "Which function makes it?", "Which exception is raised?", "How do I x?"]),
)
def test_closest_typed_keeps_some_names_and_only_names(words: list[str], question: str) -> None:
    passage = " ".join(words)
    expected = expected_types(question)
    roles = {"error", "identifier"} & expected
    named = {w for w in words if expected & types_in(w) or (roles and w.startswith(":exc:"))}
    kept = closest_typed(passage, question, expected)
    assert set(kept) <= named
    assert bool(kept) == bool(named)


WORDS = st.text(alphabet='ab."\\`:(-', min_size=1, max_size=6)


@given(st.lists(WORDS, min_size=1, max_size=12), st.lists(WORDS, max_size=12))
def test_one_of_matches_exactly_its_words(words: list[str], others: list[str]) -> None:
    pattern = re.compile(regex(one_of(words)))
    for word in words:
        assert pattern.fullmatch(word), (word, one_of(words))
    for other in others:
        assert bool(pattern.fullmatch(other)) == (other in words), (other, one_of(words))


def test_one_of_shares_prefixes() -> None:
    assert one_of(["port", "ports", "post"]) == '"po" ("rt" ("s")? | "st")'
    assert one_of(["7341.", "7341"]) == '"7341" (".")?'
    assert one_of(['say "hi"']) == '"say \\"hi\\""'
