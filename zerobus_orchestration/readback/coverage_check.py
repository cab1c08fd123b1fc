"""Comparing scanned rows with coverage: missing ranges, duplicates, rows outside coverage.

Rows are matched to coverage by the engine-owned columns ``_twg_source`` and ``_twg_offset``. The raw
table carries no partition column of its own; when sources are written per partition, the caller names
the payload column holding the partition key, otherwise rows of one source are matched regardless of
partition. Pure Arrow compute: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration import intervals
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET, SOURCE

DEFAULT_SAMPLE_SIZE: Final = 10


@dataclass(frozen=True)
class MissingRange:
    key: CoverageKey
    span: OffsetRange


@dataclass(frozen=True)
class RowRef:
    """A (source, partition, offset) seen in the table; ``count`` > 1 for duplicates."""

    source: str
    offset: int
    partition: str | None = None
    count: int = 1


@dataclass(frozen=True)
class CoverageCheck:
    missing: tuple[MissingRange, ...]
    duplicate_count: int
    duplicate_sample: tuple[RowRef, ...]
    rows_outside_coverage: int
    outside_sample: tuple[RowRef, ...]


_SRC, _OFF, _PART = "source", "offset", "partition"


def check_coverage(
    rows: pa.Table,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    *,
    partition_column: str | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> CoverageCheck:
    """Compare scanned ``rows`` (``_twg_source``, ``_twg_offset``[, partition]) with coverage ranges.

    Missing: covered offsets with no row. Duplicates: extra rows per (source[, partition], offset),
    expected only from at-least-once re-sends. Outside: rows of a covered source whose offset no range
    covers. Only sources named in ``coverage`` are considered.
    """
    normalised = _normalise_rows(rows, partition_column)
    by_group: dict[tuple[str, str | None], list[tuple[CoverageKey, Sequence[OffsetRange]]]] = {}
    for key, spans in coverage.items():
        group = (key.source, key.partition if partition_column else None)
        by_group.setdefault(group, []).append((key, spans))

    missing: list[MissingRange] = []
    outside_count = 0
    outside_sample: list[RowRef] = []
    for (source, partition), keyed in sorted(by_group.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        offsets = _group_offsets(normalised, source, partition)
        distinct = _sorted_unique(offsets)
        for key, spans in sorted(keyed, key=lambda ks: ks[0]):
            for span in intervals.merge(spans):
                missing.extend(MissingRange(key, gap) for gap in _gaps(distinct, span))
        merged = intervals.merge(span for _, spans in keyed for span in spans)
        outside = offsets.filter(pc.invert(_inside_mask(offsets, merged)))
        outside_count += len(outside)
        if len(outside_sample) < sample_size and len(outside):
            first = _sorted_unique(outside)[: sample_size - len(outside_sample)].to_pylist()
            outside_sample.extend(RowRef(source, int(o), partition) for o in first)

    dup_count, dup_sample = _duplicates(normalised, partition_column is not None, sample_size)
    return CoverageCheck(
        missing=tuple(missing),
        duplicate_count=dup_count,
        duplicate_sample=dup_sample,
        rows_outside_coverage=outside_count,
        outside_sample=tuple(outside_sample),
    )


def _normalise_rows(rows: pa.Table, partition_column: str | None) -> pa.Table:
    columns: dict[str, pa.ChunkedArray] = {
        _SRC: rows.column(SOURCE).cast(pa.string()),
        _OFF: rows.column(OFFSET).cast(pa.int64()),
    }
    if partition_column is not None:
        columns[_PART] = rows.column(partition_column).cast(pa.string())
    table = pa.table(columns)
    return table.filter(pc.and_(pc.is_valid(table[_SRC]), pc.is_valid(table[_OFF])))


def _group_offsets(rows: pa.Table, source: str, partition: str | None) -> pa.Array:
    mask = pc.equal(rows[_SRC], source)
    if partition is not None:
        mask = pc.and_(mask, pc.equal(rows[_PART], partition))
    return rows[_OFF].filter(mask).combine_chunks()


def _sorted_unique(values: pa.Array) -> pa.Array:
    unique = pc.unique(values)
    return unique.take(pc.array_sort_indices(unique))


def _gaps(sorted_distinct: pa.Array, span: OffsetRange) -> list[OffsetRange]:
    """Sub-ranges of ``span`` with no offset in ``sorted_distinct`` (vectorised over the offsets)."""
    inside = sorted_distinct.filter(
        pc.and_(pc.greater_equal(sorted_distinct, span.start), pc.less(sorted_distinct, span.end))
    )
    if len(inside) == len(span):
        return []
    before = pa.concat_arrays([pa.array([span.start - 1], pa.int64()), inside])
    after = pa.concat_arrays([inside, pa.array([span.end], pa.int64())])
    jumps = pc.greater(pc.subtract(after, before), 1)
    starts = pc.add(before.filter(jumps), 1).to_pylist()
    ends = after.filter(jumps).to_pylist()
    return [OffsetRange(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _inside_mask(offsets: pa.Array, merged: Sequence[OffsetRange]) -> pa.Array:
    mask = pa.array([False] * len(offsets), pa.bool_())
    for span in merged:
        mask = pc.or_(mask, pc.and_(pc.greater_equal(offsets, span.start), pc.less(offsets, span.end)))
    return mask


def _duplicates(rows: pa.Table, with_partition: bool, sample_size: int) -> tuple[int, tuple[RowRef, ...]]:
    keys = [_SRC, _PART, _OFF] if with_partition else [_SRC, _OFF]
    counts = rows.group_by(keys).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts["count_all"], 1))
    if dups.num_rows == 0:
        return 0, ()
    extra = pc.sum(pc.subtract(dups["count_all"], 1)).as_py()
    dups = dups.sort_by([(_SRC, "ascending"), (_OFF, "ascending")]).slice(0, sample_size)
    sample = tuple(
        RowRef(
            source=str(row[_SRC]),
            offset=int(row[_OFF]),
            partition=row.get(_PART),
            count=int(row["count_all"]),
        )
        for row in dups.to_pylist()
    )
    return int(extra or 0), sample
