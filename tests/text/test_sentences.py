"""The incremental sentence splitter: whole questions about code, the same sentences for any split."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._text._sentences import (
    SentenceSplitter,
    is_question,
    last_question,
    last_question_start,
    split_sentences,
)
from tests.helpers._profiles import examples


def sentences(text: str) -> list[str]:
    return [s.strip() for s in split_sentences(text) if s.strip()]


def fed(pieces: list[str]) -> tuple[str, list[int]]:
    """Feed ``pieces`` then flush; the text released and its sentence ends as offsets into it."""
    splitter = SentenceSplitter()
    text, ends = "", []
    for piece in pieces:
        released, at = splitter.feed(piece)
        ends += [len(text) + a for a in at]
        text += released
    released, at = splitter.flush()
    return text + released, ends + [len(text) + a for a in at]


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    return [text[a:b] for a, b in pairwise(points)]


# -- what ends a sentence -------------------------------------------------------------------

CASES = [
    ("Q: What does json.tool do?\nA:", ["Q: What does json.tool do?", "A:"]),
    ("How do I call os.path.join on Windows? Thanks.", ["How do I call os.path.join on Windows?", "Thanks."]),
    ("Why does e.g. the parser fail?", ["Why does e.g. the parser fail?"]),
    ("Use i.e. mode. Then stop.", ["Use i.e. mode.", "Then stop."]),
    ("Compare Flask vs. Django. Then pick.", ["Compare Flask vs. Django.", "Then pick."]),
    ("Ask Dr. Smith and Mr. Jones. They know.", ["Ask Dr. Smith and Mr. Jones.", "They know."]),
    ("Edit setup.py. Then run it.", ["Edit setup.py.", "Then run it."]),
    ("Is 3.10.2 newer than 1.5? Yes.", ["Is 3.10.2 newer than 1.5?", "Yes."]),
    ("See https://example.org/a.html?q=1. It helps.", ["See https://example.org/a.html?q=1.", "It helps."]),
    ("It supports JSON, YAML, etc. The rest is plain.", ["It supports JSON, YAML, etc.", "The rest is plain."]),
    ("Wait... Then what? Nothing.", ["Wait... Then what?", "Nothing."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("(Really?) Yes!", ["(Really?)", "Yes!"]),
    ("Is a ? b : c valid? Yes.", ["Is a ? b : c valid?", "Yes."]),
    ("1. Install it\n2. Run it", ["1. Install it", "2. Run it"]),
    ("How do I call\nos.path.join here?", ["How do I call\nos.path.join here?"]),
    ("Steps:\n- build\n- test", ["Steps:", "- build", "- test"]),
    ("no terminator here\n\nnew paragraph", ["no terminator here", "new paragraph"]),
    ("Done.\nnext line", ["Done.", "next line"]),
    ("why? because", ["why? because"]),
    ("no stop here  \t\n- item  \n\n  next", ["no stop here", "- item", "next"]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_sentence_ends(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_every_split_point_gives_the_same_sentences(text: str, expected: list[str]) -> None:
    whole = split_sentences(text)
    assert "".join(whole) == text
    for cut in range(len(text) + 1):
        released, ends = fed([text[:cut], text[cut:]])
        assert released == text
        bounds = [0, *ends, len(text)]
        assert [text[a:b] for a, b in pairwise(bounds) if b > a] == whole, cut
    # One character at a time: every split at once.
    assert fed(list(text)) == fed([text])


def test_only_whitespace_after_a_terminator_is_held() -> None:
    splitter = SentenceSplitter()
    assert splitter.feed("It is json.") == ("It is json.", [])
    assert splitter.feed("tool") == ("tool", [])  # json.tool: no sentence ended
    assert splitter.feed(". ") == (".", [])  # the space waits for what follows it
    assert splitter.feed("  ") == ("", [])
    assert splitter.feed("Next") == ("   Next", [0])
    assert splitter.flush() == ("", [])


def test_whitespace_where_no_sentence_can_end_is_not_held() -> None:
    splitter = SentenceSplitter()
    assert splitter.feed("one two ") == ("one two ", [])  # streamed as it comes
    assert splitter.feed("e.g. ") == ("e.g. ", [])
    assert splitter.feed("x  \n") == ("x  ", [])  # a line break may end it: held from there
    assert splitter.feed("Next") == ("\nNext", [0])


def test_flush_ends_a_sentence_only_after_whitespace_following_a_terminator() -> None:
    splitter = SentenceSplitter()
    splitter.feed("Why? ")
    assert splitter.flush() == (" ", [0])
    splitter.feed("Why?")
    assert splitter.flush() == ("", [])  # the text's own end is the caller's to judge
    assert splitter.feed("e.g. ") == ("e.g. ", [])
    assert splitter.flush() == ("", [])
    splitter.feed("a line\n")
    assert splitter.flush() == ("\n", [0])
    # flush starts afresh: the whitespace first fed is not after a sentence.
    assert splitter.feed("  Hi") == ("  Hi", [])


def test_is_question_looks_past_closing_quotes_and_brackets() -> None:
    assert is_question("Why?") and is_question('He asked "why?"') and is_question("(really?) ")
    assert not is_question("Yes.") and not is_question("a?b")


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("Intro. How do I   install it? Thanks.", "How do I install it?"),
        ("Q: What does json.tool do?\nA:", "Q: What does json.tool do?"),
        (
            "<start_of_turn>user\nWhat does json.tool do?<end_of_turn>\n<start_of_turn>model\n",
            "What does json.tool do?",
        ),
        ("how does os.path.join work? thanks", "how does os.path.join work?"),
        ("Open https://x.org/?q=1 and a ? b", None),
        ("no question here", None),
    ],
)
def test_last_question_is_whole(text: str, question: str | None) -> None:
    assert last_question(text) == question


def test_last_question_start_is_where_its_sentence_begins() -> None:
    text = "Hi. How do I call\nos.path.join? Thanks.\nA:"
    assert last_question_start(text) == text.index("How")
    assert last_question_start("no question here") is None


# -- generated questions about code ---------------------------------------------------------

_NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,7}", fullmatch=True)
_WORD = st.sampled_from(["the", "parser", "call", "fail", "work", "on", "with", "in", "config", "return", "and"])
_CAPITAL = st.sampled_from(["Windows", "Django", "Python", "NumPy", "Linux", "JSON", "I"])
_DOTTED = st.lists(st.one_of(_NAME, st.sampled_from(["Path", "Image", "DataFrame"])), min_size=2, max_size=4).map(
    ".".join
)
_VERSION = st.lists(st.integers(0, 99).map(str), min_size=2, max_size=4).map(".".join)
_FILE = st.tuples(_NAME, st.sampled_from(["py", "toml", "cfg", "md", "tar.gz"])).map(".".join)
_URL = st.tuples(_NAME, _NAME, st.sampled_from(["", "?q=1", ".html", "/"])).map(
    lambda t: f"https://{t[0]}.org/{t[1]}{t[2]}"
)
_NUMBER = st.tuples(st.integers(0, 999), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]}")
# An abbreviation that never ends a sentence may stand before anything; "etc." and an ellipsis
# before a lowercase word (before a capital they do end one, by design).
_ABBREVIATED = st.one_of(
    st.tuples(st.sampled_from(["e.g.", "i.e.", "vs.", "cf.", "Dr.", "Mr.", "Mrs."]), st.one_of(_WORD, _CAPITAL)),
    st.tuples(st.sampled_from(["etc.", "so...", "\u2026", "and so on..."]), _WORD),
).map(" ".join)
_TOKEN = st.one_of(_WORD, _WORD, _CAPITAL, _DOTTED, _VERSION, _FILE, _URL, _NUMBER, _ABBREVIATED)
QUESTIONS = st.tuples(
    st.sampled_from(["What does", "How do I use", "Why does", "Where is", "Can", "Is"]),
    st.lists(_TOKEN, min_size=1, max_size=6).map(" ".join),
).map(lambda t: f"{t[0]} {t[1]}?")
_BEFORE = st.sampled_from(["", "Some context first. ", "Read setup.py first.\n", "Hi!\n\n", "Notes: see v1.2. "])
_AFTER = st.sampled_from(["", "\nA:", " Thanks.", "\n\nAnswer briefly.", ' "Quoted." ok'])


@settings(max_examples=examples(2000))
@given(QUESTIONS, _BEFORE, _AFTER, st.lists(st.integers(0, 10_000), max_size=6))
def test_a_generated_question_comes_out_whole_for_any_split(
    question: str, before: str, after: str, cuts: list[int]
) -> None:
    text = before + question + after
    assert question in sentences(text)
    assert last_question(text) == question
    assert last_question_start(text) == len(before)
    assert fed(split_at(text, cuts)) == fed([text])
