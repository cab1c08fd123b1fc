"""Write-boundary guard: every incoming column against its declared target column, before sending.

Lossless differences are cast (uint8 into SMALLINT, int32 into BIGINT, dictionary<string> into STRING,
large/view strings and binaries, float32 into DOUBLE, decimal precision increases, date64 into DATE,
timestamps to microseconds when no sub-microsecond precision is lost, all-null columns). Everything else
raises ``WriteBoundaryError`` naming table, column, incoming and declared type, and the fix; a batch
with any failing column is refused whole, so nothing of it is sent. That includes DATE/TIMESTAMP values
outside 0001-01-01 .. 9999-12-31 (``out_of_range``), which Arrow holds but Delta and Iceberg do not: the
message names the first such value and its row (and ``_twg_offset`` position when stamped).

What leaves the guard is in the wire types of ``wire_schema`` (the schema Databricks' Arrow Flight server
builds from the table: ``large_utf8`` strings, DECIMAL as its exact text, list items named ``item``, maps
of ``keys``/``values``), converted by ``wire_values.to_wire`` after every check has passed on the declared
types. Shapes that schema cannot carry (an array of arrays or of maps, a map whose value is an array or a
map, a map keyed by a float, double, binary or nested type) and, on a table without column mapping,
field names outside ``[A-Za-z_][A-Za-z0-9_]*`` are refused by ``refuse_unsendable`` (``unsendable_shape``,
``unsendable_name``): the catalog gate calls it before it creates or evolves the table, so such a column
leaves neither a row sent nor a table behind.

Each outcome is counted by ``kind`` through ``record_type_reconcile`` (``zerobus_type_reconcile_total``);
a type mismatch no cast can bridge (``UNRECONCILABLE``) is also counted per column in
``zerobus_type_unreconcilable_total`` and logged at ERROR (``record_unreconcilable``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.catalog.guard_plan import Plan, cached_plan, make_plan, remember

# Re-exported: the guard's refusal tells users to import ``to_json`` from here.
from zerobus_orchestration.catalog.json_text import to_json as to_json
from zerobus_orchestration.catalog.temporal_range import holds_temporal, is_temporal, out_of_range_within
from zerobus_orchestration.errors import UnsupportedType, WriteBoundaryError
from zerobus_orchestration.reserved import OFFSET, RESERVED_NAMES
from zerobus_orchestration.type_map import arrow_storage_type, can_widen_to, delta_type
from zerobus_orchestration.wire_schema import WireProblem, arrow_column_problems, wire_type_of_arrow
from zerobus_orchestration.wire_values import to_wire

if TYPE_CHECKING:
    from zerobus_orchestration.metrics import SinkMetrics

log = logging.getLogger(__name__)

# Failure kinds.
NESTED_INTO_STRING = "nested_into_string"
TZ_AWARE_INTO_NTZ = "tz_aware_into_ntz"
NAIVE_INTO_TZ = "naive_into_tz"
UNSIGNED_OVERFLOW = "unsigned_overflow"
INTEGER_OVERFLOW = "integer_overflow"
SUBMICROSECOND_LOSS = "submicrosecond_loss"
LOSSY = "lossy"
TYPE_MISMATCH = "type_mismatch"
UNKNOWN_COLUMN = "unknown_column"
MISSING_NOT_NULL = "missing_not_null"
NULL_INTO_NOT_NULL = "null_into_not_null"
OUT_OF_RANGE = "out_of_range"  # a DATE/TIMESTAMP outside 0001-01-01 .. 9999-12-31
UNSUPPORTED = "unsupported_type"
UNSENDABLE_SHAPE = "unsendable_shape"  # a shape Zerobus' Arrow Flight path refuses (wire_schema)
UNSENDABLE_NAME = "unsendable_name"  # a field name it refuses on a table without column mapping
# Cast kinds (lossless, counted but not refused).
CAST_UNSIGNED = "cast_unsigned"
CAST_INTEGER = "cast_integer"
CAST_DICTIONARY = "cast_dictionary"
CAST_ENCODING = "cast_encoding"  # large/view string or binary, fixed-size binary, date64, nested re-encode
CAST_TIMESTAMP = "cast_timestamp"
CAST_FLOAT = "cast_float"
CAST_DECIMAL = "cast_decimal"
CAST_NULL = "cast_null"


# Type mismatches no cast can bridge: the producer must change (``to_json``, an explicit zone, ...).
# Counted again, per column, in ``zerobus_type_unreconcilable_total`` and logged at ERROR; value
# problems (overflow, nulls, out-of-range dates) and missing/unknown columns are not type mismatches.
UNRECONCILABLE = frozenset(
    {
        NESTED_INTO_STRING,
        TZ_AWARE_INTO_NTZ,
        NAIVE_INTO_TZ,
        TYPE_MISMATCH,
        LOSSY,
        UNSUPPORTED,
        UNSENDABLE_SHAPE,
        UNSENDABLE_NAME,
    }
)


def record_unreconcilable(
    kind: str, *, table: str, column: str, message: str, metrics: SinkMetrics | None = None
) -> None:
    """Count and log one refused column as ``zerobus_type_unreconcilable_total{table, column, kind}``."""
    log.error("write refused, unreconcilable type mismatch (%s): %s", kind, message)
    if metrics is None:
        try:
            from zerobus_orchestration.metrics import default_metrics
        except ImportError:  # metrics are optional for the catalog layer
            return
        metrics = default_metrics()
    metrics.type_unreconcilable.labels(table=table, column=column, kind=kind).inc()


def record_type_reconcile(kind: str, *, table: str = "", metrics: SinkMetrics | None = None) -> None:
    """Count one guard outcome as ``zerobus_type_reconcile_total{table, kind}`` (hook for the sink)."""
    if metrics is None:
        try:
            from zerobus_orchestration.metrics import default_metrics
        except ImportError:  # metrics are optional for the catalog layer
            return
        metrics = default_metrics()
    metrics.type_reconcile.labels(table=table, kind=kind).inc()


@dataclass(frozen=True)
class _Problem:
    column: str
    kind: str
    message: str


def _describe(t: pa.DataType) -> str:
    try:
        return f"{delta_type(t)} ({t})"
    except UnsupportedType:
        return str(t)


def _cast_kind(incoming: pa.DataType, declared: pa.DataType) -> str:
    if pa.types.is_dictionary(incoming):
        return CAST_DICTIONARY
    if pa.types.is_unsigned_integer(incoming):
        return CAST_UNSIGNED
    if pa.types.is_integer(incoming):
        return CAST_INTEGER
    if pa.types.is_floating(incoming):
        return CAST_FLOAT
    if pa.types.is_decimal(incoming):
        return CAST_DECIMAL
    if pa.types.is_timestamp(incoming):
        return CAST_TIMESTAMP
    if pa.types.is_null(incoming):
        return CAST_NULL
    return CAST_ENCODING


class _Column:
    """Decides one column: returns the cast array or a problem."""

    def __init__(
        self,
        table: str,
        name: str,
        values: pa.Array,
        declared: pa.Field,
        batch_offsets: pa.Array | None = None,
    ) -> None:
        self.table, self.name, self.values, self.declared = table, name, values, declared
        self.incoming: pa.DataType = values.type
        self.batch_offsets = batch_offsets

    def problem(self, kind: str, what: str, fix: str) -> _Problem:
        message = (
            f"table {self.table}, column {self.name!r}: incoming {_describe(self.incoming)}, declared "
            f"{_describe(self.declared.type)}: {what}. Fix: {fix}"
        )
        return _Problem(self.name, kind, message)

    def decide(self) -> tuple[pa.Array | None, str | None, _Problem | None]:
        """(cast values, cast kind or None when unchanged, problem)."""
        incoming, declared = self.incoming, self.declared.type
        if not self.declared.nullable and self.values.null_count:
            return (
                None,
                None,
                self.problem(
                    NULL_INTO_NOT_NULL,
                    f"{self.values.null_count} null value(s) in a NOT NULL column",
                    "fill or filter the nulls before writing",
                ),
            )
        out_of_range = self._temporal_range_problem()
        if out_of_range is not None:
            return None, None, out_of_range
        if incoming == declared:
            return self.values, None, None
        if pa.types.is_null(incoming):
            return pa.nulls(len(self.values), type=declared), CAST_NULL, None
        shape = self._shape_problem(incoming, declared)
        if shape is not None:
            return None, None, shape
        if pa.types.is_integer(incoming) and pa.types.is_integer(declared):
            if can_widen_to(incoming, declared):
                return self._safe_cast(declared, _cast_kind(incoming, declared))
            return self._checked_integer(declared)
        try:
            storage = arrow_storage_type(incoming)
        except UnsupportedType as exc:
            return None, None, self.problem(UNSUPPORTED, str(exc), "cast the column as the message says")
        if storage == declared or can_widen_to(storage, declared):
            return self._safe_cast(declared, _cast_kind(incoming, declared))
        return (
            None,
            None,
            self.problem(
                LOSSY if _same_family(storage, declared) else TYPE_MISMATCH,
                "the declared type cannot hold every incoming value exactly"
                if _same_family(storage, declared)
                else "the types are incompatible",
                _text_fix(self.name, storage, declared)
                or f"cast the column to {declared} explicitly, or declare a {delta_type(storage)} column",
            ),
        )

    def _temporal_range_problem(self) -> _Problem | None:
        """A DATE/TIMESTAMP value Delta and Iceberg cannot hold (``catalog/temporal_range.py``), at any
        depth: the service refuses a nested one as it does a top-level one, after the rows before it."""
        if not holds_temporal(self.declared.type):
            return None
        found = out_of_range_within(self.values)
        if found is None:
            return None
        path, outside = found
        where = f" in {self.name}{path}" if path else ""
        return self.problem(
            OUT_OF_RANGE,
            f"{outside.count} value(s){where} outside 0001-01-01 .. 9999-12-31, which Delta and Iceberg "
            f"hold; the first at row {outside.row} of the batch{self._position_of(outside.row)} is "
            f"{outside.rendered()}",
            "filter or correct those rows (e.g. clamp or null them) before writing",
        )

    def _position_of(self, row: int) -> str:
        # The sink stamps ``_twg_offset`` before the guard runs: the row's position within the write.
        offsets = self.batch_offsets
        if offsets is None:
            return ""
        position = offsets[row].as_py()
        return "" if position is None else f" (row position {position})"

    def _shape_problem(self, incoming: pa.DataType, declared: pa.DataType) -> _Problem | None:
        if pa.types.is_string(declared) and pa.types.is_nested(incoming):
            return self.problem(
                NESTED_INTO_STRING,
                "a nested value cannot go into a STRING column implicitly",
                f"send to_json({self.name!r}) (from zerobus_orchestration.catalog.guard) for a JSON string, "
                f"or declare a typed column {_safe_delta(incoming)}",
            )
        if pa.types.is_timestamp(incoming) and pa.types.is_timestamp(declared):
            if incoming.tz is not None and declared.tz is None:
                return self.problem(
                    TZ_AWARE_INTO_NTZ,
                    "a time-zone-aware timestamp into TIMESTAMP_NTZ would drop its zone",
                    "convert to naive local time explicitly (pc.local_timestamp) or declare TIMESTAMP",
                )
            if incoming.tz is None and declared.tz is not None:
                return self.problem(
                    NAIVE_INTO_TZ,
                    "a naive timestamp into TIMESTAMP would be read as UTC",
                    "attach its zone explicitly (pc.assume_timezone) or declare TIMESTAMP_NTZ",
                )
            if incoming.unit == "ns" and declared.unit == "us":
                sub = pc.sum(pc.not_equal(pc.remainder(self.values.cast(pa.int64()), 1000), 0)).as_py()
                if sub:
                    return self.problem(
                        SUBMICROSECOND_LOSS,
                        f"{sub} value(s) carry nanoseconds that Delta (microseconds) would drop",
                        "truncate to microseconds explicitly (pc.floor_temporal(col, unit='microsecond'))",
                    )
        return None

    def _safe_cast(
        self, declared: pa.DataType, kind: str
    ) -> tuple[pa.Array | None, str | None, _Problem | None]:
        try:
            return self.values.cast(declared, safe=True), kind, None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            return (
                None,
                None,
                self.problem(LOSSY, f"the cast is not exact ({exc})", f"cast to {declared} yourself"),
            )

    def _checked_integer(self, declared: pa.DataType) -> tuple[pa.Array | None, str | None, _Problem | None]:
        try:
            return self.values.cast(declared, safe=True), _cast_kind(self.incoming, declared), None
        except pa.ArrowInvalid:
            kind = UNSIGNED_OVERFLOW if pa.types.is_unsigned_integer(self.incoming) else INTEGER_OVERFLOW
            return (
                None,
                None,
                self.problem(
                    kind,
                    "values exceed the declared integer range",
                    f"declare a wider column ({_safe_delta(self.incoming)}) or filter out-of-range values",
                ),
            )


def _safe_delta(t: pa.DataType) -> str:
    try:
        return delta_type(t)
    except UnsupportedType:
        return "of a supported type"


def _family(t: pa.DataType) -> str:
    checks: list[tuple[str, Callable[[pa.DataType], bool]]] = [
        ("integer", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("decimal", pa.types.is_decimal),
        ("timestamp", pa.types.is_timestamp),
    ]
    return next((name for name, test in checks if test(t)), str(t))


def _same_family(a: pa.DataType, b: pa.DataType) -> bool:
    numeric = {"integer", "float", "decimal"}
    fa, fb = _family(a), _family(b)
    return fa == fb or (fa in numeric and fb in numeric)


def _plan(
    table: str,
    incoming: pa.Schema,
    target: pa.Schema,
    trusted: frozenset[str],
    metrics: SinkMetrics | None = None,
) -> Plan | None:
    """The plan (``guard_plan.py``), cached, or None when a column is unknown or a NOT NULL column
    missing (the slow path then builds the full refusal). Made only once the batch's shapes can be
    sent: a shape the wire cannot carry is refused here, so no plan ever holds one."""
    plan = cached_plan(table, incoming, target, trusted)
    if plan is not None:
        return plan
    if any(target.get_field_index(name) < 0 for name in incoming.names):
        return None
    # Names are ``CatalogGate.ensure``'s to check: it knows whether the table has column mapping.
    refuse_unsendable(table, incoming, column_mapping=True, metrics=metrics)
    plan = make_plan(incoming, target, trusted, lambda declared: _wire_type(table, declared, metrics))
    if plan is not None:
        remember(table, incoming, target, trusted, plan)
    return plan


def conform_batch(
    table: str,
    batch: pa.RecordBatch,
    target: pa.Schema,
    *,
    metrics: SinkMetrics | None = None,
    trusted: frozenset[str] = frozenset(),
    check_only: bool = False,
) -> pa.RecordBatch:
    """``batch`` cast and ordered as ``target`` (omitted nullable columns stay omitted), in the wire
    types (``wire_schema``), or raise.

    Raises ``WriteBoundaryError`` for the first failing column; its message lists every failure.
    Each kind (cast or failure) is counted once per batch. ``trusted``: reserved columns the engine
    stamped itself (``reserved.RESERVED_NAMES``); when their type is the declared one they skip the
    per-value range scan. Never pass caller columns here: the sink refuses reserved names in input.
    What the schemas alone decide is cached per (table, schema, target), so a batch of a schema seen
    before pays only for the per-value checks its columns need. ``check_only``: every check and count,
    but no batch to send is built (the whole-input check, ``sink/input_check.py``): ``batch`` comes back.
    """
    trusted = trusted & frozenset(RESERVED_NAMES)
    plan = _plan(table, batch.schema, target, trusted, metrics)
    if plan is None:
        return _conform_slow(table, batch, target, metrics, check_only)
    problems: list[_Problem] = []
    casts: list[str] = []
    arrays: list[pa.Array] = []
    offsets: pa.Array | None = None
    for index, declared, full, wire in plan.columns:
        values = batch.column(index)
        if check_only:
            wire = None  # nothing is sent: the wire conversion is never needed
        if not full and (declared.nullable or not values.null_count):
            arrays.append(values if wire is None else to_wire(values, wire))
            continue
        if offsets is None:
            offset_index = batch.schema.get_field_index(OFFSET)
            offsets = batch.column(offset_index) if offset_index >= 0 else None
        cast = _decided(_Column(table, declared.name, values, declared, offsets), problems, casts)
        if cast is not None:
            arrays.append(cast if wire is None else to_wire(cast, wire))
    _refuse_or_record(table, problems, casts, metrics)
    if check_only or (plan.unchanged and not casts):
        return batch
    return pa.RecordBatch.from_arrays(arrays, schema=plan.schema)


def _conform_slow(
    table: str,
    batch: pa.RecordBatch,
    target: pa.Schema,
    metrics: SinkMetrics | None,
    check_only: bool = False,
) -> pa.RecordBatch:
    """Every column decided in full: the path of a batch with an unknown or missing NOT NULL column."""
    refuse_unsendable(table, batch.schema, column_mapping=True, metrics=metrics)
    problems: list[_Problem] = []
    casts: list[str] = []
    incoming_names = set(batch.schema.names)
    offset_index = batch.schema.get_field_index(OFFSET)
    offsets = batch.column(offset_index) if offset_index >= 0 else None
    for name in batch.schema.names:
        if target.get_field_index(name) < 0:
            problems.append(
                _Problem(
                    name,
                    UNKNOWN_COLUMN,
                    f"table {table}, column {name!r}: incoming {_describe(batch.schema.field(name).type)}, "
                    "not declared in the table. Fix: reconcile the table first (the gate's ensure) or "
                    "drop the column",
                )
            )
    fields: list[pa.Field] = []
    arrays: list[pa.Array] = []
    for declared in target:
        if declared.name not in incoming_names:
            if not declared.nullable:
                problems.append(
                    _Problem(
                        declared.name,
                        MISSING_NOT_NULL,
                        f"table {table}, column {declared.name!r}: missing, declared "
                        f"{_describe(declared.type)} NOT NULL. Fix: send the column",
                    )
                )
            continue
        values = batch.column(batch.schema.get_field_index(declared.name))
        cast = _decided(_Column(table, declared.name, values, declared, offsets), problems, casts)
        if cast is not None and not check_only:
            wire = _wire_type(table, declared, metrics)
            fields.append(pa.field(declared.name, wire, nullable=declared.nullable))
            arrays.append(to_wire(cast, wire))
    _refuse_or_record(table, problems, casts, metrics)
    if check_only:
        return batch
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=batch.schema.metadata))


def refuse_unsendable(
    table: str, schema: pa.Schema, *, column_mapping: bool, metrics: SinkMetrics | None = None
) -> None:
    """Raise ``WriteBoundaryError`` if a column of ``schema`` is a shape the wire cannot carry.

    ``column_mapping``: the table has (or will be created with) column mapping, where any field name is
    fine; without it, names outside ``[A-Za-z_][A-Za-z0-9_]*`` are refused too (``wire_schema``). Every
    such column is named with its path, its shape and the fix; nothing has been sent or created yet.
    """
    found = arrow_column_problems(schema, column_mapping=column_mapping)
    if found:
        _refuse(table, [_unsendable(table, p) for p in found], metrics)


def _unsendable(table: str, problem: WireProblem) -> _Problem:
    column = problem.path.split(".", 1)[0]
    kind = UNSENDABLE_NAME if problem.is_name else UNSENDABLE_SHAPE
    return _Problem(column, kind, f"table {table}, {problem.render()}")


def _wire_type(table: str, declared: pa.Field, metrics: SinkMetrics | None) -> pa.DataType:
    """The declared column's wire type; a declared shape the wire cannot carry is refused here too."""
    try:
        return wire_type_of_arrow(declared.type)
    except UnsupportedType as exc:
        # The table itself has such a column (made outside the package): no batch can fill it.
        message = f"table {table}, declared column {declared.name!r}: {exc}"
        _refuse(table, [_Problem(declared.name, UNSENDABLE_SHAPE, message)], metrics)


def _decided(column: _Column, problems: list[_Problem], casts: list[str]) -> pa.Array | None:
    """The column's values as sent (cast if need be), or None with its problem recorded."""
    cast, kind, problem = column.decide()
    if problem is not None:
        problems.append(problem)
        return None
    assert cast is not None
    if kind is not None:
        casts.append(kind)
    return cast


def _refuse_or_record(
    table: str, problems: list[_Problem], casts: list[str], metrics: SinkMetrics | None
) -> None:
    """Refuse the batch naming every problem, or count each kind of cast it needed once."""
    if problems:
        _refuse(table, problems, metrics)
    for kind in dict.fromkeys(casts):
        record_type_reconcile(kind, table=table, metrics=metrics)


def _refuse(table: str, problems: list[_Problem], metrics: SinkMetrics | None) -> NoReturn:
    for kind in dict.fromkeys(p.kind for p in problems):  # counted once per batch and kind
        record_type_reconcile(kind, table=table, metrics=metrics)
    for p in problems:  # one problem per column, so once per batch, column and kind
        if p.kind in UNRECONCILABLE:
            record_unreconcilable(p.kind, table=table, column=p.column, message=p.message, metrics=metrics)
    first = problems[0]
    message = first.message
    if len(problems) > 1:
        message += "\nAlso:\n  " + "\n  ".join(p.message for p in problems[1:])
    raise WriteBoundaryError(
        message, table=table, column=first.column, kind=first.kind, columns=[p.column for p in problems]
    )


def _text_fix(name: str, incoming: pa.DataType, declared: pa.DataType) -> str | None:
    """The fix for a timestamp, date or decimal that arrives as text (SQLite stores them as TEXT)."""
    if not pa.types.is_string(incoming) or not (is_temporal(declared) or pa.types.is_decimal(declared)):
        return None
    return (
        f"declare the source column's type so the text is parsed: schema={{{name!r}: "
        f"'{delta_type(declared)}'}} on a SQL or file source (--schema {name}={delta_type(declared)} on the "
        f"CLI), or cast it to {declared} yourself"
    )
