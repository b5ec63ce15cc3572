"""What a chosen sentence takes with it: the block its colon introduces, the definition it belongs to."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._focusing import FocusedRetriever, focus_sentence
from clanker_rag._answer._sentences import SentenceQuery
from clanker_rag._answer._windows import attached, body_owner, is_changelog, strip_inline_html
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._passages import Fixed

LEAD_IN = (
    "Job logs are written to stderr.\n\n"
    "This example makes every nightly job log to a file:\n\n"
    ".. code-block:: python\n\n"
    "    LOGS = dict(log_targets=['-f', '--file'])\n\n"
    "    @lumen.job(job_settings=LOGS)\n"
    "    def nightly():\n"
    "        pass\n\n"
    "Other text follows here.\n"
)

DIRECTIVE = (
    ".. data:: JOURNAL_ROTATE\n\n"
    "    Rotate the job journal when it grows past its limit.\n\n"
    "    Default: ``weekly``\n\n"
    ".. data:: JOURNAL_KEEP\n\n"
    "    Keep old journals compressed.\n"
)


ANALYZER = Analyzer()


def asked(question: str) -> SentenceQuery:
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, 200, 320)


def span_of(text: str, needle: str) -> tuple[int, int]:
    start = text.index(needle)
    return start, start + len(needle)


def test_a_colon_takes_the_code_block_it_introduces_in_whole_lines() -> None:
    start, end = span_of(LEAD_IN, "This example makes every nightly job log to a file:")
    a, b = attached(LEAD_IN, start, end, 400)
    window = LEAD_IN[a:b]
    assert window.startswith("This example") and "log_targets=['-f', '--file']" in window
    assert window.rstrip().endswith("pass") and "Other text" not in window
    # A smaller budget keeps whole lines only: never a cut inside one.
    a, b = attached(LEAD_IN, start, end, 130)
    assert LEAD_IN[a:b].endswith("log_targets=['-f', '--file'])")
    # Not even the first line of code fits: the lead-in alone, not the lead-in and a directive line.
    assert attached(LEAD_IN, start, end, 100) == (start, end)


def test_a_colon_before_a_fence_that_ends_the_passage_stays_alone() -> None:
    # The chunk ends on the opening fence: there is no code to take (this raised IndexError).
    text = "Install it like this:\n\n```"
    start, end = span_of(text, "Install it like this:")
    assert attached(text, start, end, 320) == (start, end)
    # An unclosed fence with code after it still takes that code.
    text += "\npip install thing\n"
    a, b = attached(text, start, end, 320)
    assert text[a:b].endswith("pip install thing")


def test_a_lead_in_before_a_fence_that_ends_the_passage_stays_alone() -> None:
    # A chunk may end right after a fence's opening line: there is no block to take.
    text = "Use it like this:\n\n```python"
    assert attached(text, 0, 17, 300) == (0, 17)


def test_a_sentence_without_a_colon_stays_alone() -> None:
    start, end = span_of(LEAD_IN, "Job logs are written to stderr.")
    assert attached(LEAD_IN, start, end, 400) == (start, end)


def test_a_list_introduced_by_a_colon_is_kept_whole_items() -> None:
    text = "The options are:\n\n- ``--fast``: skip checks\n- ``--slow``: run every check\n\nThen more prose.\n"
    start, end = span_of(text, "The options are:")
    a, b = attached(text, start, end, 400)
    assert text[a:b].endswith("run every check") and "Then" not in text[a:b]


def test_a_directive_line_takes_its_body_and_a_body_line_its_directive() -> None:
    start, end = span_of(DIRECTIVE, ".. data:: JOURNAL_ROTATE")
    a, b = attached(DIRECTIVE, start, end, 400)
    assert "Default: ``weekly``" in DIRECTIVE[a:b] and "JOURNAL_KEEP" not in DIRECTIVE[a:b]
    start, end = span_of(DIRECTIVE, "Default: ``weekly``")
    assert body_owner(DIRECTIVE, start) == span_of(DIRECTIVE, ".. data:: JOURNAL_ROTATE")
    a, b = attached(DIRECTIVE, start, end, 400)
    assert DIRECTIVE[a:b].startswith(".. data:: JOURNAL_ROTATE") and DIRECTIVE[a:b].endswith("``weekly``")
    # Too far for the budget: the line alone.
    assert attached(DIRECTIVE, start, end, 30) == (start, end)
    assert body_owner("plain text\n    indented code\n", 14) is None


def test_the_default_line_of_a_definition_is_chosen_for_a_default_question() -> None:
    hit = Hit(DIRECTIVE, "config.rst", 1.0, start=0, end=len(DIRECTIVE), start_line=1, end_line=8)
    [widened] = FocusedRetriever(Fixed(hit), sentence=True).search("What is the default value of JOURNAL_ROTATE?", 1)
    assert widened.text.startswith(".. data:: JOURNAL_ROTATE") and widened.text.endswith("Default: ``weekly``")


def test_release_notes_are_known_by_name_or_heading() -> None:
    assert is_changelog("docs/changes.rst") and is_changelog("CHANGELOG.md") and is_changelog("HISTORY.txt")
    assert is_changelog("notes.md", "Version 8.1.0\n-------------\n\n-   Fix a bug.")
    assert not is_changelog("docs/options.rst", "Options change how a command behaves.")


def test_release_notes_go_after_the_passages_that_explain() -> None:
    class Two:
        def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
            return [
                Hit("Added the --port option to choose the port.", "CHANGES.rst", 2.0),
                Hit("Pass --port N to choose the port the daemon listens on.", "docs/cli.md", 1.0),
            ]

    moved = FocusedRetriever(Two(), sentence=True).search("Which option chooses the port the daemon listens on?", 2)
    assert [h.source for h in moved] == ["docs/cli.md", "CHANGES.rst"]


@given(st.text(alphabet="ab :.\n-`|#", max_size=120), st.integers(0, 120), st.integers(0, 60), st.integers(1, 300))
def test_the_window_always_holds_the_sentence_and_stays_in_the_text(text: str, at: int, size: int, budget: int) -> None:
    start = min(at, len(text))
    end = min(len(text), start + size)
    a, b = attached(text, start, end, budget)
    assert 0 <= a <= start <= end <= b <= len(text)
    assert b - a <= max(budget, end - start) or (a, b) == (start, end) or b == end


def test_a_sentence_of_a_paragraph_ending_in_a_colon_takes_its_block() -> None:
    text = (
        "To explore the data, start a shell with the shell command. The app\n"
        "instance will be imported. ::\n\n    $ tool shell\n    >>>\n\nMore prose.\n"
    )
    start, end = span_of(text, "To explore the data, start a shell with the shell command.")
    a, b = attached(text, start, end, 400)
    assert text[a:b].startswith("To explore") and text[a:b].endswith(">>>")
    # The paragraph and its block do not fit: the sentence alone.
    assert attached(text, start, end, 70) == (start, end)


# ------------------------------------------------------------ markup a page hides

TAGGED = (
    "# Checks\n\n"
    "Some checks run less often than others.\n"
    'You can skip <span class="minilink minilink-addedin">New in version 1.8.5</span> any check by name.\n'
    "Write `<span>` in code to keep it.\n"
)


def test_named_html_tags_leave_prose_and_everything_else_stays() -> None:
    text = (
        'Skip <span class="added">New in 1.8</span> checks.<br>Then <b>run</b> it.<!-- note -->\n'
        "Replace <name> with yours; see <https://example.org/a> and <user@example.org>.\n"
        "Inline `<span class='x'>` and ``a `<b>` b`` stay.\n"
        "```html\n"
        '<div class="keep">fenced</div>\n'
        "```\n"
        "    <em>indented code</em>\n"
        '<div align="center">\n'
    )
    assert strip_inline_html(text).split("\n") == [
        "Skip New in 1.8 checks. Then run it.",
        "Replace <name> with yours; see <https://example.org/a> and <user@example.org>.",
        "Inline `<span class='x'>` and ``a `<b>` b`` stay.",
        "```html",
        '<div class="keep">fenced</div>',
        "```",
        "    <em>indented code</em>",
        " ",
        "",
    ]


@given(st.lists(st.sampled_from(["<span a='1'>", "</span>", "<br/>", "<x>", "`", "```", "\n", " ", "w", "<", ">"])))
def test_stripping_keeps_every_line_and_every_line_without_a_tag(parts: list[str]) -> None:
    text = "".join(parts)
    out = strip_inline_html(text)
    assert out.count("\n") == text.count("\n")
    for before, after in zip(text.split("\n"), out.split("\n"), strict=True):
        if "<" not in before:
            assert after == before


def test_the_injected_sentence_shows_no_html_tags_but_code_keeps_them() -> None:
    hit = Hit(text=TAGGED, source="checks.md", score=1.0)
    out = focus_sentence(hit, asked("skip check name"))
    assert out.text == "You can skip New in version 1.8.5 any check by name."
    code = Hit(
        text="Intro line here.\n\n```html\n<b>bold</b> and more skip check name\n```\n", source="a.md", score=1.0
    )
    assert "<b>bold</b>" in focus_sentence(code, asked("skip check name")).text
