"""The two gRPC stream handlers: ``Zerobus/EphemeralStream`` (rows) and ``FlightService/DoPut`` (Arrow).

Both share one shape (``StreamSession``): a reader thread decodes requests, checks and conforms each
batch against the table, appends it to the WAL and queues a pending ack; the response generator
drains the queue, waits for the WAL group commit covering the newest pending batch (ack = durable)
and sends one cumulative ack for all of them. Failures end the call by setting a status and
returning: nothing inside the response generator raises on what a client sent, because an exception
there on every connection drives the SDK into a reconnect hot loop (reference/zerobus-protocol.md §6.2).

Handshake traps handled here (§2.3, §3, §8.2): initial metadata is flushed as soon as EphemeralStream
opens; the DoPut schema frame carries no FlightDescriptor; the ready ``PutResult``
``{"ack_up_to_offset": -1, "ack_up_to_records": 0}`` follows the schema frame before any ack; Arrow
acks carry the authoritative cumulative ``ack_up_to_records``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import pyarrow as pa

from zerobus_orchestration.emulator.auth import AuthFailure, TokenIssuer
from zerobus_orchestration.emulator.faults import FaultInjector, FaultKind, FaultSpec
from zerobus_orchestration.emulator.faults import Protocol as StreamProtocol
from zerobus_orchestration.emulator.materializer import TableState, arrow_schema, load_table
from zerobus_orchestration.emulator.proto import flight_pb2 as _flight_pb2
from zerobus_orchestration.emulator.proto import zerobus_service_pb2 as _zerobus_service_pb2
from zerobus_orchestration.emulator.quotas import StreamLimiter, Throttle
from zerobus_orchestration.emulator.records import (
    RowDecoder,
    avro_decoder,
    batch_from_frame,
    batch_to_ipc,
    json_decoder,
    proto_decoder,
    rows_to_batch,
    schema_from_frame,
)
from zerobus_orchestration.emulator.schema_check import ConformError, check_schema, conform
from zerobus_orchestration.emulator.status import RpcFailure
from zerobus_orchestration.emulator.table_health import TableFailedError, TableFailure
from zerobus_orchestration.emulator.value_check import check_values
from zerobus_orchestration.emulator.wal import WalUnusableError
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.tables import TableName, check_embedded_storage

log = logging.getLogger(__name__)

TABLE_HEADER = "x-databricks-zerobus-table-name"
ZEROBUS_SERVICE = "databricks.zerobus.Zerobus"
FLIGHT_SERVICE = "arrow.flight.protocol.FlightService"
READY = json.dumps({"ack_up_to_offset": -1, "ack_up_to_records": 0}).encode()
_POLL_S = 0.5

# Generated modules carry no type stubs; their classes are used dynamically.
zerobus_service_pb2: Any = _zerobus_service_pb2
flight_pb2: Any = _flight_pb2
RecordType: Any = zerobus_service_pb2.RecordType


class StreamServices(Protocol):
    """What a stream needs of the running emulator."""

    issuer: TokenIssuer
    limiter: StreamLimiter
    faults: FaultInjector
    per_stream_mb_s: float | None

    def table_state(self, full_name: str) -> TableState | None: ...

    def table_failure(self, full_name: str) -> TableFailure | None: ...


# -- events from the reader thread to the response generator ----------------------------------------
@dataclass(frozen=True)
class _Pending:
    seq: int
    wire_offset: int
    cumulative_rows: int
    batch_no: int
    rotate_grace_ms: int | None = None  # ask the client to rotate with this ack


@dataclass(frozen=True)
class _Abort:
    failure: RpcFailure


class _End:
    pass


_Event = _Pending | _Abort | _End
RenderAck = Callable[[_Pending, int | None], list[Any]]


@dataclass(frozen=True)
class Decoded:
    """One request turned into a batch (None: a request without data, ignored) and its wire offset."""

    batch: pa.RecordBatch | None
    wire_offset: int
    nbytes: int


Decode = Callable[[Any], Decoded]


class StreamSession:
    def __init__(
        self, services: StreamServices, state: TableState, target: pa.Schema, faults: list[FaultSpec]
    ) -> None:
        self.services = services
        self.state = state
        self.target = target
        self.faults = faults
        self.events: queue.Queue[_Event] = queue.Queue()
        self.stream_id = uuid.uuid4().hex

    def _fault(self, kind: FaultKind) -> FaultSpec | None:
        return next((f for f in self.faults if f.kind is kind), None)

    def _record(self, spec: FaultSpec, detail: str) -> None:
        self.services.faults.record_acted(spec, self.state.full_name, self.stream_id, detail)

    # -- reader side ------------------------------------------------------------------------------
    def read(self, requests: Iterator[Any], decode: Decode) -> None:
        try:
            self._read(requests, decode)
        except grpc.RpcError:
            self.events.put(_End())  # the client went away
        except Exception as exc:  # a bug must end this stream loudly, not hang it
            log.exception("stream %s on %s failed", self.stream_id, self.state.full_name)
            self.events.put(_Abort(RpcFailure(grpc.StatusCode.INTERNAL, f"emulator error: {exc}")))

    def _read(self, requests: Iterator[Any], decode: Decode) -> None:
        table = self.state.full_name
        throttle = Throttle(self.services.per_stream_mb_s)
        abort, crash, rotate = (self._fault(k) for k in (FaultKind.ABORT, FaultKind.CRASH, FaultKind.ROTATE))
        batches = 0
        rows = 0
        for request in requests:
            try:
                decoded = decode(request)
                if decoded.batch is None:
                    continue
                batch = conform(table, decoded.batch, self.target, fill_missing=False)
                # Values the table cannot hold are refused now: once acknowledged they would block it.
                check_values(table, batch)
            except ConformError as exc:
                self.events.put(_Abort(RpcFailure.schema(str(exc), [exc.problem.cause])))
                return
            except (ValueError, TypeError, pa.ArrowException) as exc:
                self.events.put(
                    _Abort(RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{table}: bad record: {exc}"))
                )
                return
            batches += 1
            if abort is not None and batches > abort.after_batches:
                self.services.faults.record_acted(
                    abort, table, self.stream_id, f"ended the stream with {abort.status} at batch {batches}"
                )
                self.events.put(_Abort(RpcFailure.named(abort.status, abort.message)))
                return
            throttle.consume(decoded.nbytes)
            failure = self.state.failure
            if failure is not None:  # marked failed while this stream was open: accept nothing more
                self.events.put(_Abort(failure.rpc_failure()))
                return
            try:
                seq = self.state.wal.append(batch_to_ipc(batch))
            except (OSError, WalUnusableError) as exc:
                self.events.put(_Abort(wal_failure(self.state, exc)))
                return
            rows += batch.num_rows
            if crash is not None and batches > crash.after_batches:
                self.state.wal.wait_durable(seq)
                log.warning("injected crash after WAL position %d of %s", seq, table)
                os._exit(crash.exit_code)
            rotate_now = rotate is not None and batches == max(1, rotate.after_batches)
            grace = rotate.grace_ms if rotate is not None and rotate_now else None
            self.events.put(_Pending(seq, decoded.wire_offset, rows, batches, grace))
        self.events.put(_End())

    # -- response side ----------------------------------------------------------------------------
    def responses(self, context: grpc.ServicerContext, render_ack: RenderAck) -> Iterator[Any]:
        """Acks for durable batches, then the end of the call; coalesces whatever is queued."""
        withhold, delay = self._fault(FaultKind.WITHHOLD_ACKS), self._fault(FaultKind.DELAY_ACKS)
        rotate_fault = self._fault(FaultKind.ROTATE)
        coalesce = withhold is None and delay is None
        held: deque[_Event] = deque()
        pause = threading.Event()
        while True:
            event = held.popleft() if held else self._next_event(context)
            if event is None:
                return
            if isinstance(event, _Pending):
                newest, rotate = event, event.rotate_grace_ms
                while coalesce:
                    try:
                        nxt = self.events.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(nxt, _Pending):
                        held.append(nxt)
                        break
                    newest = nxt
                    rotate = nxt.rotate_grace_ms if nxt.rotate_grace_ms is not None else rotate
                try:
                    self.state.wal.wait_durable(newest.seq)
                except (OSError, WalUnusableError) as exc:
                    # Never raise here (reconnect hot loop); the reopen is refused too, see open_stream.
                    wal_failure(self.state, exc).apply(context)
                    return
                if withhold is not None and newest.batch_no > withhold.after_batches:
                    self._record(withhold, f"withheld the ack of batch {newest.batch_no}")
                    continue
                if delay is not None and newest.batch_no > delay.after_batches:
                    self._record(delay, f"delayed the ack of batch {newest.batch_no} by {delay.delay_s:g} s")
                    pause.wait(delay.delay_s)
                if rotate is not None and rotate_fault is not None:
                    # the signal goes out with this ack
                    self._record(rotate_fault, f"asked to rotate with the ack of batch {newest.batch_no}")
                yield from render_ack(newest, rotate)
            elif isinstance(event, _Abort):
                event.failure.apply(context)
                return
            else:
                return

    def _next_event(self, context: grpc.ServicerContext) -> _Event | None:
        while True:
            try:
                return self.events.get(timeout=_POLL_S)
            except queue.Empty:
                if not context.is_active():
                    return None


def wal_failure(state: TableState, exc: BaseException) -> RpcFailure:
    """UNAVAILABLE (the SDK retries, then gives up with this text) naming the table, cause and fix."""
    reason = state.wal.broken
    if reason is None:  # the failed write was cut off cleanly: a later one may succeed (disk freed)
        return RpcFailure(
            grpc.StatusCode.UNAVAILABLE,
            f"{state.full_name}: the emulator could not write to its write-ahead log {state.wal.directory}: "
            f"{exc} (check the disk: free space, I/O errors)",
        )
    return wal_broken(state, reason)


def wal_broken(state: TableState, reason: str) -> RpcFailure:
    return RpcFailure(
        grpc.StatusCode.UNAVAILABLE,
        f"{state.full_name}: the emulator's write-ahead log {state.wal.directory} is broken ({reason}), "
        f"so it can make nothing durable and accepts no streams for this table: check the disk "
        f"(free space, I/O errors), then restart the emulator (acknowledged batches are replayed on start)",
    )


# -- opening a stream: auth, table, faults, quota --------------------------------------------------
@dataclass
class Opened:
    session: StreamSession
    release: Callable[[], None]


def open_stream(
    services: StreamServices, table: str | None, metadata: Mapping[str, str], protocol: StreamProtocol
) -> Opened | RpcFailure:
    if not table:
        return RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, f"missing table name (gRPC header {TABLE_HEADER})"
        )
    try:
        name = TableName.parse(table)  # the wire carries the dotted name: parsed once, folded, validated
        check_embedded_storage(name)  # a name whose WAL folder cannot exist is refused, not retried
        full_name = name.full_name
    except ConfigError as exc:
        return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    try:
        services.issuer.authorize(metadata.get("authorization"), full_name)
    except AuthFailure as exc:
        return RpcFailure.named(exc.code, f"{full_name}: {exc}")
    failure = services.table_failure(full_name)
    if failure is not None:
        return failure.rpc_failure()
    try:
        state = services.table_state(full_name)
    except TableFailedError as exc:
        return exc.failure.rpc_failure()
    except Exception as exc:  # never raise inside the response generator (reconnect hot loop)
        log.exception("opening %s failed", full_name)
        return RpcFailure(
            grpc.StatusCode.UNAVAILABLE, f"{full_name}: the emulator cannot open the table: {exc}"
        )
    if state is None:
        return RpcFailure(
            grpc.StatusCode.NOT_FOUND,
            f"table {full_name} does not exist (create it through the catalog before streaming to it)",
        )
    broken = state.wal.broken
    if broken is not None:
        # Accepting would fail the stream on its first batch, and the SDK would reconnect in a loop
        # until its flush timeout; a refused open makes it give up after its retries, with this text.
        return wal_broken(state, broken)
    faults = services.faults.arm(full_name, protocol)
    reject = next((f for f in faults if f.kind is FaultKind.REJECT_OPEN), None)
    if reject is not None:
        services.faults.record_acted(reject, full_name, "", f"refused the stream open with {reject.status}")
        return RpcFailure.named(reject.status, reject.message)
    if not services.limiter.acquire(full_name):
        return RpcFailure(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{full_name}: concurrent stream limit {services.limiter.limit} reached (reuse an open stream)",
        )
    release_once = threading.Lock()  # the call's done-callback and the generator's finally both release

    def release() -> None:
        if release_once.acquire(blocking=False):
            services.limiter.release(full_name)

    try:
        target = arrow_schema(load_table(state.uri, state.storage_options))
    except Exception as exc:
        release()
        return RpcFailure(grpc.StatusCode.UNAVAILABLE, f"{full_name}: cannot read the table schema: {exc}")
    return Opened(StreamSession(services, state, target, faults), release)


def _metadata(context: grpc.ServicerContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata():
        out[key.lower()] = value if isinstance(value, str) else value.decode("utf-8", "replace")
    return out


def _run_session(
    opened: Opened,
    context: grpc.ServicerContext,
    requests: Iterator[Any],
    decode: Decode,
    render_ack: RenderAck,
) -> Iterator[Any]:
    session = opened.session
    context.add_callback(lambda: session.events.put(_End()))
    context.add_callback(opened.release)
    reader = threading.Thread(
        target=session.read,
        args=(requests, decode),
        name=f"zerobus-emulator-read-{session.stream_id[:8]}",
        daemon=True,
    )
    reader.start()
    try:
        yield from session.responses(context, render_ack)
    finally:
        opened.release()


# -- row path ---------------------------------------------------------------------------------------
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
    metadata = _metadata(context)
    try:
        first = next(requests)
    except (StopIteration, grpc.RpcError):
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

    def decode(request: Any) -> Decoded:
        found = _row_records(request)
        if found is None:
            return Decoded(None, -1, 0)
        offset, records = found
        nbytes = sum(len(r) for r in records)
        return Decoded(rows_to_batch(full_name, decoder(records), target), offset, nbytes)

    def render_ack(pending: _Pending, rotate_grace_ms: int | None) -> list[Any]:
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
    yield from _run_session(opened, context, requests, decode, render_ack)


# -- Arrow path -------------------------------------------------------------------------------------
def _offset_of(frame: Any, fallback: int) -> int:
    if not frame.app_metadata:
        return fallback
    try:
        value = json.loads(frame.app_metadata)
        return int(value.get("offset_id", fallback))
    except (ValueError, TypeError, AttributeError):
        return fallback


def do_put(services: StreamServices, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    metadata = _metadata(context)
    opened = open_stream(services, metadata.get(TABLE_HEADER), metadata, "arrow")
    if isinstance(opened, RpcFailure):
        opened.apply(context)
        return
    session = opened.session
    full_name, target = session.state.full_name, session.target
    try:
        first = next(requests)
        schema = schema_from_frame(first.data_header)
    except (StopIteration, grpc.RpcError):
        opened.release()
        return
    except (pa.ArrowException, ValueError) as exc:
        opened.release()
        RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, f"{full_name}: first frame is not an IPC schema: {exc}"
        ).apply(context)
        return
    check = check_schema(full_name, schema, target)
    if not check.ok:
        opened.release()
        RpcFailure.schema(check.message(), check.causes).apply(context)
        return
    frames = 0

    def decode(frame: Any) -> Decoded:
        nonlocal frames
        offset = _offset_of(frame, frames)
        frames += 1
        if not frame.data_header:
            return Decoded(None, offset, 0)
        batch = batch_from_frame(schema, frame.data_header, frame.data_body)
        return Decoded(batch, offset, len(frame.data_body))

    def ack_json(pending: _Pending, rotate_grace_ms: int | None) -> list[Any]:
        body = {"ack_up_to_offset": pending.wire_offset, "ack_up_to_records": pending.cumulative_rows}
        if rotate_grace_ms is not None:
            body["close_stream_duration_ms"] = rotate_grace_ms
        return [flight_pb2.PutResult(app_metadata=json.dumps(body).encode())]

    yield flight_pb2.PutResult(app_metadata=READY)
    yield from _run_session(opened, context, requests, decode, ack_json)


def generic_handlers(services: StreamServices) -> tuple[grpc.GenericRpcHandler, ...]:
    zerobus = grpc.method_handlers_generic_handler(
        ZEROBUS_SERVICE,
        {
            "EphemeralStream": grpc.stream_stream_rpc_method_handler(
                lambda requests, context: ephemeral_stream(services, requests, context),
                request_deserializer=zerobus_service_pb2.EphemeralStreamRequest.FromString,
                response_serializer=zerobus_service_pb2.EphemeralStreamResponse.SerializeToString,
            )
        },
    )
    flight = grpc.method_handlers_generic_handler(
        FLIGHT_SERVICE,
        {
            "DoPut": grpc.stream_stream_rpc_method_handler(
                lambda requests, context: do_put(services, requests, context),
                request_deserializer=flight_pb2.FlightData.FromString,
                response_serializer=flight_pb2.PutResult.SerializeToString,
            )
        },
    )
    return zerobus, flight
