"""Arrow schemas for contract assets from a Dagster ``TableSchema`` or an ODCS data contract.

Column types are Databricks SQL type text (what ``dagster/column_schema`` shows for Zerobus tables), ODCS
logical types or Arrow aliases. Flat types are parsed by the core's ``schema_text`` (the same parser the
Airflow operators use); nested ones are spelled as Databricks spells them, ``ARRAY<T>``, ``MAP<K, V>`` and
``STRUCT<name: T, ...>`` (a field may end in ``NOT NULL``; a name that is not a plain identifier is
backtick-quoted), which is exactly the text ``column_schema_from_arrow`` writes, so a contract's column
schema turns back into the same Arrow schema.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.schema_text import arrow_type_of_text

_NESTED_HINT = (
    "nested types are spelled ARRAY<T>, MAP<K, V> and STRUCT<name: T, ...> (a field may end in NOT NULL)"
)


def _split_top_level(text: str, *, column: str, table: str) -> list[str]:
    """``text`` split at the commas outside any ``<...>``, ``(...)`` or backticks."""
    parts: list[str] = []
    depth, start, quoted = 0, 0, False
    for i, ch in enumerate(text):
        if ch == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0 or quoted:
        raise ConfigError(
            f"table {table}: column {column!r}: unbalanced brackets in {text!r}; {_NESTED_HINT}"
        )
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _quoted_name(text: str) -> tuple[str, str]:
    """The backtick-quoted name at the start of ``text`` (a doubled backtick is one), and what follows."""
    i = 1
    while True:
        end = text.index("`", i)  # balanced: _split_top_level checked the backticks
        if text[end + 1 : end + 2] != "`":
            return text[1:end].replace("``", "`"), text[end + 1 :]
        i = end + 2


def _struct_field(text: str, *, column: str, table: str) -> pa.Field:
    if text.startswith("`"):
        name, rest = _quoted_name(text)  # kept verbatim: a quoted name may be or hold spaces
    else:
        name, sep, rest = text.partition(":")
        if not sep:  # Databricks also accepts ``STRUCT<a INT>``
            name, _, rest = text.partition(" ")
        name = name.strip()
    rest = rest.strip().removeprefix(":").strip()
    if not name or not rest:
        raise ConfigError(
            f"table {table}: column {column!r}: struct field {text!r} needs a name and a type; {_NESTED_HINT}"
        )
    nullable = True
    if rest.upper().endswith(" NOT NULL"):
        rest, nullable = rest[: -len(" NOT NULL")].strip(), False
    return pa.field(name, arrow_type_of_sql(rest, column=f"{column}.{name}", table=table), nullable)


def arrow_type_of_sql(text: str, *, column: str, table: str) -> pa.DataType:
    """The Arrow type of a (possibly nested) Databricks SQL type; ``ConfigError`` naming table and column."""
    spec = text.strip()
    head, bracket, inner = spec.partition("<")
    kind = head.strip().upper()
    if not bracket or kind not in ("ARRAY", "MAP", "STRUCT"):
        return arrow_type_of_text(spec, column=column, table=table)
    if not inner.endswith(">"):
        raise ConfigError(f"table {table}: column {column!r}: {spec!r} does not end in '>'; {_NESTED_HINT}")
    parts = _split_top_level(inner[:-1], column=column, table=table)
    if kind == "ARRAY" and len(parts) == 1:
        return pa.list_(arrow_type_of_sql(parts[0], column=f"{column}[]", table=table))
    if kind == "MAP" and len(parts) == 2:
        key = arrow_type_of_sql(parts[0], column=f"{column}.key", table=table)
        return pa.map_(key, arrow_type_of_sql(parts[1], column=f"{column}.value", table=table))
    if kind == "STRUCT" and all(parts):
        return pa.struct([_struct_field(p, column=column, table=table) for p in parts])
    raise ConfigError(f"table {table}: column {column!r}: cannot read {spec!r}; {_NESTED_HINT}")


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
            pa.field(column, arrow_type_of_text(str(type_text), column=column, table=table), nullable)
        )
    if not fields:
        raise ConfigError(f"data contract {source}: the schema object has no properties")
    return pa.schema(fields)
