"""The sharded index on a cluster of separate processes (``dask scheduler``, ``dask worker``) on loopback:
concurrent writers, swapped shard folders, no workers, a lost scheduler, a worker that cannot see the
index folder, damaged shards.  Each test's cluster is started here and killed after."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers._dask_procs import cluster, env
from tests.helpers._dask_threads import stop_offload_thread
from tests.helpers._trees import write

pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

from clanker_rag import KnowledgeBase, RetrievalTimeoutError
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect

# The workers' nannies start their worker processes; the cluster context kills every group.
pytestmark = [pytest.mark.slow, pytest.mark.leaves_running("the cluster's processes are killed by their own fixture")]


@pytest.fixture(scope="module", autouse=True)
def no_dask_threads_after():
    """distributed keeps one offload thread for the process's life once a client ran here; other tests
    decide how to start worker processes by whether threads run (clanker_rag._ingest._parallel)."""
    yield
    stop_offload_thread()


@pytest.fixture(scope="module")
def procs():
    with cluster(3) as p:
        yield p


def cli(*args, timeout=300):
    cmd = [sys.executable, "-m", "clanker_rag", *args, "--no-progress"] if args[0] == "ingest" else None
    cmd = cmd or [sys.executable, "-m", "clanker_rag", *args]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout)
    return done, time.monotonic() - started


def tree(root, tag, n):
    for i in range(n):
        write(root, f"{tag}/page{i}.md", f"# {tag} {i}\n\nproxy streams {tag}{i} tokens " + "word " * (i % 30))
    return root


def shard_sources(index):
    """The sources of every shard folder, read one by one (works on a folder that no longer opens whole)."""
    return sorted(s for d in sorted(index.glob("shard-*")) for s in KnowledgeBase.load(d).sources())


def test_two_concurrent_ingests_never_both_succeed_with_files_missing(procs, tmp_path):
    index = tmp_path / "idx"
    done, _ = cli("ingest", str(tree(tmp_path / "a", "a", 20)), "--index", str(index), "--cluster", procs.address)
    assert done.returncode == 0, done.stderr
    trees = {p: tree(tmp_path / p, p, 31) for p in ("b", "c")}
    command = [sys.executable, "-m", "clanker_rag", "ingest"]
    where = ["--index", str(index), "--cluster", procs.address, "--no-progress"]
    runs = {
        p: subprocess.Popen(
            [*command, str(t), "--prefix", f"{p}/", *where],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p, t in trees.items()
    }
    outcomes = {}
    for p, r in runs.items():
        _, err = r.communicate(timeout=300)
        outcomes[p] = (r.returncode, err)
    sources = set(ShardedKnowledgeBase.load(index).sources())
    assert {s for s in sources if s.startswith("a/")} == {f"a/page{i}.md" for i in range(20)}
    assert any(code == 0 for code, _ in outcomes.values()), outcomes
    for p, (code, err) in outcomes.items():
        mine = {f"{p}/{p}/page{i}.md" for i in range(31)}
        if code == 0:
            assert mine <= sources, f"ingest {p} exited 0 but {len(mine - sources)} of its files are missing"
        else:  # waited for the lock too long: one clear line, nothing half-saved
            assert err.count("\n") == 1 and "another process is writing this index" in err, err
            assert not mine & sources


def test_swapped_shard_folders_fail_the_reingest_with_one_line(procs, tmp_path):
    index = tmp_path / "idx"
    root = tree(tmp_path / "t", "t", 30)
    done, _ = cli("ingest", str(root), "--index", str(index), "--cluster", procs.address)
    assert done.returncode == 0, done.stderr
    before = shard_sources(index)
    (index / "shard-000").rename(tmp_path / "x")
    (index / "shard-001").rename(index / "shard-000")
    (tmp_path / "x").rename(index / "shard-001")
    done, _ = cli("ingest", str(root), "--index", str(index), "--cluster", procs.address)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "the manifest places shard" in done.stderr, done.stderr
    assert "on worker tcp://127.0.0.1:" in done.stderr  # the worker that read it
    assert shard_sources(index) == before


def test_a_damaged_shard_is_one_line_naming_the_worker(procs, tmp_path):
    index = tmp_path / "idx"
    done, _ = cli("ingest", str(tree(tmp_path / "t", "t", 10)), "--index", str(index), "--cluster", procs.address)
    assert done.returncode == 0, done.stderr
    (index / "shard-002" / "index.json").write_text("{ not json")
    done, _ = cli("search", "proxy", "--index", str(index), "--cluster", procs.address, "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "shard-002" in done.stderr and "on worker tcp://127.0.0.1:" in done.stderr


def test_search_against_a_scheduler_without_workers_fails_in_time(tmp_path):
    index = tmp_path / "idx"
    kb = ShardedKnowledgeBase(3)
    kb.add_text("proxy streams tokens", "a.md")
    kb.save(index)
    with cluster(0) as lonely:
        done, seconds = cli(
            "search", "proxy", "--index", str(index), "--cluster", lonely.address, "--json", "--cluster-timeout", "3"
        )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no Dask worker joined the scheduler" in done.stderr, done.stderr
    assert seconds < 60  # 3 s of patience, plus starting Python and connecting


def test_an_unreachable_scheduler_is_one_clear_error():
    with cluster(0) as gone:
        address = gone.address
    started = time.monotonic()
    with pytest.raises(RetrievalTimeoutError, match="cannot reach the Dask scheduler"):
        connect(address, timeout=2)
    assert time.monotonic() - started < 30


def test_a_lost_scheduler_is_one_clear_error(tmp_path):
    index = tmp_path / "idx"
    kb = ShardedKnowledgeBase(2)
    kb.add_texts([("proxy streams tokens", "a.md"), ("controller splices", "b.md")])
    kb.save(index)
    with cluster(2) as procs:
        client = connect(procs.address, timeout=10)
        try:
            sharded = ShardedKnowledgeBase.load(index, client=client, timeout=5)
            assert [h.source for h in sharded.search("proxy", 3)] == ["a.md"]
            assert procs.scheduler is not None
            procs.kill(procs.scheduler)
            started = time.monotonic()
            with pytest.raises(RetrievalTimeoutError, match=r"lost the connection to the Dask scheduler|could not be"):
                for _ in range(50):  # the actors may answer once more: the workers outlive the scheduler a moment
                    sharded.search("proxy", 3)
                    time.sleep(0.1)
            assert time.monotonic() - started < 30
            with pytest.raises(RetrievalTimeoutError):
                ShardedKnowledgeBase.load(index, client=client, timeout=3)
            sharded.close()
        finally:
            close_client(client)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) to give one worker its own mounts")
def test_a_worker_that_cannot_see_the_index_folder_is_named(tmp_path):
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged mount namespaces are off here ({probe.stderr.decode().strip()})")
    shared = tmp_path / "shared"
    shared.mkdir()
    with cluster(1) as procs:
        # A worker on "another machine": an empty file system mounted over the shared folder.
        procs.start_worker(
            prefix=["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs none {shared} && exec"], name="blind"
        )
        procs.wait_for(2)
        from distributed import Client

        with Client(procs.address, timeout=30) as c:
            blind = next(a for a, w in c.scheduler_info()["workers"].items() if w["name"] == "blind")
        root = tree(shared / "t", "t", 5)
        done, _ = cli("ingest", str(root), "--index", str(shared / "idx"), "--cluster", procs.address)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"worker {blind}: cannot" in done.stderr and "shared file system" in done.stderr
    assert not (shared / "idx" / "cluster.json").exists()
    assert not list((shared / "idx").glob(".probe-*"))


def test_ingest_and_search_on_processes_match_one_machine(procs, tmp_path):
    root = tree(tmp_path / "t", "t", 40)
    index = tmp_path / "idx"
    done, _ = cli("ingest", str(root), "--index", str(index), "--cluster", procs.address, "--shards", "3")
    assert done.returncode == 0, done.stderr
    one = KnowledgeBase()
    one.ingest(root, progress=False)
    done, _ = cli("search", "proxy streams t7", "--index", str(index), "--cluster", procs.address, "--json", "-k", "10")
    got = json.loads(done.stdout)
    want = [h.to_dict() for h in one.search("proxy streams t7", 10)]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], rel=1e-6)
    assert got[0]["source"] == want[0]["source"]
    query = ["search", "proxy streams t7", "--index", str(index), "--cluster", procs.address, "--json", "-k", "10"]
    done, _ = cli(*query, "--replicas", "2")  # two copies of each shard: the same answers
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == got
    assert (
        os.stat(index / "cluster.json").st_mode & 0o777 == os.stat(index / "shard-000" / "index.json").st_mode & 0o777
    )


def test_the_session_reloads_its_shards_when_the_scheduler_is_back(tmp_path):
    """Scheduler and workers gone and started again (as supervisors do): the open index searches again,
    its shards loaded from the last save; one changed since cannot come back, and says so."""
    index = tmp_path / "idx"
    kb = ShardedKnowledgeBase(2)
    kb.add_texts([("proxy streams tokens", "a.md"), ("controller splices proxy", "b.md"), ("gamma", "c.md")])
    kb.save(index)
    with cluster(2) as procs:
        client = connect(procs.address, timeout=120)  # how long the client tries to reconnect
        try:
            sharded = ShardedKnowledgeBase.load(index, client=client, timeout=60)
            changed = ShardedKnowledgeBase.load(index, client=client, timeout=60)
            changed.add_text("unsaved", "d.md")
            before = [(h.source, h.score) for h in sharded.search("proxy", 3)]
            procs.stop()
            procs.start_scheduler()
            procs.start_worker()
            procs.start_worker()
            assert [(h.source, h.score) for h in sharded.search("proxy", 3)] == before
            assert sharded.sources() == ["a.md", "b.md", "c.md"]
            with pytest.raises(RetrievalTimeoutError, match="with the changes made since the last save"):
                changed.search("proxy", 3)
            sharded.close()
        finally:
            close_client(client)


def test_a_damaged_shard_on_a_local_cluster_is_one_line(tmp_path):
    """``--cluster local`` runs its workers on this terminal: their task tracebacks stay off it."""
    index = tmp_path / "idx"
    kb = ShardedKnowledgeBase(3)
    kb.add_texts((f"proxy streams {i}", f"f{i}.md") for i in range(9))
    kb.save(index)
    (index / "shard-001" / "index.json").write_text("{ not json")
    done, _ = cli("search", "proxy", "--index", str(index), "--cluster", "local", "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Compute Failed" not in done.stderr, done.stderr
    assert "shard-001" in done.stderr and "on worker tcp://127.0.0.1:" in done.stderr
