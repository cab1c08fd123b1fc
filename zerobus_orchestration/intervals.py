"""Pure algebra over half-open row-position ranges: union-merge, gaps, contiguous high-water.

Kept apart from the SQLite store so the rules coverage depends on are property-testable on their own.
Every function returns a *normalised* tuple: sorted by start, no empty range, and no two ranges that
overlap or touch (``[0, 3)`` and ``[3, 5)`` are one range ``[0, 5)``). Normalised input is not required.
"""

from __future__ import annotations

from collections.abc import Iterable

from zerobus_orchestration.ranges import OffsetRange


def merge(ranges: Iterable[OffsetRange]) -> tuple[OffsetRange, ...]:
    """Union of ``ranges``, normalised. Order-independent and idempotent by construction."""
    merged: list[OffsetRange] = []
    for span in sorted(r for r in ranges if r.end > r.start):
        if merged and span.start <= merged[-1].end:  # overlapping or adjacent: coalesce
            last = merged[-1]
            if span.end > last.end:
                merged[-1] = OffsetRange(last.start, span.end)
        else:
            merged.append(span)
    return tuple(merged)


def union(*groups: Iterable[OffsetRange]) -> tuple[OffsetRange, ...]:
    """Union of several range collections (e.g. stored coverage plus a newly confirmed span)."""
    return merge(span for group in groups for span in group)


def gaps_between(covered: Iterable[OffsetRange], start: int, end: int) -> tuple[OffsetRange, ...]:
    """The parts of ``[start, end)`` that ``covered`` does not cover, in order."""
    if start < 0 or end < start:
        raise ValueError(f"invalid window [{start}, {end})")
    holes: list[OffsetRange] = []
    cursor = start
    for span in merge(covered):
        if span.end <= cursor:
            continue
        if span.start >= end:
            break
        if span.start > cursor:
            holes.append(OffsetRange(cursor, span.start))
        cursor = max(cursor, span.end)
        if cursor >= end:
            break
    if cursor < end:
        holes.append(OffsetRange(cursor, end))
    return tuple(holes)


def gaps(covered: Iterable[OffsetRange], n: int) -> tuple[OffsetRange, ...]:
    """The parts of ``[0, n)`` not covered: what a resume of ``n`` rows still has to send."""
    return gaps_between(covered, 0, n)


def clip(covered: Iterable[OffsetRange], start: int, end: int) -> tuple[OffsetRange, ...]:
    """``covered`` restricted to the window ``[start, end)``."""
    if start < 0 or end < start:
        raise ValueError(f"invalid window [{start}, {end})")
    return tuple(
        OffsetRange(max(span.start, start), min(span.end, end))
        for span in merge(covered)
        if span.end > start and span.start < end
    )


def high_water(covered: Iterable[OffsetRange]) -> int:
    """End of the contiguous prefix covered from position 0 (the first gap's start); 0 if none."""
    normalised = merge(covered)
    if normalised and normalised[0].start == 0:
        return normalised[0].end
    return 0


def covered_count(covered: Iterable[OffsetRange]) -> int:
    """How many distinct positions ``covered`` holds."""
    return sum(len(span) for span in merge(covered))


def contains(covered: Iterable[OffsetRange], position: int) -> bool:
    return any(span.start <= position < span.end for span in merge(covered))
