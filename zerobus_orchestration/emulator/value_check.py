"""Values a Delta (and Iceberg) table cannot hold, found before a batch is acknowledged.

Arrow's ``date32`` and ``timestamp`` cover far more than the 0001-01-01..9999-12-31 that Delta and
Iceberg hold. delta-rs panics while computing file statistics for a date beyond it ("NaiveDate +
TimeDelta overflowed"), and a timestamp beyond it lands in Delta but breaks the Iceberg conversion
of that table. The service validates a batch before it acknowledges it; the emulator does the same
here, per batch already cast to the table's types (``schema_check.conform``), so a refused batch is
never in the write-ahead log. Nested values (struct fields, list elements, map keys and values)
are checked too; values under a null struct, list or map are not values of the table and are not
looked at, like the sink's own check (``catalog/temporal_range.py``); docs/adr/0003 records that as a
guess of what the service does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.schema_check import TYPE_INCOMPATIBLE, SchemaProblem

# 0001-01-01 and 9999-12-31 as days since the Unix epoch, and the last microsecond of 9999-12-31.
MIN_DAYS: Final = -719_162
MAX_DAYS: Final = 2_932_896
_SECONDS_PER_DAY: Final = 86_400
MIN_MICROS: Final = MIN_DAYS * _SECONDS_PER_DAY * 1_000_000
MAX_MICROS: Final = (MAX_DAYS + 1) * _SECONDS_PER_DAY * 1_000_000 - 1
_PER_SECOND: Final = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
RANGE_TEXT: Final = "0001-01-01..9999-12-31"


@dataclass(frozen=True)
class _Bounds:
    low: int
    high: int
    kind: str  # "date" or "timestamp", for the message


def _bounds(dtype: pa.DataType) -> _Bounds | None:
    """The storage-integer range a temporal type may hold in a table; None for other types."""
    if pa.types.is_date32(dtype):
        return _Bounds(MIN_DAYS, MAX_DAYS, "date")
    if pa.types.is_date64(dtype):
        ms = _SECONDS_PER_DAY * 1_000
        return _Bounds(MIN_DAYS * ms, (MAX_DAYS + 1) * ms - 1, "date")
    if pa.types.is_timestamp(dtype):
        per_second = _PER_SECOND[dtype.unit]
        low = MIN_DAYS * _SECONDS_PER_DAY * per_second
        high = (MAX_DAYS + 1) * _SECONDS_PER_DAY * per_second - 1
        if low < -(2**63) and high > 2**63 - 1:
            return None  # nanoseconds span only 1677..2262: every value fits
        return _Bounds(max(low, -(2**63)), min(high, 2**63 - 1), "timestamp")
    return None


def check_values(table: str, batch: pa.RecordBatch) -> None:
    """Raise ``ConformError`` (TYPE_INCOMPATIBLE) for the first column holding a value the table cannot."""
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        _check(table, name, column)


def _check(table: str, path: str, array: pa.Array) -> None:
    dtype = array.type
    if pa.types.is_dictionary(dtype):
        _check(table, path, array.dictionary_decode())
        return
    bounds = _bounds(dtype)
    if bounds is not None:
        _check_range(table, path, array, bounds)
        return
    if pa.types.is_struct(dtype):
        # flatten() merges the struct's own validity, so values under a null struct are not checked.
        for i, child in enumerate(array.flatten()):
            _check(table, f"{path}.{dtype.field(i).name}", child)
    elif pa.types.is_map(dtype):
        # keys and items would include the entries a null map still holds in its slot (Arrow allows it);
        # through a list of its entry structs, flatten() skips them as it does a null list's items.
        entries = array.cast(pa.list_(dtype.field(0))).flatten()
        _check(table, f"{path}.key", entries.field(0))
        _check(table, f"{path}.value", entries.field(1))
    elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        _check(table, f"{path}.element", array.flatten())


def _check_range(table: str, path: str, array: pa.Array, bounds: _Bounds) -> None:
    if len(array) == array.null_count:
        return
    storage = array.cast(pa.int32() if pa.types.is_date32(array.type) else pa.int64())
    low, high = pc.min_max(storage).values()
    if low.as_py() >= bounds.low and high.as_py() <= bounds.high:
        return
    outside = pc.or_(pc.less(storage, bounds.low), pc.greater(storage, bounds.high))
    first = int(pc.index(outside, True).as_py())
    count = int(pc.sum(outside).as_py())
    where = f"nested value {first}" if "." in path else f"row {first}"
    raise ConformError(
        table,
        SchemaProblem(
            TYPE_INCOMPATIBLE,
            path,
            f"{count} {bounds.kind} value(s) outside {RANGE_TEXT}, the range Delta and Iceberg tables hold "
            f"(first at {where}: {_render(array, first)}); send {bounds.kind}s within that range, "
            f"or NULL for an unknown one",
        ),
    )


def _render(array: pa.Array, index: int) -> str:
    """The offending value as text; Python's datetime cannot represent it, so render the raw count."""
    dtype = array.type
    raw = array.cast(pa.int32() if pa.types.is_date32(dtype) else pa.int64())[index].as_py()
    if pa.types.is_date32(dtype):
        return f"{raw} days from 1970-01-01"
    if pa.types.is_date64(dtype):
        return f"{raw} ms from 1970-01-01"
    return f"{raw} {dtype.unit} from 1970-01-01T00:00:00"
