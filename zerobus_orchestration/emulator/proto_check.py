"""A protobuf stream's descriptor checked against the target table at stream creation, as Zerobus does.

Databricks refuses a descriptor that does not match the table when the stream is created, with
``SCHEMA_VALIDATION_FAILED`` and the causes of ``schema_check`` (facts and sources in
docs/adr/0003-emulator-fidelity-limits.md):

* a field whose name is no column of the table: ``FIELD_NOT_IN_TABLE``;
* a NOT NULL column (or NOT NULL struct field) with no field: ``MISSING_REQUIRED_COLUMN``; nullable
  columns may be left out (https://docs.databricks.com/aws/en/ingestion/zerobus-schema-management);
* a field whose type is not the one the service maps the column to, or whose label does not match the
  column's nullability: ``TYPE_INCOMPATIBLE``;
* two fields naming one column (names are case-insensitive): ``FIELD_COUNT_MISMATCH``.

The type each column takes is the SDK's own mapping from a Unity Catalog schema to a descriptor
(``descriptor_from_uc_columns`` in ``rust/sdk/src/schema.rs`` of databricks/zerobus-sdk, and the
``generate_proto`` tools): BOOLEAN bool; TINYINT, SMALLINT, INT int32; BIGINT int64; FLOAT float;
DOUBLE double; STRING, DECIMAL (as text) string; BINARY bytes; DATE int32 (days since the epoch);
TIMESTAMP and TIMESTAMP_NTZ int64 (microseconds since the epoch); STRUCT a nested message; ARRAY a
``repeated`` field; MAP a ``repeated`` map-entry message with ``key`` and ``value``. A NOT NULL column
is ``required``, a nullable one ``optional``. Accepting only exactly these (no ``sint32`` for INT, no
``int64`` for INT, no ``optional`` for a NOT NULL column) is the strict reading of what the service's
documentation leaves open; ADR 0003 lists it as a guess with the rehearsal that would confirm it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from zerobus_orchestration.emulator.records import message_descriptor
from zerobus_orchestration.emulator.schema_check import (
    FIELD_NOT_IN_TABLE,
    MISSING_REQUIRED_COLUMN,
    TYPE_INCOMPATIBLE,
    SchemaProblem,
    case_clash,
)

# google.protobuf.descriptor.FieldDescriptor constants (stable parts of descriptor.proto).
LABEL_OPTIONAL, LABEL_REQUIRED, LABEL_REPEATED = 1, 2, 3
TYPE_NAMES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    10: "group",
    11: "message",
    12: "bytes",
    13: "uint32",
    14: "enum",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}
TYPE_MESSAGE = 11


def proto_type_of(arrow_type: pa.DataType) -> int | None:
    """The protobuf field type the service takes for a scalar column of ``arrow_type``; None: none."""
    t = arrow_type
    if pa.types.is_boolean(t):
        return 8
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t) or pa.types.is_date32(t):
        return 5
    if pa.types.is_int64(t) or pa.types.is_timestamp(t):
        return 3
    if pa.types.is_float32(t):
        return 2
    if pa.types.is_float64(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return 9
    if pa.types.is_decimal(t):
        return 9  # decimal text
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return 12
    return None


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t))


def _label(field: Any) -> int:
    if field.is_repeated:
        return LABEL_REPEATED
    return LABEL_REQUIRED if field.is_required else LABEL_OPTIONAL


def _declared(field: Any) -> str:
    label = {LABEL_OPTIONAL: "optional", LABEL_REQUIRED: "required", LABEL_REPEATED: "repeated"}[
        _label(field)
    ]
    kind = field.message_type.name if field.type == TYPE_MESSAGE else TYPE_NAMES.get(field.type, "?")
    return f"{label} {kind}"


class _Checker:
    def __init__(self) -> None:
        self.problems: list[SchemaProblem] = []

    def problem(self, cause: str, path: str, detail: str) -> None:
        self.problems.append(SchemaProblem(cause, path, detail))

    def message_fields(self, message: Any, columns: Iterable[pa.Field], prefix: str) -> None:
        """The fields of ``message`` against ``columns`` (a table's or a struct's), by name."""
        by_lower = {c.name.lower(): c for c in columns}
        matched: dict[str, str] = {}  # column -> the field naming it
        for field in message.fields:
            path = prefix + field.name
            column = by_lower.get(field.name.lower())
            if column is None:
                names = ", ".join(c.name for c in by_lower.values()) or "none"
                self.problem(FIELD_NOT_IN_TABLE, path, f"no such column (columns: {names}): drop the field")
                continue
            if column.name in matched:
                self.problems.append(case_clash(prefix + column.name, matched[column.name], field.name))
                continue
            matched[column.name] = field.name
            self.field(field, column, path)
        for column in by_lower.values():
            if column.name not in matched and not column.nullable:
                self.problem(
                    MISSING_REQUIRED_COLUMN,
                    prefix + column.name,
                    f"NOT NULL column of type {column.type} has no field: add "
                    f"`required {self.expected(column.type)} {column.name}`",
                )

    def field(self, field: Any, column: pa.Field, path: str) -> None:
        t = column.type
        if _is_list(t) or pa.types.is_map(t):
            if _label(field) != LABEL_REPEATED:
                self.problem(
                    TYPE_INCOMPATIBLE, path, f"{_declared(field)} for a {t} column: declare it repeated"
                )
                return
            if pa.types.is_map(t):
                self.map_entry(field, t, path)
            else:
                self.value(field, t.value_type, path + "[]", repeated=True)
            return
        if _label(field) == LABEL_REPEATED:
            detail = f"{_declared(field)} for a {t} column (not an ARRAY or MAP)"
            self.problem(TYPE_INCOMPATIBLE, path, detail)
            return
        wanted = LABEL_OPTIONAL if column.nullable else LABEL_REQUIRED
        if _label(field) != wanted:
            nullability = "nullable" if column.nullable else "NOT NULL"
            label = "optional" if column.nullable else "required"
            self.problem(
                TYPE_INCOMPATIBLE,
                path,
                f"{_declared(field)} for a {nullability} column: the field's label must match the "
                f"column's nullability (declare it {label})",
            )
            return
        self.value(field, t, path, repeated=False)

    def value(self, field: Any, t: pa.DataType, path: str, *, repeated: bool) -> None:
        """The field's type (not its label) against the column's (or element's) type ``t``."""
        if pa.types.is_struct(t):
            if field.type != TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
                detail = f"{_declared(field)} for a {t} value: use a nested message"
                self.problem(TYPE_INCOMPATIBLE, path, detail)
                return
            self.message_fields(field.message_type, list(t), path + ".")
            return
        if _is_list(t) or pa.types.is_map(t):  # an array of arrays or maps: no protobuf shape holds it
            self.problem(TYPE_INCOMPATIBLE, path, f"{t} has no protobuf mapping (nested arrays and maps)")
            return
        expected = proto_type_of(t)
        if expected is None:
            self.problem(TYPE_INCOMPATIBLE, path, f"a {t} column has no protobuf mapping")
        elif field.type != expected:
            shown = "repeated " if repeated else ""
            self.problem(
                TYPE_INCOMPATIBLE,
                path,
                f"{_declared(field)} for a {t} column: the service takes {shown}{TYPE_NAMES[expected]}",
            )

    def map_entry(self, field: Any, t: pa.MapType, path: str) -> None:
        entry = field.message_type if field.type == TYPE_MESSAGE else None
        if entry is None or not entry.GetOptions().map_entry:
            self.problem(TYPE_INCOMPATIBLE, path, f"{_declared(field)} for a {t} column: declare a map<K, V>")
            return
        key, value = entry.fields_by_name.get("key"), entry.fields_by_name.get("value")
        if key is None or value is None:
            self.problem(TYPE_INCOMPATIBLE, path, "a map entry needs key and value fields")
            return
        self.value(key, t.key_type, path + ".key", repeated=False)
        self.value(value, t.item_type, path + ".value", repeated=False)

    @staticmethod
    def expected(t: pa.DataType) -> str:
        found = proto_type_of(t)
        return TYPE_NAMES[found] if found is not None else "<message>"


def check_descriptor(descriptor_proto: bytes, target: pa.Schema) -> tuple[str, list[SchemaProblem]]:
    """The descriptor's message name and every way it fails to fit ``target`` (empty: it fits).

    Raises ``ValueError`` for bytes that are no usable ``DescriptorProto``.
    """
    message = message_descriptor(descriptor_proto)
    checker = _Checker()
    checker.message_fields(message, list(target), "")
    return str(message.name), checker.problems


def render(table: str, message_name: str, problems: list[SchemaProblem]) -> str:
    listed = "; ".join(p.render(table) for p in problems)
    return f"protobuf descriptor {message_name} does not match the table: {listed}"
