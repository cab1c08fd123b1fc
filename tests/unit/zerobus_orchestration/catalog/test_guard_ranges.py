"""The write-boundary guard refuses DATE/TIMESTAMP values Delta and Iceberg cannot hold (issue 12 item 3).

Delta and Iceberg hold 0001-01-01 .. 9999-12-31; Arrow holds far more. Such a value used to pass the
guard, be acknowledged, and then never commit (``NaiveDate + TimeDelta overflowed``), blocking the table.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.guard import OUT_OF_RANGE, conform_batch
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import OFFSET

T = "main.raw.events"
PER_S = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
FIRST_DAY, LAST_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31, days since 1970-01-01
FIRST_S, END_S = FIRST_DAY * 86_400, (LAST_DAY + 1) * 86_400  # [first second, end of 9999-12-31)


def declared_for(t: pa.DataType) -> pa.DataType:
    """The Arrow type of the Delta column such a value goes into (DATE, TIMESTAMP, TIMESTAMP_NTZ)."""
    if pa.types.is_date(t):
        return pa.date32()
    return pa.timestamp("us", tz=None if t.tz is None else "UTC")


def refuse(values: pa.Array, *, offsets: list[int] | None = None) -> WriteBoundaryError:
    columns, fields = [values], [pa.field("when", values.type)]
    if offsets is not None:
        columns.append(pa.array(offsets, pa.int64()))
        fields.append(pa.field(OFFSET, pa.int64()))
    target = pa.schema([pa.field("when", declared_for(values.type)), *fields[1:]])
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields)), target)
    return info.value


TIMESTAMP_TYPES = [pa.timestamp(u, tz=tz) for u in ("s", "ms", "us") for tz in (None, "UTC", "Asia/Tokyo")]


def test_the_reported_date32_column_is_refused_naming_table_column_value_row_and_fix() -> None:
    err = refuse(pa.array([-(2**31), 2**31 - 1, 0], pa.date32()), offsets=[100, 101, 102])
    assert (err.table, err.column, err.kind) == (T, "when", OUT_OF_RANGE)
    text = str(err)
    assert T in text and "'when'" in text
    assert "2 value(s) outside 0001-01-01 .. 9999-12-31" in text
    assert "row 0 of the batch (row position 100)" in text
    assert "-2147483648 days" in text
    assert "Fix:" in text


def test_timestamp_us_at_year_294247_is_refused() -> None:
    err = refuse(pa.array([0, 2**63 - 1], pa.timestamp("us")))
    assert err.kind == OUT_OF_RANGE and "row 1 of the batch" in str(err)
    assert "9223372036854775807 microseconds" in str(err) and "year 29" in str(err)


@pytest.mark.parametrize("t", [pa.date32(), pa.date64()], ids=str)
def test_dates_just_outside_either_end_are_refused(t: pa.DataType) -> None:
    per_day = 1 if pa.types.is_date32(t) else 86_400_000
    low, high = FIRST_DAY * per_day, (LAST_DAY + 1) * per_day - 1
    for outside in (low - 1, high + 1):
        raw = pa.array([None, 0, outside], pa.int32() if pa.types.is_date32(t) else pa.int64())
        err = refuse(raw.view(t))
        assert err.kind == OUT_OF_RANGE and "row 2 of the batch" in str(err)


@pytest.mark.parametrize("t", TIMESTAMP_TYPES, ids=str)
def test_timestamps_just_outside_either_end_are_refused_in_every_unit_and_zone(t: pa.DataType) -> None:
    per_s = PER_S[t.unit]
    for outside in (FIRST_S * per_s - 1, END_S * per_s):
        err = refuse(pa.array([outside, None], pa.int64()).view(t))
        assert err.kind == OUT_OF_RANGE and "row 0 of the batch" in str(err)


@pytest.mark.parametrize("t", [pa.date32(), pa.date64(), *TIMESTAMP_TYPES], ids=str)
def test_the_first_and_last_representable_values_pass(t: pa.DataType) -> None:
    if pa.types.is_date(t):
        values = pa.array([date(1, 1, 1), date(9999, 12, 31), None], t)
    else:
        per_s = PER_S[t.unit]
        values = pa.array([FIRST_S * per_s, END_S * per_s - 1, None], pa.int64()).view(t)
    target = pa.schema([pa.field("when", declared_for(t))])
    checked = conform_batch(T, pa.RecordBatch.from_arrays([values], names=["when"]), target)
    assert checked.num_rows == 3 and checked.column(0).null_count == 1


def test_nanoseconds_cannot_leave_the_range_and_are_not_refused_for_it() -> None:
    # int64 nanoseconds span 1677..2262: never outside, so only the sub-microsecond rule applies.
    whole_us = 9_223_372_036_854_775_000  # the largest multiple of 1000 below 2**63
    values = pa.array([-whole_us, whole_us], pa.int64()).view(pa.timestamp("ns", tz="UTC"))
    checked = conform_batch(
        T,
        pa.RecordBatch.from_arrays([values], names=["when"]),
        pa.schema([pa.field("when", pa.timestamp("us", tz="UTC"))]),
    )
    assert checked.num_rows == 2


def test_the_gate_over_a_real_delta_table_refuses_and_counts_the_kind(tmp_path: Path) -> None:
    catalog = LocalCatalog(tmp_path / "wh")
    metrics = SinkMetrics(CollectorRegistry())
    gate = CatalogGate(catalog, Role.DERIVED, metrics=metrics)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("day", pa.date32())])
    target = gate.ensure(T, schema)
    assert target.field("day").type == pa.date32()  # read back from the Delta log
    good = pa.RecordBatch.from_pylist([{"id": 1, "day": date(2024, 1, 1)}], schema=schema)
    assert gate.conform(T, good, target).num_rows == 1
    bad = pa.RecordBatch.from_arrays(
        [pa.array([2, 3], pa.int64()), pa.array([0, 2**31 - 1], pa.int32()).view(pa.date32())], schema=schema
    )
    with pytest.raises(WriteBoundaryError, match="row 1 of the batch"):
        gate.conform(T, bad, target)
    counted = metrics.type_reconcile.labels(table=T, kind=OUT_OF_RANGE)._value.get()
    assert counted == 1


def test_an_in_range_timestamp_with_a_zone_is_still_cast_to_utc_microseconds() -> None:
    tokyo = pa.array([datetime(2024, 1, 1, tzinfo=UTC)], pa.timestamp("ms", tz="Asia/Tokyo"))
    checked = conform_batch(
        T,
        pa.RecordBatch.from_arrays([tokyo], names=["when"]),
        pa.schema([pa.field("when", pa.timestamp("us", tz="UTC"))]),
    )
    assert checked.column(0).type == pa.timestamp("us", tz="UTC")
    assert checked.column(0)[0].as_py() == datetime(2024, 1, 1, tzinfo=UTC)


# A DATE/TIMESTAMP nested in a struct, a list or a map is held to the same span: the service refuses a
# nested one too (the emulator's value check does, at any depth), after the rows before it were sent.
NESTED_DAY = pa.array([0, 1, LAST_DAY + 1], pa.int32()).view(pa.date32())


def _nested_cases() -> dict[str, tuple[pa.Array, str, int]]:
    """name -> (column values, path named in the refusal, batch row of the first bad value)."""
    struct = pa.StructArray.from_arrays([pa.array([1, 2, 3]), NESTED_DAY], ["n", "day"])
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 2, 3]), NESTED_DAY)  # rows: [0, 1], [], [bad]
    maps = pa.MapArray.from_arrays(pa.array([0, 1, 3]), pa.array(["a", "b", "c"]), NESTED_DAY)
    deep = pa.StructArray.from_arrays(
        [pa.ListArray.from_arrays(pa.array([0, 1, 1, 3]), NESTED_DAY)], ["days"]
    )
    return {
        "struct field": (struct, "when.day", 2),
        "list item": (lists, "when.element", 2),
        "map value": (maps, "when.value", 1),
        "list in a struct": (deep, "when.days.element", 2),
    }


@pytest.mark.parametrize("case", list(_nested_cases()))
def test_a_nested_date_outside_the_span_is_refused_naming_its_path_and_row(case: str) -> None:
    values, path, row = _nested_cases()[case]
    batch = pa.RecordBatch.from_arrays(
        [values, pa.array([10, 11, 12][: len(values)], pa.int64())], ["when", OFFSET]
    )
    # Declared exactly as sent: the guard's fast path (no cast needed) must still scan the values.
    target = pa.schema([pa.field("when", values.type), pa.field(OFFSET, pa.int64())])
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, batch, target)
    err = info.value
    assert (err.table, err.column, err.kind) == (T, "when", OUT_OF_RANGE)
    text = str(err)
    assert f"1 value(s) in {path} outside 0001-01-01 .. 9999-12-31" in text
    assert f"row {row} of the batch (row position {10 + row})" in text


def test_a_null_list_backed_by_items_does_not_shift_the_row_named() -> None:
    # Row 0 is a null list whose slots still hold two items (Arrow allows it); the bad day is in row 2.
    values = pa.ListArray.from_arrays(
        pa.array([0, 2, 3, 4]),
        pa.array([5, 6, 7, LAST_DAY + 1], pa.int32()).view(pa.date32()),
        mask=pa.array([True, False, False]),
    )
    batch = pa.RecordBatch.from_arrays([values], ["when"])
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch(T, batch, batch.schema)
    assert "1 value(s) in when.element outside" in str(info.value)
    assert "row 2 of the batch" in str(info.value)


def test_a_nested_value_under_a_null_parent_is_not_a_value_and_passes() -> None:
    struct = pa.StructArray.from_arrays([NESTED_DAY], ["day"], mask=pa.array([False, False, True]))
    maps = pa.MapArray.from_arrays(
        pa.array([0, 1, 3]), pa.array(["a", "b", "c"]), NESTED_DAY, mask=pa.array([False, True])
    )
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 3]), NESTED_DAY)
    for values in (struct, maps, lists.slice(0, 1)):
        batch = pa.RecordBatch.from_arrays([values], ["when"])
        assert conform_batch(T, batch, batch.schema).num_rows == len(values)
