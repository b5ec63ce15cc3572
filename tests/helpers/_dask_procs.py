"""A Dask cluster of separate processes on loopback, as a deployment runs one: ``dask scheduler`` and
``dask worker`` commands (each its own process group), started and stopped by the tests."""

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# As docs/scale.md tells a deployment to set them.
DASK_ENV = {
    "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
    "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "inf",
}


def env() -> dict[str, str]:
    """The environment of the cluster's processes and of CLI runs: this tree's clanker_rag."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **DASK_ENV}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Procs:
    """A scheduler and its workers, each a process group killed at ``stop``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, cmd: list[str], prefix: list[str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*(prefix or []), *cmd],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own group: stop() ends the nanny's worker too
        )

    def start_scheduler(self) -> None:
        cmd = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--dashboard-address", "127.0.0.1:0"]
        self.scheduler = self._spawn(cmd)

    def start_worker(self, *, prefix: list[str] | None = None, name: str | None = None) -> None:
        cmd = [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--host", "127.0.0.1"]
        cmd += ["--nthreads", "1", "--dashboard-address", "127.0.0.1:0"]
        if name is not None:
            cmd += ["--name", name]
        if prefix:
            # A shell script in front (set up a mount namespace, then exec): the command ends the script.
            self.workers.append(self._spawn([*prefix[:-1], prefix[-1] + " " + shlex.join(cmd)]))
        else:
            self.workers.append(self._spawn(cmd))

    def wait_for(self, n_workers: int, timeout: float = 120) -> None:
        from distributed import Client

        with Client(self.address, timeout=timeout) as c:
            c.wait_for_workers(n_workers, timeout=timeout)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in [*self.workers, *([self.scheduler] if self.scheduler else [])]:
            self.kill(proc)
        self.workers = []
        self.scheduler = None


@contextlib.contextmanager
def cluster(n_workers: int):
    procs = Procs()
    try:
        procs.start_scheduler()
        for _ in range(n_workers):
            procs.start_worker()
        if n_workers:
            procs.wait_for(n_workers)
        else:
            _wait_for_port(procs.port)
        yield procs
    finally:
        procs.stop()


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")
