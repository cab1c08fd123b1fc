"""Payload decoding: row-path records (JSON, protobuf, Avro) and Arrow Flight frames into Arrow batches.

Row records become one ``RecordBatch`` per request, typed by the target table's schema, so the WAL and
the materialiser only ever see Arrow. Unknown record fields are a schema problem of the producer
(``FIELD_NOT_IN_TABLE``), reported with the column named, never an exception escaping a stream.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.schema_check import (
    FIELD_NOT_IN_TABLE,
    MISSING_REQUIRED_COLUMN,
    TYPE_INCOMPATIBLE,
    SchemaProblem,
    case_clash,
)

_CONTINUATION = b"\xff\xff\xff\xff"
_END_OF_STREAM = _CONTINUATION + b"\x00\x00\x00\x00"

RowDecoder = Callable[[Sequence[bytes | str]], list[dict[str, Any]]]


def rows_to_batch(table: str, rows: list[dict[str, Any]], target: pa.Schema) -> pa.RecordBatch:
    """Rows (dicts) typed by ``target``; raises ``ConformError`` naming the column on any mismatch."""
    names = {f.name.lower(): f.name for f in target}
    normalised: list[dict[str, Any]] = []
    for row in rows:
        out: dict[str, Any] = {}
        spelled: dict[str, str] = {}  # table column -> the record key that filled it
        for key, value in row.items():
            name = names.get(key.lower())
            if name is None:
                raise ConformError(
                    table,
                    SchemaProblem(
                        FIELD_NOT_IN_TABLE,
                        key,
                        f"record field not in the table ({', '.join(names.values())})",
                    ),
                )
            if name in spelled:
                raise ConformError(table, case_clash(name, spelled[name], key))
            spelled[name] = key
            out[name] = value
        normalised.append(out)
    present = {k for row in normalised for k in row}
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for f in target:
        if f.name not in present:
            if not f.nullable:
                raise ConformError(
                    table, SchemaProblem(MISSING_REQUIRED_COLUMN, f.name, "NOT NULL column missing")
                )
            continue
        values = [row.get(f.name) for row in normalised]
        arrays.append(_typed_array(table, f, values))
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _typed_array(table: str, f: pa.Field, values: list[Any]) -> pa.Array:
    try:
        return pa.array(values, type=f.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    try:  # e.g. ISO-8601 strings for timestamps and dates, numeric strings for int64 (proto JSON style)
        inferred = pa.array(values)
        if not (pa.types.is_string(inferred.type) or pa.types.is_large_string(inferred.type)):
            # Only text is parsed: a number or boolean cast into a STRING or BOOLEAN column (123 ->
            # '123', true -> 1) would be a silent coercion the producer never asked for.
            raise TypeError(f"got {inferred.type} values; send JSON values of the column type")
        return inferred.cast(f.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
        raise ConformError(
            table, SchemaProblem(TYPE_INCOMPATIBLE, f.name, f"values do not fit {f.type}: {exc}")
        ) from exc


def json_decoder() -> RowDecoder:
    def decode(records: Sequence[bytes | str]) -> list[dict[str, Any]]:
        rows = []
        for record in records:
            value = json.loads(record, object_pairs_hook=_unique_keys)
            if not isinstance(value, dict):
                raise ValueError(f"a JSON record must be an object, got {type(value).__name__}")
            rows.append(value)
        return rows

    return decode


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a repeated key: ``json.loads`` would silently keep only the last value."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"a JSON record repeats the key {key!r}; one value would be lost: send it once")
        seen[key] = value
    return seen


def message_descriptor(descriptor_proto: bytes) -> Any:
    """The ``google.protobuf`` ``Descriptor`` of a serialized ``DescriptorProto`` (nested types inlined).

    Raises ``ValueError`` for bytes that are not a self-contained message descriptor.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    try:
        message = descriptor_pb2.DescriptorProto.FromString(descriptor_proto)
        package = f"zerobus_emulator_{uuid.uuid4().hex}"
        file_proto = descriptor_pb2.FileDescriptorProto(
            name=f"{package}.proto", package=package, syntax="proto2"
        )
        file_proto.message_type.add().CopyFrom(_relink(message, package))
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file_proto)
        return pool.FindMessageTypeByName(f"{package}.{message.name}")
    except (DecodeError, TypeError, KeyError) as exc:
        raise ValueError(
            f"descriptor_proto is not a self-contained DescriptorProto (nested types must be inlined): {exc}"
        ) from exc


def proto_decoder(descriptor_proto: bytes) -> RowDecoder:
    """Decoder for records of the single message type described by a serialized ``DescriptorProto``."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(message_descriptor(descriptor_proto))

    def decode(records: Sequence[bytes | str]) -> list[dict[str, Any]]:
        return [_message_to_dict(cls.FromString(r if isinstance(r, bytes) else r.encode())) for r in records]

    return decode


def _relink(message: Any, package: str) -> Any:
    """Point nested type references (``.<anything>.Outer.Inner``) at the inlined nested types."""
    from google.protobuf import descriptor_pb2

    out = descriptor_pb2.DescriptorProto()
    out.CopyFrom(message)

    def fix(msg: Any, prefix: str) -> None:
        for fld in msg.field:
            if fld.type_name:
                tail = fld.type_name.split(f".{message.name}.", 1)
                if len(tail) == 2:
                    fld.type_name = f".{package}.{message.name}.{tail[1]}"
                elif fld.type_name.rsplit(".", 1)[-1] == message.name:
                    fld.type_name = f".{package}.{message.name}"
        for nested in msg.nested_type:
            fix(nested, f"{prefix}.{nested.name}")

    fix(out, f".{package}.{message.name}")
    return out


def _message_to_dict(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fld, value in msg.ListFields():
        if fld.message_type is not None and fld.message_type.GetOptions().map_entry:
            out[fld.name] = [(k, _proto_value(v)) for k, v in value.items()]
        elif fld.is_repeated:
            out[fld.name] = [_proto_value(v) for v in value]
        else:
            out[fld.name] = _proto_value(value)
    return out


def _proto_value(value: Any) -> Any:
    if hasattr(value, "ListFields"):
        return _message_to_dict(value)
    return value


def avro_decoder(schema_json: str) -> RowDecoder:
    try:
        import fastavro
    except ImportError as exc:  # an optional dependency of the emulator
        raise ValueError(
            "Avro streams need fastavro in the emulator's environment (pip install fastavro)"
        ) from exc
    schema = fastavro.parse_schema(json.loads(schema_json))

    def decode(records: Sequence[bytes | str]) -> list[dict[str, Any]]:
        rows = []
        for r in records:
            row = fastavro.schemaless_reader(
                io.BytesIO(r if isinstance(r, bytes) else r.encode()), schema, None
            )
            if not isinstance(row, dict):
                raise ValueError("an Avro record must be a record (object)")
            rows.append(row)
        return rows

    return decode


# -- Arrow Flight frames -------------------------------------------------------------------------
def ipc_message(data_header: bytes, data_body: bytes) -> bytes:
    """One encapsulated IPC message rebuilt from a FlightData frame's header and body."""
    pad = (-len(data_header)) % 8
    return _CONTINUATION + struct.pack("<i", len(data_header) + pad) + data_header + b"\x00" * pad + data_body


def schema_from_frame(data_header: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(ipc_message(data_header, b"")))


def frame_stream(
    schema: pa.Schema, schema_message: bytes, data_header: bytes, data_body: bytes | memoryview
) -> tuple[pa.RecordBatch, bytes]:
    """A frame's batch and an IPC stream holding exactly it (schema message, the frame, end of stream).

    Both share one buffer, built with the one copy decoding needs anyway, so a batch the table takes
    as sent goes to the write-ahead log as these bytes instead of being serialised again: at hundreds
    of MB/s each extra copy and re-encoding of the body is CPU the gRPC handlers hold the GIL for.
    """
    pad = (-len(data_header)) % 8
    prefix = _CONTINUATION + struct.pack("<i", len(data_header) + pad)
    stream = b"".join((schema_message, prefix, data_header, b"\x00" * pad, data_body, _END_OF_STREAM))
    message = pa.ipc.read_message(pa.py_buffer(stream).slice(len(schema_message)))
    return pa.ipc.read_record_batch(message, schema), stream


def batch_to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def batches_from_ipc(payload: bytes | memoryview) -> list[pa.RecordBatch]:
    with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
        return list(reader)
