"""What one write says it delivered: the record read-back verifies, wherever it runs.

A write's own record travels with the orchestrator, not with the writer's host: the Dagster
materialisation's metadata, the Airflow ingest task's XCom. Both carry the write summary's keys
(``table``, ``source``, ``partition``, ``offset_start``, ``offset_end``, ``rows_written``,
``rows_skipped``), and optionally ``delivered_ranges`` (``[[start, end], ...]``), so a verifier on
another host needs no coverage file to know which positions to look for.

Light on purpose (no pyarrow, no pyiceberg): an Airflow DAG file and the triggerer import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zerobus_orchestration.ranges import OffsetRange

RANGES_KEY = "delivered_ranges"


@dataclass(frozen=True)
class WriteRecord:
    """(source, partition) of ``table`` and the half-open offset ranges the write made durable."""

    table: str
    source: str
    partition: str
    ranges: tuple[OffsetRange, ...]

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], *, table: str | None = None) -> WriteRecord | None:
        """From a write summary (``WriteResult.as_dict()``, an XCom, flattened Dagster metadata).

        ``None`` when the summary names no source or no offsets (not a Zerobus write, or one recorded
        before offsets were): the caller falls back to a same-host cache or the table's own truth.
        A write returns only once every row is durable, so its rows are positions ``offset_start`` up
        to ``offset_end``, and at least ``rows_written + rows_skipped`` of them: a resumed write whose
        tail was already delivered sends nothing past what it skipped.
        """
        name = table if table is not None else summary.get("table")
        source, partition = summary.get("source"), summary.get("partition")
        if not isinstance(name, str) or not isinstance(source, str) or not isinstance(partition, str):
            return None
        explicit = summary.get(RANGES_KEY)
        if explicit is not None:
            return cls(name, source, partition, ranges_from_primitives(explicit))
        start, end = summary.get("offset_start"), summary.get("offset_end")
        if not isinstance(start, int) or not isinstance(end, int):
            return None
        rows = _int(summary.get("rows_written")) + _int(summary.get("rows_skipped"))
        last = max(end, start + rows)
        return cls(name, source, partition, (OffsetRange(start, last),) if last > start else ())

    def primitives(self) -> list[list[int]]:
        """The ranges as JSON-safe pairs (trigger kwargs, XCom)."""
        return ranges_to_primitives(self.ranges)


def ranges_to_primitives(ranges: Sequence[OffsetRange]) -> list[list[int]]:
    return [[int(r.start), int(r.end)] for r in ranges]


def ranges_from_primitives(value: Any) -> tuple[OffsetRange, ...]:
    """``[[start, end], ...]`` back to ranges; anything else is refused, naming the value."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise ValueError(f"delivered ranges must be a list of [start, end] pairs, got {value!r}")
    ranges: list[OffsetRange] = []
    for pair in value:
        if (
            not isinstance(pair, Sequence)
            or isinstance(pair, str | bytes)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        ):
            raise ValueError(f"delivered range {pair!r} is not a [start, end] pair of integers")
        ranges.append(OffsetRange(int(pair[0]), int(pair[1])))
    return tuple(ranges)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
