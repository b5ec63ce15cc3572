"""Choosing the injected sentence among the top passages: names, shapes, defaults, tables, the rank prior."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._answer_types import (
    DEFAULT,
    IDENT,
    LITERAL,
    NUMBER,
    asks_how,
    code_names,
    focus_types,
    types_in,
)
from clanker_rag._answer._focusing import (
    FocusedRetriever,
    best_sentence,
    focus_sentence,
    named_terms,
    new_types,
    table_rows,
)
from clanker_rag._text._analysis import Analyzer
from tests.helpers._passages import Fixed, hit

ANALYZER = Analyzer()


def terms(question: str) -> set[str]:
    return set(ANALYZER(question))


# -- answer types of the sentence chosen ------------------------------------------------


def test_code_names_are_literals_and_identifiers_but_not_paths() -> None:
    text = "Wrap it with :doc:`../middleware/proxy_fix` or ``pkg.ext.loops``; use ProxyFix(app, x_for=1)."
    names = code_names(text)
    assert "pkg.ext.loops" in names and "ProxyFix" in names and "x_for" in names
    assert not any("proxy_fix" in name for name in names)


def test_a_name_counts_the_query_words_it_holds_unless_it_is_the_questions_own() -> None:
    question = "Which loader loads templates from the file system?"
    held = named_terms(".. autoclass:: pkg.FileSystemLoader", terms(question), ANALYZER)
    assert {"file", "system", "loader"} <= held
    # run_simple is named by the question: finding it again says nothing.
    own = "Which parameter of run_simple picks the reloader?"
    assert named_terms("Pass it to ``run_simple``.", terms(own), ANALYZER) == set()


def test_focus_types_every_cue_noun_counts_and_which_asks_for_a_name() -> None:
    # "limits" after "attribute" reads as a second noun (a number); the attribute still counts.
    assert IDENT in focus_types("Which request attribute limits the size of a form field?")
    assert focus_types("Which delimiter starts a comment?") == {IDENT, LITERAL}
    assert focus_types("What happens when the index is locked?") == frozenset()
    assert focus_types("What is the default port?") == {NUMBER, DEFAULT}
    assert LITERAL in focus_types("How do I turn the check off?")


def test_asks_how() -> None:
    assert asks_how("How do I serve the app?") and asks_how("how to  serve it")
    assert not asks_how("Which server is the default?")


def test_inline_code_of_the_questions_own_words_is_not_the_asked_for_name() -> None:
    question = "Which extension adds break to loops?"
    expected = focus_types(question)
    assert new_types("This adds ``break`` to loops.", expected, terms(question), ANALYZER) == frozenset()
    assert LITERAL in new_types("Import name: ``pkg.ext.loops``", expected, terms(question), ANALYZER)


# -- the sentence chosen ---------------------------------------------------------------

LOADERS = hit(
    "Loaders\n-------\n\nLoaders are responsible for loading templates.\n\n"
    ".. autoclass:: pkg.PackageLoader\n\n.. autoclass:: pkg.FileSystemLoader\n",
    "api.rst",
    1.6,
)
INTRO = hit(
    "This loader looks up templates in a folder of your package.\n\n"
    "Other loaders load templates from other places, such as the file system.\n",
    "intro.rst",
    2.0,
)
FILESYSTEM_QUESTION = "Which loader loads templates from a folder on the file system?"


def test_the_sentence_naming_the_thing_is_chosen_from_a_lower_passage() -> None:
    expected = focus_types(FILESYSTEM_QUESTION)
    where, _ = best_sentence([INTRO, LOADERS], terms(FILESYSTEM_QUESTION), ANALYZER, 200, expected, 320, 0.5)
    assert where == 1
    shown = FocusedRetriever(Fixed(INTRO, LOADERS), sentence=True, answer_types=True, attach=320, pick=2)
    out = shown.search(FILESYSTEM_QUESTION, 2)
    assert out[0].source == "api.rst" and "FileSystemLoader" in out[0].text
    assert out[1].source == "intro.rst"


def test_without_answer_types_the_first_passage_stays() -> None:
    shown = FocusedRetriever(Fixed(INTRO, LOADERS), sentence=True, answer_types=False, attach=320, pick=2)
    assert shown.search(FILESYSTEM_QUESTION, 2)[0].source == "intro.rst"


def test_the_rank_prior_keeps_a_far_better_ranked_passage() -> None:
    question = "Which worker reads the files?"
    top = hit("The reader worker reads the files.", "a.md", 10.0)
    low = hit("The ``FileReader`` worker reads the files.", "b.md", 0.1)
    expected = focus_types(question)
    assert best_sentence([top, low], terms(question), ANALYZER, 200, expected, None, 0.0)[0] == 1
    assert best_sentence([top, low], terms(question), ANALYZER, 200, expected, None, 1.0)[0] == 0


def test_a_question_about_a_default_takes_the_sentence_saying_default() -> None:
    question = "Which backend is used by default?"
    text = (
        "To switch between the backends use the ``backend_type`` parameter.\n\n"
        "- The default ``stat`` backend checks modification times.\n"
    )
    out = FocusedRetriever(Fixed(hit(text, "serving.rst", 1.0)), sentence=True, answer_types=True).search(question, 1)
    assert "stat" in out[0].text and "switch" not in out[0].text


def test_a_chosen_sentence_stays_first_whatever_the_type_order() -> None:
    # The first passage's sentence holds the asked-for shape; the second's best sentence does not.
    question = "How do I check in a template whether a value is set?"
    plain = hit("You check in a template whether a value is set with a test.", "a.rst", 1.0)
    coded = hit("Templates use ``{{ x }}``.", "b.rst", 2.0)
    out = FocusedRetriever(Fixed(coded, plain), sentence=True, answer_types=True, pick=2).search(question, 2)
    assert out[0].source == "a.rst"


# -- defaults and tables --------------------------------------------------------------


def test_a_default_is_stated_not_the_word_in_passing() -> None:
    for stated in ("Default: ``None``", "It defaults to 8.", "On by default.", "(default 8)", "default='x'"):
        assert DEFAULT in types_in(stated), stated
    for passing in ("The default cookie implementation signs it.", "Sending it every time (the default) helps."):
        assert DEFAULT not in types_in(passing), passing
    # The question's word still asks about a default.
    assert DEFAULT in focus_types("Which cookie implementation is the default?")


def test_the_sentence_stating_the_default_wins_over_the_word_in_passing() -> None:
    question = "What is the default value of the timeout?"
    text = "The default timeout handler logs the value and retries.\n\nThe timeout defaults to 30 seconds.\n"
    out = FocusedRetriever(Fixed(hit(text, "config.rst", 1.0)), sentence=True, answer_types=True).search(question, 1)
    assert "30" in out[0].text


TABLE = (
    "Settings\n\n"
    "| setting | default | meaning |\n"
    "|---------|---------|---------|\n"
    "| workers | 4 | processes serving requests |\n"
    "| timeout | 30 | seconds before a request is dropped |\n\n"
    "Each worker keeps a pool of threads (default 8 per pool).\n"
)


def test_table_rows_are_found_under_their_header() -> None:
    from clanker_rag._answer._focusing import _sentences

    spans = _sentences(TABLE)
    found = table_rows(TABLE, spans)
    assert len(found) == 1
    (header, rows), *_ = found.items()
    assert TABLE[spans[header][0] :].startswith("| setting")
    assert [TABLE[spans[r][0] : spans[r][1]].split("|")[1].strip() for r in rows] == ["workers", "timeout"]
    # A row of pipes with no rule under it is no header.
    assert table_rows("| a | b |\n| c | d |\n", _sentences("| a | b |\n| c | d |\n")) == {}


def test_a_header_row_is_never_the_sentence_shown() -> None:
    question = "What does the setting column mean?"
    out = FocusedRetriever(Fixed(hit(TABLE, "config.md", 1.0)), sentence=True, answer_types=True).search(question, 1)
    assert "| setting | default" not in out[0].text


def test_a_table_row_is_read_with_its_header() -> None:
    # The row holding the value says "default" only through its header; the prose says it in passing.
    question = "Which setting is the default number of workers?"
    out = FocusedRetriever(Fixed(hit(TABLE, "config.md", 1.0)), sentence=True, answer_types=True).search(question, 1)
    assert out[0].text.startswith("| workers | 4")


@given(st.text(alphabet="ab|-+=: \n", max_size=80))
def test_table_rows_are_units_after_their_header(text: str) -> None:
    from clanker_rag._answer._focusing import _sentences

    spans = _sentences(text)
    seen: set[int] = set()
    for header, rows in table_rows(text, spans).items():
        assert text[spans[header][0]] == "|"
        assert all(header < row < len(spans) for row in rows)
        assert header not in seen and not seen & set(rows)
        seen |= {header, *rows}


# -- what a question says in other words ----------------------------------------------


def test_a_spelled_out_number_matches_its_digits_alone() -> None:
    from clanker_rag._answer._focusing import spelled_numbers

    found = spelled_numbers(terms("How do I start four workers?"), ANALYZER)
    assert set(found) == {"four"}
    digits = found["four"]
    assert digits.search("gunicorn -w 4 app") and digits.search("(4)")
    for other in ("14 workers", "version 4.2", "x4", "40"):
        assert not digits.search(other), other
    # "one" is as often a pronoun as a number.
    assert spelled_numbers(terms("Which one starts the server?"), ANALYZER) == {}


def test_the_sentence_writing_the_spelled_number_as_digits_wins() -> None:
    question = "How do I start the server with four worker processes?"
    text = "Each worker is a process.\n\nStart the server with -w 4.\n"
    out = focus_sentence(hit(text, "deploy.rst", 1.0), terms(question), ANALYZER, 200)
    assert "-w 4" in out.text


def test_a_question_asks_for_a_default_in_other_words() -> None:
    for question in (
        "Which converter is used for a variable when none is given?",
        "What does the loader use if it is not set?",
        "Which port is used if omitted?",
    ):
        assert DEFAULT in focus_types(question), question
    assert DEFAULT not in focus_types("Which option is given to the server?")
    question = "Which converter is used when none is given?"
    text = (
        "Rules are written ``<converter(arguments):name>``.\n\n"
        "If no converter is given, the ``string`` converter is used by default.\n"
    )
    out = FocusedRetriever(Fixed(hit(text, "routing.rst", 1.0)), sentence=True, answer_types=True).search(question, 1)
    assert "string" in out[0].text
