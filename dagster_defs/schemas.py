"""Arrow schemas for contract assets from a Dagster ``TableSchema`` or an ODCS data contract.

Column types are Databricks SQL type text (what ``dagster/column_schema`` shows for Zerobus tables), ODCS
logical types or Arrow aliases, parsed by the core's ``schema_text`` (the same parser the Airflow
operators use). Only flat types; a nested column needs ``schema=pa.schema(...)``.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.schema_text import arrow_type_of_text


def arrow_schema_from_column_schema(column_schema: dg.TableSchema, *, table: str) -> pa.Schema:
    fields = []
    for col in column_schema.columns:
        nullable = col.constraints.nullable if col.constraints is not None else True
        fields.append(
            pa.field(col.name, arrow_type_of_text(col.type, column=col.name, table=table), nullable)
        )
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
            pa.field(column, arrow_type_of_text(str(type_text), column=column, table=table), nullable)
        )
    if not fields:
        raise ConfigError(f"data contract {source}: the schema object has no properties")
    return pa.schema(fields)
