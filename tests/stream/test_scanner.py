"""The incremental tag scanner: byte-exact pass-through for any split."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clanker_rag._exceptions import ConfigError
from clanker_rag._stream._scanner import TagScanner, ToolCall
from tests.helpers._profiles import examples

_TAG_START = re.compile(r"<tool[\s>/]", re.IGNORECASE)


def run(pieces: list[str], scanner: TagScanner | None = None) -> tuple[str, list[ToolCall], str]:
    """Feed pieces; return (visible text, calls, text and call tags re-interleaved)."""
    sc = scanner or TagScanner()
    visible: list[str] = []
    calls: list[ToolCall] = []
    rebuilt: list[str] = []
    for piece in [*pieces, None]:
        text, events = sc.feed(piece) if piece is not None else sc.flush()
        visible.append(text)
        pos = 0
        for ev in events:
            rebuilt.append(text[pos : ev.position])
            rebuilt.append(ev.raw)
            pos = ev.position
            calls.append(ev)
        rebuilt.append(text[pos:])
    return "".join(visible), calls, "".join(rebuilt)


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(text[last:p])
        last = p
    pieces.append(text[last:])
    return pieces


# -- generated transcripts ------------------------------------------------------
# Fragments are built once from a fixed seed so each Hypothesis example only
# draws a handful of choices (cheap enough for 10,000 examples); Hypothesis
# still picks the combination, the order and the split points.

_NOISE_ALPHABET = "ab <>/tolTOL=\"'\n.?"
_PAYLOAD_ALPHABET = "abc xyz?.-'\"=>\n"


def _fragments() -> list[tuple[str, str | None, str]]:
    rnd = random.Random(1234)
    out: list[tuple[str, str | None, str]] = []

    def text(alphabet: str, n: int) -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, n)))

    for _ in range(150):  # noise: passes through as is
        s = text(_NOISE_ALPHABET, 12)
        out.append((s, None, s))
    for _ in range(150):  # recognised calls, in many spellings
        quote = rnd.choice(['"', "'", ""])
        ws = lambda: rnd.choice(["", " ", "  ", "\n", "\t"])  # noqa: E731
        name = rnd.choice(["retrieve", "RETRIEVE", "Retrieve"])
        attrs = rnd.sample(['id="3"', "k='5'", "lang=en", "verbose"], rnd.randint(0, 2))
        attrs.insert(rnd.randint(0, len(attrs)), f"name{ws()}={ws()}{quote}{name}{quote}")
        body = text(_PAYLOAD_ALPHABET, 20)
        close = rnd.choice(["</tool>", "</tool >", "</TOOL>", "< / tool\n>"])
        sep = rnd.choice([" ", "  ", "\n", "\t "])
        out.append((f"<tool{sep}{' '.join(attrs)}{ws()}>{body}{close}", body.strip(), ""))
    for _ in range(40):  # other tool names: plain text
        name = rnd.choice(["search", "calc", "retriever", "retrieve2"])
        raw = f'<tool name="{name}">{text(_PAYLOAD_ALPHABET, 12)}</tool>'
        out.append((raw, None, raw))
    return out


FRAGMENTS = _fragments()
UNCLOSED = ["", '<tool name="retrieve">', '<tool name="retrieve">how to', "<tool name='retrieve'>x <"]


@st.composite
def transcript(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=8))
    tail = draw(st.sampled_from(UNCLOSED))  # an unclosed call at the end is released as text
    text = "".join(p[0] for p in parts) + tail
    expected_visible = "".join(p[2] for p in parts) + tail
    queries = [p[1] for p in parts if p[1] is not None]
    tags = sum(1 for p in parts if p[0].startswith("<tool")) + bool(tail)
    # Noise must not accidentally form tags with its neighbours.
    assume(len(_TAG_START.findall(text)) == tags)
    return text, expected_visible, queries


@pytest.mark.slow
@settings(max_examples=examples(10_000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcript(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_split_gives_the_same_text_and_calls(case: tuple[str, str, list[str]], cuts: list[int]) -> None:
    text, expected_visible, queries = case
    visible, calls, rebuilt = run(split_at(text, cuts))
    assert visible == expected_visible
    assert [c.query for c in calls] == queries
    assert all(c.name == "retrieve" for c in calls)
    assert rebuilt == text  # nothing lost, nothing invented, order kept


@settings(max_examples=examples(2_000), deadline=None)
@given(st.text(max_size=40), st.lists(st.integers(min_value=0, max_value=100), max_size=8))
def test_text_without_tags_passes_through_byte_for_byte(text: str, cuts: list[int]) -> None:
    assume(not _TAG_START.search(text))
    visible, calls, _ = run(split_at(text, cuts))
    assert visible == text
    assert calls == []


@settings(max_examples=examples(2_000), deadline=None)
@given(st.lists(st.text(alphabet="ab<tolTOL \n", max_size=6), max_size=10))
def test_holds_back_only_a_possible_tag_prefix(pieces: list[str]) -> None:
    assume(not _TAG_START.search("".join(pieces)))
    sc = TagScanner()
    seen = released = ""
    for piece in pieces:
        seen += piece
        released += sc.feed(piece)[0]
        # The held part is the longest suffix that could still become "<tool".
        held = next(
            (seen[i:] for i in range(max(0, len(seen) - 5), len(seen)) if "<tool".startswith(seen[i:].lower())),
            "",
        )
        assert released + held == seen


# -- a fixed transcript split at every position ---------------------------------

TRANSCRIPT = (
    "Let me check < that. <to be sure> I call "
    '<tool name="retrieve">install steps</tool> then '
    "<tool  id=7 NAME='retrieve'\n>\n  how to configure\n</tool > and "
    '<tool name="search">web</tool> plus <toolbox> and </tool> stray, '
    '<tool name="retrieve" query="attr query"/> end <tool name="retrieve">cut'
)
TRANSCRIPT_VISIBLE = (
    "Let me check < that. <to be sure> I call  then  and "
    '<tool name="search">web</tool> plus <toolbox> and </tool> stray,  end '
    '<tool name="retrieve">cut'
)
TRANSCRIPT_QUERIES = ["install steps", "how to configure", "attr query"]


def test_fixed_transcript_in_one_piece() -> None:
    visible, calls, rebuilt = run([TRANSCRIPT])
    assert visible == TRANSCRIPT_VISIBLE
    assert [c.query for c in calls] == TRANSCRIPT_QUERIES
    assert rebuilt == TRANSCRIPT


@pytest.mark.parametrize("i", range(len(TRANSCRIPT) + 1))
def test_fixed_transcript_split_at_every_position(i: int) -> None:
    visible, calls, rebuilt = run([TRANSCRIPT[:i], TRANSCRIPT[i:]])
    assert visible == TRANSCRIPT_VISIBLE
    assert [c.query for c in calls] == TRANSCRIPT_QUERIES
    assert rebuilt == TRANSCRIPT


def test_fixed_transcript_one_character_at_a_time() -> None:
    visible, calls, _ = run(list(TRANSCRIPT))
    assert visible == TRANSCRIPT_VISIBLE
    assert [c.query for c in calls] == TRANSCRIPT_QUERIES


# -- specific behaviour ----------------------------------------------------------


def test_event_position_marks_where_the_tag_stood() -> None:
    sc = TagScanner()
    text, events = sc.feed('ab<tool name="retrieve">q</tool>cd')
    assert text == "abcd"
    assert [e.position for e in events] == [2]
    assert events[0].attrs["name"] == "retrieve"


def test_registered_handler_names_are_recognised() -> None:
    visible, calls, _ = run(['x <tool name="calc">1+1</tool> y'], TagScanner(["retrieve", "calc"]))
    assert visible == "x  y"
    assert [(c.name, c.query) for c in calls] == [("calc", "1+1")]


def test_json_payload_gives_its_query_field() -> None:
    _, calls, _ = run(['<tool name="retrieve">{"query": "kv cache"}</tool>'])
    assert calls[0].query == "kv cache"


def test_payload_over_the_cap_is_released_as_text() -> None:
    sc = TagScanner(max_payload=10)
    ok = '<tool name="retrieve">' + "a" * 10 + "</tool>"
    too_long = '<tool name="retrieve">' + "b" * 11 + "</tool>"
    visible, calls, _ = run([ok, too_long[:15], too_long[15:]], sc)
    assert [c.query for c in calls] == ["a" * 10]
    assert visible == too_long


def test_payload_cap_is_the_same_for_any_split() -> None:
    text = 'x<tool name="retrieve">' + "c" * 30 + '</tool><tool name="retrieve">ok</tool>'
    for i in range(len(text) + 1):
        visible, calls, rebuilt = run([text[:i], text[i:]], TagScanner(max_payload=20))
        assert visible == 'x<tool name="retrieve">' + "c" * 30 + "</tool>"
        assert [c.query for c in calls] == ["ok"]
        assert rebuilt == text


def test_open_tag_without_end_is_released_after_the_cap() -> None:
    sc = TagScanner(max_open_tag=16)
    text, events = sc.feed("<tool " + "z" * 20)
    assert text == "<tool " + "z" * 20
    assert not events and not sc.holding


def test_unclosed_call_at_end_of_stream() -> None:
    sc = TagScanner()
    assert sc.feed('hi <tool name="retrieve">how to') == ("hi ", [])
    assert sc.in_call
    call = sc.take_open_call()
    assert call is not None and call.query == "how to" and not call.closed
    assert call.raw == '<tool name="retrieve">how to'
    assert sc.flush() == ("", ())


def test_flush_releases_unclosed_tag_as_text() -> None:
    sc = TagScanner()
    sc.feed('<tool name="retrieve">part')
    assert sc.flush()[0] == '<tool name="retrieve">part'
    assert sc.take_open_call() is None


def test_bad_configuration_is_rejected() -> None:
    with pytest.raises(ConfigError):
        TagScanner(max_payload=0)
    with pytest.raises(ConfigError):
        TagScanner(max_open_tag=3)
