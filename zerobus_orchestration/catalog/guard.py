"""Write-boundary guard: every incoming column against its declared target column, before sending.

Lossless differences are cast (uint8 into SMALLINT, int32 into BIGINT, dictionary<string> into STRING,
large/view strings and binaries, float32 into DOUBLE, decimal precision increases, date64 into DATE,
timestamps to microseconds when no sub-microsecond precision is lost, all-null columns). Everything else
raises ``WriteBoundaryError`` naming table, column, incoming and declared type, and the fix; a batch
with any failing column is refused whole, so nothing of it is sent.

Each outcome is counted by ``kind`` through ``record_type_reconcile`` (``zerobus_type_reconcile_total``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.errors import UnsupportedType, WriteBoundaryError
from zerobus_orchestration.types import arrow_storage_type, can_widen_to, delta_type

if TYPE_CHECKING:
    from zerobus_orchestration.metrics import SinkMetrics

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
UNSUPPORTED = "unsupported_type"
# Cast kinds (lossless, counted but not refused).
CAST_UNSIGNED = "cast_unsigned"
CAST_INTEGER = "cast_integer"
CAST_DICTIONARY = "cast_dictionary"
CAST_ENCODING = "cast_encoding"  # large/view string or binary, fixed-size binary, date64, nested re-encode
CAST_TIMESTAMP = "cast_timestamp"
CAST_FLOAT = "cast_float"
CAST_DECIMAL = "cast_decimal"
CAST_NULL = "cast_null"


def record_type_reconcile(kind: str, *, table: str = "", metrics: SinkMetrics | None = None) -> None:
    """Count one guard outcome as ``zerobus_type_reconcile_total{table, kind}`` (hook for the sink)."""
    if metrics is None:
        try:
            from zerobus_orchestration.metrics import default_metrics
        except ImportError:  # metrics are optional for the catalog layer
            return
        metrics = default_metrics()
    metrics.type_reconcile.labels(table=table, kind=kind).inc()


def _json_value(value: Any, t: pa.DataType) -> Any:
    # Driven by the Arrow type, not the Python value: ``as_py`` turns a map into a list of pairs, so
    # an empty map would look like an empty list.
    if value is None:
        return None
    if pa.types.is_dictionary(t):
        return _json_value(value, t.value_type)
    if pa.types.is_map(t):
        out: dict[str, Any] = {}
        for k, v in value:
            key = str(_json_value(k, t.key_type))
            if key in out:
                # A JSON object holds one value per key: keeping the last would drop data silently.
                raise ValueError(
                    f"to_json: a map holds the key {key!r} more than once, which a JSON object cannot; "
                    "deduplicate the map's keys first"
                )
            out[key] = _json_value(v, t.item_type)
        return out
    if pa.types.is_struct(t):
        return {
            t.field(i).name: _json_value(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields)
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_json_value(v, t.value_type) for v in value]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return [_json_value(v, t.value_type) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def to_json(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A STRING column holding each value as compact JSON (nulls stay null).

    The explicit way to put a struct/list/map column into a STRING target: ``batch.set_column(i, name,
    to_json(batch.column(i)))``. Timestamps and dates become ISO-8601, binary base64, decimals strings;
    maps become objects (a map repeating a key raises ``ValueError``).
    """
    values = column.to_pylist()
    out = [
        None
        if v is None
        else json.dumps(_json_value(v, column.type), separators=(",", ":"), ensure_ascii=False)
        for v in values
    ]
    return pa.array(out, type=pa.string())


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

    def __init__(self, table: str, name: str, values: pa.Array, declared: pa.Field) -> None:
        self.table, self.name, self.values, self.declared = table, name, values, declared
        self.incoming: pa.DataType = values.type

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
                f"cast the column to {declared} explicitly, or declare a {delta_type(storage)} column",
            ),
        )

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


def check_batch(
    table: str, batch: pa.RecordBatch, target: pa.Schema, *, metrics: SinkMetrics | None = None
) -> pa.RecordBatch:
    """``batch`` cast and ordered as ``target`` (omitted nullable columns stay omitted), or raise.

    Raises ``WriteBoundaryError`` for the first failing column; its message lists every failure.
    Each kind (cast or failure) is counted once per batch.
    """
    problems: list[_Problem] = []
    casts: list[str] = []
    incoming_names = set(batch.schema.names)
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
        cast, kind, problem = _Column(table, declared.name, values, declared).decide()
        if problem is not None:
            problems.append(problem)
            continue
        assert cast is not None
        if kind is not None:
            casts.append(kind)
        fields.append(declared)
        arrays.append(cast)
    if problems:
        for kind in dict.fromkeys(p.kind for p in problems):  # counted once per batch and kind
            record_type_reconcile(kind, table=table, metrics=metrics)
        first = problems[0]
        message = first.message
        if len(problems) > 1:
            message += "\nAlso:\n  " + "\n  ".join(p.message for p in problems[1:])
        raise WriteBoundaryError(message, table=table, column=first.column, kind=first.kind)
    for kind in dict.fromkeys(casts):
        record_type_reconcile(kind, table=table, metrics=metrics)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=batch.schema.metadata))
