"""ShardedKnowledgeBase on a real multi-process Dask cluster bound to 127.0.0.1:
same hits as one KnowledgeBase, recovery from a worker killed with SIGKILL,
bounded searches, the CLI with --cluster.  The tests start the cluster and shut it down."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers._dask_threads import stop_offload_thread
from tests.helpers._leaks import alive, child_pids
from tests.helpers._trees import write

distributed = pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

from clanker_rag import ConfigError, KnowledgeBase, RetrievalTimeoutError  # noqa: E402
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Killed workers are restarted by their nanny: new worker processes and threads that belong to the
# module's cluster, which the `client` fixture shuts down (and checks that no process is left).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.leaves_running("the module's LocalCluster restarts killed workers until the module ends"),
]
QUERIES = ["proxy streams tokens", "controller splices results", "w3 w7", "index shard worker", "alpha"]


@pytest.fixture(scope="module")
def client():
    before = child_pids()
    threads_before = set(threading.enumerate())
    c = connect("local", n_workers=3)  # LocalCluster(host="127.0.0.1", processes=True), no work stealing
    assert all(addr.startswith("tcp://127.0.0.1:") for addr in c.scheduler_info()["workers"])
    assert c.scheduler.address.startswith("tcp://127.0.0.1:")
    yield c
    close_client(c)
    deadline = time.monotonic() + 30
    while cluster_processes(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not cluster_processes(before), "the cluster left processes running"
    # distributed keeps one offload thread for the process's life once used; other tests decide
    # how to start worker processes by whether threads run (clanker_rag._ingest._parallel), so stop it.
    stop_offload_thread()
    # A nanny's "watch process join" thread ends just after its process is reaped: on a busy
    # machine that is after the loop above, so threads get the same bounded wait as processes.
    left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    for thread in left:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    left = [t for t in left if t.is_alive()]
    assert not left, f"the cluster left threads running: {[t.name for t in left]}"


def cluster_processes(before):
    """Child processes started since ``before``, but multiprocessing's own helper
    (the resource tracker of the spawn start method lives as long as the interpreter)."""
    out = []
    for pid in child_pids() - before:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if alive(pid) and b"resource_tracker" not in cmdline:
            out.append(pid)
    return out


def corpus():
    words = [
        "proxy",
        "streams",
        "tokens",
        "controller",
        "splices",
        "results",
        "index",
        "shard",
        "worker",
        "alpha",
        "beta",
    ]
    for i in range(60):
        text = " ".join(words[(i * j) % len(words)] for j in range(1, 25 + i % 17)) + f" w{i % 9} w{i % 4}"
        yield text, f"docs/{i}.md", {"group": i % 3}


def answers(kb, **kw):
    return [[(h.source, h.chunk_index, h.score) for h in kb.search(q, 10, **kw)] for q in QUERIES]


def same(a, b):
    """The same scores rank by rank, and the same chunks apart from ties with the last score."""
    assert len(a) == len(b)
    for xs, ys in zip(a, b):
        assert [x[2] for x in xs] == pytest.approx([y[2] for y in ys], rel=1e-6)
        if xs:
            last = xs[-1][2]
            above = {x[:2] for x in xs if x[2] > last * (1 + 1e-6)}
            assert above == {y[:2] for y in ys if y[2] > last * (1 + 1e-6)}


def kill_holder(client, kb, shard):
    """SIGKILL the worker process holding ``shard``; returns its address.

    A copy still being computed (a change just sent, a move after an earlier kill) has no holder yet
    (``shard_workers`` leaves it out): wait, bounded, until the scheduler lists one."""
    deadline = time.monotonic() + 60
    while not (held := kb.shard_workers()[shard]):
        assert time.monotonic() < deadline, f"shard {shard} has no holder after 60 s"
        time.sleep(0.05)
    address = held[0]
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    return address


@pytest.fixture
def saved(tmp_path, client):
    client.wait_for_workers(3, timeout=120)  # workers killed by an earlier test are back
    one = KnowledgeBase(chunk_size=20, stride=10)
    one.add_texts(corpus())
    kb = ShardedKnowledgeBase(3, client=client, chunk_size=20, stride=10)
    kb.add_texts(corpus())
    same(answers(one), answers(kb))
    same(answers(one, where={"group": 1}), answers(kb, where={"group": 1}))
    folder = kb.save(tmp_path / "idx")
    kb.close()
    return one, folder


def test_search_survives_sigkill_of_a_worker(client, saved):
    one, folder = saved
    # A call to the killed worker's actor would try to connect for Dask's connect timeout (30 s):
    # the search gives it up once the scheduler no longer lists that worker as the shard's holder.
    kb = ShardedKnowledgeBase.load(folder, client=client, timeout=10.0)
    before = answers(kb)
    same(answers(one), before)
    for shard in (0, 1):
        gone = kill_holder(client, kb, shard)
        assert answers(kb) == before  # rebuilt from the saved folder, searched again
        assert gone not in [w for ws in kb.shard_workers() for w in ws]
    kb.close()


def test_shards_lost_with_every_worker_at_once_are_rebuilt(client, saved):
    """Every worker killed at once: the shards wait for a worker, and the restarted ones rebuild them
    (Dask never started a waiting task that preferred a worker now gone: the search stalled)."""
    one, folder = saved
    kb = ShardedKnowledgeBase.load(folder, client=client)
    before = answers(kb)
    pids = client.run(os.getpid)
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    assert answers(kb) == before
    same(answers(one), before)
    kb.close()


def test_unsaved_changes_survive_sigkill(client, saved):
    one, folder = saved
    kb = ShardedKnowledgeBase.load(folder, client=client)
    kb.add_text("zebra unicorn narwhal", "new/animals.md")
    one.add_text("zebra unicorn narwhal", "new/animals.md")
    assert kb.remove("docs/5.md") == one.remove("docs/5.md") > 0
    # The scheduler replays the changes made since the save on the rebuilt shards.
    kill_holder(client, kb, kb.shard_of("new/animals.md"))
    assert [h.source for h in kb.search("unicorn", 3)] == ["new/animals.md"]
    kill_holder(client, kb, kb.shard_of("docs/5.md"))
    assert "docs/5.md" not in kb.sources()
    assert [h.source for h in kb.search("unicorn", 3)] == ["new/animals.md"]
    same(answers(one), answers(kb))
    kb.close()


def test_unreachable_shard_raises_unless_partial(client, saved):
    _, folder = saved
    kb = ShardedKnowledgeBase.load(folder, client=client, timeout=2.0)
    kb.search("proxy streams", 5)  # every shard answered once: the next calls go straight to the workers
    frozen = kb.shard_workers()[2][0]
    on_it = tuple(i for i, ws in enumerate(kb.shard_workers()) if frozen in ws)
    assert len(on_it) < 3  # one shard a worker: freezing one leaves others answering
    pid = client.run(os.getpid, workers=[frozen])[frozen]
    os.kill(pid, signal.SIGSTOP)  # a hung machine: connected, silent
    try:
        with pytest.raises(RetrievalTimeoutError, match=r"shards \[.*2.*\] of 3 could not be reached"):
            kb.search("proxy streams", 5)
        partial = kb.search("proxy streams", 5, allow_partial=True)
        assert partial.missing == on_it
        assert partial and all(kb.shard_of(h.source) not in on_it for h in partial)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert answers(kb) == answers(ShardedKnowledgeBase.load(folder))  # and in this process, without Dask
    kb.close()


def test_cli_ingest_and_search_on_the_cluster(client, tmp_path):
    tree = tmp_path / "tree"
    for text, source, _ in corpus():
        write(tree, source, text)
    write(tree, "secret/.env", "TOKEN=1\n")
    index = tmp_path / "idx"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    address = client.scheduler.address

    def cli(*args):
        cmd = [sys.executable, "-m", "clanker_rag", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=300).stdout

    cli("ingest", str(tree), "--index", str(index), "--cluster", address, "--shards", "3")
    assert json.loads((index / "cluster.json").read_text())["shards"] == 3
    for i in range(3):
        assert len(KnowledgeBase.load(index / f"shard-00{i}")) > 0
    one = KnowledgeBase()
    one.ingest(tree, progress=False)
    got = json.loads(
        cli("search", "proxy streams tokens", "--index", str(index), "--cluster", address, "--json", "-k", "10")
    )
    want = [h.to_dict() for h in one.search("proxy streams tokens", 10)]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], rel=1e-6)
    every = {(h.source, h.start_line, h.end_line): h for h in one.search("proxy streams tokens", 10_000)}
    for g in got:
        h = every[(g["source"], g["start_line"], g["end_line"])]
        assert (g["text"], g["score"]) == (h.text, pytest.approx(h.score, rel=1e-6))
    stats = json.loads(cli("stats", "--index", str(index), "--cluster", address, "--json"))
    assert (stats["shards"], stats["chunks"], stats["sources"]) == (3, len(one), len(one.sources()))
    report = json.loads(cli("ingest", str(tree), "--index", str(index), "--cluster", address, "--json"))
    assert report["added"] == [] and len(report["unchanged"]) == 60
    # The folder also opens in this process, without Dask.
    assert ShardedKnowledgeBase.load(index).search("proxy streams tokens", 3)[0].source == want[0]["source"]


def test_ingest_on_the_cluster_matches_one_machine(client, tmp_path, capsys):
    tree = tmp_path / "tree"
    for text, source, _ in corpus():
        write(tree, source, text)
    one = KnowledgeBase()
    kb = ShardedKnowledgeBase(3, client=client)
    r1, s1 = one.ingest(tree, progress=False), kb.ingest(tree, progress=True)
    assert (sorted(s1.added), s1.chunks_total) == (sorted(r1.added), r1.chunks_total)
    # The workers' progress reaches this process: one bar, ending full.
    err = capsys.readouterr().err
    assert f"{len(r1.added)}/{len(r1.added)} files" in err and "files/s" in err
    (tree / "docs/7.md").unlink()
    r2, s2 = one.ingest(tree, progress=False), kb.ingest(tree)
    assert s2.removed == r2.removed == ["docs/7.md"]
    same(answers(one), answers(kb))
    kb.close()


def test_ingest_finishes_when_a_worker_is_killed_during_it(client, tmp_path, monkeypatch):
    """The scheduler runs a lost shard's ingest again on the rebuilt shard: the report and the
    index are those of one machine."""
    client.wait_for_workers(3, timeout=120)
    tree = tmp_path / "tree"
    for i in range(400):
        write(tree, f"docs/{i // 50}/page{i}.md", f"# Page {i}\n\nproxy {i} streams tokens " + "word " * (i % 40))
    one = KnowledgeBase()
    r1 = one.ingest(tree, progress=False)
    kb = ShardedKnowledgeBase(3, client=client)
    victim = sorted(client.ncores())[0]
    pid = client.run(os.getpid, workers=[victim])[victim]

    class KillOnFirstProgress(io.StringIO):
        """The progress bar's stream: the first progress a shard reports (its first file) kills a worker."""

        def write(self, text):
            if not self.getvalue():
                os.kill(pid, signal.SIGKILL)
            return super().write(text)

    stream = KillOnFirstProgress()
    monkeypatch.setattr(sys, "stderr", stream)
    s1 = kb.ingest(tree, progress=True)
    monkeypatch.undo()
    assert stream.getvalue()  # the kill happened, while the shards were ingesting
    assert (sorted(s1.added), s1.chunks_total, s1.skipped) == (sorted(r1.added), r1.chunks_total, r1.skipped)
    assert len(kb) == len(one)
    same(answers(one), answers(kb))
    kb.close()


def test_cli_serve_on_the_cluster_injects_from_the_shards(client, tmp_path):
    from tests.helpers._fake_upstream import FakeUpstream, Reply
    from tests.helpers._serve import serve_and_ask

    kb = ShardedKnowledgeBase(3)
    kb.add_text("The harbor lantern server listens on port 7341 by default.", "guide/ports.md")
    kb.add_text("Unrelated notes about gardening and tomatoes.", "notes/garden.md")
    kb.save(tmp_path / "idx")
    with FakeUpstream(lambda path, body: Reply(["7341"])) as up:
        args = ["--upstream", up.url, "--index", str(tmp_path / "idx"), "--cluster", client.scheduler.address]
        served = serve_and_ask(args, "Which port does the harbor lantern server listen on?\n")
        assert "(3 shards on " in served.banner
        assert served.answer["choices"][0]["text"] == "7341"
        [request, *_] = [r for r in up.requests if r["path"] == "/v1/completions"]
        assert "guide/ports.md" in request["body"]["prompt"]  # injected from a shard on a worker
    assert served.code == 130 and "stopped" in served.rest and "Traceback" not in served.rest


def test_shards_are_spread_one_a_worker(client, saved):
    _, folder = saved
    kb = ShardedKnowledgeBase.load(folder, client=client)
    try:
        holders = [ws[0] for ws in kb.shard_workers()]
        assert sorted(holders) == sorted(client.ncores())  # 3 shards on 3 workers: one hung machine holds one
    finally:
        kb.close()


def test_cli_search_on_the_cluster_escapes_terminal_controls(client, tmp_path):
    kb = ShardedKnowledgeBase(3)
    kb.add_text("harbor lantern \x1b[2J\x1b]0;pwned\x07 keeper", "notes/evil\nname\x1b]2;t\x07.md")
    kb.add_text("harbor lantern plain", "plain.md")
    kb.save(tmp_path / "idx")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "clanker_rag", "search", "harbor lantern", "--index", str(tmp_path / "idx")]
    cmd += ["--cluster", client.scheduler.address, "--color", "always"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=300).stdout
    for bad in ("\x1b[2J", "\x1b]", "\x07"):
        assert bad not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in out
    assert len(out.splitlines()) == 4  # a head and a snippet line per hit: the newline in the name is escaped


def test_a_second_local_cluster_serves_http_on_loopback_and_a_free_port():
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:
        # Warnings are errors in the tests: distributed warns when its default port 8787 is taken.
        c = connect("local", n_workers=1)
        try:
            http = c.cluster.scheduler.http_server
            assert http.address == "127.0.0.1" and http.port != 8787
        finally:
            close_client(c)
    finally:
        held.close()


def test_replicas_answer_while_a_worker_hangs(client, saved):
    """replicas=2: a SIGSTOPped worker's shards are read from their second copies, in full, without
    waiting for the timeout; a change drops the second copies and the next save loads them again."""
    one, folder = saved
    kb = ShardedKnowledgeBase.load(folder, client=client, timeout=30.0, replicas=2)
    try:
        holders = kb.shard_workers()
        assert all(len(ws) == 2 for ws in holders)  # each shard on two workers
        before = answers(kb)
        same(answers(one), before)
        frozen = holders[0][0]
        pid = client.run(os.getpid, workers=[frozen])[frozen]
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert answers(kb) == before  # every shard answered: nothing partial
            assert time.monotonic() - started < kb.timeout / 2  # no shard waited for the timeout
        finally:
            os.kill(pid, signal.SIGCONT)
        kb.add_text("zebra unicorn", "new/z.md")
        # The scheduler reports a changed shard's holder once the change's result is registered there:
        # shard_workers() leaves a copy it does not see yet out, so the check waits a bounded moment.
        deadline = time.monotonic() + 10
        while not all(len(ws) == 1 for ws in kb.shard_workers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(len(ws) == 1 for ws in kb.shard_workers()), kb.shard_workers()  # no second copies
        kb.save()
        assert all(len(ws) == 2 for ws in kb.shard_workers())
        assert [h.source for h in kb.search("unicorn", 3)] == ["new/z.md"]
    finally:
        kb.close()
    with pytest.raises(ConfigError, match="replicas=3"):
        ShardedKnowledgeBase.load(folder, client=client, replicas=3)
