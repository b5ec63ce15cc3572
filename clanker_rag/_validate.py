"""Parameter checks shared by the configurable classes.

Every refused parameter is reported in one shape, built by
:func:`out_of_range`: ``name=value is out of range: expected what``.  The
checks below (:func:`check_int`, :func:`check_number`, :func:`one_of`) write
the ``expected`` part from their bounds, so the same rule reads the same
wherever it is applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from ._exceptions import ConfigError

__all__ = [
    "check_bool",
    "check_callable",
    "check_int",
    "check_metadata",
    "check_number",
    "check_str",
    "int_k",
    "one_of",
    "out_of_range",
    "positive_int",
    "short",
    "text_items",
]

T = TypeVar("T")


def out_of_range(name: str, value: object, expected: str) -> ConfigError:
    """The error for a refused parameter, in the one shape every check uses."""
    return ConfigError(f"{name}={short(value)} is out of range: expected {expected}")


def _bounds(low: float | None, high: float | None, *, low_open: bool = False, high_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high:g}"
    return ""


@overload
def check_int(
    name: str, value: object, low: int | None = ..., high: int | None = ..., *, none: Literal[False] = ...
) -> int: ...
@overload
def check_int(
    name: str, value: object, low: int | None = ..., high: int | None = ..., *, none: Literal[True]
) -> int | None: ...
def check_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, none: bool = False
) -> int | None:
    """``value`` if it is an int (bools excluded) within ``[low, high]`` (or None when ``none``)."""
    if value is None and none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        raise out_of_range(name, value, f"an integer{_bounds(low, high)}{' or None' if none else ''}")
    return value


@overload
def check_number(
    name: str,
    value: object,
    low: float | None = ...,
    high: float | None = ...,
    *,
    low_open: bool = ...,
    high_open: bool = ...,
    none: Literal[False] = ...,
) -> float: ...
@overload
def check_number(
    name: str,
    value: object,
    low: float | None = ...,
    high: float | None = ...,
    *,
    low_open: bool = ...,
    high_open: bool = ...,
    none: Literal[True],
) -> float | None: ...
def check_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    none: bool = False,
) -> float | None:
    """``value`` if it is a finite int or float (bools excluded) within the bounds (or None when ``none``).

    ``low_open`` / ``high_open`` leave the bound itself out.  NaN and the
    infinities are refused: no setting here means "for ever" by infinity.
    """
    if value is None and none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or (low is not None and (value <= low if low_open else value < low))
        or (high is not None and (value >= high if high_open else value > high))
    ):
        bounds = _bounds(low, high, low_open=low_open, high_open=high_open)
        raise out_of_range(name, value, f"a finite number{bounds}{' or None' if none else ''}")
    return value


def one_of(name: str, value: T, choices: Sequence[T]) -> T:
    """``value`` if it is one of ``choices``, else the error listing them."""
    # Compared by type as well: True == 1 must not pass for an int choice.
    if not any(type(value) is type(c) and value == c for c in choices):
        raise out_of_range(name, value, f"one of {', '.join(map(repr, choices))}")
    return value


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise out_of_range(name, value, "True or False")
    return value


def check_str(name: str, value: object, *, none: bool = False) -> None:
    """Nothing if ``value`` is a str (or None when ``none``)."""
    if not (isinstance(value, str) or (value is None and none)):
        raise out_of_range(name, value, f"a str{' or None' if none else ''}")


def check_callable(name: str, value: object, what: str) -> None:
    """Nothing if ``value`` is callable or None; ``what`` describes the callable expected."""
    if value is not None and not callable(value):
        raise out_of_range(name, value, f"{what} or None")


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (bools excluded)."""
    return check_int(name, value, 1)


def int_k(k: object) -> int:
    """``k`` (how many hits a search returns) if it is an int (bools excluded; 0 or less returns none)."""
    return check_int("k", k)


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
