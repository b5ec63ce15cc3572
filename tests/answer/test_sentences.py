"""What each sentence holds for the window chooser: its own terms, its lead-in's, its header's."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._focusing import FocusedRetriever, sentence_query
from clanker_rag._answer._sentences import SentenceQuery, sentence_spans, sentence_units
from clanker_rag._text._analysis import Analyzer
from tests.helpers._passages import Fixed, hit

ANALYZER = Analyzer()


def asked(question: str) -> SentenceQuery:
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, 200, 320)


def test_within_a_passage_the_sentence_stating_the_default_is_shown() -> None:
    question = "What is the default value of the grace period?"
    text = "The default grace handler logs the period and retries.\n\nThe grace period defaults to 30 seconds.\n"
    [shown] = FocusedRetriever(Fixed(hit(text, "config.rst", 1.0)), sentence=True).search(question, 1)
    assert "30" in shown.text


TABLE = (
    "Settings\n\n"
    "| setting | default | meaning |\n"
    "|---------|---------|---------|\n"
    "| jobs | 4 | processes handling jobs |\n"
    "| grace | 30 | seconds before a job is dropped |\n\n"
    "Each job keeps a pool of threads (default 8 per pool).\n"
)


def terms_of(text: str, question: str, *starts: str) -> list[set[str]]:
    """The query terms counted by the units of ``text`` that begin with each of ``starts``."""
    spans = sentence_spans(text)
    found = sentence_units(text, asked(question)).terms
    return [found[next(k for k, (a, _) in enumerate(spans) if text.startswith(start, a))] for start in starts]


def test_a_header_row_is_never_shown_and_a_row_is_read_with_its_header() -> None:
    question = "Which setting is the default number of jobs?"
    header, row = terms_of(TABLE, question, "| setting", "| jobs")
    assert header == set()
    assert {"set", "default"} <= row  # only through its header
    out = FocusedRetriever(Fixed(hit(TABLE, "config.md", 1.0)), sentence=True).search(question, 1)
    assert not out[0].text.startswith("| setting")


@given(st.text(alphabet="ab|-+=: \n`.", max_size=80))
def test_sentences_are_ordered_disjoint_non_blank_slices_and_tables_count_once(text: str) -> None:
    spans = sentence_spans(text)
    assert all(a < b and text[a:b].strip() for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
    found = sentence_units(text, asked("Which setting is the default?")).terms
    assert len(found) == max(1, len(spans))


def test_prose_resumed_after_a_code_block_counts_its_lead_in_words() -> None:
    text = "The score is computed with:\n\n    s = f(x)\n\nwith k1 = 1.2 for every term.\n"
    question = "What is k1 in the score?"
    found = sentence_units(text, asked(question))
    resumed = next(k for k, (a, _) in enumerate(found.spans) if text[a:].startswith("with k1"))
    assert resumed in found.lead_ins and "score" in found.terms[resumed]


# A made-up manual page, laid out as `man` renders one: headings in capitals, indented bodies.
PAGE = (
    "GLOW(1)                    User Commands                    GLOW(1)\n\n"
    "NAME\n       glow - light up a terminal\n\n"
    "SYNOPSIS\n       glow [OPTION]... [PATTERN]...\n\n"
    "DESCRIPTION\n       Paint each PATTERN in colour.\n\n"
    "       -t, --tint=NAME\n              use colour NAME\n\n"
    "EXIT STATUS\n       0 when a line was painted, 3 when nothing matched.\n\n"
    "SEE ALSO\n       grep(1), dim(5)\n"
)


def test_a_heading_in_capitals_is_a_unit_of_its_own_and_an_ellipsis_ends_no_sentence() -> None:
    units = [PAGE[a:b] for a, b in sentence_spans(PAGE)]
    assert "NAME" in units and "EXIT STATUS" in units and "SYNOPSIS" in units
    assert "glow [OPTION]... [PATTERN]..." in units  # one unit: "..." marks a repeat
    assert "-t, --tint=NAME\n              use colour NAME" in units  # an option with its indented meaning


def test_a_unit_in_a_plain_text_section_counts_its_heading_words() -> None:
    question = "What exit status does glow return when nothing matched?"
    status, tint, heading = terms_of(PAGE, question, "0 when", "-t, --tint", "EXIT STATUS")
    assert {"exit", "status"} <= status
    assert not {"exit", "status"} & tint  # under DESCRIPTION
    assert heading == set()  # a heading is never a window of its own
    [shown] = FocusedRetriever(Fixed(hit(PAGE, "glow.txt", 1.0)), sentence=True).search(question, 1)
    assert "3 when nothing matched" in shown.text


def test_words_that_only_name_the_answer_kind_place_nothing() -> None:
    asked_ = sentence_query("Which glow option sets the tint?", ANALYZER, 200, 320)
    assert "option" not in asked_.terms and {"glow", "tint"} <= asked_.terms
    # A question of cue words alone keeps them: something must place the window.
    assert sentence_query("Which options?", ANALYZER, 200, 320).terms == set(ANALYZER("Which options?"))
    [shown] = FocusedRetriever(Fixed(hit(PAGE, "glow.txt", 1.0)), sentence=True).search(
        "Which glow option sets the tint?", 1
    )
    assert shown.text.startswith("-t, --tint=NAME")
