"""A protobuf stream whose descriptor does not fit the table is refused at creation, as Databricks does.

The emulator used to accept any descriptor and fail (or silently NULL) record by record: a missing
NOT NULL column, ``required`` against a nullable column or a field of another type opened fine. The
official SDK now gets a non-retriable ``SCHEMA_VALIDATION_FAILED`` from ``create_stream``, naming the
cause and the field, and nothing is written.
"""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.rpc import error_details_pb2, status_pb2
from zerobus.sdk.shared import NonRetriableException, TableProperties

from tests.integration.emulator.test_wire import channel, metadata, requests_from
from tests.support.emulator_helpers import TABLE, read_table, row_options, sdk_for
from zerobus_orchestration.emulator.proto import zerobus_service_pb2
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.transport.classify import classify

pytestmark = pytest.mark.integration

zb: Any = zerobus_service_pb2
OPTIONAL, REQUIRED = 1, 2
INT64, STRING, DOUBLE, INT32 = 3, 9, 1, 5


def message_class(*fields: tuple[str, int, int]) -> Any:
    """A compiled message ``Event`` with ``(name, type, label)`` fields, numbered in order."""
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"event_{abs(hash(fields))}.proto", package="t", syntax="proto2"
    )
    message = file_proto.message_type.add(name="Event")
    for number, (name, kind, label) in enumerate(fields, start=1):
        message.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Event"))


def open_proto(emu: Emulator, cls: Any) -> Any:
    return sdk_for(emu).create_stream(
        emu.client_id, emu.client_secret, TableProperties(TABLE, cls.DESCRIPTOR), row_options()
    )


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        (
            [("name", STRING, OPTIONAL)],
            r"MISSING_REQUIRED_COLUMN: main\.default\.events\.id: NOT NULL column",
        ),
        (
            [("id", INT64, REQUIRED), ("name", STRING, REQUIRED)],
            r"TYPE_INCOMPATIBLE: main\.default\.events\.name: required string for a nullable column",
        ),
        (
            [("id", INT64, REQUIRED), ("colour", STRING, OPTIONAL)],
            r"FIELD_NOT_IN_TABLE: main\.default\.events\.colour: no such column",
        ),
        (
            [("id", INT64, REQUIRED), ("score", INT32, OPTIONAL)],
            r"TYPE_INCOMPATIBLE: main\.default\.events\.score: optional int32 for a double column",
        ),
    ],
    ids=["missing NOT NULL column", "required for nullable", "field not in table", "incompatible type"],
)
def test_a_mismatched_descriptor_is_refused_at_creation_naming_the_field(
    emulator: Emulator, fields: list[tuple[str, int, int]], refusal: str
) -> None:
    with pytest.raises(
        NonRetriableException, match=f"SCHEMA_VALIDATION_FAILED: protobuf descriptor Event.*{refusal}"
    ):
        open_proto(emulator, message_class(*fields))


def test_the_matching_descriptor_opens_and_writes(emulator: Emulator, warehouse: Path) -> None:
    cls = message_class(("id", INT64, REQUIRED), ("score", DOUBLE, OPTIONAL))  # nullable name left out
    stream = open_proto(emulator, cls)
    stream.wait_for_offset(stream.ingest_record_offset(cls(id=7, score=1.5)))
    stream.close()
    emulator.materialize_now(TABLE)
    assert read_table(warehouse).to_pylist() == [{"id": 7, "name": None, "score": 1.5}]


def test_the_refusal_carries_every_cause_in_the_error_info(emulator: Emulator) -> None:
    descriptor = descriptor_pb2.DescriptorProto()
    message_class(("name", STRING, REQUIRED), ("colour", STRING, OPTIONAL)).DESCRIPTOR.CopyToProto(descriptor)
    create = zb.CreateIngestStreamRequest(
        table_name=TABLE, record_type=zb.PROTO, descriptor_proto=descriptor.SerializeToString()
    )
    with channel(emulator) as ch:
        call = ch.stream_stream(
            "/databricks.zerobus.Zerobus/EphemeralStream",
            request_serializer=zb.EphemeralStreamRequest.SerializeToString,
            response_deserializer=zb.EphemeralStreamResponse.FromString,
        )
        q: queue.Queue[Any] = queue.Queue()
        q.put(zb.EphemeralStreamRequest(create_stream=create))
        with pytest.raises(grpc.RpcError) as info:
            list(call(requests_from(q), metadata=metadata(emulator), timeout=10))
        q.put(None)
    error = info.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    error_info = error_details_pb2.ErrorInfo()
    assert status_pb2.Status.FromString(details).details[0].Unpack(error_info)
    assert error_info.reason == "SCHEMA_VALIDATION_FAILED"
    assert error_info.metadata["causes"] == "TYPE_INCOMPATIBLE,FIELD_NOT_IN_TABLE,MISSING_REQUIRED_COLUMN"
    assert classify(error) is ErrorClass.SCHEMA_REJECTED
