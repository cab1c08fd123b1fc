"""The production wire contract, driven with the official SDK directly: the emulator takes exactly the
Arrow schema Databricks' Arrow Flight server builds from a Delta table, and nothing else.

The expected wire schemas are written out here from the table of the SDK's converter
(``arrow_schema_from_uc_columns``, docs/architecture.md#the-wire-contract), independently of the
package's ``wire_schema``: STRING and DECIMAL as ``large_utf8`` (a decimal as its text), BINARY as
``large_binary``, DATE ``date32``, TIMESTAMP ``timestamp[us, tz=UTC]``, TIMESTAMP_NTZ ``timestamp[us]``,
lists of ``item``, maps of ``keys``/``values``, structs recursively. Values go in through
``create_arrow_stream`` + ``ingest_batch`` and come back out of the Delta table and its Iceberg mirror
(pyiceberg), compared exactly; every other layout is refused at stream creation with
``TYPE_INCOMPATIBLE`` naming the column, what was sent and what was expected, except the two the server
casts (counted by the emulator).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
from collections.abc import Iterator
from decimal import Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Schema
from zerobus.sdk.shared import NonRetriableException

from tests.support.emulator_helpers import open_arrow
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.schema_check import CAST_MAP_KEY_VALUE, CAST_VARIANT_MARKER
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.readback.iceberg_nulls import keep_list_nulls
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration

TABLE = "main.wire.every_type"
ROWS = 6  # zero, the largest, the smallest, the smallest step below zero, a random value, NULL

# Decimal columns: every precision 1..38, each at scale 0, its middle and its largest up to 18.
DECIMALS = sorted({(p, s) for p in range(1, 39) for s in {0, p // 2, min(p, 18)} if s <= 18})

LARGE_UTF8, LARGE_BINARY = pa.large_string(), pa.large_binary()
TS, NTZ = pa.timestamp("us", tz="UTC"), pa.timestamp("us")


def item(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("item", t, nullable=True))


def keys_values(k: pa.DataType, v: pa.DataType) -> pa.DataType:
    return pa.map_(pa.field("keys", k, nullable=False), pa.field("values", v, nullable=True))


# (column, Delta type as the table declares it, its wire type by the converter's table, values)
ADDRESS_DELTA = pa.struct(
    [
        pa.field("city", pa.string()),
        pa.field("zip", pa.int32(), nullable=False),
        pa.field("tags", pa.list_(pa.string())),
    ]
)
ADDRESS_WIRE = pa.struct(
    [
        pa.field("city", LARGE_UTF8),
        pa.field("zip", pa.int32(), nullable=False),
        pa.field("tags", item(LARGE_UTF8)),
    ]
)
UTC = dt.UTC
PLAIN: list[tuple[str, pa.DataType, pa.DataType, list[Any]]] = [
    ("i64", pa.int64(), pa.int64(), [0, 2**63 - 1, -(2**63), -1, 42, None]),
    ("i32", pa.int32(), pa.int32(), [0, 2**31 - 1, -(2**31), -1, 7, None]),
    ("i16", pa.int16(), pa.int16(), [0, 2**15 - 1, -(2**15), -1, 7, None]),
    ("i8", pa.int8(), pa.int8(), [0, 127, -128, -1, 7, None]),
    ("f64", pa.float64(), pa.float64(), [0.0, 1.7976931348623157e308, -5e-324, -0.5, 3.25, None]),
    (
        "f32",
        pa.float32(),
        pa.float32(),
        [0.0, 3.4028234663852886e38, -1.401298464324817e-45, -0.5, 3.25, None],
    ),
    ("flag", pa.bool_(), pa.bool_(), [False, True, True, False, True, None]),
    ("s", pa.string(), LARGE_UTF8, ["", "ünïcode ✓", "x" * 1000, "a\x00b", "'quoted'", None]),
    ("b", pa.binary(), LARGE_BINARY, [b"", b"\x00\xff", b"x" * 1000, b"\x00", b"abc", None]),
    (
        "day",
        pa.date32(),
        pa.date32(),
        [
            dt.date(1970, 1, 1),
            dt.date(9999, 12, 31),
            dt.date(1, 1, 1),
            dt.date(1969, 12, 31),
            dt.date(2026, 11, 30),
            None,
        ],
    ),
    (
        "ts",
        TS,
        TS,
        [
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(1, 1, 1, tzinfo=UTC),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC),
            None,
        ],
    ),
    (
        "ntz",
        NTZ,
        NTZ,
        [
            dt.datetime(1970, 1, 1),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            dt.datetime(1, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59),
            dt.datetime(2026, 1, 2, 3, 4, 5, 6),
            None,
        ],
    ),
    ("tags", pa.list_(pa.string()), item(LARGE_UTF8), [[], ["a", None], ["x" * 100], [""], ["b", "c"], None]),
    (
        "counts",
        pa.list_(pa.int64()),
        item(pa.int64()),
        [[], [2**63 - 1], [-(2**63)], [None], [1, 2, 3], None],
    ),
    (
        "attrs",
        pa.map_(pa.string(), pa.int64()),
        keys_values(LARGE_UTF8, pa.int64()),
        [[], [("k", 2**63 - 1)], [("k", None)], [("a", 1), ("b", -1)], [("ü", 0)], None],
    ),
    (
        "by_day",
        pa.map_(pa.int32(), pa.struct([pa.field("n", pa.int64())])),
        keys_values(pa.int32(), pa.struct([pa.field("n", pa.int64())])),
        [[], [(1, {"n": 1})], [(-1, None)], [(0, {"n": None})], [(7, {"n": 7})], None],
    ),
    (
        "address",
        ADDRESS_DELTA,
        ADDRESS_WIRE,
        [
            {"city": "", "zip": 0, "tags": []},
            {"city": "Zürich", "zip": 8000, "tags": ["a", None]},
            {"city": None, "zip": -1, "tags": None},
            None,
            {"city": "x", "zip": 1, "tags": ["y"]},
            None,
        ],
    ),
    (
        "lines",
        pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("price", pa.decimal128(10, 2))])),
        item(pa.struct([pa.field("sku", LARGE_UTF8), pa.field("price", LARGE_UTF8)])),
        [
            [],
            [{"sku": "a", "price": Decimal("-99999999.99")}],
            [None],
            [{"sku": None, "price": None}],
            [{"sku": "b", "price": Decimal("0.01")}],
            None,
        ],
    ),
]


EXACT = Context(prec=100)  # Python's default context has 28 digits: it would round 38-digit values


def decimal_values(precision: int, scale: int, rng: random.Random) -> list[Decimal | None]:
    with localcontext(EXACT):
        step = Decimal(1).scaleb(-scale)
        largest = Decimal(10**precision - 1).scaleb(-scale)
        drawn = Decimal(rng.randrange(-(10**precision) + 1, 10**precision)).scaleb(-scale)
        return [Decimal(0).quantize(step), largest, -largest, -step, drawn, None]


def decimal_text(value: Decimal | None, scale: int) -> str | None:
    """The sink's canonical text, written out here with Python's own formatting: fixed point, the
    declared scale, '-' only when negative."""
    if value is None:
        return None
    with localcontext(EXACT):
        return f"{value:.{scale}f}"


def plain_text(values: list[Any], scale: int) -> list[Any]:
    return [decimal_text(v, scale) for v in values]


def wire_values(column: str, values: list[Any]) -> list[Any]:
    """``lines``' nested decimal as text; every other plain column goes as it is."""
    if column != "lines":
        return values
    return [
        None
        if row is None
        else [None if line is None else {**line, "price": decimal_text(line["price"], 2)} for line in row]
        for row in values
    ]


def columns() -> tuple[pa.Schema, pa.Schema, dict[str, list[Any]]]:
    """(the table's Delta schema, the wire schema, the expected values) of the all-types table."""
    rng = random.Random(23)
    delta_fields = [pa.field("id", pa.int64(), nullable=False)]
    wire_fields = [pa.field("id", pa.int64(), nullable=False)]
    values: dict[str, list[Any]] = {"id": list(range(ROWS))}
    for name, delta, wire, vals in PLAIN:
        delta_fields.append(pa.field(name, delta))
        wire_fields.append(pa.field(name, wire))
        values[name] = vals
    for precision, scale in DECIMALS:
        name = f"d_{precision}_{scale}"
        delta_fields.append(pa.field(name, pa.decimal128(precision, scale)))
        wire_fields.append(pa.field(name, LARGE_UTF8))
        values[name] = decimal_values(precision, scale, rng)
    return pa.schema(delta_fields), pa.schema(wire_fields), values


def wire_batch(wire: pa.Schema, values: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays = []
    for f in wire:
        vals = values[f.name]
        if f.name.startswith("d_"):
            vals = plain_text(vals, int(f.name.rsplit("_", 1)[1]))
        arrays.append(pa.array(wire_values(f.name, vals), f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=wire)


def create(warehouse: Path, table: str, schema: pa.Schema | Schema) -> None:
    uri = table_uri(str(warehouse), table)
    os.makedirs(uri, exist_ok=True)
    DeltaTable.create(uri, schema=schema)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def emulator(warehouse: Path) -> Iterator[Emulator]:
    # The Iceberg mirror on: the round trip is read back through pyiceberg too.
    config = EmulatorConfig(time_to_table_s=60.0, iceberg_lag_s=0.0)
    with Emulator(str(warehouse), config) as emu:
        yield emu


def test_every_canonical_type_is_accepted_and_round_trips_exactly_through_delta_and_iceberg(
    emulator: Emulator, warehouse: Path
) -> None:
    delta_schema, wire, values = columns()
    create(warehouse, TABLE, delta_schema)
    stream = open_arrow(emulator, TABLE, wire)
    stream.wait_for_offset(stream.ingest_batch(wire_batch(wire, values)))
    stream.close()
    version = emulator.materialize_now(TABLE)
    assert version is not None

    delta = DeltaTable(table_uri(str(warehouse), TABLE)).to_pyarrow_table().sort_by("id")
    assert delta.schema.equals(delta_schema)  # Delta's own types: DECIMAL read back from the text
    assert delta.to_pydict() == values

    mirror = emulator.mirror
    assert mirror is not None
    assert mirror.sync_now(TABLE) == version
    # As read-back reads it: pyiceberg, with the package's fix for NULL lists and maps of structs.
    keep_list_nulls()
    iceberg = mirror.load_iceberg_table(TABLE).scan().to_arrow().sort_by("id")
    assert iceberg.column_names == delta_schema.names
    for name in delta_schema.names:
        assert iceberg.column(name).to_pylist() == values[name], name
    for precision, scale in DECIMALS:
        assert iceberg.schema.field(f"d_{precision}_{scale}").type == pa.decimal128(precision, scale)


# (column, a type other than the column's wire type, the type the wire expects)
NOT_CANONICAL = [
    ("s", pa.string(), "large_string"),  # utf8 for STRING
    ("d_10_5", pa.decimal128(10, 5), "large_string"),  # native decimal128
    ("b", pa.binary(), "large_binary"),
    ("tags", pa.list_(pa.field("element", LARGE_UTF8)), "list<item: large_string>"),
    ("ts", pa.timestamp("ns", tz="UTC"), "timestamp[us, tz=UTC]"),
    ("ntz", pa.timestamp("ns"), "timestamp[us]"),
    ("attrs", pa.map_(pa.field("k", LARGE_UTF8, nullable=False), pa.field("v", pa.int64())), "keys"),
    ("address", ADDRESS_DELTA, "large_string"),  # the table's (Delta) struct, strings as utf8
]


@pytest.mark.parametrize(("column", "sent", "expected"), NOT_CANONICAL, ids=[c for c, _, _ in NOT_CANONICAL])
def test_each_non_canonical_type_is_refused_at_stream_creation_naming_the_column(
    emulator: Emulator, warehouse: Path, column: str, sent: pa.DataType, expected: str
) -> None:
    delta_schema, wire, _ = columns()
    create(warehouse, TABLE, delta_schema)
    schema = pa.schema([wire.field("id"), pa.field(column, sent)])
    with pytest.raises(NonRetriableException) as refused:
        open_arrow(emulator, TABLE, schema)
    message = str(refused.value)
    assert (
        "SCHEMA_VALIDATION_FAILED" in message
        and f"TYPE_INCOMPATIBLE: {TABLE}.{column}: sent {sent}" in message
    )
    assert expected in message
    emulator.materialize_now(TABLE)
    assert DeltaTable(table_uri(str(warehouse), TABLE)).version() == 0  # nothing written


def test_the_map_key_value_layout_is_cast_per_batch_and_counted(emulator: Emulator, warehouse: Path) -> None:
    table = "main.wire.maps"
    create(
        warehouse,
        table,
        pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("attrs", pa.map_(pa.string(), pa.int64()))]
        ),
    )
    arrow_default = pa.map_(pa.field("key", LARGE_UTF8, nullable=False), pa.field("value", pa.int64()))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("attrs", arrow_default)])
    stream = open_arrow(emulator, table, schema)
    for i in range(3):
        batch = pa.record_batch([pa.array([i]), pa.array([[("k", i)]], arrow_default)], schema=schema)
        stream.wait_for_offset(stream.ingest_batch(batch))
    stream.close()
    assert emulator.wire_casts.of(table) == {CAST_MAP_KEY_VALUE: 3}  # one cast per batch, as the server
    emulator.materialize_now(table)
    rows = DeltaTable(table_uri(str(warehouse), table)).to_pyarrow_table().sort_by("id").to_pylist()
    assert rows == [{"id": i, "attrs": [("k", i)]} for i in range(3)]
    # The canonical layout costs no cast.
    canonical = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("attrs", keys_values(LARGE_UTF8, pa.int64()))]
    )
    stream = open_arrow(emulator, table, canonical)
    stream.wait_for_offset(
        stream.ingest_batch(
            pa.record_batch(
                [pa.array([9]), pa.array([[("k", 9)]], canonical.field("attrs").type)], schema=canonical
            )
        )
    )
    stream.close()
    assert emulator.wire_casts.of(table) == {CAST_MAP_KEY_VALUE: 3}


VARIANT_WIRE = pa.struct(
    [pa.field("metadata", LARGE_BINARY, nullable=False), pa.field("value", LARGE_BINARY, nullable=False)]
)
MARKER = {b"ARROW:extension:name": b"arrow.parquet.variant", b"ARROW:extension:metadata": b""}


def test_variant_is_a_struct_of_two_binaries_and_its_extension_marker_is_cast_and_counted(
    tmp_path: Path,
) -> None:
    warehouse = tmp_path / "variant"
    table = "main.wire.variants"
    delta = Schema.from_json(
        '{"type":"struct","fields":[{"name":"id","type":"long","nullable":false,"metadata":{}},'
        '{"name":"v","type":"variant","nullable":true,"metadata":{}}]}'
    )
    create(warehouse, table, delta)
    # Variant binaries of the Parquet variant encoding: {} (metadata version 1, no keys) and the int8 7.
    value = {"metadata": b"\x01\x00\x00", "value": b"\x0c\x07"}
    config = EmulatorConfig(time_to_table_s=60.0, iceberg_lag_s=0.0)
    with Emulator(str(warehouse), config, iceberg=False) as emu:
        for field in (pa.field("v", VARIANT_WIRE), pa.field("v", VARIANT_WIRE, metadata=MARKER)):
            schema = pa.schema([pa.field("id", pa.int64(), nullable=False), field])
            stream = open_arrow(emu, table, schema)
            batch = pa.RecordBatch.from_arrays(
                [pa.array([1]), pa.array([value], VARIANT_WIRE)], schema=schema
            )
            stream.wait_for_offset(stream.ingest_batch(batch))
            stream.close()
        assert emu.wire_casts.of(table) == {CAST_VARIANT_MARKER: 1}  # only the marked stream's batch
        with pytest.raises(
            NonRetriableException, match=rf"TYPE_INCOMPATIBLE: {table}\.v: sent struct<metadata: binary"
        ):
            open_arrow(
                emu,
                table,
                pa.schema(
                    [
                        pa.field("id", pa.int64(), nullable=False),
                        pa.field(
                            "v",
                            pa.struct(
                                [
                                    pa.field("metadata", pa.binary(), nullable=False),
                                    pa.field("value", pa.binary(), nullable=False),
                                ]
                            ),
                        ),
                    ]
                ),
            )
        emu.materialize_now(table)
    rows = DeltaTable(table_uri(str(warehouse), table)).to_pyarrow_table().to_pylist()
    assert rows == [{"id": 1, "v": value}, {"id": 1, "v": value}]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1.234", "1.234"),  # more fractional digits than the scale: would be rounded
        ("1000.00", "1000.00"),  # more digits than the precision
        ("1e2", "1e2"),  # an exponent
        ("+1.00", "+1.00"),
        ("one", "one"),
    ],
)
def test_decimal_text_that_is_not_of_the_columns_precision_and_scale_is_refused_before_the_ack(
    emulator: Emulator, warehouse: Path, text: str, why: str
) -> None:
    table = "main.wire.money"
    create(warehouse, table, pa.schema([pa.field("amount", pa.decimal128(5, 2))]))
    schema = pa.schema([pa.field("amount", LARGE_UTF8)])
    stream = open_arrow(emulator, table, schema, recovery=False)
    stream.ingest_batch(pa.record_batch([pa.array(["1.50"], LARGE_UTF8)], schema=schema))
    stream.ingest_batch(pa.record_batch([pa.array(["-0.01", text], LARGE_UTF8)], schema=schema))
    with pytest.raises(
        NonRetriableException, match=rf"TYPE_INCOMPATIBLE: {table}\.amount: 1 value.*{re.escape(repr(why))}"
    ):
        stream.flush()
    unacked = stream.get_unacked_batches()
    assert [b.column(0).to_pylist() for b in unacked] == [["-0.01", text]]  # refused before its ack
    emulator.materialize_now(table)
    assert DeltaTable(table_uri(str(warehouse), table)).to_pyarrow_table().to_pylist() == [
        {"amount": Decimal("1.50")}
    ]
