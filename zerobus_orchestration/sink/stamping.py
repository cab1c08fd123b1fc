"""Per-batch work of a write that needs nothing but the batch: input checks, positions and stamping.

``ZerobusSink`` calls these under its own lock; nothing here touches a stream, the pool or the catalog.
Stamping appends the reserved columns (``_twg_emit_ts``, ``_twg_source``, ``_twg_offset``) without
copying the caller's columns, in their wire types (``wire_schema``: the source tag as ``large_utf8``), so
the guard sends them as stamped; the position span and its exact runs are what coverage records.
"""

from __future__ import annotations

import datetime as dt
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import RESERVED_FIELDS, RESERVED_NAMES
from zerobus_orchestration.wire_schema import wire_type_of_arrow

# The reserved columns as the wire carries them (the table declares them as ``RESERVED_FIELDS``).
STAMPED_FIELDS = tuple(f.with_type(wire_type_of_arrow(f.type)) for f in RESERVED_FIELDS)
_EMIT_TS_TYPE = STAMPED_FIELDS[0].type
_SOURCE_TYPE = STAMPED_FIELDS[1].type
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The kernel itself: ``pc.add``'s Python wrapper costs more than the add on a 20,000-row batch. Not
# ``add_checked``: positions are non-negative and far below 2**63.
_ADD = pc.get_function("add")


def is_in_memory(data: object) -> bool:
    """Input that is whole in memory (checked whole before sending), as opposed to a stream."""
    return isinstance(data, pa.RecordBatch | pa.Table | list | tuple)


def with_positions(
    batches: Iterable[pa.RecordBatch], at: int | None
) -> Iterator[tuple[pa.RecordBatch, int | None]]:
    """Each batch with the position of its first row (None: continue from the sink's high-water)."""
    # The position advances only after the consumer checked the batch (``ZerobusSink._checked``), so a
    # non-batch fails there with a clear message rather than here on ``num_rows``.
    for batch in batches:
        yield batch, at
        if at is not None:
            at += batch.num_rows
        del batch  # not alive while the source builds the next one (two large batches at once)


def check_input(table: str, batch: object, offset_column: str | None) -> None:
    """The checks that need nothing but the batch itself: type, reserved names, offset column."""
    if not isinstance(batch, pa.RecordBatch):
        raise TypeError(f"{table}: expected Arrow record batches, got {type(batch).__name__}")
    if batch.num_rows == 0:
        return  # never sent
    clash = [name for name in batch.schema.names if name in RESERVED_NAMES]
    if clash:
        raise ValueError(
            f"{table}: column {clash[0]!r} is reserved for the engine and stamped on write; "
            f"rename or drop it before writing (reserved: {', '.join(RESERVED_NAMES)})"
        )
    column = offset_column
    if column is None:
        return
    if column not in batch.schema.names:
        raise ValueError(
            f"{table}: declared offset column {column!r} is missing from the batch "
            f"(columns: {', '.join(batch.schema.names)}); fix: add it or drop offset_column"
        )
    values = batch.column(column)
    if values.null_count or not pa.types.is_integer(values.type):
        raise ValueError(
            f"{table}: offset column {column!r} must be a non-null integer column, "
            f"got {values.type} "
            f"with {values.null_count} null(s); fix: fill it with row positions"
        )
    lowest = pc.min(values).as_py()
    if lowest < 0:
        raise ValueError(
            f"{table}: offset column {column!r} holds a negative position ({lowest}); "
            "fix: positions are non-negative row offsets, as Kafka offsets are"
        )


def position_span(
    batch: pa.RecordBatch, first: int, declared: pa.Array | None
) -> tuple[OffsetRange, tuple[OffsetRange, ...] | None]:
    """The batch's position span, and its exact runs when the declared offsets have gaps.

    ``first``: the first row's position when no offset column is declared. ``declared``: the offset
    column as int64, already valid (``check_input``), or None.
    """
    if declared is None:
        return OffsetRange(first, first + batch.num_rows), None
    offsets = declared.to_numpy()
    if _is_step_one(offsets):  # the common case: one contiguous ascending run
        return OffsetRange(int(offsets[0]), int(offsets[0]) + len(offsets)), None
    # Gaps (Kafka offsets after compaction or transaction markers) or any order: record exactly the
    # positions present, as disjoint runs, so coverage never claims a position this batch lacks.
    present = np.unique(offsets)
    breaks = np.flatnonzero(np.diff(present) != 1) + 1
    runs = tuple(OffsetRange(int(run[0]), int(run[-1]) + 1) for run in np.split(present, breaks) if len(run))
    return OffsetRange(runs[0].start, runs[-1].end), runs


class Stamper:
    """Appends the reserved columns for one source. Not thread-safe: the sink calls it under its lock."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._source_bytes = source.encode("utf-8")
        self._stamped_from: pa.Schema | None = None
        self._stamped_schema: pa.Schema | None = None
        # The source column of the last batch: the same for every batch of its length, and Arrow arrays
        # are immutable, so batches of one size (the usual case) share one instead of building it anew.
        self._last_sources: pa.Array | None = None
        self._ramp: pa.Array | None = None  # 0, 1, ..., n - 1 for the last batch length n

    @property
    def bytes_per_row(self) -> int:
        """What stamping adds to each row: two int64/timestamp values, the tag and its int64 offset."""
        return 8 + 8 + 8 + len(self._source_bytes)

    def stamp(
        self, batch: pa.RecordBatch, span: OffsetRange, emit_ts: dt.datetime, declared: pa.Array | None
    ) -> pa.RecordBatch:
        n = batch.num_rows
        offsets = declared if declared is not None else self._positions(span.start, n)
        emit_us = (emit_ts - _EPOCH) // dt.timedelta(microseconds=1)
        # A repeated 8-byte buffer: measured faster than pa.repeat or numpy.full for the timestamp.
        stamps = pa.Array.from_buffers(_EMIT_TS_TYPE, n, [None, pa.py_buffer(array("q", [emit_us]) * n)])
        sources = self._sources(n)
        if self._stamped_from is None or not batch.schema.equals(self._stamped_from, check_metadata=True):
            self._stamped_schema = pa.schema([*batch.schema, *STAMPED_FIELDS], metadata=batch.schema.metadata)
            self._stamped_from = batch.schema
        return pa.RecordBatch.from_arrays(
            [*batch.columns, stamps, sources, offsets], schema=self._stamped_schema
        )

    def _positions(self, first: int, n: int) -> pa.Array:
        """``first, first + 1, ..., first + n - 1`` as int64: the kept ramp ``0 .. n - 1`` plus ``first``.

        One SIMD add into Arrow's memory pool: measured ~8x cheaper than a fresh ``numpy.arange`` per
        batch, whose buffer comes from the system allocator and page-faults on every batch.
        """
        ramp = self._ramp
        if ramp is None or len(ramp) != n:
            ramp = self._ramp = _int64_array(np.arange(n, dtype=np.int64))
        if first == 0:
            return ramp
        return _ADD.call([ramp, _int64_scalar(first)])

    def _sources(self, n: int) -> pa.Array:
        """``n`` copies of the source tag (shared with the last batch when it had ``n`` rows too)."""
        last = self._last_sources
        if last is None or len(last) != n:
            last = self._last_sources = self._build_sources(n)
        return last

    def _build_sources(self, n: int) -> pa.Array:
        """``n`` copies of the source tag, built from two buffers (about 3x faster than ``pa.repeat``)."""
        width = len(self._source_bytes)
        value_offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)  # large_utf8: int64 offsets
        data = self._source_bytes * n
        return pa.Array.from_buffers(_SOURCE_TYPE, n, [None, pa.py_buffer(value_offsets), pa.py_buffer(data)])


# Not ``pa.scalar(value)`` or ``pa.array(numpy_array)`` below: converting a Python object or a numpy array
# makes pyarrow import pandas (if installed) on first use, ~35 MB and ~0.4 s in every writing process that
# has not imported it already. Arrays over existing buffers do not.


def _int64_scalar(value: int) -> pa.Scalar:
    """``value`` as an Arrow int64 scalar, read from a one-value buffer."""
    return pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(array("q", [value]))])[0]


def _int64_array(values: np.ndarray[Any, np.dtype[np.int64]]) -> pa.Array:
    """A contiguous int64 numpy array as an Arrow array over the same memory (it keeps it alive)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _is_step_one(offsets: np.ndarray[Any, np.dtype[np.int64]]) -> bool:
    """Whether ``offsets`` ascend by exactly one from row to row."""
    return bool(np.all(np.diff(offsets) == 1))
