"""The two gRPC stream handlers: ``Zerobus/EphemeralStream`` (rows) and ``FlightService/DoPut`` (Arrow).

Both run one ``session.StreamSession`` (open, read, conform, WAL append, durable cumulative acks); this
module holds what differs: decoding each protocol's requests and rendering its acks.

Handshake traps handled here: initial metadata is flushed as soon as EphemeralStream opens; the DoPut
schema frame carries no FlightDescriptor; the ready ``PutResult``
``{"ack_up_to_offset": -1, "ack_up_to_records": 0}`` follows the schema frame before any ack; Arrow
acks carry the authoritative cumulative ``ack_up_to_records``. Both traps and the hot loop are
described in docs/architecture.md#the-zerobus-service-and-the-official-sdk.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import pyarrow as pa

from zerobus_orchestration.emulator.errors import RecordTooLarge
from zerobus_orchestration.emulator.flight_frame import FlightFrame, parse_flight_data
from zerobus_orchestration.emulator.ipc_names import sent_fields, with_sent_names
from zerobus_orchestration.emulator.materializer import load_table
from zerobus_orchestration.emulator.proto import flight_pb2 as _flight_pb2
from zerobus_orchestration.emulator.proto import zerobus_service_pb2 as _zerobus_service_pb2
from zerobus_orchestration.emulator.proto_check import check_descriptor, render
from zerobus_orchestration.emulator.records import (
    RowDecoder,
    avro_decoder,
    frame_stream,
    ipc_message,
    json_decoder,
    proto_decoder,
    rows_to_batch,
    schema_from_frame,
)
from zerobus_orchestration.emulator.schema_check import (
    SchemaCheck,
    WireColumn,
    check_schema,
    table_wire_columns,
    wire_cast,
)
from zerobus_orchestration.emulator.session import (
    TABLE_HEADER,
    Decoded,
    Pending,
    StreamServices,
    open_stream,
    run_session,
    stream_metadata,
)
from zerobus_orchestration.emulator.status import RpcFailure
from zerobus_orchestration.emulator.wire_casts import WireCasts

log = logging.getLogger(__name__)

ZEROBUS_SERVICE = "databricks.zerobus.Zerobus"
# The service refuses a row-path message above 10 MiB: "The Zerobus server has a limit on decoded received
# messages set to 10MB" (databricks/zerobus-sdk-py#16, databricks/zerobus-sdk#36); the SDK enforces the
# same limit client-side, as 10 MiB minus 64 KiB of envelope headroom summed over one call's records
# (``max_ingest_payload_bytes`` in rust/sdk/src/stream_configuration.rs, databricks/zerobus-sdk#331).
# The status the service answers with is not documented: the emulator uses INVALID_ARGUMENT, the class
# the SDK gives the same condition (a guess, docs/adr/0003-emulator-fidelity-limits.md).
MAX_ROW_MESSAGE_BYTES = 10 * 1024 * 1024
FLIGHT_SERVICE = "arrow.flight.protocol.FlightService"
READY = json.dumps({"ack_up_to_offset": -1, "ack_up_to_records": 0}).encode()

# Generated modules carry no type stubs; their classes are used dynamically.
zerobus_service_pb2: Any = _zerobus_service_pb2
flight_pb2: Any = _flight_pb2
RecordType: Any = zerobus_service_pb2.RecordType
_COLUMN_MAPPING_MODES = frozenset({"name", "id"})  # delta.columnMapping.mode values that turn it on


class ArrowServices(StreamServices, Protocol):
    """What an Arrow stream needs beyond any stream's: where it counts the server-side casts."""

    wire_casts: WireCasts


# -- row path ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OversizedRequest:
    """A row-path request above ``MAX_ROW_MESSAGE_BYTES``, kept unparsed: the stream is refused."""

    nbytes: int

    def message(self, table: str) -> str:
        return (
            f"{table}: a request of {self.nbytes:,} bytes exceeds the service's limit of "
            f"{MAX_ROW_MESSAGE_BYTES:,} bytes (10 MiB) per message: send fewer or smaller records per "
            "call (the SDK refuses a call over 10,420,224 record bytes before sending)"
        )


def parse_row_request(data: bytes) -> Any:
    """``EphemeralStreamRequest`` from the wire, or ``OversizedRequest`` above the service's limit."""
    if len(data) > MAX_ROW_MESSAGE_BYTES:
        return OversizedRequest(len(data))
    return zerobus_service_pb2.EphemeralStreamRequest.FromString(data)


def _row_decoder(create: Any) -> RowDecoder:
    record_type = create.record_type if create.HasField("record_type") else RecordType.PROTO
    if record_type == RecordType.JSON:
        return json_decoder()
    if record_type == RecordType.PROTO:
        if not create.descriptor_proto:
            raise ValueError("a PROTO stream needs descriptor_proto (a serialized DescriptorProto)")
        return proto_decoder(create.descriptor_proto)
    if record_type == RecordType.AVRO:
        if not create.avro_schema_json:
            raise ValueError("an AVRO stream needs avro_schema_json")
        return avro_decoder(create.avro_schema_json)
    raise ValueError(f"unsupported record_type {record_type}")


def _descriptor_refusal(create: Any, table: str, target: pa.Schema) -> RpcFailure | None:
    """The SCHEMA_VALIDATION_FAILED refusal of a PROTO stream whose descriptor does not fit ``target``."""
    if create.HasField("record_type") and create.record_type != RecordType.PROTO:
        return None
    name, problems = check_descriptor(create.descriptor_proto, target)
    if not problems:
        return None
    return RpcFailure.schema(render(table, name, problems), list(dict.fromkeys(p.cause for p in problems)))


def _row_records(request: Any) -> tuple[int, list[bytes | str]] | None:
    kind = request.WhichOneof("payload")
    if kind == "ingest_record":
        record = request.ingest_record
        which = record.WhichOneof("record")
        return (record.offset_id, [getattr(record, which)]) if which else None
    if kind == "ingest_record_batch":
        batch = request.ingest_record_batch
        which = batch.WhichOneof("batch")
        return (batch.offset_id, list(getattr(batch, which).records)) if which else None
    return None  # unknown payloads (newer protocol fields) are ignored, never raised on


def ephemeral_stream(
    services: StreamServices, requests: Iterator[Any], context: grpc.ServicerContext
) -> Iterator[Any]:
    # The SDK sends create_stream only after the response headers arrive: flush them now.
    context.send_initial_metadata(())
    metadata = stream_metadata(context)
    try:
        first = next(requests)
    except (StopIteration, grpc.RpcError):
        return
    if isinstance(first, OversizedRequest):
        RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, first.message(metadata.get(TABLE_HEADER, ""))).apply(
            context
        )
        return
    if first.WhichOneof("payload") != "create_stream":
        RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be create_stream").apply(context)
        return
    create = first.create_stream
    table = create.table_name or metadata.get(TABLE_HEADER)
    header = metadata.get(TABLE_HEADER)
    if header and create.table_name and header != create.table_name:
        RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"table header {header!r} differs from create_stream {create.table_name!r}",
        ).apply(context)
        return
    opened = open_stream(services, table, metadata, "row")
    if isinstance(opened, RpcFailure):
        opened.apply(context)
        return
    try:
        decoder = _row_decoder(create)
    except ValueError as exc:
        opened.release()
        RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{table}: {exc}").apply(context)
        return
    session = opened.session
    full_name, target = session.state.full_name, session.target
    refused = _descriptor_refusal(create, full_name, target)
    if refused is not None:  # Databricks refuses a mismatched descriptor at creation (proto_check.py)
        opened.release()
        refused.apply(context)
        return

    def decode(request: Any) -> Decoded:
        if isinstance(request, OversizedRequest):
            raise RecordTooLarge(request.message(full_name))
        found = _row_records(request)
        if found is None:
            return Decoded(None, -1, 0)
        offset, records = found
        nbytes = sum(len(r) for r in records)
        return Decoded(rows_to_batch(full_name, decoder(records), target), offset, nbytes)

    def render_ack(pending: Pending, rotate_grace_ms: int | None) -> list[Any]:
        ack = zerobus_service_pb2.EphemeralStreamResponse(
            ingest_record_response=zerobus_service_pb2.IngestRecordResponse(
                durability_ack_up_to_offset=pending.wire_offset
            )
        )
        if rotate_grace_ms is None:
            return [ack]
        signal = zerobus_service_pb2.CloseStreamSignal()
        signal.duration.FromMilliseconds(rotate_grace_ms)
        return [ack, zerobus_service_pb2.EphemeralStreamResponse(close_stream_signal=signal)]

    yield zerobus_service_pb2.EphemeralStreamResponse(
        create_stream_response=zerobus_service_pb2.CreateIngestStreamResponse(stream_id=session.stream_id)
    )
    yield from run_session(opened, context, requests, decode, render_ack)


# -- Arrow path -------------------------------------------------------------------------------------
def _offset_of(frame: FlightFrame, fallback: int) -> int:
    if not frame.app_metadata:
        return fallback
    try:
        value = json.loads(frame.app_metadata)
        return int(value.get("offset_id", fallback))
    except (ValueError, TypeError, AttributeError):
        return fallback


def table_wire_schema(uri: str, storage_options: dict[str, str] | None) -> list[WireColumn]:
    """The table's columns in the schema the Arrow Flight server builds from it (``wire_schema``), read
    from the Delta log's own schema; names outside ``[A-Za-z_][A-Za-z0-9_]*`` count as columns the wire
    cannot carry unless the table has column mapping."""
    table = load_table(uri, storage_options)
    fields = json.loads(table.schema().to_json())["fields"]
    mode = (table.metadata().configuration.get("delta.columnMapping.mode") or "none").lower()
    return table_wire_columns(fields, column_mapping=mode in _COLUMN_MAPPING_MODES)


def do_put(services: ArrowServices, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    metadata = stream_metadata(context)
    opened = open_stream(services, metadata.get(TABLE_HEADER), metadata, "arrow")
    if isinstance(opened, RpcFailure):
        opened.apply(context)
        return
    session = opened.session
    full_name = session.state.full_name
    try:
        first = next(requests)
        # Map field names as sent: pyarrow's reader renames them (ipc_names.py), the server does not.
        schema = with_sent_names(schema_from_frame(first.data_header), sent_fields(first.data_header))
        schema_message = ipc_message(first.data_header, b"")
    except (StopIteration, grpc.RpcError):
        opened.release()
        return
    except (pa.ArrowException, ValueError) as exc:
        opened.release()
        RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, f"{full_name}: first frame is not an IPC schema: {exc}"
        ).apply(context)
        return
    try:
        expected = table_wire_schema(session.state.uri, session.state.storage_options)
    except Exception as exc:  # never raise inside the response generator (reconnect hot loop)
        opened.release()
        RpcFailure(grpc.StatusCode.UNAVAILABLE, f"{full_name}: cannot read the table schema: {exc}").apply(
            context
        )
        return
    # At stream creation, as the service does: the schema frame against the table's wire schema.
    check: SchemaCheck = check_schema(full_name, schema, expected)
    if not check.ok:
        opened.release()
        RpcFailure.schema(check.message(), check.causes).apply(context)
        return
    if check.casts:
        log.info(
            "%s: stream %s needs a per-batch cast (%s)", full_name, session.stream_id, ", ".join(check.casts)
        )
    frames = 0

    def decode(frame: FlightFrame) -> Decoded:
        nonlocal frames
        offset = _offset_of(frame, frames)
        frames += 1
        if not frame.data_header:
            return Decoded(None, offset, 0)
        # The body is a view of the received message: frame_stream's buffer is its one copy.
        batch, stream = frame_stream(schema, schema_message, frame.data_header, frame.data_body)
        if check.schema is None:
            return Decoded(batch, offset, len(frame.data_body), ipc=stream)
        # Cast per batch, as the server does, and counted: the log then holds the canonical schema.
        services.wire_casts.add(full_name, check.casts)
        return Decoded(wire_cast(batch, check.schema), offset, len(frame.data_body))

    def ack_json(pending: Pending, rotate_grace_ms: int | None) -> list[Any]:
        body = {"ack_up_to_offset": pending.wire_offset, "ack_up_to_records": pending.cumulative_rows}
        if rotate_grace_ms is not None:
            body["close_stream_duration_ms"] = rotate_grace_ms
        return [flight_pb2.PutResult(app_metadata=json.dumps(body).encode())]

    yield flight_pb2.PutResult(app_metadata=READY)
    yield from run_session(opened, context, requests, decode, ack_json)


def generic_handlers(services: ArrowServices) -> tuple[grpc.GenericRpcHandler, ...]:
    zerobus = grpc.method_handlers_generic_handler(
        ZEROBUS_SERVICE,
        {
            "EphemeralStream": grpc.stream_stream_rpc_method_handler(
                lambda requests, context: ephemeral_stream(services, requests, context),
                request_deserializer=parse_row_request,
                response_serializer=zerobus_service_pb2.EphemeralStreamResponse.SerializeToString,
            )
        },
    )
    flight = grpc.method_handlers_generic_handler(
        FLIGHT_SERVICE,
        {
            "DoPut": grpc.stream_stream_rpc_method_handler(
                lambda requests, context: do_put(services, requests, context),
                request_deserializer=parse_flight_data,  # in place, not flight_pb2 (flight_frame.py)
                response_serializer=flight_pb2.PutResult.SerializeToString,
            )
        },
    )
    return zerobus, flight
