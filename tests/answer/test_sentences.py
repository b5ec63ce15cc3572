"""What each sentence holds for the window chooser: answer types, names, defaults, tables, spelled numbers."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._answer_types import DEFAULT, LITERAL, code_names, focus_types, types_in
from clanker_rag._answer._focusing import FocusedRetriever, focus_sentence
from clanker_rag._answer._sentences import SentenceQuery, mark_kind, sentence_spans, sentence_units
from clanker_rag._text._analysis import Analyzer
from tests.helpers._passages import Fixed, hit

ANALYZER = Analyzer()


def asked(question: str) -> SentenceQuery:
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, 200, focus_types(question), 320, False)


def marks(text: str, question: str) -> list[set[str | None]]:
    return [{mark_kind(t) for t in found} for found in sentence_units(text, asked(question)).terms]


def test_code_names_are_literals_and_identifiers_but_not_paths() -> None:
    names = code_names("Use ``make_job`` or `JobQueue`; see ../guide/jobs_page for more, or call run_all().")
    assert "make_job" in names and "JobQueue" in names and "run_all(" in names
    assert not any("guide" in name for name in names)


def test_inline_code_of_the_questions_own_words_is_no_answer_and_a_name_holding_them_is() -> None:
    question = "Which plugin adds retry to jobs?"
    assert LITERAL in focus_types(question)
    own, named = marks("This adds ``retry`` to jobs.\n\nImport ``lumen.plugins.retrying``.\n", question)
    assert "shape" not in own  # ``retry`` is the question's own word
    assert "shape" in named and "name" in named


def test_a_default_is_stated_not_the_word_in_passing() -> None:
    for stated in ("Default: ``None``", "It defaults to 8.", "On by default.", "(default 8)", "default='x'"):
        assert DEFAULT in types_in(stated), stated
    for passing in ("The default codec implementation packs it.", "Sending it every time (the default) helps."):
        assert DEFAULT not in types_in(passing), passing
    assert DEFAULT in focus_types("Which codec is the default?")
    for question in ("Which codec does it pick if no codec is specified?", "What does it use if it is not set?"):
        assert DEFAULT in focus_types(question), question
    assert DEFAULT not in focus_types("Which option is given to the daemon?")


def test_within_a_passage_the_sentence_stating_the_default_is_shown() -> None:
    question = "What is the default value of the grace period?"
    text = "The default grace handler logs the period and retries.\n\nThe grace period defaults to 30 seconds.\n"
    assert "30" in focus_sentence(hit(text, "config.rst", 1.0), asked(question)).text


TABLE = (
    "Settings\n\n"
    "| setting | default | meaning |\n"
    "|---------|---------|---------|\n"
    "| jobs | 4 | processes handling jobs |\n"
    "| grace | 30 | seconds before a job is dropped |\n\n"
    "Each job keeps a pool of threads (default 8 per pool).\n"
)


def test_a_header_row_is_never_shown_and_a_row_is_read_with_its_header() -> None:
    question = "Which setting is the default number of jobs?"
    spans = sentence_spans(TABLE)
    found = sentence_units(TABLE, asked(question)).terms
    header = next(k for k, (a, _) in enumerate(spans) if TABLE[a:].startswith("| setting"))
    row = next(k for k, (a, _) in enumerate(spans) if TABLE[a:].startswith("| jobs"))
    assert found[header] == set()
    assert any(mark_kind(t) == "default" for t in found[row])  # "default" only through its header
    out = FocusedRetriever(Fixed(hit(TABLE, "config.md", 1.0)), sentence=True).search(question, 1)
    assert out[0].text.startswith("| jobs | 4")


@given(st.text(alphabet="ab|-+=: \n`.", max_size=80))
def test_sentences_are_ordered_disjoint_non_blank_slices_and_tables_count_once(text: str) -> None:
    spans = sentence_spans(text)
    assert all(a < b and text[a:b].strip() for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
    found = sentence_units(text, asked("Which setting is the default?")).terms
    assert len(found) == max(1, len(spans))


def test_a_spelled_out_number_counts_where_its_digits_stand_alone() -> None:
    question = "How do I start the daemon with four job processes?"
    text = "Each job is a process.\n\nStart the daemon with -j 4.\n\nVersion 4.2 and 14 jobs are other numbers.\n"
    terms = [t for t in sentence_units(text, asked(question)).terms]
    assert "four" in terms[1] and "four" not in terms[0] and "four" not in terms[2]
    assert "-j 4" in focus_sentence(hit(text, "deploy.rst", 1.0), asked(question)).text
    one = sentence_units("Start 1 job.", asked("Which one starts the daemon?")).terms
    assert "one" not in {t for found in one for t in found}  # "one" is as often a pronoun as the number


def test_prose_resumed_after_a_code_block_counts_its_lead_in_words() -> None:
    text = "The score is computed with:\n\n    s = f(x)\n\nwith k1 = 1.2 for every term.\n"
    question = "What is k1 in the score?"
    found = sentence_units(text, asked(question))
    resumed = next(k for k, (a, _) in enumerate(found.spans) if text[a:].startswith("with k1"))
    assert resumed in found.lead_ins and "score" in found.terms[resumed]
