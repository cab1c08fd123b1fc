"""Wire-level handshake traps, checked with a raw grpcio client (what the SDK itself cannot show us).

* EphemeralStream flushes response headers before the client sends anything (tonic waits for them).
* DoPut accepts a schema frame without a FlightDescriptor, answers the ready PutResult first, then
  cumulative ``ack_up_to_records``.
* A schema rejection carries ``google.rpc.ErrorInfo`` (reason SCHEMA_VALIDATION_FAILED, ``causes``)
  in ``grpc-status-details-bin``, and ``transport.classify.classify`` reads it.
* An unknown request payload is ignored, never raised on.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa
import pytest
from google.rpc import error_details_pb2, status_pb2

from tests.support.emulator_helpers import SCHEMA, TABLE, events
from zerobus_orchestration.emulator.proto import flight_pb2, zerobus_service_pb2
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.transport.classify import classify

zb: Any = zerobus_service_pb2
fl: Any = flight_pb2


def metadata(emu: Emulator) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {emu.issue_token(TABLE)}"), ("x-databricks-zerobus-table-name", TABLE)]


def channel(emu: Emulator) -> grpc.Channel:
    return grpc.insecure_channel(
        emu.endpoint.removeprefix("http://"), options=[("grpc.enable_http_proxy", 0)]
    )


def frame(serialized: pa.Buffer, offset: int | None = None) -> Any:
    message = pa.ipc.read_message(serialized)
    app = b"" if offset is None else json.dumps({"offset_id": offset}).encode()
    return fl.FlightData(
        data_header=message.metadata.to_pybytes(), data_body=message.body.to_pybytes(), app_metadata=app
    )


def requests_from(q: queue.Queue[Any]) -> Iterator[Any]:
    while (item := q.get()) is not None:
        yield item


def test_ephemeral_stream_sends_headers_before_the_first_request(emulator: Emulator) -> None:
    with channel(emulator) as ch:
        call = ch.stream_stream(
            "/databricks.zerobus.Zerobus/EphemeralStream",
            request_serializer=zb.EphemeralStreamRequest.SerializeToString,
            response_deserializer=zb.EphemeralStreamResponse.FromString,
        )
        q: queue.Queue[Any] = queue.Queue()
        responses = call(requests_from(q), metadata=metadata(emulator), timeout=10)
        responses.initial_metadata()  # returns only because the server flushed headers with nothing sent
        create = zb.CreateIngestStreamRequest(table_name=TABLE, record_type=zb.JSON)
        q.put(zb.EphemeralStreamRequest(create_stream=create))
        assert next(responses).create_stream_response.stream_id
        unknown = zb.EphemeralStreamRequest()
        unknown.ParseFromString(b"\xa2\x06\x00")  # field 100, length 0: a payload from a newer protocol
        q.put(unknown)
        batch = zb.IngestRecordBatchRequest(offset_id=0, json_batch=zb.JsonRecordBatch(records=['{"id": 1}']))
        q.put(zb.EphemeralStreamRequest(ingest_record_batch=batch))
        assert next(responses).ingest_record_response.durability_ack_up_to_offset == 0
        q.put(None)
        assert list(responses) == []
        assert responses.code() == grpc.StatusCode.OK


def do_put(emu: Emulator, frames: list[Any]) -> tuple[list[dict[str, Any]], grpc.RpcError | None]:
    with channel(emu) as ch:
        call = ch.stream_stream(
            "/arrow.flight.protocol.FlightService/DoPut",
            request_serializer=fl.FlightData.SerializeToString,
            response_deserializer=fl.PutResult.FromString,
        )
        acks: list[dict[str, Any]] = []
        try:
            for result in call(iter(frames), metadata=metadata(emu), timeout=10):
                acks.append(json.loads(result.app_metadata))
        except grpc.RpcError as exc:
            return acks, exc
        return acks, None


def test_do_put_ready_signal_then_cumulative_record_acks(emulator: Emulator) -> None:
    frames = [
        frame(SCHEMA.serialize()),
        frame(events([1, 2]).serialize(), 0),
        frame(events([3]).serialize(), 1),
    ]
    acks, error = do_put(emulator, frames)
    assert error is None
    assert acks[0] == {"ack_up_to_offset": -1, "ack_up_to_records": 0}
    assert acks[-1] == {"ack_up_to_offset": 1, "ack_up_to_records": 3}
    records = [a["ack_up_to_records"] for a in acks]
    assert records == sorted(records)


@pytest.mark.parametrize(
    ("schema", "causes"),
    [
        (SCHEMA.append(pa.field("x", pa.string())), "FIELD_NOT_IN_TABLE"),
        (pa.schema([pa.field("id", pa.string())]), "TYPE_INCOMPATIBLE"),
        (
            pa.schema([pa.field("name", pa.large_string()), pa.field("y", pa.int8())]),
            "FIELD_NOT_IN_TABLE,MISSING_REQUIRED_COLUMN",
        ),
    ],
)
def test_schema_rejection_carries_error_info_causes(
    emulator: Emulator, schema: pa.Schema, causes: str
) -> None:
    acks, error = do_put(emulator, [frame(schema.serialize())])
    assert acks == [] and error is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    info = error_details_pb2.ErrorInfo()
    assert status_pb2.Status.FromString(details).details[0].Unpack(info)
    assert info.reason == "SCHEMA_VALIDATION_FAILED"
    assert info.metadata["causes"] == causes
    assert classify(error) is ErrorClass.SCHEMA_REJECTED
