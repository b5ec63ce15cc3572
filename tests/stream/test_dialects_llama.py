"""The shipped Gemma-3-270M writes calls in the ``clanker`` and ``search-r1`` dialects.

Gemma-3-270M is a base model: it was never trained on either format.  A
few-shot prompt written in the dialect (two solved questions whose calls and
result blocks have the exact bytes the controller writes) is enough for it to
copy the pattern: it writes the call for the new question, the controller
catches it, answers in the dialect's result frame, and the model's sentence
after the block copies the passage.  The knowledge base describes an invented
daemon, so the model cannot know the facts it answers with.

The result frames are written out here by hand from each format's source
(this package's ``<result>``; Search-R1's ``infer.py``), not read from the
dialect table.
"""

from __future__ import annotations

import pytest

from clanker_rag import Triggers
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._controller import InjectEvent, RagController, RetrieveEvent, TextEvent
from clanker_rag.backends import LlamaCppBackend
from tests.helpers._backends import RecordingBackend
from tests.helpers._llama_server import LlamaServer

pytestmark = [pytest.mark.llama, pytest.mark.slow]

DOCS = {
    "docs/zorbel-port.md": "The zorbel daemon listens on port 6182 by default.",
    "docs/zorbel-config.md": "The zorbel daemon reads its settings from the file quasar.toml.",
    "docs/zorbel-author.md": "The zorbel tool was written by Ilsa Marrow in 2019.",
    "docs/zorbel-lang.md": "The zorbel daemon is written in the Nim programming language.",
}

# Two solved questions per dialect; the blocks have the controller's exact bytes.
CLANKER_SHOTS = """Answer the question. Search first by writing <tool name="retrieve">query</tool>; \
the results come in a <result> block. Then answer in one sentence.

Question: Which colour is the brimble logo?
Answer: <tool name="retrieve">brimble logo colour</tool>
<result>
[1] docs/brimble.md:1-1
The brimble logo is teal on a grey background.
</result>
The brimble logo is teal.

Question: Who founded the Karvo bakery?
Answer: <tool name="retrieve">Karvo bakery founder</tool>
<result>
[1] docs/karvo.md:1-1
The Karvo bakery was founded by Odo Penn.
</result>
The Karvo bakery was founded by Odo Penn.

"""
SEARCH_R1_SHOTS = """Answer the question. Search first by writing <search> query </search>; \
the results come between <information> and </information>. Then answer in one sentence.

Question: Which colour is the brimble logo?
Answer: <search> brimble logo colour </search>

<information>[1] docs/brimble.md:1-1
The brimble logo is teal on a grey background.
</information>

The brimble logo is teal.

Question: Who founded the Karvo bakery?
Answer: <search> Karvo bakery founder </search>

<information>[1] docs/karvo.md:1-1
The Karvo bakery was founded by Odo Penn.
</information>

The Karvo bakery was founded by Odo Penn.

"""

# dialect -> (few-shot prompt, the call's opener, the closer the server stops on, result frame)
DIALECTS = {
    "clanker": (CLANKER_SHOTS, '<tool name="retrieve">', "</tool>", "\n<result>\n", "</result>\n"),
    "search-r1": (SEARCH_R1_SHOTS, "<search>", "</search>", "\n\n<information>", "</information>\n\n"),
}
QUESTIONS = [
    ("What port does the zorbel daemon listen on?", "docs/zorbel-port.md", "6182"),
    ("Which file holds the zorbel settings?", "docs/zorbel-config.md", "quasar.toml"),
]


@pytest.fixture()
def kb() -> KnowledgeBase:
    base = KnowledgeBase(chunk_size=None)
    for source, text in DOCS.items():
        base.add_text(text, source)
    return base


@pytest.mark.parametrize(("question", "source", "fact"), QUESTIONS, ids=["port", "settings"])
@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_the_base_model_calls_in_the_dialect_reads_the_block_and_answers_from_it(
    llama_server: LlamaServer, kb: KnowledgeBase, dialect: str, question: str, source: str, fact: str
) -> None:
    shots, opener, closer, head, tail = DIALECTS[dialect]
    prompt = f"{shots}Question: {question}\nAnswer:"
    rec = RecordingBackend(LlamaCppBackend(llama_server.url, n_predict=40, timeout=120))
    # A 270M model's own query is sometimes misspelt or borrowed from the examples: "fuse" also
    # searches the question and fuses the two rankings (docs/controller.md), as ask and serve do.
    ctl = RagController(kb, k=1, stop=["\nQuestion:"], dialect=dialect, triggers=Triggers(tool_query="fuse"))
    events = list(ctl.events(rec, prompt))

    # The model wrote its own call in the dialect; the server stopped on the closer.
    first = "".join(t.text for t in rec.pieces[0])
    assert first.lstrip().startswith(opener), f"no {dialect} call; the model wrote {first!r}"
    assert rec.pieces[0][-1].stop == closer
    retrievals = [e for e in events if isinstance(e, RetrieveEvent)]
    assert len(retrievals) == 1 and retrievals[0].query.strip()

    # The passage came back in the dialect's own result frame.
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    assert block.startswith(f"{head}[1] {source}") and block.endswith(tail)
    assert fact in block

    # Generation resumed on the exact bytes: prompt, the call, its closer, the block.
    assert len(rec.prompts) == 2
    assert rec.prompts[1] == prompt + first + closer + block

    # The sentence after the block holds the fact, which only the knowledge base knows.
    answer = "".join(t.text for t in rec.pieces[1])
    assert fact in answer, f"answer after the block: {answer!r}"
    visible = "".join(e.text for e in events if isinstance(e, TextEvent))
    assert opener.strip() not in visible and fact in visible
