"""Answer typing: the kind of token a question asks for, and sentence choice and copying that use it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._answer_types import (
    ANSWER_TYPES,
    KNOWN_TYPES,
    LITERAL,
    expected_types,
    head_noun,
    types_in,
)
from clanker_rag._answer._focusing import FocusedRetriever
from clanker_rag._answer._grammars import CopyingBackend, closest_typed, copy_grammar
from clanker_rag._answer._prompts import ANSWER_LABEL
from clanker_rag._stream._blocks import BlockBuilder
from clanker_rag._stream._controller import InjectEvent
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._backends import Recorder
from tests.helpers._gbnf import allows
from tests.helpers._passages import Fixed


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How many workers does it start?", {"number"}),
        ("What port does the server listen on?", {"number"}),
        ("What is the timeout in seconds?", {"number"}),
        ("Which option skips hidden files?", {"flag"}),
        ("What is the largest journal size allowed?", {"number"}),
        ("Which class do the job types extend?", {"identifier"}),
        ("Which function returns the passages?", {"identifier"}),
        ("Which decorator adds the option?", {"identifier"}),
        ("How do I hide the input?", {"identifier", "flag"}),
        ("How do I keep jobs whose owners left?", {"identifier", "flag"}),
        ("How many workers can I start?", {"number"}),
        ("Which exception is raised for a bad path?", {"error"}),
        ("Which file holds the settings?", {"file"}),
        ("Which environment variable sets the key?", {"env"}),
        ("Who maintains the project?", set()),
        ("Why is the cache rebuilt?", set()),
        # A how-to asks for what to write, whatever cue words its task holds.
        ("How do I tell how many jobs were retried?", {"identifier", "flag"}),
        ("How can I change the grace period in seconds?", {"identifier", "flag"}),
        # "caps" before "the" is the verb: the question asks for the key.
        ("Which setting key caps the length of a job name?", {"identifier"}),
        ("Which error codes does it return?", {"number"}),
    ],
)
def test_expected_types(question: str, expected: set[str]) -> None:
    assert expected_types(question) == expected


@pytest.mark.parametrize(
    ("text", "kind", "held"),
    [
        ("listens on port 7341", "number", True),
        ("with k1 and BM25 and v2", "number", False),
        ("pass --no-wait or -q", "flag", True),
        ("a well-known re-run", "flag", False),
        ("raises `ConfigError` here", "error", True),
        ("an Error happened", "error", False),
        ("written to jobs.toml", "file", True),
        ("a marker in `.lumenrc` first", "file", True),
        ("the end. Next one", "file", False),
        ("set LUMEN_API_TOKEN first", "env", True),
        ("set the Key first", "env", False),
        ("derives from `KnowledgeBase`:", "identifier", True),
        ("call retrieve(query) first", "identifier", True),
        ("a Word and an ID here", "identifier", False),
        ("pass keep_going=True", "identifier", True),
        ("the job.attempt variable", "identifier", True),
        ("see example.org/p/lumen for more", "identifier", False),
        ("the end.next sentence", "identifier", True),
        ("a well_known term", "identifier", True),
    ],
)
def test_types_in(text: str, kind: str, held: bool) -> None:
    assert (kind in types_in(text)) == held


@pytest.mark.parametrize(
    ("question", "head"),
    [
        ("What port does the server listen on?", "port"),
        ("What is the largest journal size allowed?", "size"),
        ("Which options skip files?", "option"),
        ("How many workers does it start?", None),
        ("Which job attribute caps the length of a name?", "attribute"),
        ("Which error codes does the daemon send?", "code"),
        ("What file size limit applies?", "size"),
    ],
)
def test_head_noun(question: str, head: str | None) -> None:
    assert head_noun(question) == head


@given(st.text(max_size=80))
def test_types_are_known_and_questions_read_case_and_spacing_blind(text: str) -> None:
    assert types_in(text) <= set(KNOWN_TYPES)
    # The grammar's types: never the focus-only ones (inline code, a stated default).
    assert expected_types(text) <= set(ANSWER_TYPES)
    assert expected_types(text) == expected_types("  " + " ".join(text.upper().split()) + " ")


# Both sentences hold two query terms; only the second holds a number.
TEXT = "Job queues are kept on disk once. The queues hold a backlog of at most 640 jobs."
QUERY = "How long may the backlog of the job queues grow?"


def test_the_sentence_shown_holds_the_expected_type() -> None:
    # Both sentences hold two query terms; only the second holds a number.
    hit = Hit(TEXT, "search.md", 1.0, start=0, end=len(TEXT), start_line=1, end_line=1)
    question = set(Analyzer()(QUERY))
    assert question & set(Analyzer()(TEXT.split(".")[0])) and expected_types(QUERY) == {"number"}
    [typed] = FocusedRetriever(Fixed(hit), budget=200, sentence=True).search(QUERY, 1)
    assert typed.text == "The queues hold a backlog of at most 640 jobs."


def test_hits_whose_sentence_holds_the_type_come_after_the_chosen_one_and_before_the_rest() -> None:
    hits = [
        Hit("Workers read files in parallel.", "a.md", 2.0),
        Hit("Readers are threads.", "b.md", 1.5),
        Hit("It starts workers that read files.", "c.md", 1.0),
        Hit("It starts 4 workers.", "d.md", 0.5),
    ]
    out = FocusedRetriever(Fixed(*hits), budget=200, sentence=True).search("How many workers does it start?", 4)
    assert out[1].source == "d.md"  # d is below the top passages the chooser weighs, and holds a number
    # No type asked for: the ranking stands after the chosen window.
    untyped = FocusedRetriever(Fixed(*hits), budget=200, sentence=True).search("Who reads files?", 4)
    assert [h.source for h in untyped[1:]] == sorted(h.source for h in untyped[1:])


def test_typed_copy_grammar_requires_a_word_of_the_type() -> None:
    row = "| upstream too slow | 504 | `upstream_timeout` |"
    grammar = copy_grammar(row, "Which status?", frozenset({"number"}))
    root = grammar.splitlines()[0]
    assert "typed" in root and root.index("(word") < root.index("typed")
    assert 'typed ::= "504"\n' in grammar
    # No word of the type in the passage: the plain grammar, nothing required.
    assert copy_grammar("no digits here", "Which status?", frozenset({"number"})) == copy_grammar(
        "no digits here", "Which status?"
    )


@pytest.mark.parametrize("typed", [False, True])
def test_copying_backend_sends_the_typed_grammar_when_asked(typed: bool) -> None:
    inner = Recorder()
    block = BlockBuilder().build("context", [Hit("port 7341", "a.md", 1.0)])
    backend = CopyingBackend(inner, "Which port?", typed=typed)
    backend.observe(InjectEvent.of(block, "question", "x"))
    list(backend(f"Question: x{block.text}Question: x\n{ANSWER_LABEL}"))
    [options] = inner.calls
    assert options is not None
    assert ('typed ::= "7341"' in options["grammar"]) == typed


@pytest.mark.parametrize(
    ("passage", "question", "kept"),
    [
        # the clause that holds the question's words: "5 for a full queue"
        (
            "When a job fails its status is: 3 for timeouts, 5 for a full queue, 70 after a crash.",
            "Which status means a full queue?",
            ["5"],
        ),
        # one clause: the number beside the head noun ("--port 7000"), not beside "listens"
        (
            "$ db serve # listens on 127.0.0.1:5432 $ tool serve --db http://127.0.0.1:5432 --port 7000",
            "What port does tool serve listen on?",
            ["7000"],
        ),
        # names of the type are no evidence for each other
        (
            "Every error derives from `BaseError`: `ParseError` (bad input), `DiskError` (full disk).",
            "Which class do the errors derive from?",
            ["`BaseError`:"],
        ),
        # nothing tells them apart: all kept
        ("Sizes 10 and 20 work.", "How many sizes?", ["10", "20"]),
        ("Only 10 works.", "How many?", ["10"]),
        ("No digits.", "How many?", []),
    ],
)
def test_closest_typed_keeps_the_candidates_the_question_points_at(
    passage: str, question: str, kept: list[str]
) -> None:
    assert closest_typed(passage, question, expected_types(question)) == kept


def test_typed_copy_grammar_holds_only_the_closest_candidates() -> None:
    line = "When a job fails its status is: 3 for timeouts, 5 for a full queue, 70 after a crash."
    grammar = copy_grammar(line, "Which status means a full queue?", frozenset({"number"}))
    assert 'typed ::= "5"\n' in grammar
    assert allows(grammar, "word", "70") and not allows(grammar, "typed", "70")  # still a word to copy


@given(
    st.lists(st.sampled_from(["port", "7000", "8080,", "(30", "on", "the", "--port", "x:", "Error", "KnowledgeBase"])),
    st.sampled_from(["What port is it?", "Which class is it?", "How many ports?", "Which option?"]),
)
def test_closest_typed_keeps_some_candidates_and_only_candidates(words: list[str], question: str) -> None:
    passage = " ".join(words)
    expected = expected_types(question)
    candidates = [w for w in passage.split() if expected & types_in(w)]
    kept = closest_typed(passage, question, expected)
    assert set(kept) <= set(candidates)
    assert bool(kept) == bool(candidates)


def test_inline_code_is_a_known_type_a_question_never_expects() -> None:
    assert LITERAL in types_in("`0`")
    assert LITERAL not in expected_types("Which value is `0`?")


def test_closest_typed_skips_a_token_the_question_writes_itself() -> None:
    question = "Apart from .lumenrc, which file does the daemon read?"
    passage = "It reads ``.lumenrc`` and ``.lumenlocal`` from the folder it is started in."
    found = closest_typed(passage, question, expected_types(question))
    assert found and all(".lumenlocal" in word for word in found)
    # When the question's own token is the only one, it stays.
    assert closest_typed("It reads ``.lumenrc`` first.", question, expected_types(question)) == ["``.lumenrc``"]
