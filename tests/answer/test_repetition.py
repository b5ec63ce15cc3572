"""An answer that repeats itself is stopped, and its generation closed."""

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._answer._ask import AnswerSettings, answer_text
from clanker_rag._answer._repetition import PHRASE_WORDS, REPEATS, loops_at_end, phrase_repeats_at_end, repeats_at_end
from clanker_rag._stream._controller import StreamEvent, TextEvent

# The answer_text default: past where the copy grammar may still owe the asked-for word.
LOOP_AFTER_WORDS = AnswerSettings().lead_words + 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096 | 4096 | 4096 | 4096 | ", True),
        ("4096 | 4096 | 4096 | ", False),
        ("BM25 is and BM25 is and BM25 is and BM25 is and BM25 is and", True),
        ("BM25 is and BM25 is and BM25 is and BM25 is and", False),  # the first copy lacks its space
        ("hahahaha", True),
        ("very, very, very good", False),
        ("...........", False),  # no letter or digit: an ellipsis or a rule, not a loop
        ("| | | | | |", False),
        ("The proxy listens on port 7341 by default.", False),
        ("", False),
        ("x" * 3, False),
        ("x" * 4, True),
    ],
)
def test_repeats_at_end(text: str, expected: bool) -> None:
    assert repeats_at_end(text) is expected


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.text(min_size=1, max_size=20).filter(lambda u: any(c.isalnum() for c in u)))
def test_a_piece_written_repeats_times_is_found_and_fewer_is_not_needed(prefix: str, unit: str) -> None:
    assert repeats_at_end(prefix + unit * REPEATS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the tool reads the file from the root then reads the file from the root then ", True),
        ("the tool reads the file from the root then reads the file from the ro", False),  # a word unfinished
        ("one two three four one two three four ", False),  # four words twice: not yet
        ("one two three four five one two three four five ", True),
        ("one two three four five one two three four six ", False),
        ("it is what it is, and it is what it is. ", False),  # the punctuation differs
        ("Pass --port to change the port, or --host to change the host. ", False),
        ("", False),
    ],
)
def test_phrase_repeats_at_end(text: str, expected: bool) -> None:
    assert phrase_repeats_at_end(text) is expected


@given(
    st.lists(st.sampled_from(["a", "b", "port", "7341", "--x", "the"]), max_size=8),
    st.lists(st.sampled_from(["a", "b", "port", "7341", "--x", "the"]), min_size=PHRASE_WORDS, max_size=12),
)
def test_any_phrase_of_enough_words_written_twice_is_a_loop(prefix: list[str], phrase: list[str]) -> None:
    text = " ".join(prefix + phrase + phrase) + " "
    assert phrase_repeats_at_end(text) and loops_at_end(text)
    # The same without the word being written is not judged yet.
    assert phrase_repeats_at_end(text[:-2]) == phrase_repeats_at_end(" ".join(prefix + phrase + phrase[:-1]) + " ")


def test_a_clause_written_over_and_over_stops_after_its_second_copy() -> None:
    clause = " the runner starts the app with the file that"
    source = Source(["Answer: It", *[f" {word}" for word in clause.split()] * 30])
    out = visible(answer_text(iter(source)))
    assert out.count("runner") == 2
    assert source.sent < 2 * len(clause.split()) + 4
    assert source.closed


class Source:
    """Events from a list; records whether the consumer closed it."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.sent = 0
        self.closed = False

    def __iter__(self) -> Iterator[StreamEvent]:
        try:
            for text in self.texts:
                self.sent += 1
                yield TextEvent(text)
        finally:
            self.closed = True


def visible(events: Iterator[StreamEvent]) -> str:
    return "".join(ev.text for ev in events if isinstance(ev, TextEvent))


def test_a_looping_answer_stops_and_closes_the_generation() -> None:
    source = Source(["Answer: The budget is 4096", *([" | 4096"] * 200)])
    gen = iter(source)
    out = visible(answer_text(gen))
    assert out.startswith("The budget is 4096 | 4096")
    assert repeats_at_end(out)
    assert source.sent < 15  # not the 200 copies
    assert source.closed


def test_a_loop_within_the_typed_words_lead_is_left_to_reach_it() -> None:
    # The typed copying grammar may still owe the asked-for word (here 418)
    # as the word after LEAD_WORDS: a loop before it is not cut.
    cell = " `queue_full` |"
    texts = ["Answer:", *([cell] * (LOOP_AFTER_WORDS // 2)), " 418", " |", *([cell] * 100)]
    out = visible(answer_text(iter(Source(texts))))
    assert "418" in out
    assert len(out) < len(cell) * 20


LOOPING = "Answer: The limit is 4096 | 4096 | 4096 | 4096 | 4096 | 4096 | 4096 | 4096"
PLAIN = "Answer: The proxy listens on port 7341 by default, see 7341 and 7341."


@pytest.mark.parametrize("cut", range(1, len(LOOPING)))
def test_split_anywhere_a_loop_is_cut_as_soon_as_it_exists(cut: int) -> None:
    # One event up to the cut, then one character per event: the answer ends
    # with the event that completes the loop, or with the first event when the
    # loop is already complete in it.
    answer = LOOPING[len("Answer: ") :]
    first_loop = next(
        i for i in range(len(answer) + 1) if loops_at_end(answer[:i]) and len(answer[:i].split()) > LOOP_AFTER_WORDS
    )
    source = Source([LOOPING[:cut], *LOOPING[cut:]])
    out = visible(answer_text(iter(source))).lstrip(" ")
    assert out == answer[: max(first_loop, cut - len("Answer: "))]
    assert source.closed


@pytest.mark.parametrize("cut", range(1, len(PLAIN)))
def test_split_anywhere_an_answer_without_a_loop_passes_whole(cut: int) -> None:
    source = Source([PLAIN[:cut], PLAIN[cut:]])
    # (A cut right after the label leaves the space that followed it.)
    assert visible(answer_text(iter(source))).lstrip(" ") == PLAIN[len("Answer: ") :]
