"""Schema checks and conforming, without a server: the causes Zerobus reports, against the wire schema.

The stream's schema is compared strictly with the one the Arrow Flight server builds from the table
(``wire_schema``): every other type is ``TYPE_INCOMPATIBLE`` naming the column, what was sent and what
was expected, except the two layouts the server casts per batch. The real-server path (the official SDK
at stream creation) is tested in tests/integration/emulator/test_wire_contract.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.records import rows_to_batch
from zerobus_orchestration.emulator.schema_check import (
    CAST_MAP_KEY_VALUE,
    CAST_VARIANT_MARKER,
    WireColumn,
    check_schema,
    conform,
    table_wire_columns,
    wire_cast,
)

TARGET = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.string())),
    ]
)
DELTA_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {
        "name": "tags",
        "type": {"type": "array", "elementType": "string", "containsNull": True},
        "nullable": True,
    },
    {"name": "price", "type": "decimal(10,2)", "nullable": True},
    {"name": "attrs", "type": {"type": "map", "keyType": "string", "valueType": "long"}, "nullable": True},
    {"name": "v", "type": "variant", "nullable": True},
]
WIRE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.field("item", pa.large_string()))),
        pa.field("price", pa.large_string()),
        pa.field(
            "attrs",
            pa.map_(pa.field("keys", pa.large_string(), nullable=False), pa.field("values", pa.int64())),
        ),
        pa.field(
            "v",
            pa.struct(
                [
                    pa.field("metadata", pa.large_binary(), nullable=False),
                    pa.field("value", pa.large_binary(), nullable=False),
                ]
            ),
        ),
    ]
)


def columns() -> list[WireColumn]:
    return table_wire_columns(DELTA_FIELDS, column_mapping=False)


def test_the_wire_schema_and_omitted_nullable_columns_pass() -> None:
    assert check_schema("c.s.t", WIRE, columns()).ok
    check = check_schema("c.s.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]), columns())
    assert check.ok and not check.casts


NOT_THE_WIRE = [
    ("name", pa.string(), "large_string"),  # utf8 for STRING
    ("price", pa.decimal128(10, 2), "large_string"),  # native decimal128
    ("tags", pa.list_(pa.field("element", pa.large_string())), "list item is 'element'"),
    ("tags", pa.large_list(pa.large_string()), "not a list"),
    ("tags", pa.list_(pa.string()), "tags.item is string"),
    ("ts", pa.timestamp("ns", tz="UTC"), "timestamp[ns, tz=UTC]"),
    ("ts", pa.timestamp("us"), "timestamp[us]"),
    (
        "attrs",
        pa.map_(pa.field("keys", pa.string(), nullable=False), pa.field("values", pa.int64())),
        "attrs.keys is string",
    ),
    (
        "attrs",
        pa.map_(pa.field("k", pa.large_string(), nullable=False), pa.field("v", pa.int64())),
        "'k'/'v'",
    ),
    ("v", pa.struct([pa.field("metadata", pa.binary()), pa.field("value", pa.binary())]), "v is struct"),
    ("id", pa.int32(), "int32"),  # no widening either: the server compares, it does not cast
]


@pytest.mark.parametrize(
    ("column", "sent", "said"), NOT_THE_WIRE, ids=[f"{c}-{t}" for c, t, _ in NOT_THE_WIRE]
)
def test_anything_but_the_wire_type_is_type_incompatible_naming_sent_and_expected(
    column: str, sent: pa.DataType, said: str
) -> None:
    nullable = column != "id"
    incoming = pa.schema([pa.field("id", pa.int64(), nullable=False)]) if column != "id" else pa.schema([])
    incoming = incoming.append(pa.field(column, sent, nullable=nullable))
    check = check_schema("c.s.t", incoming, columns())
    assert check.causes == ("TYPE_INCOMPATIBLE",)
    message = check.message()
    expected = WIRE.field(column).type
    assert f"c.s.t.{column}" in message and f"sent {sent}" in message and f"expected {expected}" in message
    assert said in message


def test_nullability_is_part_of_the_wire_schema() -> None:
    check = check_schema("c.s.t", pa.schema([pa.field("id", pa.int64(), nullable=True)]), columns())
    assert check.causes == ("TYPE_INCOMPATIBLE",) and "nullable" in check.message()


def test_every_problem_is_reported_with_table_and_column() -> None:
    incoming = pa.schema([pa.field("name", pa.int32()), pa.field("extra", pa.large_string())])
    check = check_schema("c.s.t", incoming, columns())
    assert check.causes == ("TYPE_INCOMPATIBLE", "FIELD_NOT_IN_TABLE", "MISSING_REQUIRED_COLUMN")
    message = check.message()
    assert "c.s.t.name" in message and "c.s.t.extra" in message and "c.s.t.id" in message


def test_the_map_key_value_layout_is_accepted_and_cast_as_the_server_does() -> None:
    key_value = pa.map_(pa.field("key", pa.large_string(), nullable=False), pa.field("value", pa.int64()))
    incoming = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("attrs", key_value)])
    check = check_schema("c.s.t", incoming, columns())
    assert check.ok and check.casts == (CAST_MAP_KEY_VALUE,)
    assert check.schema is not None
    batch = pa.record_batch([pa.array([1]), pa.array([[("a", 7)]], key_value)], schema=incoming)
    cast = wire_cast(batch, check.schema)
    assert str(cast.schema.field("attrs").type) == str(WIRE.field("attrs").type)
    assert cast.column("attrs").to_pylist() == [[("a", 7)]]


def test_a_variant_extension_marker_is_accepted_and_stripped() -> None:
    marker = {b"ARROW:extension:name": b"arrow.parquet.variant", b"ARROW:extension:metadata": b""}
    incoming = pa.schema([pa.field("id", pa.int64(), nullable=False), WIRE.field("v").with_metadata(marker)])
    check = check_schema("c.s.t", incoming, columns())
    assert check.ok and check.casts == (CAST_VARIANT_MARKER,)
    assert check.schema is not None and check.schema.field("v").metadata is None
    # The same marker on a struct column that is not a VARIANT is no cast, just the struct.
    plain = table_wire_columns(
        [
            {"name": "id", "type": "long", "nullable": False},
            {
                "name": "v",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"name": "metadata", "type": "binary", "nullable": False},
                        {"name": "value", "type": "binary", "nullable": False},
                    ],
                },
            },
        ],
        column_mapping=False,
    )
    assert check_schema("c.s.t", incoming, plain).casts == ()


def test_columns_the_wire_cannot_carry_are_refused_when_sent_and_fine_when_omitted() -> None:
    fields = [
        {"name": "id", "type": "long", "nullable": False},
        {
            "name": "nested",
            "type": {"type": "array", "elementType": {"type": "array", "elementType": "long"}},
        },
        {"name": "café", "type": "string"},
    ]
    plain = table_wire_columns(fields, column_mapping=False)
    ids = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    assert check_schema("c.s.t", ids, plain).ok
    sent = ids.append(pa.field("nested", pa.list_(pa.list_(pa.int64()))))
    check = check_schema("c.s.t", sent, plain)
    assert check.causes == ("TYPE_INCOMPATIBLE",) and "an array of arrays" in check.message()
    named = ids.append(pa.field("café", pa.large_string()))
    assert "field name outside" in check_schema("c.s.t", named, plain).message()
    mapped = table_wire_columns(fields, column_mapping=True)
    assert check_schema("c.s.t", named, mapped).ok  # any name under column mapping


def test_conform_casts_and_fills_missing_columns_when_asked() -> None:
    batch = pa.record_batch(
        {"id": pa.array([1, 2], pa.int32()), "name": pa.array(["a", None], pa.large_string())}
    )
    kept = conform("c.s.t", batch, TARGET, fill_missing=False)
    assert kept.schema.names == ["id", "name"] and kept.schema.field("id").type == pa.int64()
    full = conform("c.s.t", batch, TARGET, fill_missing=True)
    assert full.schema == TARGET and full.column("ts").null_count == 2


DECIMAL_TARGET = pa.schema(
    [
        pa.field("d", pa.decimal128(5, 2)),
        pa.field("ds", pa.list_(pa.decimal128(38, 18))),
        pa.field("s", pa.struct([pa.field("amount", pa.decimal128(3, 0))])),
    ]
)


def wire_batch(d: list[str | None], ds: list[list[str | None]], amount: list[str | None]) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(d, pa.large_string()),
            pa.array(ds, pa.list_(pa.field("item", pa.large_string()))),
            pa.array([{"amount": a} for a in amount], pa.struct([pa.field("amount", pa.large_string())])),
        ],
        names=["d", "ds", "s"],
    )


def test_decimal_text_is_logged_as_sent_and_read_into_the_exact_decimal() -> None:
    batch = wire_batch(
        ["-999.99", None, "0.5"],
        [["99999999999999999999.999999999999999999"], [], ["-0.000000000000000001", None]],
        ["-999", "0", None],
    )
    logged = conform("c.s.t", batch, DECIMAL_TARGET, fill_missing=False)
    assert logged.equals(batch)  # the write-ahead log keeps what the producer sent
    table = conform("c.s.t", batch, DECIMAL_TARGET, fill_missing=True)
    assert table.schema == DECIMAL_TARGET
    assert table.column("d").to_pylist() == [Decimal("-999.99"), None, Decimal("0.50")]
    assert table.column("ds").to_pylist() == [
        [Decimal("99999999999999999999.999999999999999999")],
        [],
        [Decimal("-1E-18"), None],
    ]
    assert table.column("s").to_pylist() == [
        {"amount": Decimal(-999)},
        {"amount": Decimal(0)},
        {"amount": None},
    ]


@pytest.mark.parametrize(
    ("batch", "path", "text"),
    [
        (wire_batch(["1.234"], [[]], ["1"]), "d", "1.234"),  # more fraction than the scale
        (wire_batch(["1000.00"], [[]], ["1"]), "d", "1000.00"),  # more digits than the precision
        (wire_batch(["1e2"], [[]], ["1"]), "d", "1e2"),  # an exponent
        (wire_batch(["+1.00"], [[]], ["1"]), "d", "+1.00"),
        (wire_batch([" 1.00"], [[]], ["1"]), "d", " 1.00"),
        (wire_batch(["abc"], [[]], ["1"]), "d", "abc"),
        (wire_batch([""], [[]], ["1"]), "d", ""),
        (wire_batch(["1"], [["1.0000000000000000001"]], ["1"]), "ds.element", "1.0000000000000000001"),
        (wire_batch(["1"], [[]], ["1.0"]), "s.amount", "1.0"),  # scale 0: no point at all
    ],
)
def test_text_that_is_not_a_decimal_of_that_precision_and_scale_is_refused(
    batch: pa.RecordBatch, path: str, text: str
) -> None:
    for fill in (False, True):  # at accept (before the ack) and at materialisation alike
        with pytest.raises(ConformError, match=rf"TYPE_INCOMPATIBLE: c\.s\.t\.{path}: 1 value") as info:
            conform("c.s.t", batch, DECIMAL_TARGET, fill_missing=fill)
        assert repr(text) in str(info.value)


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
    check = check_schema("c.s.t", incoming, columns())
    assert check.causes == ("FIELD_COUNT_MISMATCH",)
    assert "c.s.t.id" in check.message() and "'id' and 'ID'" in check.message()
    batch = pa.record_batch({"id": [1], "ID": [9]}, schema=incoming)
    with pytest.raises(ConformError, match=r"FIELD_COUNT_MISMATCH: c\.s\.t\.id: .*'id' and 'ID'.*send"):
        conform("c.s.t", batch, TARGET, fill_missing=False)
    with pytest.raises(ConformError, match=r"FIELD_COUNT_MISMATCH: c\.s\.t\.id: .*'id' and 'ID'.*send"):
        rows_to_batch("c.s.t", [{"id": 1, "ID": 9}], TARGET)
