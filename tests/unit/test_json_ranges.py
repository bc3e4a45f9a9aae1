"""Integer range regexes: exact membership, checked against Python ints."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.json_schema.ranges import integer_range_regex

BIG = 2**70


def _in(n: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or n >= lo) and (hi is None or n <= hi)


def _probe_points(lo: int | None, hi: int | None) -> set[int]:
    """Every integer near the bounds, near 0, and near powers of ten inside."""
    points = set(range(-25, 26))
    for b in (lo, hi):
        if b is not None:
            points.update(range(b - 25, b + 26))
            for k in range(1, len(str(abs(b))) + 2):
                for edge in (10**k, -(10**k)):
                    points.update((edge - 1, edge, edge + 1))
    return points


@pytest.mark.parametrize(
    "lo,hi",
    [(0, 0), (0, 9), (1, 100), (-100, -1), (-57, 1234), (None, 5), (-5, None), (None, None),
     (7, 7), (10, 99), (19, 201), (-1000, 0), (0, None), (123, None), (None, -123),
     (-(2**64), 2**64), (2**64, 2**65 + 7), (None, -(2**64)), (999, 1000), (-1, 1)],
)
def test_exhaustive_near_bounds(lo, hi):
    rx = re.compile(integer_range_regex(lo, hi))
    for n in _probe_points(lo, hi):
        assert bool(rx.fullmatch(str(n))) == _in(n, lo, hi), (lo, hi, n)


def test_every_integer_in_a_small_window():
    for lo in range(-30, 31, 7):
        for hi in range(lo, 160, 13):
            rx = re.compile(integer_range_regex(lo, hi))
            for n in range(-200, 200):
                assert bool(rx.fullmatch(str(n))) == _in(n, lo, hi), (lo, hi, n)


@pytest.mark.parametrize("lo,hi", [(None, None), (-5, 5), (0, 10), (None, 0), (0, None)])
def test_non_canonical_spellings_are_rejected(lo, hi):
    rx = re.compile(integer_range_regex(lo, hi))
    for text in ("-0", "00", "01", "+1", "1.0", "1e1", "", "-", " 1", "0x1"):
        assert not rx.fullmatch(text), text


def test_empty_range_raises():
    with pytest.raises(ValueError):
        integer_range_regex(5, 4)


bounds = st.one_of(st.none(), st.integers(-(BIG), BIG), st.integers(-300, 300))


@settings(max_examples=150, deadline=None)
@given(bounds, bounds, st.data())
def test_random_ranges(lo, hi, data):
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    rx = re.compile(integer_range_regex(lo, hi))
    around = [b for b in (lo, hi) if b is not None] or [0]
    for _ in range(20):
        n = data.draw(st.one_of(st.integers(-(BIG * 2), BIG * 2), st.sampled_from(around).flatmap(lambda b: st.integers(b - 3, b + 3))))
        assert bool(rx.fullmatch(str(n))) == _in(n, lo, hi), (lo, hi, n)
