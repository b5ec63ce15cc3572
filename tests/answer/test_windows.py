"""What a chosen sentence takes with it: the block its colon introduces, the definition it belongs to."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._focusing import FocusedRetriever, focus_sentence
from clanker_rag._answer._windows import attached, body_owner, is_changelog, strip_inline_html
from clanker_rag._exceptions import ConfigError
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit

LEAD_IN = (
    "Help pages are shown with --help.\n\n"
    "This example makes the short flag show the help too:\n\n"
    ".. code-block:: python\n\n"
    "    SETTINGS = dict(help_names=['-h', '--help'])\n\n"
    "    @app.command(context_settings=SETTINGS)\n"
    "    def cli():\n"
    "        pass\n\n"
    "Other text follows here.\n"
)

DIRECTIVE = (
    ".. data:: COOKIE_SAMESITE\n\n"
    "    Restrict how cookies are sent with requests from external sites.\n\n"
    "    Default: ``None``\n\n"
    ".. data:: COOKIE_SECURE\n\n"
    "    Send the cookie over HTTPS only.\n"
)


def span_of(text: str, needle: str) -> tuple[int, int]:
    start = text.index(needle)
    return start, start + len(needle)


def test_a_colon_takes_the_code_block_it_introduces_in_whole_lines() -> None:
    start, end = span_of(LEAD_IN, "This example makes the short flag show the help too:")
    a, b = attached(LEAD_IN, start, end, 400)
    window = LEAD_IN[a:b]
    assert window.startswith("This example") and "help_names=['-h', '--help']" in window
    assert window.rstrip().endswith("pass") and "Other text" not in window
    # A smaller budget keeps whole lines only: never a cut inside one.
    a, b = attached(LEAD_IN, start, end, 130)
    assert LEAD_IN[a:b].endswith("help_names=['-h', '--help'])")
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
    start, end = span_of(LEAD_IN, "Help pages are shown with --help.")
    assert attached(LEAD_IN, start, end, 400) == (start, end)


def test_a_list_introduced_by_a_colon_is_kept_whole_items() -> None:
    text = "The options are:\n\n- ``--fast``: skip checks\n- ``--slow``: run every check\n\nThen more prose.\n"
    start, end = span_of(text, "The options are:")
    a, b = attached(text, start, end, 400)
    assert text[a:b].endswith("run every check") and "Then" not in text[a:b]


def test_a_directive_line_takes_its_body_and_a_body_line_its_directive() -> None:
    start, end = span_of(DIRECTIVE, ".. data:: COOKIE_SAMESITE")
    a, b = attached(DIRECTIVE, start, end, 400)
    assert "Default: ``None``" in DIRECTIVE[a:b] and "COOKIE_SECURE" not in DIRECTIVE[a:b]
    start, end = span_of(DIRECTIVE, "Default: ``None``")
    assert body_owner(DIRECTIVE, start) == span_of(DIRECTIVE, ".. data:: COOKIE_SAMESITE")
    a, b = attached(DIRECTIVE, start, end, 400)
    assert DIRECTIVE[a:b].startswith(".. data:: COOKIE_SAMESITE") and DIRECTIVE[a:b].endswith("``None``")
    # Too far for the budget: the line alone.
    assert attached(DIRECTIVE, start, end, 30) == (start, end)
    assert body_owner("plain text\n    indented code\n", 14) is None


def test_the_default_line_of_a_definition_is_chosen_for_a_default_question() -> None:
    hit = Hit(DIRECTIVE, "config.rst", 1.0, start=0, end=len(DIRECTIVE), start_line=1, end_line=8)
    terms = set(Analyzer()("What is the default value of COOKIE_SAMESITE?"))
    plain = focus_sentence(hit, terms, Analyzer(), 200)
    widened = focus_sentence(hit, terms, Analyzer(), 200, attach=320)
    assert "None" not in plain.text
    assert widened.text.startswith(".. data:: COOKIE_SAMESITE") and widened.text.endswith("Default: ``None``")


def test_release_notes_are_known_by_name_or_heading() -> None:
    assert is_changelog("docs/changes.rst") and is_changelog("CHANGELOG.md") and is_changelog("HISTORY.txt")
    assert is_changelog("notes.md", "Version 8.1.0\n-------------\n\n-   Fix a bug.")
    assert not is_changelog("docs/options.rst", "Options change how a command behaves.")


def test_release_notes_go_after_the_passages_that_explain() -> None:
    class Two:
        def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
            return [Hit("Added the --port option.", "CHANGES.rst", 2.0), Hit("Pass --port N.", "docs/cli.md", 1.0)]

    kept = FocusedRetriever(Two(), sentence=True).search("port option", 2)
    moved = FocusedRetriever(Two(), sentence=True, changelog_last=True).search("port option", 2)
    assert [h.source for h in kept] == ["CHANGES.rst", "docs/cli.md"]
    assert [h.source for h in moved] == ["docs/cli.md", "CHANGES.rst"]


class Two:
    def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
        return [
            Hit("Workers start.\n\nWorkers stop.\n\nWorkers wait.", "a.md", 2.0),
            Hit("Workers read the files in parallel.", "b.md", 1.0),
        ]


def test_pick_shows_the_passage_whose_sentence_answers() -> None:
    first = FocusedRetriever(Two(), sentence=True).search("which workers read files", 2)
    picked = FocusedRetriever(Two(), sentence=True, pick=2).search("which workers read files", 2)
    assert first[0].source == "a.md"
    assert picked[0].source == "b.md" and picked[1].source == "a.md"


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


LINE_LENGTH = (
    "Black reformats every file it is given.\n\n"
    "Long lines are split to fit the configured line length. The default is 88 characters.\n"
    "Strings are normalised to double quotes unless told otherwise by an option.\n"
)


def follow_shown(follow: int, text: str = LINE_LENGTH) -> Hit:
    terms = set(Analyzer()("How long may a line be, what is the configured line length?"))
    shown = focus_sentence(Hit(text, "black.md", 1.0, start=0, end=len(text)), terms, Analyzer(), 200, follow=follow)
    assert isinstance(shown, Hit)
    return shown


def test_follow_takes_the_answer_in_the_sentence_after_the_matching_one() -> None:
    # The sentence repeating the question's words holds no number; the next one answers.
    assert follow_shown(0).text == "Long lines are split to fit the configured line length."
    shown = follow_shown(120)
    assert shown.text == "Long lines are split to fit the configured line length. The default is 88 characters."
    assert LINE_LENGTH[shown.start : shown.end] == shown.text


def test_follow_keeps_whole_sentences_within_its_budget() -> None:
    # The next sentence does not fit 80 characters: the sentence alone, never a cut one.
    assert follow_shown(80).text == follow_shown(0).text
    # 160 characters take the next sentence but not the line after it (162 characters from the start).
    shown = follow_shown(160)
    assert shown.end - shown.start <= 160 and shown.text.endswith("88 characters.")
    assert "Strings" in follow_shown(400).text


@given(st.text(alphabet="ab .\n", max_size=200), st.integers(40, 300))
def test_follow_shows_the_sentence_and_never_more_than_its_budget(text: str, follow: int) -> None:
    terms = {"a"}
    alone = focus_sentence(Hit(text, "s", 1.0, start=0, end=len(text)), terms, Analyzer(), 40)
    shown = focus_sentence(Hit(text, "s", 1.0, start=0, end=len(text)), terms, Analyzer(), 40, follow=follow)
    assert isinstance(alone, Hit) and isinstance(shown, Hit)
    assert shown.start == alone.start and shown.end >= alone.end
    if shown.end > alone.end:
        assert shown.end - shown.start <= follow


@pytest.mark.parametrize("follow", [-1, 1, 39, 4001])
def test_follow_outside_its_range_is_refused_with_the_value(follow: int) -> None:
    with pytest.raises(ConfigError, match=rf"follow must be 0 \(off\) or 40\.\.4000 characters, got {follow}"):
        FocusedRetriever(Two(), sentence=True, follow=follow)


def test_follow_at_the_ends_of_its_range_is_accepted() -> None:
    assert FocusedRetriever(Two(), follow=0).follow == 0
    assert FocusedRetriever(Two(), follow=40).follow == 40
    assert FocusedRetriever(Two(), follow=4000).follow == 4000


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
    analyzer = Analyzer()
    terms = set(analyzer("skip check name"))
    out = focus_sentence(hit, terms, analyzer, 200)
    assert out.text == "You can skip New in version 1.8.5 any check by name."
    code = Hit(
        text="Intro line here.\n\n```html\n<b>bold</b> and more skip check name\n```\n", source="a.md", score=1.0
    )
    assert "<b>bold</b>" in focus_sentence(code, terms, analyzer, 200).text
