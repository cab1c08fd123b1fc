"""Write-boundary guard and ``CatalogGate`` over the local backend (real deltalake)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from prometheus_client import CollectorRegistry

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.guard import conform_batch, to_json
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.contracts import managed_comment
from zerobus_orchestration.errors import PlanRefusedError, WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import RESERVED_NAMES
from zerobus_orchestration.sink.schema_gate import SchemaGate

T = "main.raw.events"

DECLARED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int16()),
        pa.field("tiny", pa.int8()),
        pa.field("label", pa.string()),
        pa.field("ntz", pa.timestamp("us")),
        pa.field("tz", pa.timestamp("us", tz="UTC")),
        pa.field("ratio", pa.float64()),
        pa.field("price", pa.decimal128(12, 2)),
    ]
)


@pytest.fixture
def metrics() -> SinkMetrics:
    return SinkMetrics(CollectorRegistry())


@pytest.fixture
def gate(tmp_path: Path, metrics: SinkMetrics) -> CatalogGate:
    return CatalogGate(
        LocalCatalog(tmp_path / "wh"), Role.PRIMARY_RAW, {"id": "primary key"}, metrics=metrics
    )


def ensure_table(gate: CatalogGate) -> pa.Schema:
    return gate.ensure(T, DECLARED)


def send(gate: CatalogGate, target: pa.Schema, batch: pa.RecordBatch) -> None:
    """What the sink does: check, then (only then) write; the writer stands in for Zerobus, reading the
    wire types back into the table's (``from_arrays`` casts to ``target``: decimal text exactly)."""
    checked = gate.conform(T, batch, target)
    # Zerobus fills omitted nullable columns with NULL; the stand-in writer does the same.
    full = [
        checked.column(checked.schema.get_field_index(f.name))
        if f.name in checked.schema.names
        else pa.nulls(checked.num_rows, f.type)
        for f in target
    ]
    table = pa.Table.from_batches([pa.RecordBatch.from_arrays(full, schema=target)])
    write_deltalake(gate.catalog.location(T), table, mode="append")  # type: ignore[attr-defined]


def rows(gate: CatalogGate) -> int:
    return int(DeltaTable(gate.catalog.location(T)).to_pyarrow_table().num_rows)  # type: ignore[attr-defined]


def batch(**columns: pa.Array) -> pa.RecordBatch:
    base = {"id": pa.array(range(len(next(iter(columns.values())))), pa.int64())}
    return pa.RecordBatch.from_pydict({**base, **columns})


def test_gate_is_the_sinks_schema_gate_and_returns_the_declared_schema(gate: CatalogGate) -> None:
    assert isinstance(gate, SchemaGate)
    target = ensure_table(gate)
    assert target.names == [*DECLARED.names, *RESERVED_NAMES]
    assert target.field("id").nullable is False
    state = gate.catalog.describe(T)
    assert state is not None and state.column("id").comment == managed_comment("primary key")  # type: ignore[union-attr]
    again = gate.ensure(T, DECLARED)
    assert again == target and gate.last_outcome is not None and gate.last_outcome.plan.empty


def test_ensure_evolves_for_a_new_field_and_accepts_a_subset(gate: CatalogGate) -> None:
    ensure_table(gate)
    v = DeltaTable(gate.catalog.location(T)).version()
    target = gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field("fresh", pa.uint8())]))
    assert target.field("fresh").type == pa.int16()
    assert DeltaTable(gate.catalog.location(T)).version() == v + 1  # one ADD COLUMNS, nothing else


def test_ensure_refuses_a_wider_producer_type_before_anything_is_sent(gate: CatalogGate) -> None:
    ensure_table(gate)
    with pytest.raises(PlanRefusedError, match="small") as info:
        gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field("small", pa.int64())]))
    assert "live SMALLINT, desired BIGINT" in str(info.value)


UNSENDABLE = [
    ("nested", pa.list_(pa.list_(pa.int64())), "nested", "an array of arrays"),
    ("maps", pa.list_(pa.map_(pa.string(), pa.int64())), "maps", "an array of maps"),
    ("multi", pa.map_(pa.string(), pa.list_(pa.int64())), "multi", "a map whose value is an array"),
    ("deep", pa.map_(pa.string(), pa.map_(pa.string(), pa.int64())), "deep", "a map whose value is a map"),
    ("by_ratio", pa.map_(pa.float64(), pa.int64()), "by_ratio.key", "a map keyed by DOUBLE"),
    ("by_blob", pa.map_(pa.binary(), pa.int64()), "by_blob.key", "a map keyed by BINARY"),
    ("s", pa.struct([("inner", pa.list_(pa.list_(pa.int8())))]), "s.inner", "an array of arrays"),
]


@pytest.mark.parametrize(("column", "kind", "path", "shape"), UNSENDABLE, ids=[c for c, *_ in UNSENDABLE])
def test_ensure_refuses_a_shape_the_wire_cannot_carry_before_creating_the_table(
    gate: CatalogGate, metrics: SinkMetrics, column: str, kind: pa.DataType, path: str, shape: str
) -> None:
    with pytest.raises(WriteBoundaryError) as info:
        gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field(column, kind)]))
    err = info.value
    assert (err.table, err.column, err.kind) == (T, column, "unsendable_shape")
    assert f"table {T}, column {path!r} is {shape}" in str(err) and "Fix: " in str(err)
    assert gate.catalog.describe(T) is None  # refused before any DDL: no table left behind
    labels = {"table": T, "column": column, "kind": "unsendable_shape"}
    assert metrics.sample("zerobus_type_unreconcilable_total", labels) == 1.0


def test_ensure_refuses_a_name_the_wire_takes_only_with_column_mapping(gate: CatalogGate) -> None:
    with pytest.raises(WriteBoundaryError) as info:
        gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field("prix-€", pa.int64())]))
    assert (info.value.column, info.value.kind) == ("prix-€", "unsendable_name")
    assert "rename it (e.g. 'prix__')" in str(info.value) and "column mapping" in str(info.value)
    assert gate.catalog.describe(T) is None
    # Delta itself allows the name on a plain table; only the Arrow Flight path refuses it.
    nested = pa.struct([pa.field("ok", pa.int32()), pa.field("not ok", pa.int32())])
    with pytest.raises(WriteBoundaryError, match=r"column 's\.not ok' is a field name outside"):
        gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field("s", nested)]))


def test_the_guard_alone_refuses_an_unsendable_shape_too(gate: CatalogGate) -> None:
    target = ensure_table(gate)
    # A table made outside the package may hold such a column; no batch can fill it.
    nested = pa.schema([*target, pa.field("nested", pa.list_(pa.list_(pa.int64())))])
    b = pa.RecordBatch.from_pydict({"id": pa.array([1], pa.int64()), "nested": pa.array([[[1]]])})
    with pytest.raises(WriteBoundaryError, match="an array of arrays") as info:
        gate.conform(T, b, nested)
    assert info.value.kind == "unsendable_shape"


def test_ensure_leaves_other_mismatches_to_the_guard_and_its_precise_fix(gate: CatalogGate) -> None:
    ensure_table(gate)
    nested = pa.array([{"a": 1}], pa.struct([("a", pa.int32())]))
    target = gate.ensure(T, pa.schema([pa.field("id", pa.int64()), pa.field("label", nested.type)]))
    assert target.field("label").type == pa.string()
    with pytest.raises(WriteBoundaryError, match="to_json"):
        send(gate, target, batch(label=nested))
    assert rows(gate) == 0


def test_lossless_cases_are_cast_and_counted(gate: CatalogGate, metrics: SinkMetrics) -> None:
    target = ensure_table(gate)
    b = pa.RecordBatch.from_pydict(
        {
            "small": pa.array([200, 255], pa.uint8()),
            "id": pa.array([1, 2], pa.int32()),
            "label": pa.array(["a", "b"]).dictionary_encode(),
            "ntz": pa.array([1_000, 2_000], pa.timestamp("ns")),
            "tz": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("s", tz="Europe/Paris")),
            "ratio": pa.array([0.5, 1.5], pa.float32()),
            "price": pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)),
        }
    )
    send(gate, target, b)
    checked = gate.conform(T, b, target)
    assert checked.schema.names == ["id", "small", "label", "ntz", "tz", "ratio", "price"]  # target order
    assert checked.schema.field("small").type == pa.int16()
    # Cast to the declared types, then sent in their wire types (wire_schema): STRING and DECIMAL as
    # large_utf8, the decimal as its exact text at the declared scale.
    assert checked.schema.field("label").type == pa.large_string()
    assert checked.schema.field("price").type == pa.large_string()
    assert checked.column(checked.schema.get_field_index("small")).to_pylist() == [200, 255]
    assert checked.column(checked.schema.get_field_index("price")).to_pylist() == ["1.25", None]
    assert rows(gate) == 2
    for kind in (
        "cast_unsigned",
        "cast_integer",
        "cast_dictionary",
        "cast_timestamp",
        "cast_float",
        "cast_decimal",
    ):
        assert metrics.sample("zerobus_type_reconcile_total", {"table": T, "kind": kind}) == 2.0, kind


FAILURES = [
    ("label", pa.array([{"a": 1}], pa.struct([("a", pa.int32())])), "nested_into_string", "to_json('label')"),
    ("label", pa.array([[1, 2]], pa.list_(pa.int32())), "nested_into_string", "to_json"),
    ("label", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())), "nested_into_string", "to_json"),
    ("ntz", pa.array([0], pa.timestamp("us", tz="UTC")), "tz_aware_into_ntz", "TIMESTAMP_NTZ"),
    ("tz", pa.array([0], pa.timestamp("us")), "naive_into_tz", "assume_timezone"),
    ("tiny", pa.array([200], pa.uint8()), "unsigned_overflow", "SMALLINT"),
    ("small", pa.array([2**40], pa.uint64()), "unsigned_overflow", "wider column"),
    ("small", pa.array([2**20], pa.int32()), "integer_overflow", "INT"),
    ("ntz", pa.array([1_001], pa.timestamp("ns")), "submicrosecond_loss", "floor_temporal"),
    ("ratio", pa.array([1], pa.int64()), "lossy", "cast the column"),
    ("small", pa.array([1.0], pa.float64()), "lossy", "DOUBLE"),
    ("price", pa.array([Decimal("1.234")], pa.decimal128(10, 3)), "lossy", "DECIMAL(10,3)"),
    ("label", pa.array([1], pa.int64()), "type_mismatch", "BIGINT"),
    ("id", pa.array([None], pa.int64()), "null_into_not_null", "fill or filter"),
    ("ghost", pa.array([1], pa.int64()), "unknown_column", "reconcile"),
    ("ratio", pa.array([1.0], pa.float16()), "unsupported_type", "float32"),
]


@pytest.mark.parametrize(
    ("column", "values", "kind", "fix"), FAILURES, ids=[f"{k}-{c}" for c, _, k, _ in FAILURES]
)
def test_each_mismatch_kind_fails_naming_everything_and_writes_nothing(
    gate: CatalogGate, metrics: SinkMetrics, column: str, values: pa.Array, kind: str, fix: str
) -> None:
    target = ensure_table(gate)
    version = DeltaTable(gate.catalog.location(T)).version()
    b = batch(**{column: values}) if column != "id" else pa.RecordBatch.from_pydict({"id": values})
    with pytest.raises(WriteBoundaryError) as info:
        send(gate, target, b)
    err = info.value
    assert (err.table, err.column, err.kind) == (T, column, kind)
    message = str(err)
    assert T in message and repr(column) in message and fix in message
    if kind not in ("unknown_column",):
        assert "declared" in message and "incoming" in message
    assert DeltaTable(gate.catalog.location(T)).version() == version and rows(gate) == 0
    assert metrics.sample("zerobus_type_reconcile_total", {"table": T, "kind": kind}) == 1.0


def test_missing_not_null_column_fails_and_every_problem_is_listed(gate: CatalogGate) -> None:
    target = ensure_table(gate)
    b = pa.RecordBatch.from_pydict({"label": pa.array([{"a": 1}]), "tz": pa.array([0], pa.timestamp("us"))})
    with pytest.raises(WriteBoundaryError) as info:
        gate.conform(T, b, target)
    assert (info.value.column, info.value.kind) == ("id", "missing_not_null")  # target order
    assert "'tz'" in str(info.value) and "'label'" in str(info.value) and "missing" in str(info.value)


def test_to_json_is_the_explicit_fix(gate: CatalogGate) -> None:
    target = ensure_table(gate)
    nested = pa.array(
        [{"a": 1, "when": datetime(2026, 1, 2, tzinfo=UTC), "m": [("k", b"\x00")]}, None],
        pa.struct(
            [
                ("a", pa.int32()),
                ("when", pa.timestamp("us", tz="UTC")),
                ("m", pa.map_(pa.string(), pa.binary())),
            ]
        ),
    )
    as_json = to_json(nested)
    assert as_json.type == pa.string() and as_json.null_count == 1
    assert json.loads(as_json[0].as_py()) == {"a": 1, "when": "2026-01-02T00:00:00+00:00", "m": {"k": "AA=="}}
    send(gate, target, batch(label=as_json))
    assert rows(gate) == 2


def test_all_null_column_is_cast_to_the_declared_type() -> None:
    target = pa.schema([pa.field("x", pa.int64())])
    out = conform_batch(T, pa.RecordBatch.from_pydict({"x": pa.nulls(3)}), target)
    assert out.schema == target and out.column(0).null_count == 3


def test_nested_lossless_reencoding_is_cast() -> None:
    target = pa.schema([pa.field("s", pa.struct([("a", pa.int16()), ("l", pa.list_(pa.string()))]))])
    incoming = pa.array(
        [{"a": 7, "l": ["x"]}], pa.struct([("a", pa.uint8()), ("l", pa.large_list(pa.large_string()))])
    )
    out = conform_batch(T, pa.RecordBatch.from_pydict({"s": incoming}), target)
    wire = pa.struct([("a", pa.int16()), ("l", pa.list_(pa.field("item", pa.large_string())))])
    assert str(out.schema) == str(pa.schema([pa.field("s", wire)]))  # str: list item names count
    assert out.column(0).to_pylist() == [{"a": 7, "l": ["x"]}]


def test_to_json_renders_an_empty_map_as_an_object_like_any_other_map() -> None:
    maps = pa.array([[("a", 1)], [], None], pa.map_(pa.string(), pa.int64()))
    assert to_json(maps).to_pylist() == ['{"a":1}', "{}", None]


def test_to_json_refuses_a_map_repeating_a_key_instead_of_dropping_a_value() -> None:
    repeated = pa.array([[(1, "x"), (1, "y")]], pa.map_(pa.int64(), pa.string()))
    with pytest.raises(ValueError, match="holds the key '1' more than once"):
        to_json(repeated)
