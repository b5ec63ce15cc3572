"""Parallel ingest: worker processes read and count, the index comes out as a serial ingest makes it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clanker_rag._engine._writing import IndexWriter
from clanker_rag._exceptions import ConfigError
from clanker_rag._ingest import _parallel, _run
from clanker_rag._ingest._parallel import usable_cpus
from clanker_rag._ingest._readers import read_document
from clanker_rag._ingest._report import IngestReport
from clanker_rag._kb import KnowledgeBase
from tests.helpers._trees import write


def ingest(kb: KnowledgeBase, path: Any, **options: Any) -> IngestReport:
    """The ingest as ``kb.ingest`` runs it (with the knowledge base's own writer)."""
    return kb.ingest(path, **options)


ROOT = Path(__file__).resolve().parents[2]
KEY_BLOCK = "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nabc\n-----END " + "OPENSSH PRIVATE KEY-----\n"
WORDS = (
    "river",
    "stone",
    "lantern",
    "copper",
    "meadow",
    "signal",
    "harbor",
    "thistle",
    "orbit",
    "quartz",
    "Élan",
    "naïve",
    "東京大学",
    "parse_config",
    "HTTPServer2",
    "getValue",
    "x2",
    "the",
    "and",
    "running",
)


REAL_START_METHOD = _parallel.start_method


@pytest.fixture(autouse=True)
def fork_workers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork workers, as the command-line tool does, even when an earlier test
    left a thread running (the llama.cpp server's log reader, say): forked
    workers inherit this test's monkeypatches.  Tests of the start method
    itself opt out with ``real_start_method``."""
    if "real_start_method" not in request.keywords:
        monkeypatch.setattr(_parallel, "start_method", lambda explicit: "fork")
    # The test trees are small: start workers for them anyway.
    monkeypatch.setattr(_parallel, "POOL_MIN_BYTES", 0)


def make_tree(root: Path, n: int = 40) -> None:
    """Every reader and most skip reasons, in more files than one batch holds."""
    for i in range(n):
        words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(30 + i))
        write(root, f"docs/page{i:02d}.md", f"# Page {i}\n\n## Part\n\n{words}\n\n```\ncode block {i}\n```\n")
        write(
            root,
            f"src/mod{i:02d}.py",
            f"import os\n\n\ndef func_{i}(value):\n    return value + {i}  # {words}\n\n\n"
            f"class Thing{i}:\n    def method(self):\n        return '{words[:40]}'\n",
        )
    write(root, "notes.txt", "plain notes about the harbor and quartz " * 50)
    write(root, "data/rows.csv", "name,city\n" + "".join(f"n{i},meadow {i}\n" for i in range(30)))
    write(root, "data/items.jsonl", "".join(json.dumps({"id": i, "text": f"orbit {i}"}) + "\n" for i in range(10)))
    write(
        root,
        "site/index.html",
        "<html><head><title>Lantern</title><script>x()</script></head><body><p>copper signal</p></body></html>",
    )
    write(root, "cp1252.txt", "caf\xe9 cr\xe8me".encode("cp1252"))
    write(root, "empty.md", "   \n")
    write(root, "binary.txt", b"\x00\x01\x02binary")
    write(root, "deploy/key.txt", "config\n" + KEY_BLOCK)
    write(root, ".env", "SECRET=1")


def saved(kb: KnowledgeBase, where: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The saved index: its manifest body and every data file, byte for byte."""
    kb.save(where)
    body = json.loads((where / "index.json").read_text("utf-8"))["body"]
    files = {p.name: p.read_bytes() for p in where.iterdir() if p.name.startswith("data-")}
    return body, files


def report_view(report: IngestReport) -> dict[str, Any]:
    view = report.to_dict()
    for key in ("seconds", "workers"):
        view.pop(key)
    return view


def both(tree: Path, tmp: Path, **options: object) -> tuple[KnowledgeBase, IngestReport, KnowledgeBase, IngestReport]:
    serial_kb, parallel_kb = KnowledgeBase(chunk_size=40, stride=20), KnowledgeBase(chunk_size=40, stride=20)
    serial = ingest(serial_kb, tree, jobs=1, progress=False, **options)
    parallel = ingest(parallel_kb, tree, jobs=3, progress=False, **options)
    return serial_kb, serial, parallel_kb, parallel


def assert_same(a: KnowledgeBase, b: KnowledgeBase, tmp: Path) -> None:
    for sub in ("a", "b"):
        shutil.rmtree(tmp / sub, ignore_errors=True)
    assert saved(a, tmp / "a") == saved(b, tmp / "b")
    for query in ("harbor quartz", "func_3 value", "Thing7 method", "東京", "café", "meadow"):
        assert [(h.source, h.chunk_index, h.score) for h in a.search(query, 5)] == [
            (h.source, h.chunk_index, h.score) for h in b.search(query, 5)
        ]


def test_parallel_ingest_builds_the_serial_index_byte_for_byte(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    serial_kb, serial, parallel_kb, parallel = both(tree, tmp_path)
    assert serial.workers == 0 and parallel.workers == 2  # and this process
    assert report_view(parallel) == report_view(serial)
    assert len(parallel.added) == 40 * 2 + 5  # md, py, txt, csv, jsonl, html, cp1252
    reasons = dict(parallel.skipped)
    assert reasons["empty.md"] == "empty or whitespace-only"
    assert reasons["binary.txt"].startswith("binary file")
    assert reasons["deploy/key.txt"].startswith("secret guard")
    assert parallel_kb.source_metadata("cp1252.txt")["encoding"] == "cp1252"  # type: ignore[index]
    # Term ids are created in the same order, so the saved bytes are equal.
    assert parallel_kb._index.terms == serial_kb._index.terms
    assert_same(serial_kb, parallel_kb, tmp_path)


def test_parallel_reingest_replaces_adds_and_removes_like_serial(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    serial_kb, _, parallel_kb, _ = both(tree, tmp_path)
    write(tree, "docs/page03.md", "# Rewritten\n\nzeppelin only now\n")
    (tree / "src/mod05.py").unlink()
    write(tree, "docs/new.md", "# New\n\nfresh zeppelin\n")
    os.utime(tree / "notes.txt", ns=(1, 1))  # touched, same content: unchanged by hash
    again_serial = ingest(serial_kb, tree, jobs=1, progress=False)
    again_parallel = ingest(parallel_kb, tree, jobs=2, progress=False)
    assert report_view(again_parallel) == report_view(again_serial)
    assert again_parallel.updated == ["docs/page03.md"] and again_parallel.added == ["docs/new.md"]
    assert again_parallel.removed == ["src/mod05.py"]
    assert "notes.txt" in again_parallel.unchanged
    assert {h.source for h in parallel_kb.search("zeppelin", 5)} == {"docs/page03.md", "docs/new.md"}
    assert not [h for h in parallel_kb.search("Page 3", 50) if h.source == "docs/page03.md" and "Part" in h.text]
    assert_same(serial_kb, parallel_kb, tmp_path)


def test_this_process_reads_too_while_the_workers_are_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    real = _parallel.Worker.prepare
    main = os.getpid()

    def slow(self: _parallel.Worker, task: _parallel.Task) -> object:
        if os.getpid() != main:
            time.sleep(0.02)  # a worker far slower than this process
        return real(self, task)

    here: list[int] = []
    there: list[int] = []
    real_here, real_collect = _parallel.ParallelReader._prepare_here, _parallel.ParallelReader._collect

    def spy_here(self: _parallel.ParallelReader, batch: _parallel._Batch) -> None:
        here.append(len(batch.entries))
        real_here(self, batch)

    def spy_collect(self: _parallel.ParallelReader, batch: _parallel._Batch) -> None:
        real_collect(self, batch)
        if batch.result is not None:
            there.append(len(batch.entries))

    monkeypatch.setattr(_parallel.Worker, "prepare", slow)
    monkeypatch.setattr(_parallel.ParallelReader, "_prepare_here", spy_here)
    monkeypatch.setattr(_parallel.ParallelReader, "_collect", spy_collect)
    serial_kb = KnowledgeBase(chunk_size=40, stride=20)
    serial = ingest(serial_kb, tree, jobs=1, progress=False)
    parallel_kb = KnowledgeBase(chunk_size=40, stride=20)
    parallel = ingest(parallel_kb, tree, jobs=2, progress=False)
    assert parallel.workers == 1
    assert here and there  # both took batches
    assert sum(here) + sum(there) == len(parallel.added) + len(parallel.skipped) - 1  # .env never gets read
    assert report_view(parallel) == report_view(serial)
    assert_same(serial_kb, parallel_kb, tmp_path)


def test_small_runs_stay_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    for i in range(_parallel.BATCH_FILES * 2 - 1):
        write(tree, f"f{i:02d}.md", f"small file {i}")
    report = ingest(KnowledgeBase(), tree, jobs=2, progress=False)
    assert len(report.added) == _parallel.BATCH_FILES * 2 - 1 and report.workers == 0  # fewer than two batches
    write(tree, "more.md", "one more")
    kb = KnowledgeBase()
    assert ingest(kb, tree, jobs=2, progress=False).workers == 1
    # A re-ingest finding a few dozen changed files, or many tiny ones, reads them here.
    monkeypatch.setattr(_parallel, "POOL_MIN_BYTES", 1 << 20)
    for i in range(_parallel.BATCH_FILES * 3):
        write(tree, f"new{i:02d}.md", f"another small file {i}")
    report = ingest(kb, tree, jobs=2, progress=False)
    assert len(report.added) == _parallel.BATCH_FILES * 3 and report.workers == 0


def test_planning_runs_only_so_far_ahead_of_settling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    monkeypatch.setattr(_parallel, "POOL_MIN_BYTES", 1 << 40)  # never worth starting workers here
    monkeypatch.setattr(_parallel, "PLAN_AHEAD", 5)
    events: list[str] = []
    real_plan, real_settle = _run._Run._plan, _run._Run._settle_ready

    def plan(self: _run._Run, *args: object) -> object:
        events.append("plan")
        return real_plan(self, *args)  # type: ignore[arg-type]

    def settle(self: _run._Run, *args: object) -> bool:
        events.append("settle")
        return real_settle(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_run._Run, "_plan", plan)
    monkeypatch.setattr(_run._Run, "_settle_ready", settle)
    report = ingest(KnowledgeBase(), tree, jobs=2, progress=False)
    assert report.workers == 0 and len(report.added) == 40 * 2 + 5
    # A huge tree must not be stat-ed whole (and held in memory) before the
    # first file is indexed: planning runs a few batches and PLAN_AHEAD ahead.
    assert events.index("settle") <= 3 * _parallel.BATCH_FILES + 5 < events.count("plan")


def test_worker_that_dies_leaves_the_rest_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    real = _parallel.Worker.prepare
    main = os.getpid()

    def dying(self: _parallel.Worker, task: _parallel.Task) -> object:
        if os.getpid() != main:
            os._exit(3)  # like the kernel's out-of-memory killer
        return real(self, task)

    monkeypatch.setattr(_parallel.Worker, "prepare", dying)  # forked workers inherit the patch
    serial_kb, serial, parallel_kb, parallel = both(tree, tmp_path)
    assert parallel.workers == 2
    assert "worker processes failed" in caplog.text
    assert report_view(parallel) == report_view(serial)
    assert_same(serial_kb, parallel_kb, tmp_path)


def raising_reader(suffix: str, error: Exception) -> Callable[..., object]:
    """``read_document``, raising ``error`` for the file whose path ends with ``suffix``."""
    real = read_document

    def reader(path: str, *args: object, **kwargs: object) -> object:
        if path.endswith(suffix):
            raise error
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    return reader


def test_unexpected_worker_error_rereads_the_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    broken = raising_reader("mod07.py", RuntimeError("a bug in a reader"))
    monkeypatch.setattr(_parallel, "read_document", broken)  # the workers' reader only
    serial_kb, serial, parallel_kb, parallel = both(tree, tmp_path)
    assert "src/mod07.py" in parallel.added
    assert report_view(parallel) == report_view(serial)
    assert_same(serial_kb, parallel_kb, tmp_path)


def test_reader_failure_in_a_worker_is_a_reported_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    failing = raising_reader("page11.md", ValueError("nesting too deep"))
    monkeypatch.setattr(_parallel, "read_document", failing)
    monkeypatch.setattr(_run, "read_document", failing)
    caplog.set_level(logging.WARNING)
    serial_kb, serial, parallel_kb, parallel = both(tree, tmp_path)
    assert ("docs/page11.md", "reader failed: ValueError: nesting too deep") in parallel.skipped
    assert "nesting too deep" in caplog.text
    assert report_view(parallel) == report_view(serial)
    assert_same(serial_kb, parallel_kb, tmp_path)


def test_parallel_ingest_interrupted_keeps_saved_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, index = tmp_path / "tree", tmp_path / "index"
    make_tree(tree)
    real = IndexWriter.add_prepared
    calls = 0

    def flaky(self: IndexWriter, *args: object, **kwargs: object) -> int:
        nonlocal calls
        calls += 1
        if calls == 30:
            raise RuntimeError("disk on fire")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(IndexWriter, "add_prepared", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        ingest(KnowledgeBase(), tree, index_path=index, checkpoint_files=10, jobs=2, progress=False)
    monkeypatch.setattr(IndexWriter, "add_prepared", real)
    kept = KnowledgeBase.load(index)
    assert len(kept.sources()) == 29  # every file added before the failure was saved
    report = ingest(kept, tree, index_path=index, jobs=2, progress=False)
    assert len(report.unchanged) == 29 and len(report.added) == 40 * 2 + 5 - 29
    fresh = KnowledgeBase()
    ingest(fresh, tree, jobs=1, progress=False)
    assert KnowledgeBase.load(index).sources() == fresh.sources()


def test_parallel_ingest_killed_outright_leaves_no_worker_no_lock_no_spool(tmp_path: Path) -> None:
    tree, index, pids = tmp_path / "tree", tmp_path / "index", tmp_path / "pids"
    make_tree(tree)
    # The writer holds the index lock (as `clanker-rag ingest` does), forks a
    # slow worker and dies by SIGKILL midway, after a few checkpoints.
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from clanker_rag._engine._writing import IndexWriter
        from clanker_rag._ingest import _parallel
        from clanker_rag._kb import KnowledgeBase
        _parallel.POOL_MIN_BYTES = 0
        real_start, real_prepare, main = _parallel._start_worker, _parallel.Worker.prepare, os.getpid()
        def start(*args):
            with open({str(pids)!r}, "a") as fh:
                fh.write(f"{{os.getpid()}}\\n")
            real_start(*args)
        def prepare(self, task):
            if os.getpid() != main:
                time.sleep(0.02)
            return real_prepare(self, task)
        _parallel._start_worker, _parallel.Worker.prepare = start, prepare
        real_add, calls = IndexWriter.add_prepared, 0
        def add_then_die(self, *args, **kwargs):
            global calls
            calls += 1
            if calls == 40:
                os.kill(main, signal.SIGKILL)
            return real_add(self, *args, **kwargs)
        IndexWriter.add_prepared = add_then_die
        with KnowledgeBase.edit({str(index)!r}) as kb:
            kb.ingest({str(tree)!r}, index_path={str(index)!r}, checkpoint_files=10, jobs=3, progress=False)
    """)
    # The ingest gets a temp folder of its own, so that the spool check below
    # sees only this ingest's spool, not those of other ingests on the machine.
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    workers = [int(line) for line in pids.read_text().split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers), "a worker outlived the killed ingest"
    assert not list(own_tmp.glob("clanker-rag-ingest-*")), "the spool folder was left behind"
    saved = KnowledgeBase.load(index)
    assert len(saved.sources()) == 30  # three checkpoints of ten files
    with KnowledgeBase.edit(index, timeout=2) as kb:  # no worker keeps the lock
        report = kb.ingest(tree, index_path=index, jobs=2, progress=False)
    assert len(report.unchanged) == 30 and len(report.added) == 40 * 2 + 5 - 30


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()  # a zombie has exited
    except FileNotFoundError:
        return False


def test_jobs_above_the_usable_cpus_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from clanker_rag._ingest._run import _workers_for

    too_many = usable_cpus() + 62
    with caplog.at_level(logging.WARNING, logger="clanker_rag"):
        workers, _ = _workers_for(KnowledgeBase()._writer, too_many)
    assert workers == too_many  # an explicit library request is honoured; the CLI caps -j
    assert any(str(too_many) in r.getMessage() and "usable CPUs" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="clanker_rag"):
        _workers_for(KnowledgeBase()._writer, usable_cpus())
    assert not caplog.records


def test_jobs_is_validated() -> None:
    for bad in (0, -2, True, 1.5):
        with pytest.raises(ConfigError, match="jobs"):
            ingest(KnowledgeBase(), ".", jobs=bad)


def test_custom_analyser_or_wrapped_add_text_stays_in_this_process(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    custom = KnowledgeBase(analyzer=lambda text: text.lower().split())
    assert ingest(custom, tree, jobs=2, progress=False).workers == 0
    assert custom.search("harbor")
    wrapped = KnowledgeBase()
    seen: list[str] = []
    real = wrapped.add_text

    def spy(text: str, source: str, *args: object, **kwargs: object) -> int:
        seen.append(source)
        return real(text, source, *args, **kwargs)  # type: ignore[arg-type]

    wrapped.add_text = spy  # type: ignore[method-assign]
    report = ingest(wrapped, tree, jobs=2, progress=False)
    assert report.workers == 0 and sorted(seen) == sorted(report.added)


@pytest.mark.real_start_method
def test_automatic_mode_does_not_fork_a_threaded_program() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert _parallel.start_method(explicit=False) is None
        assert _parallel.start_method(explicit=True) in ("forkserver", "spawn")
    finally:
        stop.set()
        thread.join()


@pytest.mark.real_start_method
@pytest.mark.leaves_running("multiprocessing keeps one forkserver process for the rest of the interpreter's life")
def test_explicit_jobs_in_a_threaded_program_start_workers_without_fork(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree, n=20)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert ingest(KnowledgeBase(), tree, progress=False).workers == 0  # automatic mode stays here
        serial_kb, serial, parallel_kb, parallel = both(tree, tmp_path)
    finally:
        stop.set()
        thread.join()
    assert parallel.workers == 2
    assert report_view(parallel) == report_view(serial)
    assert_same(serial_kb, parallel_kb, tmp_path)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.lists(st.sampled_from([*"abcé東 _\n#Zx9", *WORDS]), min_size=1, max_size=120).map("".join),
        min_size=2,
        max_size=14,
    ),
    batch=st.integers(1, 3),
)
def test_any_tree_any_batching_same_index(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str], batch: int
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    for i, text in enumerate(texts):
        write(tmp / "tree", f"f{i:02d}.{'md' if i % 2 else 'py'}", text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_parallel, "BATCH_FILES", batch)
        serial_kb, serial, parallel_kb, parallel = both(tmp / "tree", tmp)
    assert report_view(parallel) == report_view(serial)
    assert parallel.workers == (2 if len(texts) >= 2 * batch else 0)  # two batches' worth start the pool
    assert_same(serial_kb, parallel_kb, tmp)


def test_add_text_overridden_in_a_subclass_is_called_for_every_file(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    seen: list[str] = []

    class Logged(KnowledgeBase):
        def add_text(self, text, source, metadata=None, *, sections=None):
            seen.append(source)
            return super().add_text(text, source, metadata, sections=sections)

    kb = Logged()
    assert not kb._takes_prepared() and KnowledgeBase()._takes_prepared()
    report = ingest(kb, tree, jobs=2, progress=False)
    assert report.workers == 0 and sorted(seen) == sorted(report.added)


def test_a_worker_reports_typed_outcomes(tmp_path: Path) -> None:
    kb = KnowledgeBase(chunk_size=40, stride=20)
    worker = _parallel.Worker(kb.analyzer, kb.chunker)
    write(tmp_path, "a.md", "# Title\n\nharbor lantern quartz\n")
    write(tmp_path, "b.txt", b"\x00\x01binary")
    write(tmp_path, "c.md", "the same content as indexed")

    def task(name: str, sha: str | None = None) -> _parallel.Task:
        return _parallel.Task(str(tmp_path / name), "markdown", 1000, 40, sha, name)

    same = hashlib.sha256(b"the same content as indexed").hexdigest()
    result = _parallel.prepare_with(worker, [task("a.md"), task("b.txt"), task("c.md", same), task("gone.md")])
    prepared, refused, unchanged, vanished = result.outcomes
    assert isinstance(prepared, _parallel.Prepared) and prepared.doc.text.startswith("# Title")
    assert isinstance(refused, _parallel.Refused) and refused.reason.startswith("binary file")
    assert isinstance(unchanged, _parallel.Unchanged)
    assert isinstance(vanished, _parallel.Refused) and vanished.transient
    assert result.token == worker.token and set(result.fresh) >= {"harbor", "lantern", "quartz", "titl"}
    # The worker's counts, mapped to a knowledge base's ids, are what add_text would index.
    terms = _parallel.WorkerTerms()
    terms.strings.extend(result.fresh)
    direct, prepared_kb = KnowledgeBase(chunk_size=40, stride=20), KnowledgeBase(chunk_size=40, stride=20)
    direct.add_text(prepared.doc.text, "a.md", sections=prepared.doc.sections)
    ready = _parallel.Ready(None, "a.md", None, prepared, terms)  # type: ignore[arg-type]
    writer = prepared_kb._writer
    writer.add_prepared(prepared.doc.text, "a.md", None, prepared.doc.sections, content="x", counted=ready.chunks)
    assert [(h.text, h.section) for h in direct.search("harbor title")] == [
        (h.text, h.section) for h in prepared_kb.search("harbor title")
    ]
    assert [h.score for h in direct.search("harbor title")] == [h.score for h in prepared_kb.search("harbor title")]
