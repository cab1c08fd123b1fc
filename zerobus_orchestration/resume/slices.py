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

Positions alone cannot tell whether the input changed between tries (a new file sorting first in a
glob, an unstable SQL order): skipping covered positions would then lose rows never delivered and
re-send delivered ones. So, given the content digests coverage recorded (``digests=``), every batch is
first checked (``resume.check.ContentChecker``) and the first range whose rows differ raises
``ResumeMismatchError``. Rows to send are held back until every digested range has been checked, so a
mismatch fails before anything is sent; what is held is only the not-yet-delivered rows that come
before the last delivered range (holes a crash left), capped at ``HOLD_BACK_ROWS`` rows, past which
sending resumes (with a warning) while checking continues.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration import intervals
from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.errors import ResumeInputError, ResumeMismatchError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.resume.check import ContentChecker, _Mismatch

log = logging.getLogger(__name__)

HOLD_BACK_ROWS = 1_000_000
"""Most rows held back while delivered ranges are still being checked (see the module docstring)."""

# pyarrow is untyped (Any) here, so the alias is spelled out for readers rather than for mypy.
BatchSource: TypeAlias = "Iterable[pa.RecordBatch] | pa.RecordBatchReader | pa.Table"


class ResumeSlice(NamedTuple):
    """Rows still to send: ``batch`` starts at position ``start_offset``."""

    start_offset: int
    batch: pa.RecordBatch


class _Step(NamedTuple):
    """One input batch, where its rows sit, and the slices of it still to send."""

    batch: pa.RecordBatch
    start: int  # positional: the position of its first row
    offsets: pa.Array | None  # declared offset column: every row's position (int64)
    pieces: list[ResumeSlice]


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
    digests: Iterable[RangeDigest] = (),
    source: str | None = None,
    partition: str = "",
    hold_back_rows: int = HOLD_BACK_ROWS,
) -> Iterator[ResumeSlice]:
    """Yield, in input order, only the rows of ``batches`` whose positions ``covered`` lacks.

    ``digests``: the content digests coverage recorded for these positions; the input is checked
    against them and ``ResumeMismatchError`` raised, before anything is yielded, when it differs.
    Without digests (an older coverage file) covered positions are skipped unchecked, with a warning.
    ``table``, ``source`` and ``partition`` only name the write in messages.
    """
    index = _Covered(covered)
    if offset_column is None:
        steps = _positional(index, _iter_batches(batches))
    else:
        steps = _by_offset_column(index, _iter_batches(batches), offset_column, table)
    if not index.spans:
        for step in steps:
            yield from step.pieces
            # A step holds its input batch: let it go before the source builds the next (every layer
            # between reader and sink must, or two large input batches are alive at once).
            del step
        return
    where = _where(table, source, partition)
    checker = ContentChecker(digests, index.spans, offset_column=offset_column, where=where)
    yield from _checked(steps, checker, hold_back_rows, table=table, source=source, partition=partition)


def _checked(
    steps: Iterable[_Step],
    checker: ContentChecker,
    hold_back_rows: int,
    *,
    table: str | None,
    source: str | None,
    partition: str,
) -> Iterator[ResumeSlice]:
    held: list[ResumeSlice] = []
    held_rows = 0
    holding = True
    sent = 0
    try:
        for step in steps:
            checker.feed(step.batch, step.start, step.offsets)
            held.extend(step.pieces)
            held_rows += sum(piece.batch.num_rows for piece in step.pieces)
            del step  # not alive while the source builds the next batch (``held`` keeps what is needed)
            if holding and checker.pending:
                if held_rows < hold_back_rows:
                    continue
                holding = False
                log.warning(
                    "%s: %d row(s) to send are held back while delivered range %s is still being checked; "
                    "sending them now to bound memory (a mismatch found later still fails the write)",
                    checker.where,
                    held_rows,
                    checker.first_pending(),
                )
            sent += held_rows
            yield from held  # no loop variable: a slice sent is not kept here while the next batch is built
            held, held_rows = [], 0
        checker.finish()
    except _Mismatch as mismatch:
        raise mismatch_error(
            mismatch, checker, table=table, source=source, partition=partition, sent=sent
        ) from None
    if checker.verified:
        log.info(
            "%s: checked %d delivered range(s) against the input: unchanged", checker.where, checker.verified
        )
    yield from held


def mismatch_error(
    mismatch: _Mismatch,
    checker: ContentChecker,
    *,
    table: str | None,
    source: str | None,
    partition: str,
    sent: int,
) -> ResumeMismatchError:
    """The error a resume raises when its input no longer holds the delivered rows."""
    span = mismatch.span
    unit = "offsets" if checker.offset_column else "positions"
    what = (
        "Nothing was sent."
        if not sent
        else f"{sent} row(s) at {unit} never delivered before were already sent (memory bound)."
    )
    return ResumeMismatchError(
        f"{checker.where}: resume refused: the input changed since an earlier try. At {unit} "
        f"[{span.start}, {span.end}), delivered by that try, {mismatch.detail}; skipping by {unit} would "
        "lose rows never delivered and send delivered ones again. "
        f"{what} Ways out: write this input under a new partition (partition=..., CLI --partition), "
        "or send every row again without resuming, accepting duplicates of what was delivered "
        "(resume=False; CLI --no-resume; Airflow ZerobusIngestOperator(resume=False); Dagster: launch a "
        "new run rather than re-executing, which writes under its own coverage partition).",
        table=table,
        source=source,
        partition=partition,
        span=span,
    )


class CoveredIndex(_Covered):
    """Normalised ranges with a bisect index, built once for many ``without`` calls."""


def without(
    piece: ResumeSlice,
    index: CoveredIndex,
    *,
    offset_column: str | None = None,
    table: str | None = None,
) -> Iterator[ResumeSlice]:
    """The parts of one slice whose positions ``index`` lacks (a second skip after the cache's)."""
    if not index.spans:
        yield piece
        return
    batch = piece.batch
    if offset_column is None:
        start, end = piece.start_offset, piece.start_offset + batch.num_rows
        for gap in intervals.gaps_between(index.overlapping(start, end), start, end):
            yield ResumeSlice(gap.start, batch.slice(gap.start - start, len(gap)))
        return
    if batch.num_rows:
        yield from _uncovered_by_offset(index, batch, _offsets(batch, offset_column, table))


def _where(table: str | None, source: str | None, partition: str) -> str:
    parts = [] if table is None else [f"table {table}"]
    if source is not None:
        parts.append(f"source {source!r}")
    parts.append(f"partition {partition!r}")
    return ", ".join(parts)


def _iter_batches(batches: BatchSource) -> Iterable[pa.RecordBatch]:
    if isinstance(batches, pa.Table):
        chunks: list[pa.RecordBatch] = batches.to_batches()  # zero-copy views of the table's chunks
        return chunks
    return batches


def _positional(index: _Covered, batches: Iterable[pa.RecordBatch]) -> Iterator[_Step]:
    position = 0
    for batch in batches:
        start, end = position, position + batch.num_rows
        position = end
        pieces = [
            ResumeSlice(gap.start, batch.slice(gap.start - start, len(gap)))
            for gap in intervals.gaps_between(index.overlapping(start, end), start, end)
        ]
        yield _Step(batch, start, None, pieces)
        del batch, pieces  # not alive while the source builds the next batch


def _by_offset_column(
    index: _Covered, batches: Iterable[pa.RecordBatch], column: str, table: str | None
) -> Iterator[_Step]:
    for batch in batches:
        if batch.num_rows == 0:
            continue
        offsets = _offsets(batch, column, table)
        yield _Step(batch, 0, offsets, list(_uncovered_by_offset(index, batch, offsets)))
        del batch, offsets  # not alive while the source builds the next batch


def _uncovered_by_offset(index: _Covered, batch: pa.RecordBatch, offsets: pa.Array) -> Iterator[ResumeSlice]:
    bounds = pc.min_max(offsets)
    hits = index.overlapping(bounds["min"].as_py(), bounds["max"].as_py() + 1)
    if not hits:
        yield ResumeSlice(offsets[0].as_py(), batch)
        return
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
            "Fix: declare the column that carries each row's offset, or resume positionally.",
            table=table,
            column=column,
        )
    values = batch.column(column)
    if not pa.types.is_integer(values.type):
        raise ResumeInputError(
            f"{where}: offset column has type {values.type}, resume needs an integer column. "
            "Fix: cast the offsets to int64 before resuming.",
            table=table,
            column=column,
        )
    if values.null_count:
        raise ResumeInputError(
            f"{where}: {values.null_count} row(s) have a null offset, so their coverage is unknowable. "
            "Fix: fill every offset, or resume positionally.",
            table=table,
            column=column,
        )
    offsets = pc.cast(values, pa.int64())
    lowest = pc.min(offsets).as_py()
    if lowest < 0:
        raise ResumeInputError(
            f"{where}: offset {lowest} is negative; coverage positions start at 0. "
            "Fix: shift the offsets so the first is 0 or more.",
            table=table,
            column=column,
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
