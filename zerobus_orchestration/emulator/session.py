"""One ingest stream's life, shared by both wire protocols: open (auth, table, faults, quota), read, ack.

``open_stream`` refuses what can never work with the status the SDK gives up on (a missing table, a
broken write-ahead log, the stream quota). ``StreamSession``: a reader thread decodes requests, checks
and conforms each batch against the table, appends it to the WAL and queues a pending ack; the
response generator drains the queue, waits for the WAL group commit covering the newest pending batch
(ack = durable) and sends one cumulative ack for all of them. Failures end the call by setting a
status and returning: nothing inside the response generator raises on what a client sent, because an
exception there on every connection drives the SDK into a reconnect hot loop. ``streams.py`` holds the
two protocols' decoding and ack rendering.
"""

from __future__ import annotations

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

from zerobus_orchestration.emulator.auth import TokenIssuer
from zerobus_orchestration.emulator.errors import (
    AuthFailure,
    ConformError,
    RecordTooLarge,
    TableFailedError,
    WalUnusableError,
)
from zerobus_orchestration.emulator.faults import FaultInjector, FaultKind, FaultSpec
from zerobus_orchestration.emulator.faults import Protocol as StreamProtocol
from zerobus_orchestration.emulator.materializer import TableState, arrow_schema, load_table
from zerobus_orchestration.emulator.quotas import StreamLimiter, Throttle
from zerobus_orchestration.emulator.records import (
    batch_to_ipc,
)
from zerobus_orchestration.emulator.schema_check import conform, unchanged
from zerobus_orchestration.emulator.status import RpcFailure
from zerobus_orchestration.emulator.table_health import TableFailure
from zerobus_orchestration.emulator.value_check import check_values
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.tables import TableName, check_embedded_storage

log = logging.getLogger(__name__)

TABLE_HEADER = "x-databricks-zerobus-table-name"
POLL_S = 0.5


class StreamServices(Protocol):
    """What a stream needs of the running emulator."""

    @property
    def issuer(self) -> TokenIssuer: ...

    limiter: StreamLimiter
    faults: FaultInjector
    per_stream_mb_s: float | None

    def table_state(self, full_name: str) -> TableState | None: ...

    def table_failure(self, full_name: str) -> TableFailure | None: ...


# -- events from the reader thread to the response generator ----------------------------------------
@dataclass(frozen=True)
class Pending:
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


_Event = Pending | _Abort | _End
RenderAck = Callable[[Pending, int | None], list[Any]]


@dataclass(frozen=True)
class Decoded:
    """One request turned into a batch (None: a request without data, ignored) and its wire offset."""

    batch: pa.RecordBatch | None
    wire_offset: int
    nbytes: int
    # An IPC stream holding exactly ``batch`` as received (Arrow path): logged as is when the table
    # takes the batch unchanged, instead of serialising it again.
    ipc: bytes | None = None


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
    def read(self, requests: Iterator[Any], decode: Decode, alive: Callable[[], bool] = lambda: True) -> None:
        try:
            self._read(requests, decode, alive)
        except grpc.RpcError:
            self.events.put(_End())  # the client went away
        except Exception as exc:  # a bug must end this stream loudly, not hang it
            log.exception("stream %s on %s failed", self.stream_id, self.state.full_name)
            self.events.put(_Abort(RpcFailure(grpc.StatusCode.INTERNAL, f"emulator error: {exc}")))

    def _read(self, requests: Iterator[Any], decode: Decode, alive: Callable[[], bool]) -> None:
        table = self.state.full_name
        throttle = Throttle(self.services.per_stream_mb_s)
        abort, crash, rotate = (self._fault(k) for k in (FaultKind.ABORT, FaultKind.CRASH, FaultKind.ROTATE))
        late_commit = self._fault(FaultKind.DELAY_COMMIT)
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
            except RecordTooLarge as exc:
                self.events.put(_Abort(RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))))
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
            if not alive():
                # The client went away while this batch waited (the throttle can hold it for seconds):
                # it was never acknowledged, so it is dropped, not made durable long after the writer
                # died (a resume on another host would have no way to wait for it).
                self.events.put(_End())
                return
            failure = self.state.failure
            if failure is not None:  # marked failed while this stream was open: accept nothing more
                self.events.put(_Abort(failure.rpc_failure()))
                return
            if late_commit is not None and batches > late_commit.after_batches:
                # Held before the record exists: the materialiser cannot commit it in between.
                held_after = self.state.hold_commits(late_commit.delay_s)
                self._record(
                    late_commit,
                    f"held batch {batches} (WAL positions after {held_after}) from the Delta table for "
                    f"{late_commit.delay_s:g} s",
                )
            try:
                seq = self.state.wal.append(wal_payload(decoded, batch))
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
            self.events.put(Pending(seq, decoded.wire_offset, rows, batches, grace))
        self.events.put(_End())

    # -- response side ----------------------------------------------------------------------------
    def responses(self, context: grpc.ServicerContext, render_ack: RenderAck) -> Iterator[Any]:
        """Acks for durable batches, then the end of the call; coalesces whatever is queued."""
        withhold, delay = self._fault(FaultKind.WITHHOLD_ACKS), self._fault(FaultKind.DELAY_ACKS)
        rotate_fault, undurable = self._fault(FaultKind.ROTATE), self._fault(FaultKind.DELAY_DURABILITY)
        coalesce = withhold is None and delay is None and undurable is None
        held: deque[_Event] = deque()
        pause = threading.Event()
        while True:
            event = held.popleft() if held else self._next_event(context)
            if event is None:
                return
            if isinstance(event, Pending):
                newest, rotate = event, event.rotate_grace_ms
                while coalesce:
                    try:
                        nxt = self.events.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(nxt, Pending):
                        held.append(nxt)
                        break
                    newest = nxt
                    rotate = nxt.rotate_grace_ms if nxt.rotate_grace_ms is not None else rotate
                durable = self.state.wal.durable_seq
                if (
                    undurable is not None
                    and newest.batch_no > undurable.after_batches
                    and durable < newest.seq
                ):
                    # Only while the batch is not durable yet (a group commit may already have covered it).
                    self._record(
                        undurable,
                        f"held batch {newest.batch_no} (WAL position {newest.seq}, durable through "
                        f"{durable}) {undurable.delay_s:g} s before making it durable",
                    )
                    pause.wait(undurable.delay_s)
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
                return self.events.get(timeout=POLL_S)
            except queue.Empty:
                if not context.is_active():
                    return None


def wal_payload(decoded: Decoded, conformed: pa.RecordBatch) -> bytes:
    """The IPC stream to log: the received one when conforming changed nothing, else a new one."""
    if decoded.ipc is not None and decoded.batch is not None and unchanged(decoded.batch, conformed):
        return decoded.ipc
    return batch_to_ipc(conformed)


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


def stream_metadata(context: grpc.ServicerContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata():
        out[key.lower()] = value if isinstance(value, str) else value.decode("utf-8", "replace")
    return out


def run_session(
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
        args=(requests, decode, context.is_active),
        name=f"zerobus-emulator-read-{session.stream_id[:8]}",
        daemon=True,
    )
    reader.start()
    try:
        yield from session.responses(context, render_ack)
    finally:
        opened.release()
