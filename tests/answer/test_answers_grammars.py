"""Sentence focus and constrained copying for base models (no server: a recording backend stands in)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._focusing import FocusedRetriever, _lead_ins, _sentences, focus_sentence
from clanker_rag._answer._grammars import TOOL_GRAMMAR, CopyingBackend, copy_grammar
from clanker_rag._answer._prompts import ANSWER_LABEL, SEARCH_LABEL
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._blocks import BlockBuilder
from clanker_rag._stream._controller import InjectEvent, RagController
from clanker_rag._stream._settings import BlockLayout, Hooks
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._backends import Recorder
from tests.helpers._gbnf import allows


def test_sentences_split_prose_and_rows() -> None:
    text = "It reads `a. b` first (see x. y) and then\nwraps here. Next one\n- an item\n| a | b. c |\n| d | e |\n\nEnd."
    got = [text[a:b] for a, b in _sentences(text)]
    assert got == [
        "It reads `a. b` first (see x. y) and then\nwraps here.",
        "Next one",
        "- an item",
        "| a | b. c |",
        "| d | e |",
        "End.",
    ]


@given(st.lists(st.sampled_from(["word", "a.", "`x", "(y", "|", "\n", " ", "```", "-", "7"]), max_size=40))
def test_sentences_are_ordered_disjoint_non_blank_slices(parts: list[str]) -> None:
    text = "".join(parts)
    spans = _sentences(text)
    last = 0
    for a, b in spans:
        assert last <= a < b <= len(text)
        assert text[a:b].strip() and not text[a].isspace()
        last = b


def test_focus_sentence_keeps_the_best_sentence_on_one_line() -> None:
    text = "The server starts fast.\nIt listens on port 7341 by\ndefault. Stop it with Ctrl-C."
    hit = Hit(text, "guide.md", 1.0, start=100, end=100 + len(text), start_line=5, end_line=7)
    out = focus_sentence(hit, {"port", "default"}, Analyzer(), 200)
    assert isinstance(out, Hit)
    assert out.text == "It listens on port 7341 by default."
    assert (out.start_line, out.end_line) == (6, 7)
    assert " ".join(text[out.start - 100 : out.end - 100].split()) == out.text


# The fact ends a sentence begun before a code block: "... with:", the formula, "with k1 = 1.2".
RESUMED = (
    "## Scoring\n\nThe default scoring is BM25 with:\n\n    score = k1 * tf\n\n"
    "with `k1 = 1.2` here. Each k1 is checked.\n"
)


def test_prose_resumed_after_a_code_block_is_about_its_lead_in_words() -> None:
    hit = Hit(RESUMED, "search.md", 1.0, start=0, end=len(RESUMED), start_line=1, end_line=8)
    out = focus_sentence(hit, set(Analyzer()("default k1 of the scoring")), Analyzer(), 200)
    assert out.text == "with `k1 = 1.2` here."
    assert isinstance(out, Hit)
    assert RESUMED[out.start : out.end] == out.text


@pytest.mark.parametrize(
    ("text", "joined"),
    [
        (RESUMED, True),
        ("Run it:\n\n```\nclanker-rag ask. x\n```\nthen look. Done.", True),
        ("Run it.\n\n    code here\n\nthen look.", False),  # the lead-in ended its sentence
        ("Run it:\n\n    code here\n\nThen look.", False),  # a new sentence
        ("Run it:\nthen look.", False),  # no code in between
    ],
)
def test_lead_ins_need_a_colon_code_and_lower_case(text: str, joined: bool) -> None:
    spans = _sentences(text)
    leads = _lead_ins(text, spans)
    resumed = [k for k, (a, _) in enumerate(spans) if text[a:].startswith("then") or text[a:].startswith("with")]
    assert bool(leads) == joined
    if joined:
        assert list(leads) == resumed and text[spans[leads[resumed[0]]][0] :].startswith(("The default", "Run it:"))


def test_focused_retriever_sentence_mode_checks_budget_and_cuts() -> None:
    class One:
        def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
            return [Hit("Alpha beta gamma. " * 20, "a.md", 1.0)]

    [hit] = FocusedRetriever(One(), budget=50, sentence=True).search("gamma", 1)
    assert hit.text == "Alpha beta gamma."


def test_copy_grammar_lists_passage_words_not_the_question_s() -> None:
    grammar = copy_grammar('listens on port 8765. "quoted" back\\slash', "Which port?")
    assert grammar.startswith('root ::= " " word')
    for word in ("8765.", "8765", '"quoted"', "back\\slash", "port"):
        assert allows(grammar, "word", word), word
    # Free to write the question's words, a small model echoes the question instead of answering.
    assert not allows(grammar, "word", "Which") and not allows(grammar, "word", "Ctrl-C")
    assert not allows(grammar, "word", "por") and not allows(grammar, "word", "8765..")
    # A passage without words: the question's are all there is.
    assert allows(copy_grammar("  ", "Which port?"), "word", "Which")


def test_copying_backend_constrains_answers_after_a_block_and_tool_calls_only() -> None:
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port?")
    list(backend("Question: x\n" + ANSWER_LABEL))  # no block yet: nothing to copy from
    block = BlockBuilder().build("context", [Hit("port 8765", "a.md", 1.0)])
    backend.observe(InjectEvent.of(block, "question", "x"))
    backend.observe(InjectEvent.of(BlockBuilder().build("result", note="No new passages."), "tool", "x"))
    list(backend(f"Question: x{block.text}Question: x\n{ANSWER_LABEL}"))
    list(backend("Question: x\n" + SEARCH_LABEL))
    list(backend(block.text + "free text"))
    first, second, third, fourth = inner.calls
    assert first is None
    assert second is not None and '"8765"' in second["grammar"] and '"Which"' not in second["grammar"]
    assert third == {"grammar": TOOL_GRAMMAR}
    assert fourth is None


def test_copying_grammar_takes_every_passage_of_the_turn() -> None:
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port?")
    builder = BlockBuilder()
    backend.observe(InjectEvent.of(builder.build("context", [Hit("port 8765", "a.md", 1.0)]), "question", "q"))
    two = [Hit("--port flag", "b.md", 1.0), Hit("default 7000", "c.md", 0.5)]
    backend.observe(InjectEvent.of(builder.build("result", two), "tool", "q"))
    list(backend("..." + ANSWER_LABEL))
    [options] = inner.calls
    assert options is not None
    assert all(f'"{word}"' in options["grammar"] for word in ("8765", "--port", "7000"))


def test_the_controller_hands_the_copying_backend_each_block_before_resuming() -> None:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The server listens on port 8765 by default.", "docs/server.md")
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port does the server use?")
    ctl = RagController(
        kb,
        k=1,
        questions=True,
        tools=False,
        layout=BlockLayout(after_block=ANSWER_LABEL),
        hooks=Hooks(on_block=backend.observe),
    )
    events = list(ctl.events(backend, "Question: Which port does the server use?\n"))
    assert [type(ev).__name__ for ev in events][:2] == ["RetrieveEvent", "InjectEvent"]
    [options] = inner.calls
    assert options is not None and '"8765"' in options["grammar"]


def test_with_first_the_typed_word_comes_from_the_earliest_passage_holding_one() -> None:
    # Two windows, best first: the second's number answers as well by its words, but the
    # answer must hold the first's; a first window without a number leaves the second's.
    builder = BlockBuilder()
    question = "Which port does the server listen on?"
    best = Hit("The server listens on port 8765.", "a.md", 1.0)
    other = Hit("The server can listen on port 9000 instead.", "b.md", 0.9)
    none = Hit("The server listens on a port.", "c.md", 0.9)
    grammars = {}
    for first in (False, True):
        for name, hits in (("both", [best, other]), ("late", [none, other])):
            inner = Recorder()
            backend = CopyingBackend(inner, question, typed=True, first=first)
            backend.observe(InjectEvent.of(builder.build("context", hits), "question", "q"))
            list(backend("..." + ANSWER_LABEL))
            [options] = inner.calls
            assert options is not None
            grammars[first, name] = options["grammar"]
    typed = {key: grammar.split("typed ::= ", 1)[1] for key, grammar in grammars.items()}
    assert '"8765"' in typed[True, "both"] and '"9000"' not in typed[True, "both"]
    assert '"9000"' in typed[True, "late"]
    # Without ``first`` both numbers stay candidates, as before.
    assert '"8765"' in typed[False, "both"] and '"9000"' in typed[False, "both"]
    # Every word of both windows may still be written around it.
    words = grammars[True, "both"].split("typed ::= ", 1)[0]
    assert '"instead"' in words and '"9000"' in words
