"""Spark/Delta type spellings for the fake Unity Catalog, derived from sqlglot ``DataType`` values.

Unity Catalog reports each column three ways: ``type_text`` (Spark catalog string, lower case:
``bigint``, ``struct<a:int>``), ``type_json`` (the Spark ``StructField`` as JSON) and ``type_name``
(the ``ColumnTypeName`` enum). The fake keeps one parsed ``exp.DataType`` per column and renders all
three from it, so a DDL statement parsed by sqlglot and the REST answer can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlglot import exp

from zerobus_orchestration.errors import CatalogError

_T = exp.DataType.Type

# sqlglot type -> (Spark catalog string, Spark JSON type, ColumnTypeName)
_PRIMITIVES: dict[Any, tuple[str, str, str]] = {
    _T.BIGINT: ("bigint", "long", "LONG"),
    _T.INT: ("int", "integer", "INT"),
    _T.SMALLINT: ("smallint", "short", "SHORT"),
    _T.TINYINT: ("tinyint", "byte", "BYTE"),
    _T.TEXT: ("string", "string", "STRING"),
    _T.VARCHAR: ("string", "string", "STRING"),
    _T.CHAR: ("string", "string", "STRING"),
    _T.NVARCHAR: ("string", "string", "STRING"),
    _T.DOUBLE: ("double", "double", "DOUBLE"),
    _T.FLOAT: ("float", "float", "FLOAT"),
    _T.BOOLEAN: ("boolean", "boolean", "BOOLEAN"),
    _T.DATE: ("date", "date", "DATE"),
    _T.TIMESTAMP: ("timestamp", "timestamp", "TIMESTAMP"),
    _T.TIMESTAMPTZ: ("timestamp", "timestamp", "TIMESTAMP"),
    _T.TIMESTAMPLTZ: ("timestamp", "timestamp", "TIMESTAMP"),
    _T.TIMESTAMPNTZ: ("timestamp_ntz", "timestamp_ntz", "TIMESTAMP_NTZ"),
    _T.BINARY: ("binary", "binary", "BINARY"),
    _T.VARBINARY: ("binary", "binary", "BINARY"),
    _T.NULL: ("void", "void", "NULL"),
    _T.VARIANT: ("variant", "variant", "VARIANT"),
}

# Integral widening order (Delta type widening: byte -> short -> int -> long).
INTEGRAL_RANK: dict[Any, int] = {_T.TINYINT: 0, _T.SMALLINT: 1, _T.INT: 2, _T.BIGINT: 3}


def parse_type(text: str) -> exp.DataType:
    """A Databricks SQL or Spark type string as a sqlglot ``DataType``."""
    try:
        return exp.DataType.build(text, dialect="databricks")
    except Exception as exc:  # sqlglot raises several parse error types
        raise CatalogError(f"cannot parse column type {text!r}: {exc}") from exc


def decimal_params(dtype: exp.DataType) -> tuple[int, int]:
    params = [int(p.name) for p in dtype.expressions]
    precision = params[0] if params else 10
    scale = params[1] if len(params) > 1 else 0
    return precision, scale


def _struct_fields(dtype: exp.DataType) -> list[exp.ColumnDef]:
    return [f for f in dtype.expressions if isinstance(f, exp.ColumnDef)]


def _field_type(field: exp.ColumnDef) -> exp.DataType:
    kind = field.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise CatalogError(f"struct field {field.name!r} has no type")
    return kind


def _field_comment(field: exp.ColumnDef) -> str | None:
    for constraint in field.args.get("constraints") or []:
        if isinstance(constraint.kind, exp.CommentColumnConstraint):
            return str(constraint.kind.this.name)
    return None


def _field_nullable(field: exp.ColumnDef) -> bool:
    return not any(
        isinstance(c.kind, exp.NotNullColumnConstraint) and not c.kind.args.get("allow_null")
        for c in field.args.get("constraints") or []
    )


def _element_types(dtype: exp.DataType) -> list[exp.DataType]:
    return [e for e in dtype.expressions if isinstance(e, exp.DataType)]


def _quote_field(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


def type_text(dtype: exp.DataType) -> str:
    """Spark catalog string, e.g. ``array<struct<a:int>>``, ``decimal(10,2)``."""
    kind = dtype.this
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind][0]
    if kind == _T.DECIMAL:
        precision, scale = decimal_params(dtype)
        return f"decimal({precision},{scale})"
    if kind == _T.ARRAY:
        (element,) = _element_types(dtype)
        return f"array<{type_text(element)}>"
    if kind == _T.MAP:
        key, value = _element_types(dtype)
        return f"map<{type_text(key)},{type_text(value)}>"
    if kind == _T.STRUCT:
        inner = ",".join(f"{_quote_field(f.name)}:{type_text(_field_type(f))}" for f in _struct_fields(dtype))
        return f"struct<{inner}>"
    raise CatalogError(f"type {dtype.sql(dialect='databricks')} is not a Delta type")


def spark_json_type(dtype: exp.DataType) -> Any:
    """The ``type`` member of a Spark ``StructField`` JSON."""
    kind = dtype.this
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind][1]
    if kind == _T.DECIMAL:
        precision, scale = decimal_params(dtype)
        return f"decimal({precision},{scale})"
    if kind == _T.ARRAY:
        (element,) = _element_types(dtype)
        return {"type": "array", "elementType": spark_json_type(element), "containsNull": True}
    if kind == _T.MAP:
        key, value = _element_types(dtype)
        return {
            "type": "map",
            "keyType": spark_json_type(key),
            "valueType": spark_json_type(value),
            "valueContainsNull": True,
        }
    if kind == _T.STRUCT:
        return {
            "type": "struct",
            "fields": [
                struct_field_json(f.name, _field_type(f), _field_nullable(f), _field_comment(f))
                for f in _struct_fields(dtype)
            ],
        }
    raise CatalogError(f"type {dtype.sql(dialect='databricks')} is not a Delta type")


def struct_field_json(name: str, dtype: exp.DataType, nullable: bool, comment: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"comment": comment} if comment is not None else {}
    return {"name": name, "type": spark_json_type(dtype), "nullable": nullable, "metadata": metadata}


def type_json(name: str, dtype: exp.DataType, nullable: bool, comment: str | None) -> str:
    return json.dumps(struct_field_json(name, dtype, nullable, comment), separators=(",", ":"))


def type_name(dtype: exp.DataType) -> str:
    """``ColumnTypeName`` enum value."""
    kind = dtype.this
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind][2]
    if kind == _T.DECIMAL:
        return "DECIMAL"
    if kind in (_T.ARRAY, _T.MAP, _T.STRUCT):
        return str(kind.value)
    raise CatalogError(f"type {dtype.sql(dialect='databricks')} is not a Delta type")


def sql_text(dtype: exp.DataType) -> str:
    """Databricks SQL spelling, e.g. ``BIGINT``, ``STRUCT<a: INT>`` (used in error messages)."""
    return str(dtype.sql(dialect="databricks"))


def field_paths(name: str, dtype: exp.DataType) -> Iterator[tuple[str, ...]]:
    """The column's own path, then the path of every struct field nested in it (through arrays and maps)."""
    yield (name,)
    yield from _nested_paths((name,), dtype)


def _nested_paths(path: tuple[str, ...], dtype: exp.DataType) -> Iterator[tuple[str, ...]]:
    if dtype.this == _T.STRUCT:
        for f in _struct_fields(dtype):
            yield (*path, f.name)
            yield from _nested_paths((*path, f.name), _field_type(f))
    elif dtype.this in (_T.ARRAY, _T.MAP):
        for element in _element_types(dtype):
            yield from _nested_paths(path, element)


def contains_ntz(dtype: exp.DataType) -> bool:
    return any(isinstance(node, exp.DataType) and node.this == _T.TIMESTAMPNTZ for node in dtype.walk())
