"""``coverage.digest.rows_digest``: equal rows hash equal whatever lies beneath their null slots."""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.coverage.digest import rows_digest

_VALID_FIRST_AND_LAST = pa.py_buffer(bytes([0b101]))


def _with_bytes_beneath_null(kind: pa.DataType, beneath: bytes) -> pa.RecordBatch:
    """Three slots, the middle one null, holding ``beneath`` where a reader may leave anything."""
    width = kind.bit_width // 8
    values = bytes(width) + beneath * width + bytes(width)
    column = pa.Array.from_buffers(kind, 3, [_VALID_FIRST_AND_LAST, pa.py_buffer(values)], null_count=1)
    return pa.record_batch({"x": column})


@pytest.mark.parametrize(
    "kind",
    [pa.int64(), pa.int8(), pa.float64(), pa.date32(), pa.timestamp("us", tz="UTC"), pa.decimal128(10, 2)],
    ids=str,
)
def test_bytes_beneath_a_null_slot_do_not_change_the_digest(kind: pa.DataType) -> None:
    zeroed, garbage = _with_bytes_beneath_null(kind, b"\x00"), _with_bytes_beneath_null(kind, b"\x07")
    assert zeroed.column(0).to_pylist() == garbage.column(0).to_pylist()
    assert rows_digest(zeroed) == rows_digest(garbage)


def test_a_null_is_not_the_zero_beneath_it() -> None:
    assert rows_digest(pa.record_batch({"x": pa.array([1, None, 3])})) != rows_digest(
        pa.record_batch({"x": pa.array([1, 0, 3])})
    )
