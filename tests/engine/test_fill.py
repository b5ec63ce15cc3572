"""The bulk build's cheaper array fills and sorts equal the plain ones, bit for bit."""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._engine import _fill
from clanker_rag._engine._fill import float32s, int32s, retyped_int32s
from clanker_rag._engine._scoring import impact_order, impact_orders
from tests.helpers._profiles import examples

INT32_MAX = 2**31 - 1
# Doubles, including ones that round to the same float32 and ones that do not fit one's
# precision (ties, subnormals, values past float32's largest).
doubles = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True, width=64),
    st.floats(min_value=0.0, max_value=8.0, width=32).map(float),
    st.integers(min_value=0, max_value=2**20).map(lambda n: n / 1024),
)


def bits(values: array[float]) -> bytes:
    return values.tobytes()


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(doubles, max_size=300))
def test_float32s_is_array_f_bit_for_bit(values: list[float]) -> None:
    assert bits(float32s(iter(values))) == bits(array("f", values))
    assert float32s(values).typecode == "f"


def test_float32s_packs_past_one_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fill, "_SLICE", 7)
    values = [i / 3 for i in range(50)]
    assert bits(float32s(map(float, values))) == bits(array("f", values))
    assert float32s([]) == array("f")


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=INT32_MAX), max_size=300))
def test_int32s_is_array_i(values: list[int]) -> None:
    got = int32s(iter(values))
    assert got.typecode == "i" and got == array("i", values)
    assert got.tobytes() == array("i", values).tobytes()


@pytest.mark.parametrize("bad", [2**31, 2**32 - 1, 2**32, -1])
def test_int32s_refuses_what_array_i_of_non_negatives_cannot_hold(bad: int) -> None:
    with pytest.raises(OverflowError):
        int32s([0, 5, bad, 7])


def test_retyped_int32s_checks_every_value() -> None:
    ok = array("I", [0, 1, INT32_MAX])
    assert retyped_int32s(ok) == array("i", [0, 1, INT32_MAX])
    for i in range(4):
        values = [3, 4, 5, 6]
        values[i] = 2**31 + i
        with pytest.raises(OverflowError):
            retyped_int32s(array("I", values))
    assert retyped_int32s(array("I")) == array("i")


def simple_order(imps: list[float]) -> list[int]:
    """Positions by decreasing impact, ties by position: the order's definition."""
    return sorted(range(len(imps)), key=lambda i: (-imps[i], i))


# float32 impacts with many ties, as a list's (tf, chunk length) pairs give.
impact_lists = st.lists(
    st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.25, 7.0]) | st.floats(0.0, 20.0, width=32), max_size=80),
    max_size=12,
)


@pytest.mark.slow
@settings(max_examples=examples(500), deadline=None)
@given(impact_lists, st.integers(min_value=0, max_value=10))
def test_impact_orders_are_the_defined_order(lists: list[list[float]], order_min: int) -> None:
    imps = array("f", [x for one in lists for x in one])
    offsets = [0]
    for one in lists:
        offsets.append(offsets[-1] + len(one))
    want: list[int] = []
    for a, b in pairwise(offsets):
        if b - a > order_min:
            want.extend(simple_order(imps[a:b].tolist()))
    got = impact_orders(imps, offsets, order_min)
    assert got.typecode == "i" and got.tolist() == want
    for a, b in pairwise(offsets):
        parts: tuple[Sequence[float], ...] = (imps[a:b], memoryview(imps)[a:b], imps[a:b].tolist())
        for part in parts:
            order = impact_order(part)
            assert order.typecode == "i" and order.tolist() == simple_order(imps[a:b].tolist())


def test_float32_rounding_matches_struct_and_array() -> None:
    # The one double that rounds to a different float32 under truncation: rounding to nearest wins.
    x = 1.0 + 2**-24 + 2**-40
    assert float32s([x]).tobytes() == array("f", [x]).tobytes() == struct.pack("f", x)


def test_float32s_falls_back_to_the_array_module_where_struct_refuses() -> None:
    # Not a float at all: both refuse it alike.
    with pytest.raises(TypeError):
        array("f", [1.0, "x"])  # type: ignore[type-var]
    with pytest.raises(TypeError):
        float32s([1.0, "x"])  # type: ignore[list-item]
    assert bits(float32s([1.0, 3, True])) == bits(array("f", [1.0, 3, True]))
