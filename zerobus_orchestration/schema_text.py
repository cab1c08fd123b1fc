"""Column types written as text, parsed once for every front end (Dagster, Airflow, the core).

A type may be spelled as:

- a Databricks SQL / Delta / ODCS name, any case: ``BIGINT``, ``INT``, ``STRING``, ``VARCHAR(20)``,
  ``DOUBLE``, ``TIMESTAMP`` (UTC), ``TIMESTAMP_NTZ``, ``DECIMAL(10, 2)``, ``NUMERIC(10,2)``, ``number``;
- an Arrow alias: ``int64``, ``string``, ``double``, ``bool``, ``date32``, ``timestamp[us]``,
  ``decimal128(10, 2)``, plus ``timestamp[<unit>, tz=<zone>]``.

The two vocabularies never disagree where they overlap (``float`` is 32-bit and ``double`` 64-bit in
both), so one parser accepts the union. Only flat types: a nested column needs a ``pyarrow.Schema``.
In a ``{column: "type"}`` mapping a trailing ``not null`` makes the column non-nullable.

pyarrow is imported when a type is parsed, not when this module is: Airflow DAG files import the
operators that use it and must stay cheap to parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from zerobus_orchestration.errors import ConfigError, UnsupportedType

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_schema_of_text", "arrow_type_of_text"]

# SQL / Delta / ODCS names (lower case) -> (pyarrow factory name, arguments).
_NAMED: Final[Mapping[str, tuple[str, tuple[Any, ...]]]] = {
    "tinyint": ("int8", ()),
    "byte": ("int8", ()),
    "smallint": ("int16", ()),
    "short": ("int16", ()),
    "int": ("int32", ()),
    "integer": ("int32", ()),
    "bigint": ("int64", ()),
    "long": ("int64", ()),
    "float": ("float32", ()),
    "real": ("float32", ()),
    "double": ("float64", ()),
    "number": ("float64", ()),  # ODCS logicalType
    "boolean": ("bool_", ()),
    "bool": ("bool_", ()),
    "string": ("string", ()),
    "varchar": ("string", ()),
    "text": ("string", ()),
    "binary": ("binary", ()),
    "date": ("date32", ()),
    "timestamp": ("timestamp", ("us", "UTC")),
    "timestamp_ltz": ("timestamp", ("us", "UTC")),
    "timestamp_ntz": ("timestamp", ("us",)),
}
_TIMESTAMP_TZ: Final = re.compile(r"timestamp\[(s|ms|us|ns),\s*tz=([^\]]+)\]")
_DECIMAL: Final = re.compile(r"(?:decimal(?:128)?|numeric)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_VARCHAR: Final = re.compile(r"(?:varchar|char)\s*\(\s*\d+\s*\)")
_NOT_NULL: Final = re.compile(r"\s+not\s+null$", re.IGNORECASE)
_HINT: Final = (
    "use a flat SQL type (BIGINT, STRING, DOUBLE, TIMESTAMP, DECIMAL(p,s), ...) or an Arrow alias (int64, "
    "string, double, bool, date32, timestamp[us], timestamp[us, tz=UTC], decimal(10, 2)), or pass "
    "schema=pa.schema([...]) for nested columns"
)


def arrow_type_of_text(text: str, *, column: str, table: str | None = None) -> pa.DataType:
    """The Arrow type ``text`` spells; a ``ConfigError`` naming the table, the column and the fix."""
    import pyarrow as pa

    spec = text.strip()
    if match := _TIMESTAMP_TZ.fullmatch(spec):  # the zone keeps its case: "Europe/Paris"
        return pa.timestamp(match.group(1), tz=match.group(2).strip())
    lower = spec.lower()
    named = _NAMED.get(lower)
    if named is not None:
        factory, args = named
        result: pa.DataType = getattr(pa, factory)(*args)
        return result
    if match := _DECIMAL.fullmatch(lower):
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    if _VARCHAR.fullmatch(lower):
        return pa.string()
    try:
        alias: pa.DataType = pa.type_for_alias(lower)
        return alias
    except (ValueError, KeyError):
        pass
    from zerobus_orchestration.type_map import arrow_type_of_delta

    try:
        return arrow_type_of_delta(lower)
    except UnsupportedType:
        where = f"table {table}: " if table else ""
        raise ConfigError(f"{where}column {column!r}: unknown Arrow type {text!r}; {_HINT}") from None


def arrow_schema_of_text(spec: pa.Schema | Mapping[str, Any], *, table: str | None = None) -> pa.Schema:
    """``spec`` as a ``pyarrow.Schema``; a mapping is ``{column: "type[ not null]"}`` or Arrow types."""
    import pyarrow as pa

    if isinstance(spec, pa.Schema):
        return spec
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError("schema must be a pyarrow.Schema or a non-empty {column: 'arrow type'} mapping")
    fields = []
    for name, type_text in spec.items():
        if isinstance(type_text, pa.DataType):
            fields.append(pa.field(str(name), type_text))
            continue
        text = str(type_text)
        nullable = _NOT_NULL.search(text) is None
        parsed = arrow_type_of_text(_NOT_NULL.sub("", text), column=str(name), table=table)
        fields.append(pa.field(str(name), parsed, nullable))
    return pa.schema(fields)
