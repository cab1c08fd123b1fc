"""Schema checks and conforming, without a server: the causes Zerobus reports, and lossless casts only."""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.records import rows_to_batch
from zerobus_orchestration.emulator.schema_check import check_schema, compatible, conform

TARGET = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.string())),
    ]
)


def test_matching_schema_and_omitted_nullable_columns_pass() -> None:
    assert check_schema("c.s.t", TARGET, TARGET).ok
    assert check_schema("c.s.t", pa.schema([pa.field("id", pa.int64())]), TARGET).ok


def test_every_problem_is_reported_with_table_and_column() -> None:
    incoming = pa.schema([pa.field("name", pa.int32()), pa.field("extra", pa.string())])
    check = check_schema("c.s.t", incoming, TARGET)
    assert check.causes == ("TYPE_INCOMPATIBLE", "FIELD_NOT_IN_TABLE", "MISSING_REQUIRED_COLUMN")
    message = check.message()
    assert "c.s.t.name" in message and "c.s.t.extra" in message and "c.s.t.id" in message


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (pa.int32(), pa.int64(), True),
        (pa.uint32(), pa.int64(), True),
        (pa.uint8(), pa.int8(), False),
        (pa.int64(), pa.int32(), False),
        (pa.int64(), pa.float64(), False),
        (pa.float32(), pa.float64(), True),
        (pa.large_string(), pa.string(), True),
        (pa.timestamp("ns", tz="Europe/Paris"), pa.timestamp("us", tz="UTC"), True),
        (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), True),
        (pa.large_list(pa.large_string()), pa.list_(pa.string()), True),
        (
            pa.struct([pa.field("a", pa.int32())]),
            pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())]),
            True,
        ),
        (pa.struct([pa.field("z", pa.int32())]), pa.struct([pa.field("a", pa.int64())]), False),
    ],
)
def test_compatible_is_lossless_only(src: pa.DataType, dst: pa.DataType, ok: bool) -> None:
    assert compatible(src, dst) is ok


def test_conform_casts_and_fills_missing_columns_when_asked() -> None:
    batch = pa.record_batch(
        {"id": pa.array([1, 2], pa.int32()), "name": pa.array(["a", None], pa.large_string())}
    )
    kept = conform("c.s.t", batch, TARGET, fill_missing=False)
    assert kept.schema.names == ["id", "name"] and kept.schema.field("id").type == pa.int64()
    full = conform("c.s.t", batch, TARGET, fill_missing=True)
    assert full.schema == TARGET and full.column("ts").null_count == 2


def test_conform_refuses_nulls_in_required_columns_and_lossy_values() -> None:
    with pytest.raises(ConformError, match=r"NULL_IN_REQUIRED_COLUMN: c\.s\.t\.id"):
        conform("c.s.t", pa.record_batch({"id": pa.array([1, None], pa.int64())}), TARGET, fill_missing=False)
    nanos = pa.record_batch(
        {"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.timestamp("ns", tz="UTC"))}
    )
    with pytest.raises(ConformError, match=r"TYPE_INCOMPATIBLE: c\.s\.t\.ts"):
        conform("c.s.t", nanos, TARGET, fill_missing=False)  # 1 ns would be truncated to 0 us


def test_json_rows_are_typed_by_the_table() -> None:
    rows = [{"id": 1, "ts": "2026-01-01T00:00:00Z", "tags": ["x"]}, {"ID": 2, "name": "b"}]
    batch = rows_to_batch("c.s.t", rows, TARGET)
    assert batch.column("id").to_pylist() == [1, 2]
    assert batch.column("ts").type == pa.timestamp("us", tz="UTC")
    with pytest.raises(ConformError, match=r"FIELD_NOT_IN_TABLE: c\.s\.t\.nope"):
        rows_to_batch("c.s.t", [{"id": 1, "nope": 1}], TARGET)
    with pytest.raises(ConformError, match=r"TYPE_INCOMPATIBLE: c\.s\.t\.id"):
        rows_to_batch("c.s.t", [{"id": "not a number"}], TARGET)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ({"id": 1, "name": 123}, "name"),  # a number is not silently stringified
        ({"id": 1, "name": True}, "name"),
        ({"id": True}, "id"),  # nor a boolean turned into 1
    ],
)
def test_json_values_of_another_kind_are_refused_not_coerced(row: dict[str, object], column: str) -> None:
    with pytest.raises(ConformError, match=rf"TYPE_INCOMPATIBLE: c\.s\.t\.{column}: values do not fit"):
        rows_to_batch("c.s.t", [row], TARGET)


def test_json_text_still_parses_into_numbers_and_timestamps() -> None:
    batch = rows_to_batch("c.s.t", [{"id": "7", "ts": "2026-01-01T00:00:00Z"}], TARGET)
    assert batch.column("id").to_pylist() == [7]


def test_case_only_duplicate_fields_are_a_field_count_mismatch() -> None:
    # Column names are case-insensitive, so `id` and `ID` both land on column `id`: keeping either
    # would silently drop the other's values.
    incoming = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ID", pa.int64())])
    check = check_schema("c.s.t", incoming, TARGET)
    assert check.causes == ("FIELD_COUNT_MISMATCH",)
    assert "c.s.t.id" in check.message() and "'id' and 'ID'" in check.message()
    batch = pa.record_batch({"id": [1], "ID": [9]}, schema=incoming)
    with pytest.raises(ConformError, match=r"FIELD_COUNT_MISMATCH: c\.s\.t\.id: .*'id' and 'ID'.*send"):
        conform("c.s.t", batch, TARGET, fill_missing=False)
    with pytest.raises(ConformError, match=r"FIELD_COUNT_MISMATCH: c\.s\.t\.id: .*'id' and 'ID'.*send"):
        rows_to_batch("c.s.t", [{"id": 1, "ID": 9}], TARGET)
