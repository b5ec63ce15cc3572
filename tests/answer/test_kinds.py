"""What a question asks for, which text holds it, and the copying grammar that makes an answer hold it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._grammars import CopyingBackend, copy_grammar, one_of, typed_words
from clanker_rag._answer._kinds import code_names, has_number, question_kinds
from clanker_rag._answer._prompts import ANSWER_LABEL
from clanker_rag._stream._blocks import BlockBuilder
from clanker_rag._stream._controller import InjectEvent
from clanker_rag._types import Hit
from tests.helpers._backends import Recorder
from tests.helpers._gbnf import allows, regex


@pytest.mark.parametrize(
    ("question", "kinds"),
    [
        ("How many workers does it start?", {"number"}),
        ("What port does the server listen on?", {"number"}),
        ("What is the timeout in seconds?", {"number"}),
        ("Which option skips hidden files?", {"flag", "name"}),
        ("Which class do the job types extend?", {"name"}),
        ("How do I hide the input?", {"howto", "flag", "name"}),
        ("What is the default codec?", {"default"}),
        ("Which codec does it pick if none is given?", {"name", "default"}),
        ("What does the daemon do?", set()),
        ("  HOW   MANY   workers?", {"number"}),
    ],
)
def test_question_kinds(question: str, kinds: set[str]) -> None:
    assert question_kinds(question) == kinds


def test_code_names_are_literals_and_identifiers_but_not_paths() -> None:
    names = code_names(
        "Use ``make_job`` or `JobQueue`; see ../guide/jobs_page for more, or call run_all() with LUMEN_JOBS."
    )
    assert {"make_job", "JobQueue", "run_all(", "LUMEN_JOBS"} <= set(names)
    assert not any("guide" in name for name in names)
    assert code_names("plain words only") == []


@pytest.mark.parametrize(
    ("passage", "question", "kept"),
    [
        # the number beside the question's words ("--port 7000"), at equal distance the one after them
        ("$ db serve listens on 5432 $ tool serve --db x --port 7000", "What port does tool serve use?", ["7000"]),
        ("When a job fails: 3 for timeouts, 5 for full queues, 70 after crashes.", "How many for full queues?", ["5"]),
        ("Only 10 works.", "How many?", ["10"]),
        ("No digits.", "How many?", []),
        # a token the question writes itself is what it asks about, unless it is the only one
        ("It reads --conf and --local from the folder.", "Besides --conf, which option is read?", ["--local"]),
        ("It reads --conf first.", "Besides --conf, which option is read?", ["--conf"]),
    ],
)
def test_typed_words_are_the_asked_for_kind_the_question_points_at(
    passage: str, question: str, kept: list[str]
) -> None:
    assert typed_words(passage, question) == kept


@given(
    st.lists(st.sampled_from(["port", "7000", "8080,", "(30", "on", "the", "--port", "x:", "KnowledgeBase", "a_b"])),
    st.sampled_from(["What port is it?", "Which class is it?", "How many ports?", "Which option?", "Why?"]),
)
def test_typed_words_keep_some_words_of_the_kind_and_only_those(words: list[str], question: str) -> None:
    kinds = question_kinds(question)
    of_kind = {
        w
        for w in words
        if ("number" in kinds and any(c.isdigit() for c in w))
        or ("flag" in kinds and w.startswith("-"))
        or ("name" in kinds and code_names(w))
    }
    kept = typed_words(" ".join(words), question)
    assert set(kept) <= of_kind
    assert bool(kept) == bool(of_kind)


def test_a_typed_grammar_requires_a_typed_word_within_the_lead_and_still_allows_the_others() -> None:
    line = "When a job fails: 3 for timeouts, 5 for full queues, 70 after crashes."
    grammar = copy_grammar(line, "How many for full queues?", ["5"], max_words=6, lead_words=2)
    root = grammar.splitlines()[0]
    assert root == 'root ::= " " (word " "){0,2} typed (" " word){0,3} "\\n"'
    assert allows(grammar, "typed", "5") and not allows(grammar, "typed", "70")
    assert allows(grammar, "word", "70")
    assert copy_grammar("no digits", "How many?", []) == copy_grammar("no digits", "How many?")


@pytest.mark.parametrize("typed", [False, True])
def test_the_copying_backend_sends_the_typed_grammar_when_asked(typed: bool) -> None:
    inner = Recorder()
    block = BlockBuilder().build("context", [Hit("port 7341", "a.md", 1.0)])
    backend = CopyingBackend(inner, "Which port?", typed=typed)
    backend.observe(InjectEvent.of(block, "question", "x"))
    list(backend(f"Question: x{block.text}Question: x\n{ANSWER_LABEL}"))
    [options] = inner.calls
    assert options is not None
    assert ('typed ::= "7341"' in options["grammar"]) == typed


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


def test_a_manual_reference_is_neither_a_number_nor_a_name() -> None:
    assert not has_number("See flock(2) and GLOW(1) for details.")
    assert has_number("It retries 3 times (see flock(2)).")
    assert code_names("See flock(2) for details.") == []
    assert code_names("Call flock() first.") == ["flock("]
