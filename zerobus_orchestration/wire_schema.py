"""The Arrow schema on the wire: what Databricks' Arrow Flight server builds from a Delta table.

The one authority for it: the sink sends batches of exactly this schema (``catalog/guard.py`` converts
them, ``wire_values.py`` holds the array conversions) and the emulator compares every Arrow stream
against it (``emulator/schema_check.py``). The table of docs/architecture.md#the-wire-contract says the
same; the rules and their sources are in docs/adr/0003-emulator-fidelity-limits.md.

Source: the official SDK's converter from a Unity Catalog table to the Arrow schema a producer should
send, ``arrow_schema_from_uc_columns`` in ``rust/sdk/src/schema.rs`` of ``databricks/zerobus-sdk``,
whose doc comment says every choice is "dictated by the Databricks Arrow Flight server" and is "the
canonical schema the Databricks Arrow Flight server builds from Delta"; VARIANT as a struct of two
binaries from its changelog (release 2.3.2):

=================  ====================================================================
Delta              wire
=================  ====================================================================
STRING             ``large_utf8``
DECIMAL(p,s)       ``large_utf8``: the value as text (``wire_values.decimal_text``); a TODO
                   there says native decimal128 follows "once the Databricks Arrow Flight
                   server accepts native Decimal128"
BINARY             ``large_binary``
VARIANT            ``struct<metadata: large_binary not null, value: large_binary not null>``
DATE               ``date32``
TIMESTAMP          ``timestamp[us, tz=UTC]``
TIMESTAMP_NTZ      ``timestamp[us]``
BIGINT .. TINYINT  ``int64`` / ``int32`` / ``int16`` / ``int8``
DOUBLE, FLOAT      ``float64``, ``float32``
BOOLEAN            ``bool``
ARRAY<T>           ``list`` whose item field is ``item`` (always nullable: the converter drops
                   ``containsNull``)
MAP<K,V>           ``map`` of ``keys`` (not null) and ``values`` (nullable)
STRUCT             ``struct``, the same field names and nullability, recursively
=================  ====================================================================

Refused by the same converter (and so, by its account, by the server): an array of arrays, an array
of maps, a map whose value is an array or a map, a map keyed by a float, double, binary or nested type
(its message says keys "must be integral, bool, or string"; its check lets DATE, TIMESTAMP and DECIMAL
keys through, and so does this module), and a field name outside ``[A-Za-z_][A-Za-z0-9_]*``
(``validate_field_name``; Databricks allows other names only on tables with column mapping, so they are
refused here only without it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import pyarrow as pa

from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.type_map import delta_json_type

DeltaType: TypeAlias = "str | Mapping[str, Any]"
"""A Delta schema type as JSON: a primitive name (``"long"``, ``"decimal(10,2)"``) or a nested object."""

WIRE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Field names the converter accepts (``validate_field_name``): ASCII letters, digits and ``_``."""

LIST_ITEM: Final = "item"
MAP_KEYS: Final = "keys"
MAP_VALUES: Final = "values"
VARIANT_EXTENSION: Final = "arrow.parquet.variant"
"""The extension marker a VARIANT field may carry; the server's target schema is unmarked (changelog
2.6.0: "a marked schema forces a per-batch server-side cast")."""

VARIANT: Final = pa.struct(
    [
        pa.field("metadata", pa.large_binary(), nullable=False),
        pa.field("value", pa.large_binary(), nullable=False),
    ]
)

_PRIMITIVES: Final[Mapping[str, pa.DataType]] = {
    "string": pa.large_string(),
    "binary": pa.large_binary(),
    "variant": VARIANT,
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
}
_DECIMAL: Final = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# Map keys the converter refuses (``is_valid_map_key``); nested keys are refused as well.
_BAD_KEYS: Final = frozenset({"float", "double", "binary", "variant"})

# Shapes, as the refusal names them.
ARRAY_OF_ARRAYS: Final = "an array of arrays"
ARRAY_OF_MAPS: Final = "an array of maps"
MAP_OF_ARRAYS: Final = "a map whose value is an array"
MAP_OF_MAPS: Final = "a map whose value is a map"
MAP_KEY: Final = "a map keyed by"
NAME: Final = "a field name outside [A-Za-z_][A-Za-z0-9_]*"


@dataclass(frozen=True)
class WireProblem:
    """A part of a column the wire cannot carry: where (``a.b``, ``a.element``, ``m.key``), what, the fix."""

    path: str
    shape: str
    fix: str

    @property
    def is_name(self) -> bool:
        return self.shape.startswith(NAME)

    def render(self) -> str:
        return (
            f"column {self.path!r} is {self.shape}, which Zerobus' Arrow Flight path refuses. Fix: {self.fix}"
        )


def decimal_parameters(delta: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of a Delta ``decimal(p,s)`` type name, else None."""
    match = _DECIMAL.fullmatch(delta)
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_sendable_name(name: str) -> bool:
    return WIRE_NAME.fullmatch(name) is not None


def wire_type(delta: DeltaType) -> pa.DataType:
    """The wire type of a Delta schema type; raises ``UnsupportedType`` naming every refused part."""
    problems = list(_problems("<column>", delta, names=False))
    if problems:
        raise UnsupportedType("; ".join(p.render() for p in problems))
    return _wire(delta)


def column_problems(name: str, delta: DeltaType, *, column_mapping: bool) -> list[WireProblem]:
    """Every part of column ``name`` of type ``delta`` the wire cannot carry (none: it can be sent).

    ``column_mapping``: the table has column mapping on (``delta.columnMapping.mode`` ``name`` or ``id``),
    where Databricks allows any field name; without it a name outside ``WIRE_NAME`` is a problem too.
    """
    problems = [] if column_mapping or is_sendable_name(name) else [_name_problem(name, name)]
    problems.extend(_problems(name, delta, names=not column_mapping))
    return problems


def wire_field(field: Mapping[str, Any], *, column_mapping: bool) -> pa.Field:
    """The wire field of a Delta StructField (JSON: name, type, nullable); raises ``UnsupportedType``."""
    name, delta = str(field["name"]), field["type"]
    problems = column_problems(name, delta, column_mapping=column_mapping)
    if problems:
        raise UnsupportedType("; ".join(p.render() for p in problems))
    return pa.field(name, _wire(delta), nullable=bool(field.get("nullable", True)))


def wire_schema(fields: Iterable[Mapping[str, Any]], *, column_mapping: bool) -> pa.Schema:
    """The wire schema of a Delta table's fields (``_delta_log`` schema JSON, or Unity ``type_json``s)."""
    return pa.schema([wire_field(f, column_mapping=column_mapping) for f in fields])


@functools.lru_cache(maxsize=1024)
def wire_type_of_arrow(t: pa.DataType) -> pa.DataType:
    """The wire type of a column declared from Arrow type ``t`` (through ``type_map.delta_json_type``).

    For the declared (canonical storage) types of a live table and for anything a user hands the
    package alike; raises ``UnsupportedType`` for a type Delta cannot store or the wire cannot carry.
    Cached: the guard asks per column of every batch schema it plans.
    """
    return wire_type(delta_json_type(t))


def wire_schema_of_arrow(schema: pa.Schema, *, column_mapping: bool) -> pa.Schema:
    """The wire schema of a table declared as the Arrow ``schema``; raises ``UnsupportedType``."""
    return wire_schema(
        ({"name": f.name, "type": delta_json_type(f.type), "nullable": f.nullable} for f in schema),
        column_mapping=column_mapping,
    )


def arrow_column_problems(schema: pa.Schema, *, column_mapping: bool) -> list[WireProblem]:
    """``column_problems`` of every column of the Arrow ``schema`` whose type Delta can store.

    A type Delta cannot store at all (uint64, float16, ...) is left to the catalog, which refuses it
    with its own cast hint; this answers only what the wire adds to Delta's rules.
    """
    problems: list[WireProblem] = []
    for f in schema:
        try:
            delta = delta_json_type(f.type)
        except UnsupportedType:
            continue
        problems.extend(column_problems(f.name, delta, column_mapping=column_mapping))
    return problems


# -- the walk ------------------------------------------------------------------------------------------


def _wire(delta: DeltaType) -> pa.DataType:
    if isinstance(delta, str):
        primitive = _PRIMITIVES.get(delta)
        if primitive is not None:
            return primitive
        if decimal_parameters(delta) is not None:
            return pa.large_string()
        raise UnsupportedType(f"Delta type {delta!r} has no wire type")
    kind = delta.get("type")
    if kind == "array":
        return pa.list_(pa.field(LIST_ITEM, _wire(delta["elementType"]), nullable=True))
    if kind == "map":
        return pa.map_(
            pa.field(MAP_KEYS, _wire(delta["keyType"]), nullable=False),
            pa.field(MAP_VALUES, _wire(delta["valueType"]), nullable=True),
        )
    if kind == "struct":
        return pa.struct(
            [
                pa.field(str(f["name"]), _wire(f["type"]), nullable=bool(f.get("nullable", True)))
                for f in delta["fields"]
            ]
        )
    raise UnsupportedType(f"Delta type {dict(delta)!r} has no wire type")


def _kind(delta: DeltaType) -> str:
    return delta if isinstance(delta, str) else str(delta.get("type"))


def _problems(path: str, delta: DeltaType, *, names: bool) -> Iterator[WireProblem]:
    if isinstance(delta, str):
        return
    kind = delta.get("type")
    if kind == "array":
        element = delta["elementType"]
        inner = _kind(element)
        if inner == "array":
            yield WireProblem(
                path,
                ARRAY_OF_ARRAYS,
                "wrap the inner array in a struct (ARRAY<STRUCT<items: ARRAY<...>>>), or send the column "
                "as JSON text (to_json, from zerobus_orchestration.catalog.guard) into a STRING column",
            )
        elif inner == "map":
            yield WireProblem(
                path,
                ARRAY_OF_MAPS,
                "wrap each map in a struct (ARRAY<STRUCT<entries: MAP<...>>>), or send the column as JSON "
                "text (to_json, from zerobus_orchestration.catalog.guard) into a STRING column",
            )
        else:
            yield from _problems(f"{path}.element", element, names=names)
    elif kind == "map":
        key, value = delta["keyType"], delta["valueType"]
        key_kind = _kind(key)
        if not isinstance(key, str) or key_kind in _BAD_KEYS:
            shown = key_kind.upper()
            yield WireProblem(
                f"{path}.key",
                f"{MAP_KEY} {shown}",
                "key the map by a string, an integer or a boolean (e.g. the key formatted as text), or send "
                "the column as JSON text (to_json, from zerobus_orchestration.catalog.guard)",
            )
        value_kind = _kind(value)
        if value_kind in ("array", "map"):
            yield WireProblem(
                path,
                MAP_OF_ARRAYS if value_kind == "array" else MAP_OF_MAPS,
                f"wrap the value in a struct (MAP<K, STRUCT<items: {value_kind.upper()}<...>>>), or send "
                "the column as JSON text (to_json, from zerobus_orchestration.catalog.guard) into a STRING "
                "column",
            )
        else:
            yield from _problems(f"{path}.value", value, names=names)
    elif kind == "struct":
        for f in delta["fields"]:
            name = str(f["name"])
            child = f"{path}.{name}"
            if names and not is_sendable_name(name):
                yield _name_problem(child, name)
            yield from _problems(child, f["type"], names=names)


def _name_problem(path: str, name: str) -> WireProblem:
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
    safe = safe if safe and not safe[0].isdigit() else f"_{safe}"
    return WireProblem(
        path,
        f"{NAME} ({name!r})",
        f"rename it (e.g. {safe!r}), or write to a table with column mapping "
        "('delta.columnMapping.mode' = 'name', which Unity Catalog sets on every table it creates)",
    )
