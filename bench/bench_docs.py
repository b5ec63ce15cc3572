"""Answers on documentation we did not write: what reaches the model, and what the shipped model answers.

The docs folders of twenty-three projects come from their source distributions
(``pip download --no-binary :all: --no-deps PKG==V``), fetched into a cache
folder (``--cache``, default ``$TMPDIR/clanker-rag-bench-docs``) and never
committed; each is ingested into a fresh in-memory knowledge base as
``clanker-rag ingest DOCS`` would.  Our own docs (the shipped index,
``bench/answers_qa.jsonl``) are one more collection, ``clanker``.

Questions: ``bench/docs_qa.jsonl`` (collection, kind, question, accepted
answers); ``--check`` verifies every answer occurs in its collection's text
and is not given away by its question.

Two measures:

* **inject** (model-independent, no server): is an accepted answer in the
  top 3 passages at all, and in the text ``ask`` injects (the blocks the
  controller builds for the question, as ``ask`` configures it);
* **answer** (``--model``): the shipped Gemma-3-270M through the ``ask`` path
  (:func:`clanker_rag._answer._ask.ask_events`, ``max_tokens=96``) on a
  llama.cpp server this script starts on 127.0.0.1 (or ``--url``), plus the
  no-retrieval baseline (the same few-shot prompt without passages); median
  and 95th-percentile seconds to answer.

Every miss gets a failure class: ``retrieval miss`` (no top-3 passage holds
the answer), ``wrong passage`` (a top-3 passage does, the injected one does
not), ``wrong window`` (the injected passage's chunk holds it, the window cut
it), ``model copied wrong`` (the injected text holds it, the answer does not).

    python bench/bench_docs.py --check
    python bench/bench_docs.py                        # inject measure, every collection
    python bench/bench_docs.py --model -v             # both measures, every answer printed
    python bench/bench_docs.py --collections werkzeug --model

``pytest`` (8.3.3, ``doc/en``), ``attrs`` (24.2.0), ``coverage`` (7.6.1,
``doc``), ``black`` (24.8.0), then ``marshmallow`` (4.4.0), ``markdown``
(3.11.3) and ``scrapy`` (2.19.0), then ``gunicorn`` (27.0.1), ``structlog``
(26.1.0) and ``celery`` (5.7.0), then ``hatch`` (1.18.2), ``aiohttp``
(3.14.5) and ``alembic`` (1.20.1, ``docs/build``), then ``pip`` (26.3,
``docs/html``), ``peewee`` (4.5.3) and ``supervisor`` (4.3.0), then
``pyinstaller`` (6.22.3, ``doc``), ``huey`` (3.5.4) and ``borgmatic`` (2.1.10)
were held-out sets, written from the docs without running retrieval or a model
on them and each reported once, at the end of a session or before anything was
changed; every collection is now development data (the learned chooser's
weights, ``bench/train_selector.py``, are fitted on the collections that were
development data when it was last run).  A new held-out set goes in
``HELD_OUT``: the default run leaves it out so that nothing is tuned on it by
accident.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import QA, contains, correct  # noqa: E402
from bench.answers_qa import load as load_own  # noqa: E402
from clanker_rag._answer._ask import AnswerSettings, answer_controller, ask_events  # noqa: E402
from clanker_rag._answer._prompts import ANSWER_LABEL, STOP, base_prompt  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._retrieval._proximity import ProximityRetriever  # noqa: E402
from clanker_rag._stream._controller import InjectEvent, RetrieveEvent, TextEvent  # noqa: E402
from clanker_rag._types import HitLike  # noqa: E402

QA_PATH = ROOT / "bench" / "docs_qa.jsonl"
RESULTS = ROOT / "bench" / "results" / "docs_answers.json"
PACKAGES = {
    "click": "click==8.1.7",
    "flask": "flask==3.0.3",
    "jinja2": "jinja2==3.1.4",
    "werkzeug": "werkzeug==3.0.3",
    "pytest": "pytest==8.3.3",
    "attrs": "attrs==24.2.0",
    "coverage": "coverage==7.6.1",
    "black": "black==24.8.0",
    "marshmallow": "marshmallow==4.4.0",
    "markdown": "markdown==3.11.3",
    "scrapy": "scrapy==2.19.0",
    "gunicorn": "gunicorn==27.0.1",
    "structlog": "structlog==26.1.0",
    "celery": "celery==5.7.0",
    "hatch": "hatch==1.18.2",
    "aiohttp": "aiohttp==3.14.5",
    "alembic": "alembic==1.20.1",
    "pip": "pip==26.3",
    "peewee": "peewee==4.5.3",
    "supervisor": "supervisor==4.3.0",
    "pyinstaller": "pyinstaller==6.22.3",
    "huey": "huey==3.5.4",
    "borgmatic": "borgmatic==2.1.10",
}
# The docs folder inside each sdist, where it is not ``docs`` (alembic's ``docs`` also holds
# the built HTML and a second copy of every source under ``_sources``; ``docs/build`` is the
# reStructuredText alone. pip's ``docs`` also holds ``man``, generated stubs whose options are
# filled in at build time; ``docs/html`` is the hand-written documentation).
DOCS_FOLDER = {
    "pytest": "doc/en",
    "coverage": "doc",
    "alembic": "docs/build",
    "pip": "docs/html",
    "pyinstaller": "doc",
}
# Questions written after every default was decided are run only by name, so
# that tuning on the default run never sees them; the next set a helper writes
# goes here. pytest, attrs, coverage, black, marshmallow, markdown, scrapy,
# gunicorn, structlog, celery, hatch, aiohttp, alembic, pip, peewee, supervisor,
# pyinstaller, huey and borgmatic were held out this way, each reported once
# (bench/RESULTS.md); they are development data now.
HELD_OUT: tuple[str, ...] = ()
OWN = "clanker"
COLLECTIONS = (*PACKAGES, OWN)
DEFAULT_COLLECTIONS = tuple(name for name in COLLECTIONS if name not in HELD_OUT)
TOP = 3


@dataclass(frozen=True)
class Item:
    id: str
    collection: str
    kind: str
    question: str
    answers: tuple[str, ...]

    def qa(self) -> QA:
        return QA(self.id, "", self.question, self.answers, "test")


def kind_of(question: str) -> str:
    """The kind of one of our own questions (the third-party ones say theirs)."""
    q = question.lower()
    if q.startswith(("how do", "how can", "how should")):
        return "howto"
    if q.startswith(("how many", "how long", "how much", "what is the default", "what port")) or "default" in q:
        return "default" if "default" in q else "number"
    return "which"


def load(collections: Sequence[str]) -> list[Item]:
    items = []
    if set(collections) & set(PACKAGES):
        for line in QA_PATH.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                if obj["collection"] in collections:
                    items.append(
                        Item(obj["id"], obj["collection"], obj["kind"], obj["question"], tuple(obj["answers"]))
                    )
    if OWN in collections:
        # The test half only: the tune half has been used to decide defaults before.
        items += [Item(qa.id, OWN, kind_of(qa.question), qa.question, qa.answers) for qa in load_own(split="test")]
    return items


# -- the collections -------------------------------------------------------------------


def fetch(name: str, cache: Path) -> Path:
    """The docs folder of ``name``'s source distribution, downloaded and unpacked once into ``cache``."""
    spec = PACKAGES[name]
    dist, version = spec.split("==")
    folder = DOCS_FOLDER.get(name, "docs")
    docs = cache / f"{dist}-{version}" / folder
    if docs.is_dir():
        return docs
    sdists = cache / "sdist"
    sdists.mkdir(parents=True, exist_ok=True)
    archive = sdists / f"{dist}-{version}.tar.gz"
    if not archive.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", spec, "-d", str(sdists)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
    prefix = f"{dist}-{version}/{folder}/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        tar.extractall(cache, members=members, filter="data")
    return docs


def knowledge_base(name: str, cache: Path) -> KnowledgeBase:
    if name == OWN:
        return KnowledgeBase.default()
    kb = KnowledgeBase()
    kb.ingest(fetch(name, cache))
    return kb


def collection_text(name: str, kb: KnowledgeBase) -> str:
    """Everything the index holds: an answer pattern must occur in it."""
    return "\n".join(kb.source_text(source) or "" for source in kb.sources())


def problems(items: Sequence[Item], kbs: dict[str, KnowledgeBase]) -> list[str]:
    out = []
    seen: set[str] = set()
    texts = {name: collection_text(name, kb) for name, kb in kbs.items()}
    for item in items:
        if item.id in seen:
            out.append(f"{item.id}: duplicate id")
        seen.add(item.id)
        if item.kind not in ("default", "number", "which", "howto"):
            out.append(f"{item.id}: kind {item.kind!r}")
        for answer in item.answers:
            if not contains(texts[item.collection], answer):
                out.append(f"{item.id}: {answer!r} is not in the {item.collection} docs")
            if contains(item.question, answer):
                out.append(f"{item.id}: {answer!r} is given away by the question")
    return out


# -- measures --------------------------------------------------------------------------


@dataclass
class Record:
    id: str
    collection: str
    kind: str
    question: str
    top3: bool  # an accepted answer in the top 3 passages
    injected: bool  # ... in the injected text
    passage: bool  # ... in the whole chunk the injected window was cut from
    block: str
    answer: str | None = None
    correct: bool | None = None
    seconds: float | None = None
    baseline: str | None = None
    baseline_correct: bool | None = None
    failure: str | None = None
    sources: list[str] = field(default_factory=list)


class _Recording:
    """The knowledge base, remembering the hits of its last search (before focusing)."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.analyzer = kb.analyzer
        self.bm25 = kb.bm25
        self.last: list[HitLike] = []

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[HitLike]:
        self.last = list(self.kb.search(query, k, **kwargs))
        return self.last

    def collection_stats(self, terms: Any) -> Any:
        # What ask's proximity reranking weighs words by: as it reranks the knowledge base itself.
        return self.kb.collection_stats(terms)


def _nothing(prompt: str, stop: Sequence[str]) -> Iterator[str]:
    return iter(())


def _within(at: object, hit: HitLike) -> bool:
    start, end = getattr(hit, "start", None), getattr(hit, "end", None)
    return isinstance(at, int) and isinstance(start, int) and isinstance(end, int) and start <= at < end


def retriever_of(kb: Any, proximity: float) -> Any:
    """What ask retrieves from: the knowledge base, or (to compare) its hits reranked by term proximity."""
    return ProximityRetriever(kb, weight=proximity) if proximity else kb


def injected(kb: KnowledgeBase, item: Item, settings: AnswerSettings, proximity: float = 0.0) -> Record:
    """What ``ask`` would inject for ``item`` (no model: a generation that writes nothing)."""
    qa = item.qa()
    # The passages ask's retrieval puts first.
    top = retriever_of(kb, proximity).search(item.question, TOP)
    rec = _Recording(kb)
    ctl = answer_controller(retriever_of(rec, proximity), item.question, settings)
    blocks, chunks = [], []
    for ev in ctl.events(_nothing, base_prompt(item.question, settings.mode), question=item.question):
        if isinstance(ev, InjectEvent):
            blocks.append(ev.block)
        elif isinstance(ev, RetrieveEvent):
            for shown in ev.hits[: ctl.k]:
                # The chunk each shown window was cut from.
                at = getattr(shown, "start", None)
                chunks += [h.text for h in rec.last if h.source == shown.source and _within(at, h)]
    block = "".join(blocks)
    return Record(
        item.id,
        item.collection,
        item.kind,
        item.question,
        top3=any(correct(h.text, qa) for h in top),
        injected=correct(block, qa),
        passage=any(correct(text, qa) for text in chunks),
        block=block,
        sources=[h.source for h in top],
    )


def classify(rec: Record) -> str | None:
    if rec.correct:
        return None
    if not rec.top3:
        return "retrieval miss"
    if not rec.passage:
        return "wrong passage"
    if not rec.injected:
        return "wrong window"
    return "model copied wrong"


def answer(kb: KnowledgeBase, item: Item, url: str, rec: Record, proximity: float = 0.0, baseline: bool = True) -> None:
    from clanker_rag.backends import LlamaCppBackend

    started = time.perf_counter()
    events = ask_events(retriever_of(kb, proximity), item.question, url, max_tokens=96)
    rec.answer = "".join(ev.text for ev in events if isinstance(ev, TextEvent)).strip()
    rec.seconds = time.perf_counter() - started
    rec.correct = correct(rec.answer, item.qa())
    rec.failure = classify(rec)
    if not baseline:
        return
    llama = LlamaCppBackend(url, n_predict=96, temperature=0.0, cache_prompt=True, timeout=300)
    baseline = "".join(t.text for t in llama(base_prompt(item.question, "none"), STOP)).strip()
    rec.baseline = baseline.removeprefix(ANSWER_LABEL).strip()
    rec.baseline_correct = correct(rec.baseline, item.qa())


# -- report ----------------------------------------------------------------------------


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def rows(records: Sequence[Record], key: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(getattr(r, key) for r in records):
        chosen = [r for r in records if getattr(r, key) == group]
        in_top = [r for r in chosen if r.top3]
        row: dict[str, float] = {
            "n": len(chosen),
            "top3": sum(r.top3 for r in chosen),
            "injected": sum(r.injected for r in chosen),
            "injected_of_top3": sum(r.injected for r in in_top) / len(in_top) if in_top else 0.0,
        }
        answered = [r for r in chosen if r.correct is not None]
        if answered:
            row["correct"] = sum(bool(r.correct) for r in answered)
            row["baseline"] = sum(bool(r.baseline_correct) for r in answered)
            times = [r.seconds or 0.0 for r in answered]
            row["median_s"] = statistics.median(times)
            row["p95_s"] = p95(times)
        out[group] = row
    return out


def print_rows(title: str, table: dict[str, dict[str, float]]) -> None:
    cols = ("n", "top3", "inj", "inj|top3", "answer", "base", "med s", "p95 s")
    print(f"{title:<10} " + " ".join(f"{c:>{w}}" for c, w in zip(cols, (3, 5, 5, 9, 7, 5, 6, 6))))
    for group, r in table.items():
        line = f"{group:<10} {r['n']:>3.0f} {r['top3']:>5.0f} {r['injected']:>5.0f} {r['injected_of_top3']:>9.0%}"
        if "correct" in r:
            acc = r["correct"] / r["n"]
            line += f" {acc:>7.0%} {r['baseline']:>5.0f} {r['median_s']:>6.2f} {r['p95_s']:>6.2f}"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=list(DEFAULT_COLLECTIONS), choices=COLLECTIONS)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--check", action="store_true", help="only check the answer patterns against the docs")
    parser.add_argument("--model", action="store_true", help="also ask the shipped model (starts llama.cpp)")
    parser.add_argument("--url", help="a running llama.cpp server to use instead of starting one")
    parser.add_argument("--label", help="store the records in bench/results/docs_answers.json under this name")
    parser.add_argument("--no-baseline", action="store_true", help="skip the no-retrieval answers (half the time)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every question")
    parser.add_argument(
        "--proximity", type=float, default=0.0, help="ask's hits reranked by term proximity with this weight (0: off)"
    )
    args = parser.parse_args()
    settings = AnswerSettings()
    items = load(args.collections)
    kbs = {name: knowledge_base(name, args.cache) for name in args.collections}
    bad = problems(items, kbs)
    for line in bad:
        print(line)
    if args.check or bad:
        print(f"{len(items)} questions, {len(bad)} problems")
        return 1 if bad else 0
    records = [injected(kbs[item.collection], item, settings, args.proximity) for item in items]
    if args.model or args.url:
        if args.url:
            url = args.url.rstrip("/")
            for item, rec in zip(items, records):
                answer(kbs[item.collection], item, url, rec, args.proximity, not args.no_baseline)
        else:
            from tests.helpers._llama_server import LlamaServer

            with LlamaServer() as server:
                for item, rec in zip(items, records):
                    answer(kbs[item.collection], item, server.url, rec, args.proximity, not args.no_baseline)
    for rec in records:
        if rec.correct is None:
            rec.failure = (
                None
                if rec.injected
                else ("retrieval miss" if not rec.top3 else "wrong window" if rec.passage else "wrong passage")
            )
    if args.verbose:
        for rec in records:
            mark = "ok " if (rec.correct if rec.correct is not None else rec.injected) else "BAD"
            shown = rec.answer if rec.answer is not None else " ".join(rec.block.split())[:150]
            print(f"{mark} {rec.id:<11} top3={rec.top3:d} inj={rec.injected:d} {rec.failure or '':<18} {shown!r}")
    print_rows("collection", rows(records, "collection"))
    print_rows("kind", rows(records, "kind"))
    failures: dict[str, int] = {}
    for rec in records:
        if rec.failure:
            failures[rec.failure] = failures.get(rec.failure, 0) + 1
    print("failures:", ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none")
    if args.label:
        RESULTS.parent.mkdir(exist_ok=True)
        stored = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        stored[args.label] = [asdict(r) for r in records]
        RESULTS.write_text(json.dumps(stored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CLANKER_RAG_SHARED", str(ROOT.parent / "shared"))
    sys.exit(main())
