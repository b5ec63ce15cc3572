"""Recovery that heals, on a cluster of separate processes on loopback (``dask scheduler``/``dask worker``):
a worker lost for good is forgotten, copies are placed apart and rebalanced, health goes green -> yellow ->
green, a drain empties a worker, a hung worker bounds every wait, a scheduler outage heals, wrong addresses
are one clear line.  Each test starts its cluster and kills it after; bounds on time are generous ("bounded,
not stuck"), never a speed target."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers._dask_procs import cluster, env
from tests.helpers._dask_threads import stop_offload_thread

distributed = pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

from clanker_rag import RetrievalTimeoutError  # noqa: E402
from clanker_rag._cluster._dask_shards import DaskShards  # noqa: E402
from clanker_rag.cluster import ShardedKnowledgeBase, close_client, connect  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.leaves_running("the cluster's processes are killed by their own fixture")]
QUERY = "proxy alpha3"


@pytest.fixture(scope="module", autouse=True)
def no_dask_threads_after():
    yield
    stop_offload_thread()


@pytest.fixture
def index(tmp_path):
    kb = ShardedKnowledgeBase(3)
    kb.add_texts((f"proxy streams tokens {i} alpha{i % 7}", f"d{i}.md") for i in range(120))
    return kb.save(tmp_path / "idx")


def cli(*args, timeout=300):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "clanker_rag", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )
    return done, time.monotonic() - started


def answers(kb):
    return [(h.source, h.score) for h in kb.search(QUERY, 5)]


def worker_pid(client, address):
    return client.run(os.getpid, workers=[address])[address]


def until(check, seconds=60.0):
    """Poll ``check`` until it holds (returns its last value): a bound on waiting, not a speed test."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.25)


def test_a_worker_lost_for_good_is_no_longer_asked(index):
    """replicas=2, a worker's process group killed for good: searches answer in full, and after the first
    few no read asks the dead address again (counted: actor starts submitted to it)."""
    with cluster(3) as procs:
        client = connect(procs.address, timeout=30)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, replicas=2, timeout=20)
            before = answers(kb)
            dead = kb.shard_workers()[0][0]
            victim = next(p for p in procs.workers if worker_pid(client, dead) in _group(p.pid))
            procs.kill(victim)
            procs.workers.remove(victim)
            asked = []
            submit = client.submit

            def counting(fn, *a, **kw):
                if kw.get("actor") and kw.get("workers") == [dead]:
                    asked.append(dead)
                return submit(fn, *a, **kw)

            client.submit = counting
            for _ in range(5):
                assert answers(kb) == before
            settled = len(asked)
            for _ in range(20):
                assert answers(kb) == before
            assert len(asked) == settled, "reads kept asking the lost worker"
            assert until(lambda: all(dead not in ws for ws in kb.shard_workers()))
            kb.close()
        finally:
            close_client(client)


def _group(pgid):
    """The pids of a process group (a worker's nanny and the worker it started)."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                out.add(int(name))
    return out


def test_health_goes_yellow_on_a_loss_and_green_once_a_worker_joins(index):
    """Two workers, replicas=2: green; one killed for good, yellow (every shard served, one copy each);
    a new worker joins and the placement look moves copies to it: green, copies apart, every worker used."""
    with cluster(2) as procs:
        client = connect(procs.address, timeout=30)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, replicas=2, timeout=20)
            before = answers(kb)
            assert kb.health().status == "green"
            done, _ = cli("cluster", "health", "--cluster", procs.address, "--index", str(index), "--json")
            assert done.returncode == 0, done.stderr
            seen = json.loads(done.stdout)
            assert seen["status"] == "green" and [s["shard"] for s in seen["shards"]] == [0, 1, 2]
            assert all(len(s["workers"]) == 2 and s["copies"] == 2 for s in seen["shards"])
            procs.kill(procs.workers.pop(0))
            assert until(lambda: kb.health().status == "yellow")
            assert answers(kb) == before
            procs.start_worker()
            assert until(lambda: kb.health().status == "green")
            holders = kb.shard_workers()
            assert all(len(set(copies)) == 2 for copies in holders)  # never both copies on one worker
            assert len({w for copies in holders for w in copies}) == 2
            assert answers(kb) == before
            kb.close()
        finally:
            close_client(client)


def test_copies_stay_apart_and_every_worker_holds_one_after_kills_and_a_restart(index):
    with cluster(3) as procs:
        client = connect(procs.address, timeout=30)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, replicas=2, timeout=30)
            before = answers(kb)
            for _ in range(3):  # kill one, start one: the rolling restart of a supervisor
                procs.kill(procs.workers.pop(0))
                procs.start_worker()
                procs.wait_for(3)
                assert answers(kb) == before

            def placed():
                holders = kb.shard_workers()
                workers = set(client.scheduler_info()["workers"])
                used = {w for copies in holders for w in copies}
                return all(len(c) == 2 and len(set(c)) == 2 for c in holders) and used == workers

            assert until(placed)
            assert kb.health().status == "green"
            kb.close()
        finally:
            close_client(client)


def test_drain_moves_every_shard_off_a_worker(index):
    with cluster(3) as procs:
        client = connect(procs.address, timeout=30)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, replicas=2, timeout=20)
            before = answers(kb)
            target = kb.shard_workers()[0][0]
            done, _ = cli("cluster", "drain", target, "--cluster", procs.address, "--cluster-timeout", "60")
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(f"drained {target}: ") and done.stdout.count("\n") == 1
            held = {k for k, ws in client.who_has().items() if target in ws}
            assert held == set(), held  # no shard copy, no read actor
            assert all(target not in ws for ws in kb.shard_workers())
            assert answers(kb) == before
            time.sleep(2 * DaskShards.HEAL_EVERY)  # the placement looks put nothing back on it
            assert all(target not in ws for ws in kb.shard_workers())
            assert kb.health().status == "green"
            kb.close()
        finally:
            close_client(client)
        done, _ = cli("cluster", "drain", "tcp://127.0.0.1:1", "--cluster", procs.address)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and "no worker" in done.stderr


def test_one_hung_worker_bounds_opens_and_searches(index):
    """SIGSTOP one worker: an open, a search and the CLI's search and stats each end within their timeout
    (answering from the other workers, or failing saying what they waited for), not at Dask's heartbeat."""
    with cluster(3) as procs:
        client = connect(procs.address, timeout=30)
        try:
            hung = sorted(client.scheduler_info()["workers"])[0]
            pid = worker_pid(client, hung)
            os.kill(pid, signal.SIGSTOP)
            try:
                timeout = 6.0
                started = time.monotonic()
                try:
                    kb = ShardedKnowledgeBase.load(index, client=client, timeout=timeout)
                except RetrievalTimeoutError as exc:
                    assert "could not open shards within" in str(exc) or "could not be reached" in str(exc)
                    kb = None
                assert time.monotonic() - started < 2 * timeout + 5
                if kb is not None:
                    started = time.monotonic()
                    kb.search(QUERY, 5, allow_partial=True)
                    assert time.monotonic() - started < timeout + 5
                    kb.close()
                for command in (["search", QUERY, "--json"], ["stats"]):
                    done, seconds = cli(*command, "--index", str(index), "--cluster", procs.address,
                                        "--cluster-timeout", str(timeout))  # fmt: skip
                    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
                    assert seconds < 3 * timeout + 15, (command, seconds)  # starting Python and Dask too
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            close_client(client)


def test_wrong_and_dead_addresses_are_one_clear_line(index):
    with cluster(1) as procs:
        with distributed.Client(procs.address, timeout=30) as c:
            worker = next(iter(c.scheduler_info()["workers"]))
        done, _ = cli("search", "proxy", "--index", str(index), "--cluster", worker)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "is a Dask worker, not a Dask scheduler" in done.stderr and procs.address in done.stderr
        assert "unexpected" not in done.stderr
        address = procs.address
    done, seconds = cli("search", "proxy", "--index", str(index), "--cluster", address, "--cluster-timeout", "3")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot reach the Dask scheduler" in done.stderr and "within 3 s" in done.stderr
    assert seconds < 25  # 3 s, plus starting Python and Dask: not a fixed 30 s wait


def test_an_index_heals_after_its_client_gave_up_on_the_scheduler(index):
    """A client whose scheduler was gone longer than its timeout closes for good (Dask); the open index
    goes on through a new client once the scheduler is back, and a fresh load() with the old client works;
    closing it leaves no thread behind (a client that gave up keeps its IO loop running until stopped)."""
    threads = set(threading.enumerate())
    with cluster(2) as procs:
        client = distributed.Client(procs.address, timeout=3)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, timeout=30)
            before = answers(kb)
            procs.stop()
            assert until(lambda: client.status == "closed", 30)
            with pytest.raises(RetrievalTimeoutError, match="Dask scheduler"):
                kb.search(QUERY, 5)
            procs.start_scheduler()
            procs.start_worker()
            procs.start_worker()

            def answered():
                try:
                    return answers(kb) == before
                except RetrievalTimeoutError:
                    return False

            assert until(answered, 60)
            again = ShardedKnowledgeBase.load(index, client=client, timeout=30)
            assert answers(again) == before
            again.close()
            kb.close()
        finally:
            close_client(client)
    assert until(lambda: set(threading.enumerate()) <= threads, 10), set(threading.enumerate()) - threads


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) to give one worker its own mounts")
def test_a_shard_on_a_worker_that_cannot_see_the_folder_is_loaded_elsewhere(tmp_path):
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged mount namespaces are off here ({probe.stderr.decode().strip()})")
    shared = tmp_path / "shared"
    shared.mkdir()
    kb = ShardedKnowledgeBase(2)
    kb.add_texts((f"proxy streams tokens {i} alpha{i % 7}", f"d{i}.md") for i in range(40))
    index = kb.save(shared / "idx")
    with cluster(1) as procs:
        procs.start_worker(
            prefix=["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs none {shared} && exec"], name="blind"
        )
        procs.wait_for(2)
        client = connect(procs.address, timeout=30)
        try:
            blind = next(a for a, w in client.scheduler_info()["workers"].items() if w["name"] == "blind")
            sharded = ShardedKnowledgeBase.load(index, client=client, timeout=30)
            assert answers(sharded) == answers(kb)
            assert all(ws and blind not in ws for ws in sharded.shard_workers())
            errors = [s.last_error for s in sharded.health().shards if s.last_error]
            assert errors and all("cannot see shard" in e and blind in e for e in errors), errors
            assert not any("copied in from elsewhere" in e for e in errors)
            sharded.close()
        finally:
            close_client(client)


def _listening(pids):
    """The local addresses (``ip``, ``port``) that the processes ``pids`` listen on over TCP (IPv4 and v6)."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table, encoding="ascii") as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # LISTEN
                    ip_hex, port_hex = local.split(":")
                    raw = bytes.fromhex(ip_hex)
                    # /proc prints each 32-bit word in host (little-endian) order.
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                    ip = ".".join(str(b) for b in words) if width == 8 else words.hex()
                    out.add((ip, int(port_hex, 16)))
    return out


def test_the_docs_worker_command_line_listens_on_nothing_but_its_host_and_loopback():
    """docs/scale.md's `dask worker` line, its addresses swapped for loopback ones: no socket on every
    interface (Dask's worker HTTP server, which --no-dashboard leaves running, included)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scale.md").read_text(encoding="utf-8")
    [line, *_] = [ln for ln in doc.splitlines() if ln.startswith("worker-1$")]
    args = line.split("dask worker", 1)[1].split()
    assert "--dashboard-address" in args
    with cluster(0) as procs:
        args = [procs.address if a.startswith("tcp://") else "127.0.0.1" if a == "10.0.0.6" else a for a in args]
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", *args],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.workers.append(worker)
        procs.wait_for(1)
        addresses = _listening(_group(worker.pid))
    assert len(addresses) >= 3  # the nanny, the worker and its HTTP server
    assert {ip for ip, _ in addresses} == {"127.0.0.1"}, addresses


def test_a_change_on_a_worker_that_hangs_fails_once_it_is_silent_for_the_timeout(index):
    """A change waits as long as its work needs, but not for a worker that stopped sending heartbeats."""
    with cluster(2) as procs:
        client = connect(procs.address, timeout=30)
        try:
            kb = ShardedKnowledgeBase.load(index, client=client, timeout=5)
            source = next(f"new/{i}.md" for i in range(100) if kb.shard_of(f"new/{i}.md") == 0)
            holder = kb.shard_workers()[0][0]
            pid = worker_pid(client, holder)
            os.kill(pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(RetrievalTimeoutError, match=f"worker {holder} has sent the Dask scheduler no"):
                    kb.add_text("zebra unicorn", source)
                assert time.monotonic() - started < 5 + 20  # its timeout, plus heartbeats' own intervals
            finally:
                os.kill(pid, signal.SIGCONT)
            kb.close()
        finally:
            close_client(client)
