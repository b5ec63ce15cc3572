"""Parameter checks shared by the configurable classes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ._exceptions import ConfigError

__all__ = ["check_metadata", "int_k", "positive_int", "short", "text_items"]


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (bools excluded), else ``ConfigError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer")
    return value


def int_k(k: object) -> int:
    """``k`` (how many hits a search returns) if it is an int (bools excluded; 0 or less returns none), else
    ``ConfigError``."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise ConfigError(f"k={k!r} must be an integer")
    return k


def short(value: object) -> str:
    """``repr(value)`` cut to 60 characters, for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_metadata(source: str, metadata: object) -> None:
    """``ConfigError`` unless ``metadata`` is a mapping or None."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ConfigError(
            f"metadata of {source!r} must be a mapping (dict) or None, not {type(metadata).__name__} {short(metadata)}"
        )


def text_items(items: object) -> Iterator[tuple[str, str, Mapping[str, Any] | None]]:
    """The ``(text, source, metadata)`` of ``add_texts`` items, each checked as it is reached.

    A str, bytes or mapping where an iterable of items belongs is refused at
    once (iterating a str would add one text per character).
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise ConfigError(
            f"add_texts() takes an iterable of (text, source[, metadata]) tuples, "
            f"not a {type(items).__name__} ({short(items)}); use add_text() for one text"
        )
    return _checked(items)


def _checked(items: Iterable[Any]) -> Iterator[tuple[str, str, Mapping[str, Any] | None]]:
    for item in items:
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) not in (2, 3):
            raise ConfigError(
                f"add_texts(): an item must be (text, source) or (text, source, metadata), got {short(item)}"
            )
        yield (item[0], item[1], item[2] if len(item) == 3 else None)


def check_sections(
    sections: Sequence[tuple[int, int, str | None]], n: int, source: str
) -> list[tuple[int, int, str | None]]:
    """``sections`` of a text of ``n`` characters, checked: ordered ``(start, end, label)`` spans inside it."""
    out = []
    pos = 0
    for sec in sections:
        try:
            start, end, label = sec
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: a section must be (start, end, label), got {sec!r}") from None
        if not (isinstance(start, int) and isinstance(end, int) and pos <= start <= end <= n):
            raise ConfigError(
                f"{source}: section {sec!r} is out of order or outside the text (0..{n}, previous end {pos})"
            )
        if label is not None and not isinstance(label, str):
            raise ConfigError(f"{source}: section label must be str or None, got {label!r}")
        out.append((start, end, label))
        pos = end
    return out
