"""The wire-schema authority: Delta types to the Arrow types Databricks' Arrow Flight server compares.

Expected types are written out from the SDK converter's table (docs/architecture.md#the-wire-contract),
not computed; the official SDK against the emulator checks the same contract in
tests/integration/emulator/test_wire_contract.py.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.wire_schema import (
    ARRAY_OF_ARRAYS,
    ARRAY_OF_MAPS,
    MAP_OF_ARRAYS,
    MAP_OF_MAPS,
    arrow_column_problems,
    column_problems,
    wire_schema,
    wire_schema_of_arrow,
    wire_type,
    wire_type_of_arrow,
)

VARIANT = pa.struct(
    [
        pa.field("metadata", pa.large_binary(), nullable=False),
        pa.field("value", pa.large_binary(), nullable=False),
    ]
)


def same(a: pa.DataType, b: pa.DataType) -> bool:
    """Type equality with list item and map field names (Arrow's own ``==`` ignores them)."""
    return a == b and str(a) == str(b)


PRIMITIVES = [
    ("string", pa.large_string()),
    ("decimal(10,2)", pa.large_string()),
    ("decimal(38,18)", pa.large_string()),
    ("binary", pa.large_binary()),
    ("variant", VARIANT),
    ("date", pa.date32()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestamp_ntz", pa.timestamp("us")),
    ("long", pa.int64()),
    ("integer", pa.int32()),
    ("short", pa.int16()),
    ("byte", pa.int8()),
    ("double", pa.float64()),
    ("float", pa.float32()),
    ("boolean", pa.bool_()),
]


@pytest.mark.parametrize(("delta", "wire"), PRIMITIVES, ids=[d for d, _ in PRIMITIVES])
def test_each_primitive_has_the_servers_type(delta: str, wire: pa.DataType) -> None:
    assert same(wire_type(delta), wire)


def test_lists_maps_and_structs_are_named_as_the_server_names_them() -> None:
    array = {"type": "array", "elementType": "decimal(5,2)", "containsNull": False}
    assert same(wire_type(array), pa.list_(pa.field("item", pa.large_string(), nullable=True)))
    mapping = {"type": "map", "keyType": "string", "valueType": "binary", "valueContainsNull": False}
    assert same(
        wire_type(mapping),
        pa.map_(pa.field("keys", pa.large_string(), nullable=False), pa.field("values", pa.large_binary())),
    )
    struct = {
        "type": "struct",
        "fields": [
            {"name": "a", "type": "string", "nullable": False},
            {"name": "b", "type": {"type": "array", "elementType": "variant"}},
        ],
    }
    assert same(
        wire_type(struct),
        pa.struct(
            [
                pa.field("a", pa.large_string(), nullable=False),
                pa.field("b", pa.list_(pa.field("item", VARIANT))),
            ]
        ),
    )


def test_a_schema_keeps_names_order_and_nullability() -> None:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long", "nullable": False, "metadata": {"comment": "key"}},
        {"name": "amount", "type": "decimal(18,2)", "nullable": True, "metadata": {}},
    ]
    schema = wire_schema(fields, column_mapping=False)
    assert schema == pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.large_string())]
    )
    assert schema.field("id").metadata is None  # the server's schema carries no Delta metadata


STORAGE = [
    (pa.string(), pa.large_string()),
    (pa.large_string(), pa.large_string()),
    (pa.decimal128(7, 3), pa.large_string()),
    (pa.binary(), pa.large_binary()),
    (pa.uint8(), pa.int16()),
    (pa.timestamp("ns", tz="Europe/Paris"), pa.timestamp("us", tz="UTC")),
    (
        pa.list_(pa.field("element", pa.string(), nullable=False)),
        pa.list_(pa.field("item", pa.large_string())),
    ),
    (
        pa.map_(pa.string(), pa.list_(pa.int32()).value_type),
        pa.map_(pa.field("keys", pa.large_string(), nullable=False), pa.field("values", pa.int32())),
    ),
    (pa.struct([("x", pa.decimal128(3, 0))]), pa.struct([("x", pa.large_string())])),
]


@pytest.mark.parametrize(("declared", "wire"), STORAGE, ids=[str(d) for d, _ in STORAGE])
def test_a_column_declared_from_arrow_has_the_wire_type_of_its_delta_type(
    declared: pa.DataType, wire: pa.DataType
) -> None:
    assert same(wire_type_of_arrow(declared), wire)
    schema = wire_schema_of_arrow(pa.schema([pa.field("c", declared)]), column_mapping=False)
    assert same(schema.field("c").type, wire)


REFUSED = [
    (
        {"type": "array", "elementType": {"type": "array", "elementType": "long"}},
        "c",
        ARRAY_OF_ARRAYS,
        "struct",
    ),
    (
        {"type": "array", "elementType": {"type": "map", "keyType": "string", "valueType": "long"}},
        "c",
        ARRAY_OF_MAPS,
        "struct",
    ),
    (
        {"type": "map", "keyType": "string", "valueType": {"type": "array", "elementType": "long"}},
        "c",
        MAP_OF_ARRAYS,
        "struct",
    ),
    (
        {
            "type": "map",
            "keyType": "string",
            "valueType": {"type": "map", "keyType": "string", "valueType": "long"},
        },
        "c",
        MAP_OF_MAPS,
        "struct",
    ),
    ({"type": "map", "keyType": "double", "valueType": "long"}, "c.key", "a map keyed by DOUBLE", "string"),
    ({"type": "map", "keyType": "float", "valueType": "long"}, "c.key", "a map keyed by FLOAT", "string"),
    ({"type": "map", "keyType": "binary", "valueType": "long"}, "c.key", "a map keyed by BINARY", "string"),
    (
        {
            "type": "map",
            "keyType": {"type": "struct", "fields": [{"name": "a", "type": "long"}]},
            "valueType": "long",
        },
        "c.key",
        "a map keyed by STRUCT",
        "string",
    ),
    (
        # Nested anywhere: a struct field holding an array of arrays.
        {
            "type": "struct",
            "fields": [
                {
                    "name": "s",
                    "type": {"type": "array", "elementType": {"type": "array", "elementType": "long"}},
                }
            ],
        },
        "c.s",
        ARRAY_OF_ARRAYS,
        "struct",
    ),
]


@pytest.mark.parametrize(("delta", "path", "shape", "fix"), REFUSED, ids=[s for _, _, s, _ in REFUSED])
def test_the_shapes_the_converter_refuses_are_refused_with_path_shape_and_fix(
    delta: dict[str, Any], path: str, shape: str, fix: str
) -> None:
    [problem] = column_problems("c", delta, column_mapping=False)
    assert (problem.path, problem.shape) == (path, shape)
    assert fix in problem.fix and "JSON text" in problem.fix
    with pytest.raises(UnsupportedType, match=shape):
        wire_type(delta)


@pytest.mark.parametrize(
    "key", ["string", "long", "integer", "short", "byte", "boolean", "date", "timestamp", "decimal(10,0)"]
)
def test_map_keys_the_converter_lets_through(key: str) -> None:
    assert (
        column_problems("c", {"type": "map", "keyType": key, "valueType": "long"}, column_mapping=False) == []
    )


@pytest.mark.parametrize("name", ["café", "my-col", "1st", "with space", ""])
def test_names_outside_the_converters_alphabet_are_refused_without_column_mapping(name: str) -> None:
    [problem] = column_problems(name, "long", column_mapping=False)
    assert problem.is_name and problem.path == name and "rename it" in problem.fix
    assert column_problems(name, "long", column_mapping=True) == []
    nested = {"type": "struct", "fields": [{"name": name, "type": "long"}]}
    [inner] = column_problems("ok", nested, column_mapping=False)
    assert inner.is_name and inner.path == f"ok.{name}"
    assert column_problems("ok", nested, column_mapping=True) == []


def test_arrow_columns_delta_cannot_store_are_left_to_the_catalog() -> None:
    schema = pa.schema([pa.field("u", pa.uint64()), pa.field("l", pa.list_(pa.list_(pa.int64())))])
    problems = arrow_column_problems(schema, column_mapping=True)
    assert [(p.path, p.shape) for p in problems] == [("l", ARRAY_OF_ARRAYS)]
