"""Field names read from an IPC schema message's flatbuffer, which pyarrow's reader renames for maps."""

from __future__ import annotations

import pyarrow as pa

from zerobus_orchestration.emulator.ipc_names import SentField, sent_fields, with_sent_names


def header(schema: pa.Schema) -> bytes:
    """The flatbuffer as a FlightData ``data_header`` carries it (no IPC continuation prefix)."""
    return bytes(pa.ipc.read_message(schema.serialize()).metadata.to_pybytes())


KEYS_VALUES = pa.map_(pa.field("keys", pa.large_string(), nullable=False), pa.field("values", pa.int64()))


def test_pyarrow_reads_map_fields_back_as_key_and_value_whatever_was_sent() -> None:
    # The reason this module exists: if this ever stops holding, ``with_sent_names`` is a no-op.
    read = pa.ipc.read_schema(pa.schema([pa.field("m", KEYS_VALUES)]).serialize())
    assert (read.field("m").type.key_field.name, read.field("m").type.item_field.name) == ("key", "value")


def test_the_names_as_sent_are_read_at_every_depth() -> None:
    inner = pa.map_(pa.field("kk", pa.int32(), nullable=False), pa.field("vv", pa.int64()))
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("m", pa.map_(KEYS_VALUES.key_field, pa.field("values", pa.struct([("x", inner)])))),
            pa.field("l", pa.list_(pa.field("item", KEYS_VALUES))),
        ]
    )
    fields = sent_fields(header(schema))
    assert [f.name for f in fields] == ["id", "m", "l"]
    [entries] = fields[1].children
    assert [c.name for c in entries.children] == ["keys", "values"]
    assert entries.children[1].children[0].children[0].children == (SentField("kk", ()), SentField("vv", ()))
    restored = with_sent_names(pa.ipc.read_schema(schema.serialize()), fields)
    assert str(restored) == str(schema)


def test_a_schema_without_maps_is_unchanged() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("l", pa.list_(pa.field("item", pa.large_string()))),
        ]
    )
    assert str(with_sent_names(pa.ipc.read_schema(schema.serialize()), sent_fields(header(schema)))) == str(
        schema
    )
