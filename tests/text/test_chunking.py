import re
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError
from clanker_rag._text._analysis import find_words
from clanker_rag._text._chunking import Chunker


def words_of(text):
    return re.findall(r"\w+", text)


def test_exact_slices_offsets_and_lines():
    text = "\n".join(f"Line {i} has some words in it." for i in range(100))
    spans = Chunker(20, 10).split(text)
    assert len(spans) > 5
    for span in spans:
        piece = text[span.start : span.end]
        assert piece.strip()
        assert span.start_line == text.count("\n", 0, span.start) + 1
        assert span.end_line == text.count("\n", 0, span.end - 1) + 1
    assert spans[0].start == 0 and spans[-1].end == len(text)


def test_windows_overlap_and_cover_every_word():
    text = " ".join(f"w{i}" for i in range(1000))
    spans = Chunker(100, 50, slack=0).split(text)
    covered = set()
    for span in spans:
        covered.update(words_of(text[span.start : span.end]))
        assert len(words_of(text[span.start : span.end])) <= 100
    assert covered == set(words_of(text))
    assert len(spans) == 19


def test_end_snaps_to_sentence_or_paragraph():
    sentences = [f"Sentence number {i} talks about topic {i} here." for i in range(60)]
    text = " ".join(sentences)
    spans = Chunker(40, 20).split(text)
    for span in spans[:-1]:
        assert text[span.start : span.end].rstrip().endswith("."), text[span.start : span.end][-30:]


def test_whole_text_when_chunk_size_none():
    text = "one two three\nfour"
    (span,) = Chunker(None).split(text)
    assert (span.start, span.end, span.start_line, span.end_line) == (0, len(text), 1, 2)


def test_sections_are_chunked_separately_and_labelled():
    text = "# A\nalpha beta\n# B\ngamma delta epsilon"
    sections = [(0, 15, "A"), (15, len(text), "B")]
    spans = Chunker(180).split(text, sections)
    assert [(text[s.start : s.end], s.label) for s in spans] == [(text[:15], "A"), (text[15:], "B")]


@pytest.mark.parametrize("args", [(0, 1), (10, 11), (10, 0), (-1, None)])
def test_bad_parameters_name_value_and_range(args):
    with pytest.raises(ConfigError, match="out of range"):
        Chunker(*args)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .\n,é漢")), max_size=400), st.integers(1, 12), st.integers(1, 12))
def test_every_word_lands_in_some_chunk(text, size, stride):
    stride = min(stride, size)
    spans = Chunker(size, stride).split(text)
    for span in spans:
        # re-splitting a chunk's slice gives back its words: removal relies on it
        assert span.words == find_words(text[span.start : span.end])
    # words of consecutive windows, de-overlapped, are the text's words in order
    all_words = re.findall(r"[^\W漢]+|漢{1,16}", text)
    seen = set()
    for span in spans:
        for w in span.words:
            seen.add(w)
    assert seen == set(all_words)


class CountingText(str):
    """A text that adds up how many characters ``count`` scans."""

    scanned = 0

    def count(self, sub, start=0, end=None):
        end = len(self) if end is None else end
        CountingText.scanned += max(0, end - start)
        return super().count(sub, start, end)


def test_line_numbers_cost_a_linear_scan_of_the_text():
    # Overlapping windows used to restart the line count from the top for
    # every chunk: quadratic in one file's size.
    text = CountingText("\n".join(f"line {i} of a long file with words." for i in range(20_000)))
    CountingText.scanned = 0
    spans = Chunker(180, 90).split(text)
    assert len(spans) > 500
    assert CountingText.scanned <= 4 * len(text)
    last = spans[-1]
    assert last.end_line == str.count(text, "\n", 0, last.end - 1) + 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "bb", " ", "\n", "\n\n", ". ", "ccc"]), max_size=300).map("".join),
    st.integers(1, 12),
    st.integers(1, 12),
    st.lists(st.integers(0, 300), max_size=6),
)
def test_line_numbers_match_a_naive_count(text, size, stride, cuts):
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    sections = [(a, b, None) for a, b in pairwise(bounds)]
    for span in Chunker(size, min(stride, size)).split(text, sections or None):
        assert span.start_line == text.count("\n", 0, span.start) + 1
        assert span.end_line == text.count("\n", 0, max(span.start, span.end - 1)) + 1


def test_a_big_text_shares_one_str_per_distinct_word():
    # A big file's word objects, one per occurrence, used to take about 8x its size.
    text = " ".join(f"w{i % 500}" for i in range(150_000))
    spans = Chunker(180, 90).split(text)
    objects = {id(w) for span in spans for w in span.words}
    assert len(objects) == 500
    assert [w for span in spans[:2] for w in span.words][:3] == ["w0", "w1", "w2"]
