"""The sink over the official SDK sends exactly the wire schema, and refuses what the wire cannot carry.

The table uses every Delta type the package declares (BOOLEAN, TINYINT..BIGINT, FLOAT, DOUBLE,
DECIMAL, STRING, BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ, ARRAY, MAP, STRUCT, nested in one another),
fed from a mix of the Arrow types a user hands over. What the emulator received is read from its
write-ahead log (a stream the table takes as sent is logged as received), field names from the IPC
schema message itself (pyarrow's reader renames map fields); the expected schema is written out from
the SDK converter's table (docs/architecture.md#the-wire-contract). The four shapes the server refuses
never get as far as a stream: the guard refuses them with nothing sent and no table created.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.integration_env import TABLE, PoolFactory, delta_rows
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.emulator.ipc_names import sent_fields, with_sent_names
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.sdk import SdkTransport

pytestmark = pytest.mark.integration

UTC = dt.UTC
U, B = pa.large_string(), pa.large_binary()


def item(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("item", t))


def keys_values(k: pa.DataType, v: pa.DataType) -> pa.DataType:
    return pa.map_(pa.field("keys", k, nullable=False), pa.field("values", v))


# (column, the Arrow type handed to the sink, the wire type of its Delta column, values)
COLUMNS: list[tuple[str, pa.DataType, pa.DataType, list[object]]] = [
    ("flag", pa.bool_(), pa.bool_(), [True, None, False]),
    ("tiny", pa.int8(), pa.int8(), [-128, None, 127]),
    ("small", pa.uint8(), pa.int16(), [255, None, 0]),  # widened to SMALLINT by the catalog
    ("medium", pa.int32(), pa.int32(), [-(2**31), None, 2**31 - 1]),
    ("big", pa.int64(), pa.int64(), [-(2**63), None, 2**63 - 1]),
    ("ratio", pa.float32(), pa.float32(), [0.5, None, -1.25]),
    ("score", pa.float64(), pa.float64(), [1e300, None, -0.0]),
    (
        "price",
        pa.decimal128(38, 18),
        U,
        [Decimal("-99999999999999999999.999999999999999999"), None, Decimal("0")],
    ),
    ("cents", pa.decimal128(5, 2), U, [Decimal("-0.01"), None, Decimal("999.99")]),
    ("name", pa.string(), U, ["a", None, "ünï"]),
    ("label", pa.dictionary(pa.int8(), pa.string()), U, ["x", None, "y"]),
    ("note", pa.large_string(), U, ["", None, "z" * 50]),
    ("blob", pa.binary(), B, [b"\x00", None, b""]),
    ("digest", pa.binary(4), B, [b"abcd", None, b"\xff\xff\xff\xff"]),  # fixed size: BINARY
    ("day", pa.date32(), pa.date32(), [dt.date(1, 1, 1), None, dt.date(9999, 12, 31)]),
    (
        "at",
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2026, 1, 1, tzinfo=UTC), None, dt.datetime(1970, 1, 1, tzinfo=UTC)],
    ),
    (
        "local",
        pa.timestamp("ms"),
        pa.timestamp("us"),
        [dt.datetime(2026, 1, 1, 12), None, dt.datetime(1, 1, 1)],
    ),
    ("tags", pa.list_(pa.string()), item(U), [["a", None], None, []]),
    ("amounts", pa.large_list(pa.decimal128(10, 2)), item(U), [[Decimal("1.50")], None, [None]]),
    ("attrs", pa.map_(pa.string(), pa.int64()), keys_values(U, pa.int64()), [[("k", 1)], None, []]),
    (
        "prices",
        pa.map_(pa.int32(), pa.decimal128(6, 3)),
        keys_values(pa.int32(), U),
        [[(1, Decimal("-1.234"))], None, [(2, None)]],
    ),
    (
        "address",
        pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32(), nullable=False)]),
        pa.struct([pa.field("city", U), pa.field("zip", pa.int32(), nullable=False)]),
        [{"city": "Bern", "zip": 3000}, None, {"city": None, "zip": 0}],
    ),
    (
        "lines",
        pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.decimal128(9, 0))])),
        item(pa.struct([pa.field("sku", U), pa.field("qty", U)])),
        [[{"sku": "a", "qty": Decimal(-1)}], None, [None]],
    ),
    (
        "by_key",
        pa.map_(
            pa.string(), pa.struct([pa.field("seen", pa.date32()), pa.field("tags", pa.list_(pa.string()))])
        ),
        keys_values(U, pa.struct([pa.field("seen", pa.date32()), pa.field("tags", item(U))])),
        [[("k", {"seen": dt.date(2026, 1, 1), "tags": ["t"]})], None, [("j", None)]],
    ),
]
RESERVED_WIRE = [
    pa.field(EMIT_TS, pa.timestamp("us", tz="UTC")),
    pa.field(SOURCE, U),  # the source tag as large_utf8, like any STRING
    pa.field(OFFSET, pa.int64()),
]


def payload() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([0, 1, 2], pa.int64())] + [pa.array(values, kind) for _, kind, _, values in COLUMNS],
        schema=pa.schema(
            [pa.field("id", pa.int64(), nullable=False)] + [pa.field(n, k) for n, k, _, _ in COLUMNS]
        ),
    )


def received_schemas(emulator: Emulator) -> list[pa.Schema]:
    """The schema of every batch the emulator logged for TABLE, with the field names as sent."""
    state = emulator.table_state(TABLE)
    assert state is not None
    schemas = []
    for entry in state.wal.read_after(0, 1 << 30):
        schema_message = pa.ipc.read_message(pa.py_buffer(entry.payload))
        decoded = pa.ipc.read_schema(pa.py_buffer(entry.payload))
        schemas.append(with_sent_names(decoded, sent_fields(schema_message.metadata.to_pybytes())))
    return schemas


def test_the_sinks_batches_arrive_in_exactly_the_wire_schema_and_land_exactly(
    emulator: Emulator, transport: SdkTransport, gate: CatalogGate, make_pool: PoolFactory
) -> None:
    sink = ZerobusSink(make_pool(transport), source="wire/every-type", gate=gate)
    sent = payload()
    sink.send([sent, sent])  # two batches of one schema: one plan, one stream schema
    sink.flush(timeout=30)

    expected = pa.schema(
        [pa.field("id", pa.int64(), nullable=False)]
        + [pa.field(name, wire) for name, _, wire, _ in COLUMNS]
        + RESERVED_WIRE
    )
    schemas = received_schemas(emulator)
    assert len(schemas) == 2
    for schema in schemas:
        assert str(schema) == str(expected)  # str: list item and map field names included
        assert schema.equals(expected)

    landed = delta_rows(emulator).sort_by([(OFFSET, "ascending")])
    assert landed.num_rows == 6
    for name, _, _, values in COLUMNS:
        back = landed.column(name).to_pylist()
        if name == "label":
            assert back == values * 2  # dictionary-encoded on the way in, plain STRING in the table
        else:
            assert back == values * 2, name
    assert landed.column(SOURCE).to_pylist() == ["wire/every-type"] * 6


# The four shapes the server's converter refuses (and a name, on a table without column mapping).
UNSENDABLE = [
    (
        "nested",
        pa.list_(pa.list_(pa.int64())),
        [[[1]]],
        "an array of arrays",
        "wrap the inner array in a struct",
    ),
    (
        "maps",
        pa.list_(pa.map_(pa.string(), pa.int64())),
        [[[("k", 1)]]],
        "an array of maps",
        "wrap each map in a struct",
    ),
    (
        "multi",
        pa.map_(pa.string(), pa.list_(pa.int64())),
        [[("k", [1])]],
        "a map whose value is an array",
        "wrap the value in a struct",
    ),
    (
        "by_ratio",
        pa.map_(pa.float64(), pa.int64()),
        [[(0.5, 1)]],
        "a map keyed by DOUBLE",
        "key the map by a string",
    ),
    ("café", pa.string(), ["x"], "a field name outside", "rename it"),
]


@pytest.mark.parametrize(
    ("column", "kind", "values", "shape", "fix"), UNSENDABLE, ids=[c for c, *_ in UNSENDABLE]
)
def test_a_shape_the_wire_cannot_carry_is_refused_by_the_guard_with_nothing_sent_and_no_table(
    emulator: Emulator,
    transport: SdkTransport,
    warehouse: Path,
    make_pool: PoolFactory,
    column: str,
    kind: pa.DataType,
    values: list[object],
    shape: str,
    fix: str,
) -> None:
    pool = make_pool(transport)
    sink = ZerobusSink(pool, source="wire/refused", gate=CatalogGate(LocalCatalog(warehouse)))
    batch = pa.record_batch({"id": pa.array([1], pa.int64()), column: pa.array(values, kind)})
    with pytest.raises(WriteBoundaryError) as refused:
        sink.send(batch)
    err = refused.value
    assert (err.table, err.column) == (TABLE, column)
    assert err.kind in ("unsendable_shape", "unsendable_name")
    message = str(err)
    for part in (TABLE, f"column '{column}", shape, "Fix: " + fix):
        assert part in message, part
    assert emulator.streams_opened(TABLE) == 0  # nothing sent: no stream was even opened
    assert not Path(table_uri(str(warehouse), TABLE)).exists()  # and no table created
    assert LocalCatalog(warehouse).describe(TABLE) is None
    assert sink.finish()[0].batches == 0
