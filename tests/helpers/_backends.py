"""Generate backends shared by the tests: a fake that records options, and a recorder around a real one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clanker_rag.backends import LlamaCppBackend, RequestStats, Token


class Recorder:
    """A generate backend that writes nothing and records the ``options`` of each call."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any] | None] = []

    def __call__(
        self, prompt: str, stop: Sequence[str] = (), *, options: Mapping[str, Any] | None = None
    ) -> Iterator[str]:
        self.calls.append(options)
        return iter(())


class RecordingBackend:
    """Wraps a llama.cpp backend to keep every request's prompt, streamed pieces and stats."""

    def __init__(self, backend: LlamaCppBackend) -> None:
        self.backend = backend
        self.prompts: list[str] = []
        self.pieces: list[list[Token]] = []
        self.stats: list[RequestStats | None] = []

    def __call__(self, prompt: str, stop: Sequence[str]) -> Iterator[Token]:
        self.prompts.append(prompt)
        self.pieces.append([])
        try:
            for tok in self.backend(prompt, stop):
                self.pieces[-1].append(tok)
                yield tok
        finally:
            self.stats.append(self.backend.last_stats)
