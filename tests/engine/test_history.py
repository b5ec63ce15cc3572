"""Any history of changes searches exactly as one fresh build of what it leaves.

A state machine drives one knowledge base through adds (a new source, a
replaced one, the same text again), removals, commits with and without
merges, ``optimize``, whole saves into a new folder, loads, and ``edit``
blocks, with searches anywhere in between (or none, so removals pile up).
At each check the knowledge base, and after each commit the index loaded
from disk, answers every query as one fresh build of the sources it should
hold: the same hits in the same order (ties by the order of adding), scores
bit for bit, the same texts, metadata, sources and collection statistics,
with and without a metadata filter, for a large ``k`` and a small one.

The machine uses the public API only.  On corpora this small the default
thresholds never reach the paths a large index takes (segments and their
merges, packed impacts served under moved statistics, texts split over
compressed blocks), so a run may shrink them first: ``small_thresholds`` is
the one place this test names the package's internals.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from clanker_rag import Analyzer, KnowledgeBase
from clanker_rag._engine import _index, _search, _stale
from clanker_rag._storage import _segments, _texts
from clanker_rag._storage._segments import Policy
from tests.helpers._profiles import examples

VOCAB = [f"t{i}" for i in range(12)]
QUERIES = ["t0", "t1 t2", "t3 t3 t4", "t5 t6 t7 t8", "t9 t10 t11 t0", "zz"]
plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)

names = st.sampled_from([f"s{i}" for i in range(20)])
# A few short texts drawn often: equal scores, so the order of adding decides ties.
texts = st.sampled_from(["", "t0", "t0", "t0 t1", "t2 t2 t3"]) | st.lists(st.sampled_from(VOCAB), max_size=14).map(
    " ".join
)
queries = st.sampled_from(QUERIES) | st.lists(st.sampled_from([*VOCAB, "zz"]), min_size=1, max_size=5).map(" ".join)
groups = st.integers(0, 1)
edits = st.lists(st.tuples(names, st.none() | texts, groups), min_size=1, max_size=3)  # a None text: remove


def small_thresholds(full_share: float, compress: bool, seed: int, order_min: int, loose: bool) -> dict[Any, Any]:
    """Module settings under which a handful of sources takes a large index's paths."""
    places: dict[Any, Any] = {
        # Commits for any size, a merge once two segments share a level; 10.0: never a full merge.
        (_segments, "POLICY"): Policy(merge_factor=2, full_share=full_share, full_below=0),
        (_texts, "COMPRESS"): compress,
        (_texts, "TEXT_BLOCK"): 32,  # texts across blocks
        (_search, "SEED"): seed,
        (_index, "ORDER_MIN"): order_min,
    }
    if loose:  # every long list served stale however far the statistics moved, its candidates scored exactly
        places |= {(_stale, "LOOSE"): math.inf, (_stale, "MOVED_SHARE"): 0, (_stale, "RECOMPUTE_SHARE"): 0}
    return places


def hits(kb: KnowledgeBase, q: str, k: int, **filters: Any) -> list[dict[str, Any]]:
    """Everything a hit says but its chunk id (which a history may number differently)."""
    return [h.to_dict() for h in kb.search(q, k, **filters)]


class History(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="history-")
        self.folders = 0
        self.patched: list[tuple[Any, str, Any]] = []
        self.options: dict[str, Any] = {}
        self.kb = KnowledgeBase()
        # Source -> (text, metadata), in the order a fresh build adds them.
        self.live: dict[str, tuple[str, dict[str, int]]] = {}
        self.folder: Path | None = None
        self.on_disk: dict[str, tuple[str, dict[str, int]]] = {}

    @initialize(
        variant=st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]),
        chunking=st.sampled_from([(None, None), (4, 2)]),
        small=st.booleans(),
        full_share=st.sampled_from([0.6, 10.0]),
        compress=st.booleans(),
        seed=st.sampled_from([1, 2, 8]),
        order_min=st.sampled_from([0, 2]),
        loose=st.booleans(),
        first=st.lists(texts, max_size=40),
    )
    def start(
        self,
        variant: str,
        chunking: tuple[int | None, int | None],
        small: bool,
        full_share: float,
        compress: bool,
        seed: int,
        order_min: int,
        loose: bool,
        first: list[str],
    ) -> None:
        if small:
            for (module, name), value in small_thresholds(full_share, compress, seed, order_min, loose).items():
                self.patched.append((module, name, getattr(module, name)))
                setattr(module, name, value)
        self.options = {"chunk_size": chunking[0], "stride": chunking[1], "analyzer": plain, "variant": variant}
        self.kb = KnowledgeBase(**self.options)
        for i, text in enumerate(first):  # a start large enough for long lists and pruned searches
            self.add(f"s{i}", text, i % 2)

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None:  # not while a failed step's error propagates: that error is the report
                self.check()  # at least once, whatever the history
        finally:
            for module, name, value in reversed(self.patched):
                setattr(module, name, value)
            self.kb = KnowledgeBase()  # drop the data files it maps before their folder goes
            self.tmp.cleanup()

    # -- the model ------------------------------------------------------------

    @staticmethod
    def put(live: dict[str, tuple[str, dict[str, int]]], source: str, text: str, group: int) -> None:
        if live.get(source) != (text, {"g": group}):  # the same text and metadata again change nothing
            live.pop(source, None)
            live[source] = (text, {"g": group})

    def fresh(self, live: dict[str, tuple[str, dict[str, int]]]) -> KnowledgeBase:
        kb = KnowledgeBase(**self.options)
        for source, (text, metadata) in live.items():
            kb.add_text(text, source, metadata)
        return kb

    def same_as_fresh(self, kb: KnowledgeBase, live: dict[str, tuple[str, dict[str, int]]]) -> None:
        fresh = self.fresh(live)
        assert kb.sources() == fresh.sources() == sorted(live)
        assert len(kb) == len(fresh)
        for source, (text, metadata) in live.items():
            assert kb.source_text(source) == text and kb.source_metadata(source) == metadata
        mine, theirs = kb.collection_stats(VOCAB), fresh.collection_stats(VOCAB)
        assert (mine.n_docs, mine.total_length) == (theirs.n_docs, theirs.total_length)
        assert {t: n for t, n in mine.df.items() if n} == {t: n for t, n in theirs.df.items() if n}
        for q in QUERIES:
            for k in (100, 1, 3):
                assert hits(kb, q, k) == hits(fresh, q, k), (q, k)
            assert hits(kb, q, 3, where={"g": 0}) == hits(fresh, q, 3, where={"g": 0}), q

    def new_folder(self) -> Path:
        self.folders += 1
        return Path(self.tmp.name) / f"index-{self.folders}"

    def committed(self) -> None:
        """The folder now holds the live sources; a load of it must say so."""
        assert self.folder is not None
        self.on_disk = dict(self.live)
        self.same_as_fresh(KnowledgeBase.load(self.folder), self.on_disk)

    # -- changes ----------------------------------------------------------------

    @rule(source=names, text=texts, group=groups)
    def add(self, source: str, text: str, group: int) -> None:
        self.kb.add_text(text, source, {"g": group})
        self.put(self.live, source, text, group)

    @rule(source=names)
    def move(self, source: str) -> None:
        """The same text removed and added again: now the last added, so it loses the ties it won."""
        if source in self.live:
            text, metadata = self.live[source]
            self.remove(source)
            self.add(source, text, metadata["g"])

    @rule(source=names)
    def remove(self, source: str) -> None:
        held = self.live.pop(source, None)
        chunks = 0 if held is None else len(list(self.fresh({source: held}).chunks(source)))
        assert self.kb.remove(source) == chunks

    # -- saves and loads ------------------------------------------------------

    @rule()
    def save_whole(self) -> None:
        """A save into a new folder: the whole index as one segment, and the folder it commits to from then on."""
        self.folder = self.new_folder()
        self.kb.save(self.folder)
        self.committed()

    @precondition(lambda self: self.folder is not None)
    @rule(merge=st.booleans())
    def commit(self, merge: bool) -> None:
        self.kb.save(merge=merge)
        self.committed()

    @precondition(lambda self: self.folder is not None)
    @rule()
    def optimize(self) -> None:
        self.kb.optimize()
        assert self.kb.segments == 1
        self.committed()

    @precondition(lambda self: self.folder is not None)
    @rule()
    def load(self) -> None:
        """Changes not committed are dropped."""
        assert self.folder is not None
        self.kb = KnowledgeBase.load(self.folder)
        self.live = dict(self.on_disk)

    @precondition(lambda self: self.folder is not None)
    @rule(changes=edits)
    def edit(self, changes: list[tuple[str, str | None, int]]) -> None:
        """Another writer's load-change-save; this one carries on with what it saved (its own changes dropped)."""
        assert self.folder is not None
        live = dict(self.on_disk)
        with KnowledgeBase.edit(self.folder) as kb:
            for source, text, group in changes:
                if text is None:
                    kb.remove(source)
                    live.pop(source, None)
                else:
                    kb.add_text(text, source, {"g": group})
                    self.put(live, source, text, group)
        self.kb, self.live = kb, live
        self.committed()

    # -- searches ---------------------------------------------------------------

    @rule(q=queries, k=st.integers(1, 4))
    def search(self, q: str, k: int) -> None:
        """One query: it reads (and sweeps) only its terms' lists."""
        assert hits(self.kb, q, k) == hits(self.fresh(self.live), q, k)

    @rule()
    def check(self) -> None:
        self.same_as_fresh(self.kb, self.live)


History.TestCase.settings = settings(max_examples=examples(300), stateful_step_count=25, deadline=None)
test_any_history_searches_as_one_fresh_build = pytest.mark.slow(History.TestCase)
