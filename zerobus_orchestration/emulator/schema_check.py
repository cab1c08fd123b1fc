"""Incoming Arrow schemas and batches checked against the target Delta table, as Zerobus does.

Two steps, both before anything is written or acknowledged:

* ``check_schema`` (at stream open on the Arrow path, per batch on the row path) returns the
  ``SCHEMA_VALIDATION_FAILED`` causes the service reports: ``FIELD_NOT_IN_TABLE``,
  ``MISSING_REQUIRED_COLUMN``, ``TYPE_INCOMPATIBLE``, and ``FIELD_COUNT_MISMATCH`` for two fields that
  differ only in case (column names are case-insensitive, so both would land in one column and one
  would silently overwrite the other). Nullable table columns may be omitted.
* ``conform`` casts a batch to the table's types. It runs at accept time (so a batch that cannot be
  materialised is refused instead of acknowledged) and again at materialisation, where it also fills
  omitted nullable columns with nulls against the table schema current at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from zerobus_orchestration.emulator.errors import ConformError

FIELD_NOT_IN_TABLE = "FIELD_NOT_IN_TABLE"
MISSING_REQUIRED_COLUMN = "MISSING_REQUIRED_COLUMN"
TYPE_INCOMPATIBLE = "TYPE_INCOMPATIBLE"
FIELD_COUNT_MISMATCH = "FIELD_COUNT_MISMATCH"
NULL_IN_REQUIRED_COLUMN = "NULL_IN_REQUIRED_COLUMN"


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

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def causes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.cause for p in self.problems))

    def message(self) -> str:
        return "schema does not match the table: " + "; ".join(p.render(self.table) for p in self.problems)


_STRINGS = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
_BINARIES = (
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_binary_view,
    pa.types.is_fixed_size_binary,
)
_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list, pa.types.is_list_view)


def case_clash(column: str, first: str, second: str) -> SchemaProblem:
    """Two incoming spellings of one (case-insensitive) column: refused, since one would be lost."""
    return SchemaProblem(
        FIELD_COUNT_MISMATCH,
        column,
        f"fields {first!r} and {second!r} both name this column (column names are case-insensitive, "
        f"so one would silently overwrite the other): send the column once, under one spelling",
    )


def _any(preds: tuple[object, ...], t: pa.DataType) -> bool:
    return any(p(t) for p in preds)  # type: ignore[operator]


def compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether values of ``src`` can be stored in a ``dst`` column without changing their meaning."""
    if src.equals(dst) or pa.types.is_null(src):
        return True
    if pa.types.is_dictionary(src):
        return compatible(src.value_type, dst)
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        if pa.types.is_unsigned_integer(dst) and pa.types.is_signed_integer(src):
            return False
        widen = 1 if pa.types.is_unsigned_integer(src) and pa.types.is_signed_integer(dst) else 0
        return bool(dst.bit_width >= src.bit_width + widen or dst.bit_width == 64)
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return bool(dst.bit_width >= src.bit_width)
    if _any(_STRINGS, src) and _any(_STRINGS, dst):
        return True
    if _any(_BINARIES, src) and _any(_BINARIES, dst):
        return not pa.types.is_fixed_size_binary(dst)
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return (src.tz is None) == (dst.tz is None)
    if pa.types.is_date(src) and pa.types.is_date(dst):
        return True
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(src.scale == dst.scale and dst.precision >= src.precision)
    if _any(_LISTS, src) and _any(_LISTS, dst):
        return compatible(src.value_type, dst.value_type)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        return compatible(src.key_type, dst.key_type) and compatible(src.item_type, dst.item_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        return not _struct_problems(src, dst)
    return False


def _struct_problems(src: pa.StructType, dst: pa.StructType) -> list[str]:
    wanted = {dst.field(i).name: dst.field(i) for i in range(dst.num_fields)}
    problems = []
    seen = set()
    for i in range(src.num_fields):
        f = src.field(i)
        target = wanted.get(f.name)
        if target is None or not compatible(f.type, target.type):
            problems.append(f.name)
        seen.add(f.name)
    problems.extend(n for n, f in wanted.items() if n not in seen and not f.nullable)
    return problems


def check_schema(table: str, incoming: pa.Schema, target: pa.Schema) -> SchemaCheck:
    """Every way ``incoming`` fails to fit ``target``, one problem per column, with the fix."""
    problems: list[SchemaProblem] = []
    by_name = {f.name: f for f in target}
    by_lower = {f.name.lower(): f for f in target}
    present: dict[str, str] = {}  # table column -> the incoming spelling that filled it
    for f in incoming:
        t = by_name.get(f.name) or by_lower.get(f.name.lower())
        if t is None:
            problems.append(
                SchemaProblem(
                    FIELD_NOT_IN_TABLE,
                    f.name,
                    f"the table has no such column (add it to the table first, or drop it; columns: "
                    f"{', '.join(by_name) or 'none'})",
                )
            )
            continue
        if t.name in present:
            problems.append(case_clash(t.name, present[t.name], f.name))
            continue
        present[t.name] = f.name
        if not compatible(f.type, t.type):
            problems.append(
                SchemaProblem(TYPE_INCOMPATIBLE, f.name, f"incoming {f.type} cannot be stored as {t.type}")
            )
    for t in target:
        if t.name not in present and not t.nullable:
            problems.append(
                SchemaProblem(
                    MISSING_REQUIRED_COLUMN, t.name, f"NOT NULL column of type {t.type} is missing (send it)"
                )
            )
    return SchemaCheck(table, tuple(problems))


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
            cast = column if column.type.equals(t.type) else column.cast(t.type, safe=True)
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
        fields.append(t)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def unchanged(incoming: pa.RecordBatch, conformed: pa.RecordBatch) -> bool:
    """Whether ``conform`` kept ``incoming``'s columns as they are: same names, order and types."""
    if incoming.schema.names != conformed.schema.names:
        return False
    return all(a.type.equals(b.type) for a, b in zip(incoming.schema, conformed.schema, strict=True))
