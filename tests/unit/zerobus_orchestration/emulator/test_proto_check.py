"""The protobuf descriptor check at stream creation: each rule, with the cause and the field it names.

The table mixes every shape the SDK's converter (``descriptor_from_uc_columns``) maps; ``good()`` is
the descriptor that converter would build for it, and each case breaks one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2

from zerobus_orchestration.emulator.proto_check import check_descriptor, render

OPTIONAL, REQUIRED, REPEATED = 1, 2, 3
DOUBLE, INT64, INT32, BOOL, STRING, MESSAGE, BYTES, SINT32 = 1, 3, 5, 8, 9, 11, 12, 17

TABLE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("small", pa.int16()),
        pa.field("ok", pa.bool_()),
        pa.field("score", pa.float64()),
        pa.field("price", pa.decimal128(18, 2)),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("raw", pa.binary()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field("address", pa.struct([pa.field("street", pa.string()), pa.field("zip", pa.int32(), False)])),
    ]
)


def good() -> descriptor_pb2.DescriptorProto:
    m = descriptor_pb2.DescriptorProto(name="Row")
    scalars = [
        ("id", INT64, REQUIRED),
        ("name", STRING, OPTIONAL),
        ("small", INT32, OPTIONAL),
        ("ok", BOOL, OPTIONAL),
        ("score", DOUBLE, OPTIONAL),
        ("price", STRING, OPTIONAL),
        ("day", INT32, OPTIONAL),
        ("at", INT64, OPTIONAL),
        ("raw", BYTES, OPTIONAL),
        ("tags", STRING, REPEATED),
    ]
    for n, (name, kind, label) in enumerate(scalars, start=1):
        m.field.add(name=name, number=n, type=kind, label=label)
    entry = m.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=STRING, label=OPTIONAL)
    entry.field.add(name="value", number=2, type=INT64, label=OPTIONAL)
    m.field.add(name="attrs", number=11, type=MESSAGE, label=REPEATED, type_name=".Row.AttrsEntry")
    address = m.nested_type.add(name="Address")
    address.field.add(name="street", number=1, type=STRING, label=OPTIONAL)
    address.field.add(name="zip", number=2, type=INT32, label=REQUIRED)
    m.field.add(name="address", number=12, type=MESSAGE, label=OPTIONAL, type_name=".Row.Address")
    return m


def field(m: Any, name: str) -> Any:
    return next(f for f in m.field if f.name == name)


def problems(m: descriptor_pb2.DescriptorProto) -> list[tuple[str, str]]:
    _, found = check_descriptor(m.SerializeToString(), TABLE)
    return [(p.cause, p.column) for p in found]


def test_the_descriptor_the_sdk_would_build_fits() -> None:
    assert problems(good()) == []


def test_nullable_columns_may_be_left_out() -> None:
    m = descriptor_pb2.DescriptorProto(name="Row")
    m.field.add(name="id", number=1, type=INT64, label=REQUIRED)
    assert problems(m) == []


def _drop(name: str) -> Callable[[Any], None]:
    def change(m: Any) -> None:
        kept = [f for f in m.field if f.name != name]
        del m.field[:]
        m.field.extend(kept)

    return change


def _set(field_name: str, **values: Any) -> Callable[[Any], None]:
    def change(m: Any) -> None:
        for key, value in values.items():
            setattr(field(m, field_name), key, value)

    return change


def _nested(type_name: str, field_name: str, **values: Any) -> Callable[[Any], None]:
    def change(m: Any) -> None:
        nested = next(t for t in m.nested_type if t.name == type_name)
        for key, value in values.items():
            setattr(field(nested, field_name), key, value)

    return change


def _as_string(field_name: str) -> Callable[[Any], None]:
    def change(m: Any) -> None:
        f = field(m, field_name)
        f.ClearField("type_name")
        f.type = STRING

    return change


def _add(name: str, kind: int) -> Callable[[Any], None]:
    return lambda m: m.field.add(name=name, number=99, type=kind, label=OPTIONAL)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_add("bogus", STRING), [("FIELD_NOT_IN_TABLE", "bogus")]),
        (_drop("id"), [("MISSING_REQUIRED_COLUMN", "id")]),
        (_set("id", label=OPTIONAL), [("TYPE_INCOMPATIBLE", "id")]),  # NOT NULL needs required
        (_set("name", label=REQUIRED), [("TYPE_INCOMPATIBLE", "name")]),  # required vs nullable
        (_set("score", type=STRING), [("TYPE_INCOMPATIBLE", "score")]),
        (_set("small", type=INT64), [("TYPE_INCOMPATIBLE", "small")]),
        (_set("small", type=SINT32), [("TYPE_INCOMPATIBLE", "small")]),
        (_set("price", type=DOUBLE), [("TYPE_INCOMPATIBLE", "price")]),  # DECIMAL travels as text
        (_set("at", type=STRING), [("TYPE_INCOMPATIBLE", "at")]),  # TIMESTAMP is int64 microseconds
        (_set("tags", label=OPTIONAL), [("TYPE_INCOMPATIBLE", "tags")]),
        (_set("tags", type=BYTES), [("TYPE_INCOMPATIBLE", "tags[]")]),
        (_set("raw", label=REPEATED), [("TYPE_INCOMPATIBLE", "raw")]),
        (_nested("AttrsEntry", "value", type=STRING), [("TYPE_INCOMPATIBLE", "attrs.value")]),
        (_nested("Address", "zip", label=OPTIONAL), [("TYPE_INCOMPATIBLE", "address.zip")]),
        (_nested("Address", "street", name="road"), [("FIELD_NOT_IN_TABLE", "address.road")]),
        (_as_string("address"), [("TYPE_INCOMPATIBLE", "address")]),
        (_add("NAME", STRING), [("FIELD_COUNT_MISMATCH", "name")]),  # names are case-insensitive
    ],
    ids=[
        "field not in table",
        "NOT NULL column missing",
        "optional for NOT NULL",
        "required for nullable",
        "string for DOUBLE",
        "int64 for SMALLINT",
        "sint32 for SMALLINT",
        "double for DECIMAL",
        "string for TIMESTAMP",
        "ARRAY not repeated",
        "ARRAY element type",
        "repeated for BINARY",
        "MAP value type",
        "struct NOT NULL field optional",
        "struct field not in struct",
        "STRUCT as a string",
        "two spellings of a column",
    ],
)
def test_each_mismatch_is_refused_with_its_cause_naming_the_field(
    change: Callable[[Any], None], expected: list[tuple[str, str]]
) -> None:
    m = good()
    change(m)
    assert problems(m) == expected


def test_a_map_column_needs_a_map_entry_message() -> None:
    m = good()
    entry = next(t for t in m.nested_type if t.name == "AttrsEntry")
    entry.options.map_entry = False
    assert problems(m) == [("TYPE_INCOMPATIBLE", "attrs")]


def test_the_rendered_refusal_names_the_message_table_field_and_fix() -> None:
    m = good()
    field(m, "name").label = REQUIRED
    name, found = check_descriptor(m.SerializeToString(), TABLE)
    text = render("main.default.events", name, found)
    assert text.startswith("protobuf descriptor Row does not match the table: TYPE_INCOMPATIBLE: ")
    assert "main.default.events.name: required string for a nullable column" in text
    assert "declare it optional" in text


def test_a_descriptor_that_is_not_self_contained_is_a_value_error() -> None:
    m = descriptor_pb2.DescriptorProto(name="Row")
    m.field.add(name="id", number=1, type=MESSAGE, label=REQUIRED, type_name=".elsewhere.Id")
    with pytest.raises(ValueError, match="nested types must be inlined"):
        check_descriptor(m.SerializeToString(), TABLE)
