"""Resume a write: from a re-run's input, keep only the rows coverage says were never delivered.

Pure and streaming: batches are pulled one at a time and every yielded batch is a zero-copy slice of
an input batch, so memory stays bounded by one input batch whatever the input's length.
``ZerobusRuntime.write(..., resume=True)`` (the default) feeds this the coverage of (source, partition)
and pushes each slice at its start offset, so ``_twg_offset`` keeps every row's original position.

Two ways to know a row's position:

* positional (default): rows are positions ``0, 1, ... n-1`` in input order, counted across batches;
* a declared offset column (a Kafka-style offset the source already carries): each row's position is
  that column's value. Offsets need not be contiguous or sorted; a slice's ``start_offset`` is then
  the offset of its first row and the column itself holds the rest.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration import intervals
from zerobus_orchestration.errors import ZerobusOrchestrationError
from zerobus_orchestration.ranges import OffsetRange

# pyarrow is untyped (Any) here, so the alias is spelled out for readers rather than for mypy.
BatchSource: TypeAlias = "Iterable[pa.RecordBatch] | pa.RecordBatchReader | pa.Table"


class ResumeInputError(ZerobusOrchestrationError, ValueError):
    """The input cannot be positioned (declared offset column missing, not integer, null, negative)."""


class ResumeSlice(NamedTuple):
    """Rows still to send: ``batch`` starts at position ``start_offset``."""

    start_offset: int
    batch: pa.RecordBatch


class _Covered:
    """Normalised coverage with a bisect index, so each batch costs ``O(log C + overlaps)``."""

    def __init__(self, covered: Iterable[OffsetRange]) -> None:
        self.spans = intervals.merge(covered)
        self._ends = [span.end for span in self.spans]

    def overlapping(self, start: int, end: int) -> list[OffsetRange]:
        """Covered spans intersecting ``[start, end)``, clipped to it."""
        found: list[OffsetRange] = []
        for span in self.spans[bisect.bisect_right(self._ends, start) :]:
            if span.start >= end:
                break
            found.append(OffsetRange(max(span.start, start), min(span.end, end)))
        return found


def resume_slices(
    covered: Iterable[OffsetRange],
    batches: BatchSource,
    *,
    offset_column: str | None = None,
    table: str | None = None,
) -> Iterator[ResumeSlice]:
    """Yield, in input order, only the rows of ``batches`` whose positions ``covered`` lacks.

    ``table`` only names the target in error messages.
    """
    index = _Covered(covered)
    if offset_column is None:
        yield from _positional(index, _iter_batches(batches))
    else:
        yield from _by_offset_column(index, _iter_batches(batches), offset_column, table)


def _iter_batches(batches: BatchSource) -> Iterable[pa.RecordBatch]:
    if isinstance(batches, pa.Table):
        chunks: list[pa.RecordBatch] = batches.to_batches()  # zero-copy views of the table's chunks
        return chunks
    return batches


def _positional(index: _Covered, batches: Iterable[pa.RecordBatch]) -> Iterator[ResumeSlice]:
    position = 0
    for batch in batches:
        start, end = position, position + batch.num_rows
        position = end
        for gap in intervals.gaps_between(index.overlapping(start, end), start, end):
            yield ResumeSlice(gap.start, batch.slice(gap.start - start, len(gap)))


def _by_offset_column(
    index: _Covered, batches: Iterable[pa.RecordBatch], column: str, table: str | None
) -> Iterator[ResumeSlice]:
    for batch in batches:
        if batch.num_rows == 0:
            continue
        offsets = _offsets(batch, column, table)
        bounds = pc.min_max(offsets)
        hits = index.overlapping(bounds["min"].as_py(), bounds["max"].as_py() + 1)
        if not hits:
            yield ResumeSlice(offsets[0].as_py(), batch)
            continue
        # Few covered spans overlap one batch in practice (coverage is mostly contiguous), so a mask
        # built span by span stays vectorised.
        covered_mask = pc.and_(pc.greater_equal(offsets, hits[0].start), pc.less(offsets, hits[0].end))
        for span in hits[1:]:
            covered_mask = pc.or_(
                covered_mask, pc.and_(pc.greater_equal(offsets, span.start), pc.less(offsets, span.end))
            )
        for row_start, row_count in _true_runs(pc.invert(covered_mask)):
            yield ResumeSlice(offsets[row_start].as_py(), batch.slice(row_start, row_count))


def _offsets(batch: pa.RecordBatch, column: str, table: str | None) -> pa.Array:
    where = f"table {table}, column {column!r}" if table else f"column {column!r}"
    if column not in batch.schema.names:
        raise ResumeInputError(
            f"{where}: the declared offset column is not in the input (columns: {batch.schema.names}). "
            "Fix: declare the column that carries each row's offset, or resume positionally."
        )
    values = batch.column(column)
    if not pa.types.is_integer(values.type):
        raise ResumeInputError(
            f"{where}: offset column has type {values.type}, resume needs an integer column. "
            "Fix: cast the offsets to int64 before resuming."
        )
    if values.null_count:
        raise ResumeInputError(
            f"{where}: {values.null_count} row(s) have a null offset, so their coverage is unknowable. "
            "Fix: fill every offset, or resume positionally."
        )
    offsets = pc.cast(values, pa.int64())
    lowest = pc.min(offsets).as_py()
    if lowest < 0:
        raise ResumeInputError(
            f"{where}: offset {lowest} is negative; coverage positions start at 0. "
            "Fix: shift the offsets so the first is 0 or more."
        )
    return offsets


def _true_runs(mask: pa.Array) -> Iterator[tuple[int, int]]:
    """``(first_row, length)`` of each maximal run of True in ``mask``."""
    rows = pc.indices_nonzero(mask)
    if len(rows) == 0:
        return
    if len(rows) == len(mask):
        yield 0, len(mask)
        return
    breaks = pc.indices_nonzero(pc.not_equal(pc.pairwise_diff(rows), 1)).to_pylist()
    bounds = [0, *breaks, len(rows)]
    for first, stop in itertools.pairwise(bounds):
        row_start = rows[first].as_py()
        yield row_start, rows[stop - 1].as_py() - row_start + 1
