"""The field names of an Arrow IPC schema message exactly as sent, which pyarrow's reader does not keep.

pyarrow reads every map back with fields ``key`` and ``value``, whatever the producer named them
(observed with pyarrow 26: a schema written with ``keys``/``values`` reads back as ``key``/``value``),
while the Arrow Flight server's schema names them ``keys``/``values`` and casts the ``key``/``value``
layout (``schema_check``). So the emulator reads the names from the message's flatbuffer itself and puts
them back on the schema pyarrow decoded (``with_sent_names``).

Only what that needs is read (the Arrow format's ``Message.fbs`` and ``Schema.fbs``, public in
apache/arrow ``format/``): ``Message.header`` -> ``Schema.fields`` -> each ``Field``'s ``name`` and
``children``, recursively. Flatbuffers layout: a table starts with a signed offset back to its vtable,
whose 16-bit entries give each field's offset in the table; references are unsigned 32-bit offsets from
where they are stored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa

# Field indexes in the Arrow flatbuffer tables (format/Message.fbs, format/Schema.fbs).
_MESSAGE_HEADER = 2  # Message { version, header_type, header, bodyLength, custom_metadata }
_SCHEMA_FIELDS = 1  # Schema { endianness, fields, custom_metadata, features }
_FIELD_NAME = 0  # Field { name, nullable, type_type, type, dictionary, children, custom_metadata }
_FIELD_CHILDREN = 5


@dataclass(frozen=True)
class SentField:
    name: str
    children: tuple[SentField, ...]


def sent_fields(message: bytes) -> tuple[SentField, ...]:
    """The top-level fields of a schema message (a FlightData ``data_header``), names as sent."""
    buf = memoryview(message)
    root = _u32(buf, 0)
    schema = _ref(buf, root, _MESSAGE_HEADER)
    if schema is None:
        raise ValueError("the IPC message has no header")
    return _fields(buf, schema, _SCHEMA_FIELDS)


def with_sent_names(schema: pa.Schema, fields: tuple[SentField, ...]) -> pa.Schema:
    """``schema`` (as pyarrow decoded it) with every map's key and value field named as sent."""
    if len(fields) != len(schema):
        return schema
    return pa.schema(
        [f.with_type(_renamed(f.type, sent)) for f, sent in zip(schema, fields, strict=True)],
        metadata=schema.metadata,
    )


def _renamed(kind: pa.DataType, sent: SentField) -> pa.DataType:
    if pa.types.is_map(kind) and len(sent.children) == 1 and len(sent.children[0].children) == 2:
        key_sent, value_sent = sent.children[0].children
        key, value = kind.key_field, kind.item_field
        return pa.map_(
            key.with_name(key_sent.name).with_type(_renamed(key.type, key_sent)),
            value.with_name(value_sent.name).with_type(_renamed(value.type, value_sent)),
            keys_sorted=kind.keys_sorted,
        )
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and len(sent.children) == 1:
        item = kind.value_field
        renamed = item.with_type(_renamed(item.type, sent.children[0]))
        return pa.list_(renamed) if pa.types.is_list(kind) else pa.large_list(renamed)
    if pa.types.is_struct(kind) and len(sent.children) == kind.num_fields:
        return pa.struct([f.with_type(_renamed(f.type, s)) for f, s in zip(kind, sent.children, strict=True)])
    return kind


def _fields(buf: memoryview, table: int, index: int) -> tuple[SentField, ...]:
    vector = _ref(buf, table, index)
    if vector is None:
        return ()
    count = _u32(buf, vector)
    out = []
    for i in range(count):
        slot = vector + 4 + 4 * i
        field = slot + _u32(buf, slot)
        name_at = _ref(buf, field, _FIELD_NAME)
        name = "" if name_at is None else _string(buf, name_at)
        out.append(SentField(name, _fields(buf, field, _FIELD_CHILDREN)))
    return tuple(out)


def _slot(buf: memoryview, table: int, index: int) -> int | None:
    """Where field ``index`` of the table at ``table`` is stored, or None when it is absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    vtable_size = struct.unpack_from("<H", buf, vtable)[0]
    entry = 4 + 2 * index
    if entry >= vtable_size:
        return None
    offset = struct.unpack_from("<H", buf, vtable + entry)[0]
    return None if offset == 0 else table + offset


def _ref(buf: memoryview, table: int, index: int) -> int | None:
    """The position a reference field (string, vector, table) points to."""
    slot = _slot(buf, table, index)
    return None if slot is None else slot + _u32(buf, slot)


def _string(buf: memoryview, at: int) -> str:
    length = _u32(buf, at)
    return bytes(buf[at + 4 : at + 4 + length]).decode("utf-8")


def _u32(buf: memoryview, at: int) -> int:
    value: int = struct.unpack_from("<I", buf, at)[0]
    return value
