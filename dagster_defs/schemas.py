"""Arrow schemas for contract assets from a Dagster ``TableSchema`` or an ODCS data contract.

Column types are Databricks SQL type text (what ``dagster/column_schema`` shows for Zerobus tables) or
ODCS logical types. Only flat types are parsed here; a nested column needs ``schema=pa.schema(...)``.
"""

import re
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.types import arrow_type_of_delta

_SQL_TYPES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "number": pa.float64(),  # ODCS logicalType
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "varchar": pa.string(),
    "text": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"(?:decimal|numeric)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_VARCHAR = re.compile(r"(?:varchar|char)\s*\(\s*\d+\s*\)")


def arrow_type_of_sql(type_text: str, *, column: str, table: str) -> pa.DataType:
    """Arrow type of a flat SQL / Delta / ODCS type name; errors name table, column and the fix."""
    text = type_text.strip().lower()
    if text in _SQL_TYPES:
        return _SQL_TYPES[text]
    match = _DECIMAL.fullmatch(text)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    if _VARCHAR.fullmatch(text):
        return pa.string()
    try:
        return arrow_type_of_delta(text)
    except Exception:
        raise ConfigError(
            f"table {table}: column {column!r} has type {type_text!r}, which a contract asset cannot parse; "
            "use a flat SQL type (BIGINT, STRING, DOUBLE, TIMESTAMP, DECIMAL(p,s), ...) or pass "
            "schema=pa.schema([...]) for nested columns"
        ) from None


def arrow_schema_from_column_schema(column_schema: dg.TableSchema, *, table: str) -> pa.Schema:
    fields = []
    for col in column_schema.columns:
        nullable = col.constraints.nullable if col.constraints is not None else True
        fields.append(pa.field(col.name, arrow_type_of_sql(col.type, column=col.name, table=table), nullable))
    return pa.schema(fields)


def _odcs_properties(path: Path, schema_object: str | None) -> list[Any]:
    from open_data_contract_standard.model import OpenDataContractStandard

    try:
        contract = OpenDataContractStandard.from_string(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"data contract {path} does not exist") from None
    objects = [o for o in contract.schema_ or [] if schema_object in (None, o.name, o.physicalName)]
    if len(objects) != 1:
        raise ConfigError(
            f"data contract {path}: expected one schema object"
            + (f" named {schema_object!r}" if schema_object else "")
            + f", found {len(objects)}; pass contract_object=..."
        )
    return list(objects[0].properties or [])


def arrow_schema_from_contract(
    path: str | Path, *, table: str, schema_object: str | None = None
) -> pa.Schema:
    """Columns of an ODCS schema object: ``physicalName`` or ``name``; ``physicalType`` or ``logicalType``."""
    source = Path(path)
    fields: list[pa.Field] = []
    for prop in _odcs_properties(source, schema_object):
        column = prop.physicalName or prop.name
        type_text = prop.physicalType or prop.logicalType
        if not column or not type_text:
            raise ConfigError(f"data contract {source}: property {prop.name!r} needs a name and a type")
        nullable = not bool(getattr(prop, "required", False))
        fields.append(
            pa.field(column, arrow_type_of_sql(str(type_text), column=column, table=table), nullable)
        )
    if not fields:
        raise ConfigError(f"data contract {source}: the schema object has no properties")
    return pa.schema(fields)
