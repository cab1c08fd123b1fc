"""``Stamper``: the reserved columns it appends, and the source column shared between batches of one size."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.sink.stamping import Stamper

_NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=dt.UTC)


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({"v": pa.array(range(n), pa.int64())})


def test_batches_of_any_sizes_in_any_order_get_exact_reserved_columns() -> None:
    stamper, at = Stamper("asset/ünïcode"), 7
    for n in (3, 3, 5, 1, 5, 3):
        stamped = stamper.stamp(_batch(n), OffsetRange(at, at + n), _NOW, None)
        assert stamped.column(SOURCE).to_pylist() == ["asset/ünïcode"] * n
        assert stamped.column(OFFSET).to_pylist() == list(range(at, at + n))
        assert stamped.column(EMIT_TS).to_pylist() == [_NOW] * n
        assert stamped.column("v").to_pylist() == list(range(n))
        at += n


def test_batches_of_one_size_share_one_source_column_not_a_copy_each() -> None:
    """Per-batch client cost: the source tag column is built once per batch size, not per batch."""
    stamper = Stamper("s")
    first = stamper.stamp(_batch(4), OffsetRange(0, 4), _NOW, None).column(SOURCE)
    second = stamper.stamp(_batch(4), OffsetRange(4, 8), _NOW, None).column(SOURCE)
    other = stamper.stamp(_batch(2), OffsetRange(8, 10), _NOW, None).column(SOURCE)
    assert second.buffers()[2].address == first.buffers()[2].address
    assert other.buffers()[2].address != first.buffers()[2].address
    assert other.to_pylist() == ["s", "s"]


def test_positions_from_zero_and_from_far_are_exact_whatever_batch_came_before() -> None:
    """Positions are a kept ramp plus the first row's position: from 0 the ramp itself is the column,
    which later batches must never change (Arrow arrays are immutable, and the add makes a new one)."""
    stamper = Stamper("s")
    first = stamper.stamp(_batch(4), OffsetRange(0, 4), _NOW, None)
    far = stamper.stamp(_batch(4), OffsetRange(2**40, 2**40 + 4), _NOW, None)
    again = stamper.stamp(_batch(4), OffsetRange(0, 4), _NOW, None)
    shorter = stamper.stamp(_batch(2), OffsetRange(9, 11), _NOW, None)
    assert first.column(OFFSET).to_pylist() == [0, 1, 2, 3]
    assert far.column(OFFSET).to_pylist() == [2**40 + i for i in range(4)]
    assert again.column(OFFSET).to_pylist() == [0, 1, 2, 3]
    assert first.column(OFFSET).to_pylist() == [0, 1, 2, 3]
    assert shorter.column(OFFSET).to_pylist() == [9, 10] and shorter.column(OFFSET).type == pa.int64()
