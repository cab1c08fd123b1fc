"""Inputs with one bad value far in, as a user meets them: a DATE beyond what Delta holds.

``BAD_DAY`` is 3,000,000 days from 1970-01-01 (about the year 10183): Arrow holds it, Delta and
Iceberg hold 0001-01-01 .. 9999-12-31 only. ``events`` puts it in the 1-based row ``bad_row`` (default
150,000 of 200,000: past two 65,536-row batches, which is what the old write path had already sent).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BAD_DAY = 3_000_000
ROWS = 200_000
BAD_ROW = 150_000  # counted from 1, as the refusal counts


def events(rows: int = ROWS, bad_row: int | None = BAD_ROW) -> pa.Table:
    """``id`` 0.. and ``day`` (a DATE, day ``id`` after 1970-01-01), one day out of range if asked."""
    days = list(range(rows))
    if bad_row is not None:
        days[bad_row - 1] = BAD_DAY
    return pa.table(
        {"id": pa.array(range(rows), pa.int64()), "day": pa.array(days, pa.int32()).cast(pa.date32())}
    )


def events_parquet(path: Path, rows: int = ROWS, bad_row: int | None = BAD_ROW) -> Path:
    pq.write_table(events(rows, bad_row), path)
    return path
