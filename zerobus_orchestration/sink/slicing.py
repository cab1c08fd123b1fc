"""Where a batch is cut before submit: no call over ``max_batch_bytes`` as sent, whatever the rows.

The size that matters is the batch as it goes out, stamped: each row also carries the reserved columns
(``_twg_emit_ts`` and ``_twg_offset``, 8 bytes each, and ``_twg_source``, its 4-byte offset plus the
tag), which for a narrow table with a long source tag is many times the payload. Rows need not be
alike either (a few megabyte documents among thousands of tiny rows): a slice sized from the average
row is measured, and halved until it fits. A single row that does not fit alone is sent alone if the
service takes it (``MAX_CALL_BYTES``), and refused before anything is sent otherwise: past the
service's message limit the SDK retries the call forever, so sending it would hang the write.

The guard's lossless casts (``catalog/guard.py``: e.g. int32 into BIGINT) come after and may still
widen a batch; the default ``max_batch_bytes`` leaves room for that under ``MAX_CALL_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from zerobus_orchestration.config import MAX_CALL_BYTES
from zerobus_orchestration.errors import WriteBoundaryError

ROW_TOO_LARGE = "row_too_large"
_PER_BATCH = 4  # ``_twg_source`` holds one more int32 offset than it has rows


@dataclass(frozen=True)
class Cut:
    """Rows ``start .. start + length`` of a batch, and their payload ``nbytes`` if measured."""

    start: int
    length: int
    nbytes: int | None


def cuts(
    batch: pa.RecordBatch,
    nbytes: int,
    *,
    limit: int,
    per_row: int,
    max_rows: int | None,
    table: str,
    position: int | None,
) -> Iterator[Cut]:
    """The cuts of ``batch`` (payload ``nbytes``) so that each, stamped, stays within ``limit`` bytes.

    ``per_row``: the bytes stamping adds to each row. ``max_rows``: a row cap (None: none).
    ``position``: the batch's first row position, for the refusal's message (None: unknown).
    One cut, the whole batch, in the common case. Raises ``WriteBoundaryError`` for a row over
    ``MAX_CALL_BYTES`` on its own; the cuts before it have been yielded (the caller decides what that
    means: in-memory input is cut whole before anything is sent).
    """
    n = batch.num_rows
    limit = min(limit, MAX_CALL_BYTES)
    rows = n if max_rows is None else min(n, max_rows)
    stamped = nbytes + n * per_row + _PER_BATCH
    if stamped <= limit and rows >= n:
        yield Cut(0, n, nbytes)
        return
    if stamped > limit:
        # From the average row, as sent; each cut is measured below.
        rows = min(rows, max(1, n * (limit - _PER_BATCH) // (nbytes + n * per_row)))
    for start in range(0, n, rows):
        yield from _fitted(batch, start, min(rows, n - start), limit, per_row, table, position)


def _fitted(
    batch: pa.RecordBatch,
    start: int,
    length: int,
    limit: int,
    per_row: int,
    table: str,
    position: int | None,
) -> Iterator[Cut]:
    """Rows ``start .. start + length``, halved until each part fits ``limit`` (or is one row)."""
    piece = batch.slice(start, length)
    nbytes = piece.nbytes
    stamped = nbytes + length * per_row + _PER_BATCH
    if stamped <= limit:
        yield Cut(start, length, nbytes)
        return
    if length == 1:
        if stamped > MAX_CALL_BYTES:
            _refuse(piece, stamped, table, None if position is None else position + start)
        yield Cut(start, 1, nbytes)  # over max_batch_bytes but within what one call may carry: alone
        return
    half = length // 2
    del piece
    yield from _fitted(batch, start, half, limit, per_row, table, position)
    yield from _fitted(batch, start + half, length - half, limit, per_row, table, position)


def _refuse(row: pa.RecordBatch, stamped: int, table: str, position: int | None) -> None:
    widest = max(row.schema.names, key=lambda name: row.column(name).nbytes)
    where = "" if position is None else f" at row position {position}"
    raise WriteBoundaryError(
        f"table {table}, column {widest!r}: one row{where} is {stamped:,} bytes as sent "
        f"({row.column(widest).nbytes:,} in {widest!r}), more than the {MAX_CALL_BYTES:,} bytes one "
        "Zerobus ingest call may carry; nothing of it was sent. Fix: split or shrink the value (e.g. "
        "store large documents in a volume or object storage and write their path), or drop the column",
        table=table,
        column=widest,
        kind=ROW_TOO_LARGE,
    )
