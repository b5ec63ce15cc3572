"""Fake generate backends shared by the answer tests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class Recorder:
    """A generate backend that writes nothing and records the ``options`` of each call."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any] | None] = []

    def __call__(
        self, prompt: str, stop: Sequence[str] = (), *, options: Mapping[str, Any] | None = None
    ) -> Iterator[str]:
        self.calls.append(options)
        return iter(())
