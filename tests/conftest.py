import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers._fake_server import FakeServer, Handle
from tests.helpers._leaks import alive, child_pids
from tests.helpers._paths import SHARED
from tests.helpers._profiles import PROFILE

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Hypothesis profiles (see helpers/_profiles.py): "fast" by default, "ci" (HYPOTHESIS_PROFILE=ci) runs
# every example the tests ask for.  No deadline in either: the machine is shared, and speed is
# measured in bench/, never asserted in tests.
settings.register_profile("fast", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.load_profile(PROFILE)

try:  # tqdm (under sentence-transformers) starts a monitor thread that never ends; the leak guard would see it
    import tqdm

    tqdm.tqdm.monitor_interval = 0
except ImportError:  # the model extras are not installed: nothing starts that thread
    pass


@pytest.fixture
def cranfield() -> Path:
    path = SHARED / "datasets" / "cranfield"
    assert (path / "corpus.jsonl").is_file(), f"the Cranfield data set is missing at {path}"
    return path


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal.

    A run in the background (``scripts/test &``, ``nohup``) starts with SIGINT ignored; a test
    that sends it to this process sets the disposition it relies on, and puts the old one back.
    """
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def fake_server() -> Iterator[Callable[[Handle], FakeServer]]:
    """Starts a loopback fake HTTP server answering with a handler; every one stops when the test ends."""
    started: list[FakeServer] = []

    def start(handle: Handle) -> FakeServer:
        started.append(FakeServer(handle).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def llama_server():
    """One real llama.cpp server (Gemma-3-270M) for every ``llama`` test of the run.

    Fails, not skips, when the binary or the model is missing: set
    CLANKER_SKIP_LLAMA=1 to opt out on a machine without them.
    """
    from tests.helpers._llama_server import LlamaServer, LlamaUnavailable

    if os.environ.get("CLANKER_SKIP_LLAMA") == "1":
        pytest.skip("CLANKER_SKIP_LLAMA=1")
    try:
        with LlamaServer() as srv:
            yield srv
    except LlamaUnavailable as exc:
        pytest.fail(f"{exc} (set CLANKER_SKIP_LLAMA=1 to skip the llama.cpp tests)")


# --- No test leaves a thread or a child process behind -------------------------------------------
#
# A thread or process that outlives its test changes what later tests see (the parallel ingest
# refuses to fork a threaded program, the collector's counts move, ports stay bound), which makes
# results depend on test order. Every test must stop what it starts; this guard fails the test
# that did not. Fixtures of a wider scope (the session's llama.cpp server) are set up before the
# guard takes its snapshot, so what they own is not counted.

_LEAK_GRACE_S = 5.0


@pytest.fixture(autouse=True)
def no_leftover_threads_or_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    import threading
    import time

    threads_before = set(threading.enumerate())
    children_before = child_pids()
    yield
    if request.node.get_closest_marker("leaves_running"):
        return
    deadline = time.monotonic() + _LEAK_GRACE_S
    while True:
        threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        children = [p for p in child_pids() - children_before if alive(p)]
        if not threads and not children:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    detail = [f"thread {t.name!r}" for t in threads] + [f"child process {p}" for p in children]
    pytest.fail(f"the test left running: {', '.join(detail)}", pytrace=False)
