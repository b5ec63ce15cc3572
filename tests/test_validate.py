"""The shared parameter checks: what each accepts, and the one shape of what each refuses."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from clanker_rag._exceptions import ConfigError
from clanker_rag._validate import (
    check_bool,
    check_callable,
    check_int,
    check_number,
    check_str,
    int_k,
    one_of,
    out_of_range,
    positive_int,
)


def refusal(check: Callable[..., object], *args: Any, **kwargs: Any) -> str:
    """The message of the ``ConfigError`` that ``check(*args, **kwargs)`` raises."""
    with pytest.raises(ConfigError) as info:
        check(*args, **kwargs)
    return str(info.value)


def test_the_one_shape_names_the_value_and_what_is_allowed() -> None:
    assert str(out_of_range("k", 0, "an integer >= 1")) == "k=0 is out of range: expected an integer >= 1"
    # A long value is cut, so the message stays one readable line.
    assert str(out_of_range("stop", "x" * 100, "a sequence of str")).startswith("stop='xxxx")
    assert len(str(out_of_range("stop", "x" * 100, "a sequence of str"))) < 110


@pytest.mark.parametrize(
    ("low", "high", "good", "bad", "expected"),
    [
        (1, None, [1, 10**9], [0, -1], "an integer >= 1"),
        (0, None, [0, 3], [-1], "an integer >= 0"),
        (1, 100, [1, 100], [0, 101], "an integer in [1, 100]"),
        (None, None, [-5, 0], [], "an integer"),
    ],
)
def test_check_int_bounds(low: int | None, high: int | None, good: list[int], bad: list[int], expected: str) -> None:
    for value in good:
        assert check_int("n", value, low, high) == value
    refused: list[object] = [*bad, True, 1.0, "1", None]
    for wrong in refused:
        assert refusal(check_int, "n", wrong, low, high) == f"n={wrong!r} is out of range: expected {expected}"


def test_none_is_allowed_only_when_asked_and_then_named() -> None:
    assert check_int("depth", None, 1, none=True) is None
    assert check_number("min_score", None, none=True) is None
    assert refusal(check_int, "depth", 0, 1, none=True).endswith("expected an integer >= 1 or None")
    assert refusal(check_number, "t", None).endswith("expected a finite number")


def test_check_number_bounds_open_and_closed() -> None:
    assert check_number("w", 0, 0, 10) == 0 and check_number("w", 10.0, 0, 10) == 10.0
    assert refusal(check_number, "w", 10.5, 0, 10) == "w=10.5 is out of range: expected a finite number in [0, 10]"
    assert check_number("t", 1e-9, 0, low_open=True) == 1e-9
    assert refusal(check_number, "t", 0, 0, low_open=True) == "t=0 is out of range: expected a finite number > 0"
    assert refusal(check_number, "t", 1e6, 0, 1e6, low_open=True, high_open=True).endswith(
        "expected a finite number in (0, 1e+06)"
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "1", None])
def test_check_number_refuses_what_is_not_a_finite_number(bad: object) -> None:
    assert refusal(check_number, "x", bad) == f"x={bad!r} is out of range: expected a finite number"


def test_one_of_compares_types_too() -> None:
    assert one_of("replicas", 2, (1, 2)) == 2
    # True == 1 in Python; a flag where a count belongs is still refused.
    assert refusal(one_of, "replicas", True, (1, 2)) == "replicas=True is out of range: expected one of 1, 2"
    assert one_of("flare", None, (None, "rewind")) is None
    assert refusal(one_of, "flare", "up", (None, "rewind")).endswith("expected one of None, 'rewind'")


def test_flag_text_and_callable_checks() -> None:
    assert check_bool("tools", False) is False
    assert refusal(check_bool, "tools", 0) == "tools=0 is out of range: expected True or False"
    check_str("after_block", "")
    check_str("question_tail", None, none=True)
    assert refusal(check_str, "question_tail", 1, none=True).endswith("expected a str or None")
    check_callable("hook", None, "a callable")
    check_callable("hook", print, "a callable")
    assert refusal(check_callable, "hook", 1, "a callable") == "hook=1 is out of range: expected a callable or None"


def test_the_older_helpers_speak_the_same_shape() -> None:
    assert positive_int("depth", 3) == 3
    assert refusal(positive_int, "depth", 0) == "depth=0 is out of range: expected an integer >= 1"
    assert int_k(0) == 0  # a search for no hits is allowed
    assert refusal(int_k, 2.5) == "k=2.5 is out of range: expected an integer"
