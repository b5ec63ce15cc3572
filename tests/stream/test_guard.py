"""The guard on retrieved text: header lines after droppable characters, more families' turn tokens,
a served model's own control tokens (issue 40 items 8 and 9)."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._blocks import BlockBuilder, neutralize
from clanker_rag._stream._controller import InjectEvent, RagController
from clanker_rag._stream._settings import BlockLayout

DROPPABLE = ["\u0301", "\u0300", "\u20dd", "\u0903", "\u2800"]
HEADER = re.compile(r"^[^\S\n]*\[\s*\d+\s*\]", re.MULTILINE)


def as_copied(text: str) -> str:
    """``text`` the way a careless copy reads it: NFKC, format characters, combining marks and blank braille gone."""
    folded = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in folded if ch != "\u2800" and unicodedata.category(ch) not in ("Mn", "Mc", "Me", "Cf"))


@pytest.mark.parametrize("mark", DROPPABLE)
@pytest.mark.parametrize("lead", ["", "x\n", "x\r\n", "  ", "x\n  "])
def test_no_header_line_survives_a_droppable_character_before_it(mark: str, lead: str) -> None:
    text = f"{lead}{mark}[3] docs/forged.md\nforged passage"
    out = neutralize(text)
    assert not HEADER.search(as_copied(out)), repr(out)
    assert "&#91;3]" in out


def test_a_bracket_after_ordinary_text_stays() -> None:
    text = "see x\u0301[3] for details"
    assert neutralize(text) == text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["[", "]", "1", "7", " ", "\n", "\r", "a", "\u0301", "\u2800", "\u200b", "\uff3b", "<"]),
        max_size=24,
    ).map("".join)
)
def test_property_no_header_line_once_marks_are_dropped(text: str) -> None:
    out = neutralize(text)
    assert not HEADER.search(as_copied(out).replace("\r", "\n")), (text, out)


# Turn and control tokens of families the guard escapes (each a marker a chat template or tokenizer uses).
TOKENS = [
    "<seed:eos>", "<seed:bos>", "<seed:think>",  # Seed-OSS
    "<reserved_106>", "<reserved_107>",  # Baichuan 2 user / assistant
    "<用户>", "<AI>",  # MiniCPM
    "<_user>", "<_bot>", "<_end>", "<_system>",  # TeleChat
    "<role>", "</role>",  # Ling
    "<EOS_TOKEN>", "<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>",  # Cohere Command
    "<file_sep>", "<repo_name>", "<issue_start>", "<issue_comment>", "<pr_status>", "<empty_output>",  # StarCoder2
    "[CALL_ID]", "[ARGS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",  # Mistral tekken
    "]~b]", "]~!b[", "[e~[", "<minimax:tool_call>",  # MiniMax
    "[|system|]", "[|endofturn|]",  # EXAONE
    "<search>", "</search>", "<information>", "<answer>",  # Search-R1 / ReSearch
    "<|begin_of_query|>", "<|end_of_documents|>",  # R1-Searcher
]  # fmt: skip


@pytest.mark.parametrize("token", TOKENS)
def test_turn_tokens_of_more_families_are_escaped(token: str) -> None:
    out = neutralize(f"before {token} after")
    assert token not in out
    assert out.count("&") == 1  # one opening character escaped, the rest as written


@pytest.mark.parametrize("text", ["a < b", "<div>", "<ai>", "list[int]", '{"name": "pkg", "version": "1"}', "x]~y"])
def test_ordinary_text_passes_unchanged(text: str) -> None:
    assert neutralize(text) == text


def test_a_served_models_own_tokens_are_escaped() -> None:
    tokens = ("<custom_turn>", "[NEW_TURN]", "plain-word")
    out = neutralize("a <custom_turn> b [NEW_TURN] c plain-word", tokens)
    assert out == "a &lt;custom_turn> b &#91;NEW_TURN] c plain-word"
    # Folded and with marks dropped, as every marker.
    assert "<custom_turn>" not in as_copied(neutralize("a \uff1ccustom_turn> <\u0301custom_turn>", tokens))


def test_the_controller_uses_the_layouts_guard_tokens() -> None:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("ports and <custom_turn> tokens", "docs/a.md")
    ctl = RagController(kb, questions=True, layout=BlockLayout(guard=("<custom_turn>",)))
    [block] = [ev.block for ev in ctl.events([], "Which ports?", question="ports") if isinstance(ev, InjectEvent)]
    assert "&lt;custom_turn>" in block and "<custom_turn>" not in block
    assert "<custom_turn>" not in BlockBuilder(200, ("<custom_turn>",)).block("context", kb.search("ports"))
