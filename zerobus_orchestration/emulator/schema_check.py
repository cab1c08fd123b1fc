"""Incoming Arrow schemas and batches checked against the target Delta table, as Zerobus does.

Two steps, both before anything is written or acknowledged:

* ``check_schema`` (at stream open on the Arrow path) compares the stream's schema with the one the
  Databricks Arrow Flight server builds from the table (``wire_schema``, built here from the Delta
  log's own schema by ``table_wire_columns``), strictly: a field must have exactly the wire type, field
  names at every depth (list ``item``, map ``keys``/``values``) and nullability included. The causes
  are the service's: ``FIELD_NOT_IN_TABLE``, ``MISSING_REQUIRED_COLUMN``, ``TYPE_INCOMPATIBLE`` (naming
  the column, the type sent and the type expected), and ``FIELD_COUNT_MISMATCH`` for two fields that
  differ only in case (column names are case-insensitive, so both would land in one column and one
  would silently overwrite the other). Nullable table columns may be omitted. Two differences the
  server casts per batch instead of refusing are accepted and reported as ``SchemaCheck.casts``
  (``wire_cast`` applies them): a map with the ``key``/``value`` layout and a VARIANT field carrying
  the ``arrow.parquet.variant`` extension marker (sources in docs/adr/0003-emulator-fidelity-limits.md).
* ``conform`` casts a batch to the table's types. It runs at accept time (so a batch that cannot be
  materialised is refused instead of acknowledged) and again at materialisation, where it also fills
  omitted nullable columns with nulls against the table schema current at that moment. A column in
  its wire type is checked (DECIMAL text must be a decimal of the column's precision and scale,
  ``wire_values.decimal_text_refusal``) and kept as sent in the write-ahead log (``fill_missing=False``),
  then read into the table's type exactly when materialised.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.wire_schema import (
    LIST_ITEM,
    MAP_KEYS,
    MAP_VALUES,
    VARIANT_EXTENSION,
    DeltaType,
    WireProblem,
    column_problems,
    wire_field,
    wire_type_of_arrow,
)
from zerobus_orchestration.wire_values import decimal_text_refusal, from_wire

FIELD_NOT_IN_TABLE = "FIELD_NOT_IN_TABLE"
MISSING_REQUIRED_COLUMN = "MISSING_REQUIRED_COLUMN"
TYPE_INCOMPATIBLE = "TYPE_INCOMPATIBLE"
FIELD_COUNT_MISMATCH = "FIELD_COUNT_MISMATCH"
NULL_IN_REQUIRED_COLUMN = "NULL_IN_REQUIRED_COLUMN"

# Differences the server casts per batch rather than refuses (counted: ``Emulator.wire_casts``).
# The SDK's converter: "The server also accepts the Arrow-default "key_value"/"key"/"value" names and
# normalizes via `arrow::compute::cast`" (rust/sdk/src/schema.rs, databricks/zerobus-sdk).
CAST_MAP_KEY_VALUE = "map_key_value_layout"
# The SDK's changelog, release 2.6.0: the server's target schema is unmarked, "so a marked schema forces
# a per-batch server-side cast".
CAST_VARIANT_MARKER = "variant_extension_marker"
_EXTENSION_NAME = b"ARROW:extension:name"


@dataclass(frozen=True)
class SchemaProblem:
    cause: str
    column: str
    detail: str

    def render(self, table: str) -> str:
        return f"{self.cause}: {table}.{self.column}: {self.detail}"


@dataclass(frozen=True)
class SchemaCheck:
    table: str
    problems: tuple[SchemaProblem, ...] = field(default_factory=tuple)
    casts: tuple[str, ...] = ()  # server-side casts this stream's batches need (CAST_*), once each
    schema: pa.Schema | None = None  # the stream's schema once cast (None: as sent)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def causes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.cause for p in self.problems))

    def message(self) -> str:
        return "schema does not match the table: " + "; ".join(p.render(self.table) for p in self.problems)


@dataclass(frozen=True)
class WireColumn:
    """One table column as the wire carries it: its wire field, or why no stream can carry it."""

    name: str
    nullable: bool
    delta: DeltaType
    field: pa.Field | None
    problems: tuple[WireProblem, ...] = ()


def table_wire_columns(fields: Sequence[Mapping[str, Any]], *, column_mapping: bool) -> list[WireColumn]:
    """The table's columns (Delta StructFields as JSON, in table order) with their wire fields."""
    columns = []
    for f in fields:
        name, delta, nullable = str(f["name"]), f["type"], bool(f.get("nullable", True))
        problems = tuple(column_problems(name, delta, column_mapping=column_mapping))
        wire = None if problems else wire_field(f, column_mapping=column_mapping)
        columns.append(WireColumn(name, nullable, delta, wire, problems))
    return columns


def case_clash(column: str, first: str, second: str) -> SchemaProblem:
    """Two incoming spellings of one (case-insensitive) column: refused, since one would be lost."""
    return SchemaProblem(
        FIELD_COUNT_MISMATCH,
        column,
        f"fields {first!r} and {second!r} both name this column (column names are case-insensitive, "
        f"so one would silently overwrite the other): send the column once, under one spelling",
    )


def check_schema(table: str, incoming: pa.Schema, expected: Sequence[WireColumn]) -> SchemaCheck:
    """Every way ``incoming`` differs from the table's wire schema, one problem per column, with the fix."""
    problems: list[SchemaProblem] = []
    casts: list[str] = []
    by_name = {c.name: c for c in expected}
    by_lower = {c.name.lower(): c for c in expected}
    present: dict[str, str] = {}  # table column -> the incoming spelling that filled it
    fields: list[pa.Field] = []
    for f in incoming:
        column = by_name.get(f.name) or by_lower.get(f.name.lower())
        if column is None:
            problems.append(
                SchemaProblem(
                    FIELD_NOT_IN_TABLE,
                    f.name,
                    f"the table has no such column (add it to the table first, or drop it; columns: "
                    f"{', '.join(by_name) or 'none'})",
                )
            )
            continue
        if column.name in present:
            problems.append(case_clash(column.name, present[column.name], f.name))
            continue
        present[column.name] = f.name
        if column.field is None:
            problems.append(
                SchemaProblem(
                    TYPE_INCOMPATIBLE,
                    f.name,
                    "the table's column cannot be carried by the Arrow Flight path: "
                    + "; ".join(p.render() for p in column.problems),
                )
            )
            continue
        differs = _field_difference(f, column.field, column.delta, casts)
        if differs is not None:
            problems.append(
                SchemaProblem(
                    TYPE_INCOMPATIBLE,
                    f.name,
                    f"sent {_shown(f)}, expected {_shown(column.field)} ({differs}); send the table's wire "
                    "schema (docs/architecture.md#the-wire-contract)",
                )
            )
        fields.append(pa.field(f.name, column.field.type, nullable=column.field.nullable))
    for column in expected:
        if column.name not in present and not column.nullable:
            problems.append(
                SchemaProblem(
                    MISSING_REQUIRED_COLUMN,
                    column.name,
                    f"NOT NULL column of wire type {_shown_type(column)} is missing (send it)",
                )
            )
    unique = tuple(dict.fromkeys(casts))
    cast_schema = pa.schema(fields, metadata=incoming.metadata) if unique and not problems else None
    return SchemaCheck(table, tuple(problems), unique, cast_schema)


def wire_cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (whose schema ``check_schema`` accepted with casts) in the canonical wire ``schema``."""
    columns = []
    for column, target in zip(batch.columns, schema, strict=True):
        if isinstance(column.type, pa.BaseExtensionType):
            column = column.storage
        columns.append(column if str(column.type) == str(target.type) else column.cast(target.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _shown(f: pa.Field) -> str:
    return f"{f.type}{'' if f.nullable else ' not null'}"


def _shown_type(column: WireColumn) -> str:
    return str(column.field.type) if column.field is not None else str(column.delta)


def _field_difference(sent: pa.Field, wanted: pa.Field, delta: DeltaType, casts: list[str]) -> str | None:
    """How ``sent`` differs from the wire field ``wanted`` (None: the same, or only by a server cast)."""
    if sent.nullable != wanted.nullable:
        return f"{sent.name!r} is {'nullable' if sent.nullable else 'not null'} where the table's is not"
    if delta == "variant" and _is_marked_variant(sent):
        casts.append(CAST_VARIANT_MARKER)
        storage = sent.type.storage_type if isinstance(sent.type, pa.BaseExtensionType) else sent.type
        return _type_difference(sent.name, storage, wanted.type, delta, casts)
    return _type_difference(sent.name, sent.type, wanted.type, delta, casts)


def _is_marked_variant(f: pa.Field) -> bool:
    if isinstance(f.type, pa.BaseExtensionType):
        return bool(f.type.extension_name == VARIANT_EXTENSION)
    return bool((f.metadata or {}).get(_EXTENSION_NAME) == VARIANT_EXTENSION.encode())


def _type_difference(
    path: str, sent: pa.DataType, wanted: pa.DataType, delta: DeltaType, casts: list[str]
) -> str | None:
    """Strict structural comparison: Arrow's own type equality ignores list and map field names."""
    if isinstance(delta, str):
        return None if sent.equals(wanted) else f"{path} is {sent}, not {wanted}"
    kind = delta.get("type")
    if kind == "array":
        if not pa.types.is_list(sent):
            return f"{path} is {sent}, not a list"
        item = sent.value_field
        if item.name != LIST_ITEM or not item.nullable:
            shown = f"{item.name!r}{'' if item.nullable else ' not null'}"
            return f"{path}'s list item is {shown}, not a nullable {LIST_ITEM!r}"
        return _type_difference(
            f"{path}.{LIST_ITEM}", item.type, wanted.value_type, delta["elementType"], casts
        )
    if kind == "map":
        if not pa.types.is_map(sent):
            return f"{path} is {sent}, not a map"
        key, value = sent.key_field, sent.item_field
        if (key.name, value.name) == ("key", "value"):
            casts.append(CAST_MAP_KEY_VALUE)
        elif (key.name, value.name) != (MAP_KEYS, MAP_VALUES):
            return f"{path}'s map fields are {key.name!r}/{value.name!r}, not {MAP_KEYS!r}/{MAP_VALUES!r}"
        if not value.nullable:
            return f"{path}'s map values are not null, where the wire's are nullable"
        return _type_difference(
            f"{path}.{key.name}", key.type, wanted.key_type, delta["keyType"], casts
        ) or _type_difference(f"{path}.{value.name}", value.type, wanted.item_type, delta["valueType"], casts)
    if kind == "struct":
        if not pa.types.is_struct(sent):
            return f"{path} is {sent}, not a struct"
        children = delta["fields"]
        sent_names = [sent.field(i).name for i in range(sent.num_fields)]
        wanted_names = [wanted.field(i).name for i in range(wanted.num_fields)]
        if sent_names != wanted_names:
            return f"{path}'s fields are {sent_names}, not {wanted_names}"
        for i, child in enumerate(children):
            got, want = sent.field(i), wanted.field(i)
            if got.nullable != want.nullable:
                shown = "nullable" if got.nullable else "not null"
                return f"{path}.{got.name} is {shown} where the table's is not"
            differs = _type_difference(f"{path}.{got.name}", got.type, want.type, child["type"], casts)
            if differs is not None:
                return differs
        return None
    return None if sent.equals(wanted) else f"{path} is {sent}, not {wanted}"


def conform(table: str, batch: pa.RecordBatch, target: pa.Schema, *, fill_missing: bool) -> pa.RecordBatch:
    """``batch`` cast to ``target``'s types (in table order). Raises ``ConformError`` naming the column.

    With ``fill_missing`` omitted nullable columns are added as nulls, giving exactly ``target``;
    without it only the columns present are kept (the WAL stores what the producer sent).
    """
    incoming: dict[str, int] = {}
    for i, name in enumerate(batch.schema.names):
        first = incoming.setdefault(name.lower(), i)
        if first != i:
            column = next((t.name for t in target if t.name.lower() == name.lower()), name)
            raise ConformError(table, case_clash(column, batch.schema.names[first], name))
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for t in target:
        idx = incoming.get(t.name.lower())
        if idx is None:
            if not fill_missing:
                continue
            if not t.nullable:
                raise ConformError(
                    table, SchemaProblem(MISSING_REQUIRED_COLUMN, t.name, "NOT NULL column missing")
                )
            arrays.append(pa.nulls(batch.num_rows, type=t.type))
            fields.append(t)
            continue
        column = batch.column(idx)
        try:
            if column.type.equals(t.type):
                cast = column
            elif _in_wire_form(column.type, t.type):
                _check_decimal_text(table, t.name, column, t.type)
                # The log keeps what the producer sent; the table gets its own types, read exactly.
                cast = from_wire(column, t.type) if fill_missing else column
            else:
                cast = column.cast(t.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ConformError(
                table, SchemaProblem(TYPE_INCOMPATIBLE, t.name, f"{column.type} -> {t.type}: {exc}")
            ) from exc
        if not t.nullable and cast.null_count:
            raise ConformError(
                table,
                SchemaProblem(
                    NULL_IN_REQUIRED_COLUMN, t.name, f"{cast.null_count} null value(s) in a NOT NULL column"
                ),
            )
        arrays.append(cast)
        fields.append(t if cast.type.equals(t.type) else t.with_type(cast.type))  # kept in its wire type
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def unchanged(incoming: pa.RecordBatch, conformed: pa.RecordBatch) -> bool:
    """Whether ``conform`` kept ``incoming``'s columns as they are: same names, order and types."""
    if incoming.schema.names != conformed.schema.names:
        return False
    return all(a.type.equals(b.type) for a, b in zip(incoming.schema, conformed.schema, strict=True))


def _in_wire_form(sent: pa.DataType, table_type: pa.DataType) -> bool:
    """Whether ``sent`` is the wire type of a column of ``table_type`` (``wire_schema``).

    Map field names aside: pyarrow decodes every map as ``key``/``value`` (``ipc_names``), and the
    stream's schema, names included, was checked at stream creation.
    """
    try:
        return str(_map_names_dropped(wire_type_of_arrow(table_type))) == str(_map_names_dropped(sent))
    except UnsupportedType:
        return False


@functools.lru_cache(maxsize=1024)
def _map_names_dropped(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_map(kind):
        key, item = kind.key_field, kind.item_field
        return pa.map_(
            pa.field("key", _map_names_dropped(key.type), nullable=False),
            pa.field("value", _map_names_dropped(item.type), nullable=item.nullable),
        )
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_map_names_dropped(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_map_names_dropped(f.type)) for f in kind])
    return kind


def _check_decimal_text(table: str, path: str, column: pa.Array, table_type: pa.DataType) -> None:
    """Refuse DECIMAL text (at any depth) that is not a decimal of the column's precision and scale."""
    if pa.types.is_decimal(table_type):
        refusal = decimal_text_refusal(column, table_type.precision, table_type.scale)
        if refusal is not None:
            raise ConformError(table, SchemaProblem(TYPE_INCOMPATIBLE, path, refusal.describe()))
    elif pa.types.is_list(table_type) or pa.types.is_large_list(table_type):
        _check_decimal_text(table, f"{path}.element", column.flatten(), table_type.value_type)
    elif pa.types.is_map(table_type):
        _check_decimal_text(table, f"{path}.key", column.keys, table_type.key_type)
        _check_decimal_text(table, f"{path}.value", column.items, table_type.item_type)
    elif pa.types.is_struct(table_type):
        # flatten(), not field(i): it merges the struct's own validity, so what lies under a null struct
        # (pyarrow fills it with empty strings) is not taken for a value.
        for child, values in zip(table_type, column.flatten(), strict=True):
            _check_decimal_text(table, f"{path}.{child.name}", values, child.type)
