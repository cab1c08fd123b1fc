"""Property tests of the pure interval algebra coverage relies on."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerobus_orchestration import intervals
from zerobus_orchestration.ranges import OffsetRange

MAX = 200


@st.composite
def offset_ranges(draw: st.DrawFn) -> OffsetRange:
    start = draw(st.integers(0, MAX))
    return OffsetRange(start, draw(st.integers(start, MAX)))


range_lists = st.lists(offset_ranges(), max_size=25)


def positions(ranges: tuple[OffsetRange, ...] | list[OffsetRange]) -> set[int]:
    return {p for r in ranges for p in range(r.start, r.end)}


def assert_normalised(ranges: tuple[OffsetRange, ...]) -> None:
    for r in ranges:
        assert r.end > r.start
    for left, right in itertools.pairwise(ranges):
        assert left.end < right.start, f"{left} and {right} overlap or touch"


@given(range_lists)
def test_merge_keeps_exactly_the_covered_positions_normalised(ranges: list[OffsetRange]) -> None:
    merged = intervals.merge(ranges)
    assert_normalised(merged)
    assert positions(merged) == positions(ranges)


@given(range_lists, st.randoms(use_true_random=False))
def test_merge_is_order_independent(ranges: list[OffsetRange], rnd: random.Random) -> None:
    shuffled = list(ranges)
    rnd.shuffle(shuffled)
    assert intervals.merge(shuffled) == intervals.merge(ranges)


@given(range_lists)
def test_merge_is_idempotent(ranges: list[OffsetRange]) -> None:
    once = intervals.merge(ranges)
    assert intervals.merge(once) == once
    assert intervals.union(once, ranges) == once  # re-applying every write changes nothing


@given(range_lists, range_lists)
def test_union_never_loses_a_write(a: list[OffsetRange], b: list[OffsetRange]) -> None:
    combined = intervals.union(a, b)
    assert positions(combined) == positions(a) | positions(b)
    assert intervals.union(b, a) == combined


@given(range_lists, st.integers(0, MAX + 20))
def test_gaps_and_covered_partition_the_whole_range(ranges: list[OffsetRange], n: int) -> None:
    holes = intervals.gaps(ranges, n)
    assert_normalised(holes)
    covered_inside = positions(intervals.clip(ranges, 0, n))
    assert positions(holes).isdisjoint(covered_inside)
    assert positions(holes) | covered_inside == set(range(n))


@given(range_lists, st.integers(0, MAX), st.integers(0, MAX))
def test_gaps_between_a_window(ranges: list[OffsetRange], a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    holes = intervals.gaps_between(ranges, lo, hi)
    assert positions(holes) == set(range(lo, hi)) - positions(ranges)


@given(range_lists)
def test_high_water_is_the_first_gap_start(ranges: list[OffsetRange]) -> None:
    hw = intervals.high_water(ranges)
    covered = positions(ranges)
    assert set(range(hw)) <= covered
    assert hw not in covered


def test_adjacent_ranges_coalesce() -> None:
    assert intervals.merge([OffsetRange(3, 5), OffsetRange(0, 3)]) == (OffsetRange(0, 5),)


def test_empty_ranges_are_dropped_and_high_water_needs_position_zero() -> None:
    assert intervals.merge([OffsetRange(4, 4)]) == ()
    assert intervals.high_water([OffsetRange(1, 9)]) == 0
    assert intervals.gaps([], 3) == (OffsetRange(0, 3),)
    assert intervals.covered_count([OffsetRange(0, 2), OffsetRange(1, 4)]) == 4
    assert intervals.contains([OffsetRange(0, 2)], 1)
    assert not intervals.contains([OffsetRange(0, 2)], 2)


def test_invalid_window_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid window"):
        intervals.gaps_between([], 5, 2)
