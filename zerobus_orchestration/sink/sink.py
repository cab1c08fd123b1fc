"""``ZerobusSink``: stamp, guard and submit Arrow data without ever waiting for durability inline.

``push`` (fire-and-forget) and ``send`` (returns receipts whose futures only the ack lane resolves)
stamp the reserved columns, pass the catalog gate, and submit through the table's stream pool.
``finish`` reports what was *submitted* (never what is durable); ``flush`` drains this sink's own
batches to durable, for shutdown and checkpoints. Durable coverage is recorded by the ack lanes alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import TypeAlias

import pyarrow as pa

from zerobus_orchestration.errors import SinkClosedError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.sink.confirmation import (
    Confirmation,
    DerivedCoverage,
    InFlightBatches,
    LaneKind,
    NoConfirm,
    RawAnchor,
)
from zerobus_orchestration.sink.errors import ConfirmationLaneError, DeliveryFailedError, PartialSendError
from zerobus_orchestration.sink.health import PoolHealth
from zerobus_orchestration.sink.pool import StreamPool, Submitted
from zerobus_orchestration.sink.schema_gate import SchemaGate
from zerobus_orchestration.sink.slicing import cuts
from zerobus_orchestration.sink.stamping import (
    Stamper,
    check_input,
    is_in_memory,
    position_span,
    with_positions,
)

ArrowInput: TypeAlias = pa.RecordBatch | pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]
"""Half-open row-position span ``[start, end)`` within (source, partition)."""
_Piece: TypeAlias = tuple[pa.RecordBatch, int | None, int | None]
"""A batch to send, the position of its first row (None: continue), its ``nbytes`` if measured."""

_FLUSH_SLICE_S = 0.1
"""How often a waiting ``flush`` looks whether the pool was closed under it (then nothing more settles)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitInfo:
    """What this sink submitted (not what is durable: see ``flush`` and the receipts).

    ``bytes``: stamped Arrow bytes, as sent (the payload conformed to the table's wire types, plus the
    three reserved ``_twg_*`` columns). ``payload_bytes``: the caller's own Arrow bytes of the same rows,
    before stamping: what a throughput of the user's data counts.
    """

    table: str
    sink_id: str
    source: str
    partition: str
    batches: int
    rows: int
    bytes: int
    streams: int
    payload_bytes: int


@dataclass(frozen=True)
class Receipt:
    """One submitted batch. ``future`` resolves (to ``span``) only after its durable acknowledgement."""

    key: CoverageKey
    span: OffsetRange
    member: int
    offset: int
    future: Future[OffsetRange | None]

    def durable(self, timeout: float | None = None) -> OffsetRange | None:
        """Block until the ack lane confirmed this batch; raises if it could not be delivered."""
        return self.future.result(timeout)


@dataclass(frozen=True)
class _Prepared:
    batch: pa.RecordBatch
    span: OffsetRange
    runs: tuple[OffsetRange, ...] | None  # the exact ranges when the batch's positions have gaps
    nbytes: int  # measured once; ``RecordBatch.nbytes`` walks every buffer
    payload_nbytes: int  # the caller's rows' own bytes (no reserved columns, before conforming)
    claimed_from: int  # ``_next_offset`` before this batch claimed its positions (see ``_unclaim``)
    payload: pa.RecordBatch  # the caller's rows before stamping: what the range's content digest hashes


class ZerobusSink:
    """Write Arrow data for one (source, partition) into one table. Thread-safe for concurrent pushers.

    ``pool``: the table's ``StreamPool`` (``ZerobusRuntime.sink`` hands out the process's long-lived one).
    ``source`` / ``partition``: stamped into ``_twg_source`` and the coverage key.
    ``start_offset``: row position of the first row (``_twg_offset``), unless ``offset_column`` names a
    column that already holds each row's position (non-negative; gaps and any order allowed, e.g. Kafka
    offsets: coverage then records exactly the positions sent). ``ordering_key``: pin every batch of this
    sink to one stream so its order is kept. ``gate``: the catalog's schema gate.
    ``lane``: the confirmation kind this sink produces; must match the pool's lane.
    ``confirm``: False sends ``NoConfirm`` (nothing recorded, receipts still resolve).
    """

    def __init__(
        self,
        pool: StreamPool,
        *,
        source: str,
        partition: str = "",
        sink_id: str | None = None,
        start_offset: int = 0,
        offset_column: str | None = None,
        ordering_key: str | None = None,
        gate: SchemaGate | None = None,
        lane: LaneKind | None = None,
        confirm: bool = True,
        max_batch_rows: int | None = None,
        owns_pool: bool = False,
    ) -> None:
        if not source:
            raise ValueError(
                f"{pool.table}: a sink needs a non-empty source (asset key, dag_id/task_id, ...)"
            )
        if start_offset < 0:
            raise ValueError(f"{pool.table}: start_offset must be >= 0, got {start_offset}")
        if max_batch_rows is not None and max_batch_rows < 1:
            raise ValueError(f"{pool.table}: max_batch_rows must be >= 1")
        self.lane = lane if lane is not None else pool.lane_kind
        if self.lane is not pool.lane_kind:
            raise ConfirmationLaneError(
                f"{pool.table}: a {self.lane}-lane sink cannot write through a "
                f"{pool.lane_kind}-lane stream pool "
                f"(fix: build the pool with lane=LaneKind.{self.lane.name})",
                lane=str(pool.lane_kind),
            )
        self.pool = pool
        self.table = pool.table
        self.source = source
        self.partition = partition
        self.sink_id = sink_id or pool.table
        self.key = CoverageKey(self.sink_id, source, partition)
        self.start_offset = start_offset
        self.offset_column = offset_column
        self.ordering_key = ordering_key
        self.gate = gate
        self.confirm = confirm
        self.max_batch_rows = max_batch_rows
        self._owns_pool = owns_pool
        self._failed_before = pool.failed_batches  # losses of earlier writes are not this sink's
        self._unrecorded_before = pool.confirm_errors  # nor are their coverage-record failures
        self._inflight = InFlightBatches()
        self._lock = threading.Lock()
        self._next_offset = start_offset
        self._last_schema: pa.Schema | None = None
        self._target: pa.Schema | None = None
        self._batches = 0
        self._rows = 0
        self._bytes = 0
        self._payload_bytes = 0
        self._closed = False
        self._stamper = Stamper(source)

    # -- writing ------------------------------------------------------------------------------------

    def push(self, data: ArrowInput, *, key: str | None = None, at: int | None = None) -> None:
        """Fire-and-forget: stamp, guard and submit every batch; never waits for durability.

        ``at``: row position of the first row (resume after a gap); later rows continue from it.
        In-memory input (a batch, a list or tuple of batches, a Table) is checked whole, the catalog
        gate and the write-boundary guard included, before anything is submitted: a bad batch fails the
        call with nothing sent. A streamed input (reader, generator) is checked and sent batch by batch.
        """
        self._deliver(self._positioned(data, at), key, None, whole=is_in_memory(data))

    def push_positioned(
        self,
        pieces: Iterable[tuple[pa.RecordBatch, int | None]],
        *,
        whole: bool,
        key: str | None = None,
    ) -> None:
        """``push`` of batches that each carry the position of their first row (a resumed write's slices).

        ``whole``: the pieces come from in-memory input, so check them all before submitting any.
        """
        self._deliver(self._checked(pieces, whole), key, None, whole=whole)

    def send(self, data: ArrowInput, *, key: str | None = None, at: int | None = None) -> list[Receipt]:
        """Like ``push``, returning one ``Receipt`` per submitted batch.

        In-memory input (a batch, a list or tuple of batches, a Table) is checked whole (the catalog
        gate and the write-boundary guard included) before anything is sent, so a bad batch fails the
        call with nothing submitted. A streamed input (reader, generator) is sent batch by batch.
        Whenever a later batch fails (a streamed batch's checks, the pool), ``PartialSendError``
        carries the receipts of the batches already submitted.
        """
        receipts: list[Receipt] = []
        try:
            self._deliver(self._positioned(data, at), key, receipts, whole=is_in_memory(data))
        except Exception as exc:
            if not receipts:
                raise
            raise PartialSendError(
                f"{self.table}: send stopped after {len(receipts)} batch(es) were already submitted "
                f"(positions {receipts[0].span.start} .. {receipts[-1].span.end}); they are on their way "
                "and their receipts are on this error's .receipts. The failing batch and the rest of the "
                f"input were not sent: {exc}. Fix: correct that batch, then send it and the rest again",
                receipts,
                exc,
            ) from exc
        return receipts

    def _deliver(
        self,
        pieces: Iterable[_Piece],
        key: str | None,
        receipts: list[Receipt] | None,
        *,
        whole: bool,
    ) -> None:
        """Prepare and submit ``pieces`` (``_checked``'s); ``receipts``: one per submitted batch (``send``).

        ``whole``: prepare (stamp, gate, guard) every piece before submitting the first, so a bad piece
        leaves nothing sent; the positions already claimed are handed back (``_unclaim``).
        """
        if not whole:
            for batch, position, nbytes in pieces:
                prepared = self._prepare(batch, position, nbytes)
                if prepared is not None:
                    self._submit_collecting(prepared, key, receipts)
            return
        ready: list[_Prepared] = []
        try:
            for batch, position, nbytes in pieces:
                prepared = self._prepare(batch, position, nbytes)
                if prepared is not None:
                    ready.append(prepared)
        except BaseException:
            for claimed in reversed(ready):
                self._unclaim(claimed)
            raise
        for i, prepared in enumerate(ready):
            try:
                self._submit_collecting(prepared, key, receipts)
            except BaseException:
                for claimed in reversed(ready[i + 1 :]):  # the failed one is handed back by ``_submit``
                    self._unclaim(claimed)
                raise

    def _submit_collecting(
        self, prepared: _Prepared, key: str | None, receipts: list[Receipt] | None
    ) -> None:
        if receipts is None:
            self._submit(prepared, key, None)
            return
        future: Future[OffsetRange | None] = Future()
        where = self._submit(prepared, key, future)
        receipts.append(Receipt(self.key, prepared.span, where.member, where.offset, future))

    def _submit(
        self, prepared: _Prepared, key: str | None, future: Future[OffsetRange | None] | None
    ) -> Submitted:
        try:
            opened_with = self.pool.schema  # shared pool: another sink may have re-opened it
            if opened_with is None or not prepared.batch.schema.equals(opened_with):
                self.pool.ensure_open(prepared.batch.schema)
            return self.pool.submit(
                prepared.batch,
                self._confirmation(prepared.span, prepared.runs, prepared.payload),
                key=key or self.ordering_key,
                future=future,
                nbytes=prepared.nbytes,
                tracker=self._inflight,
            )
        except Exception:
            self._unclaim(prepared)
            raise

    def _unclaim(self, prepared: _Prepared) -> None:
        """Undo ``_prepare``'s claim for a batch the pool refused (it was never queued on a stream).

        Without this, ``finish`` would count the refused batch as submitted and the next batch would
        start after its positions, leaving a hole nothing ever fills. Positions are handed back only
        if no later batch claimed positions meanwhile; otherwise the hole stays (coverage is
        gap-aware, so a resume still finds it).
        """
        with self._lock:
            self._batches -= 1
            self._rows -= prepared.batch.num_rows
            self._bytes -= prepared.nbytes
            self._payload_bytes -= prepared.payload_nbytes
            if self._next_offset == prepared.span.end:
                self._next_offset = prepared.claimed_from

    def _positioned(self, data: ArrowInput, at: int | None) -> Iterable[_Piece]:
        if at is not None and (at < 0 or self.offset_column is not None):
            raise ValueError(
                f"{self.table}: at={at} needs a non-negative position and no offset_column "
                f"(offset_column={self.offset_column!r} already gives every row its position)"
            )
        in_memory = is_in_memory(data)
        if isinstance(data, pa.RecordBatch):
            source: Iterable[pa.RecordBatch] = (data,)
        elif isinstance(data, pa.Table):
            source = data.to_batches()
        else:
            source = data  # a reader or iterator is streamed: one batch alive here at a time
        return self._checked(with_positions(source, at), in_memory)

    def finish(self) -> tuple[CommitInfo, OffsetRange]:
        """What was submitted, and the submitted high-water span. Does not wait for durability."""
        with self._lock:
            info = CommitInfo(
                self.table,
                self.sink_id,
                self.source,
                self.partition,
                self._batches,
                self._rows,
                self._bytes,
                self.pool.size,
                self._payload_bytes,
            )
            return info, OffsetRange(self.start_offset, max(self.start_offset, self._next_offset))

    def flush(self, timeout: float | None = None) -> None:
        """Block until every batch this sink submitted is durable and confirmed (shutdown, checkpoints).

        Waits for this sink's own batches only (through rebuilds and re-submits), not for the shared
        pool to go idle: a sibling sink that keeps pushing would otherwise keep it from ever returning.
        Then raises ``DeliveryFailedError`` / ``CoverageNotRecordedError`` as ``StreamPool.flush`` does.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(
                    f"{self.table}: flush of sink {self.sink_id}/{self.source} did not finish within "
                    f"{timeout}s ({self._inflight.count} batch(es) not yet durable)"
                )
            wait = _FLUSH_SLICE_S if remaining is None else min(remaining, _FLUSH_SLICE_S)
            if self._inflight.wait_settled(wait):
                break
            if self.pool.closed:
                raise DeliveryFailedError(
                    f"{self.table}: the stream pool was closed with {self._inflight.count} batch(es) of "
                    f"sink {self.sink_id}/{self.source} not yet durable; coverage excludes them, so a "
                    "re-run re-sends them",
                    table=self.table,
                    failed_batches=self._inflight.count,
                )
        self.pool.raise_for_losses(
            failed_before=self._failed_before, unrecorded_before=self._unrecorded_before
        )

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting and drain to durable; closes the pool too if this sink owns it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_pool:
            self.pool.close(timeout)
        else:
            self.flush(timeout)

    def health(self) -> PoolHealth:
        return self.pool.health()

    def __enter__(self) -> ZerobusSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # still drain what was submitted, but never mask the body's own exception
            self.close()
        except Exception as close_error:
            log.error(
                "%s: draining sink %s/%s after an error failed: %s",
                self.table,
                self.sink_id,
                self.source,
                close_error,
            )

    # -- internals ----------------------------------------------------------------------------------

    def _confirmation(
        self, span: OffsetRange, runs: tuple[OffsetRange, ...] | None, payload: pa.RecordBatch
    ) -> Confirmation:
        if not self.confirm:
            return NoConfirm()
        # The payload rides along (zero-copy: the stamped batch shares its columns) so the ack lane can
        # record the range's content digest once the batch is durable, off this push path.
        if self.lane is LaneKind.RAW:
            return RawAnchor(self.key, span, runs, payload, self.offset_column)
        return DerivedCoverage(self.key, span, runs, payload, self.offset_column)

    def _checked(
        self, pieces: Iterable[tuple[pa.RecordBatch, int | None]], in_memory: bool
    ) -> Iterator[_Piece]:
        """Each piece, checked by ``check_input`` and cut to ``max_batch_rows`` and ``max_batch_bytes``
        as sent (stamped; ``sink/slicing.py``: uneven rows too, a row too large for any call refused).

        Each slice keeps its rows' positions, so each is stamped, submitted and recorded in coverage
        (with its digest) as its own range, as if the caller had sent it alone. Slices of in-memory
        input are zero-copy; slices of a streamed batch are compact copies (see below). A piece carries
        its ``nbytes`` when it was measured here (an unsliced batch), so ``_prepare`` need not again.
        """
        if in_memory:
            # Already in memory, so check it whole first (``_deliver`` then prepares it whole too).
            checked: list[tuple[pa.RecordBatch, int | None]] = []
            for batch, at in pieces:
                check_input(self.table, batch, self.offset_column)
                checked.append((batch, at))
            pieces = checked
        for batch, at in pieces:
            if not in_memory:
                check_input(self.table, batch, self.offset_column)
            nbytes = batch.nbytes  # walks every buffer: measured once per input batch
            # All of this batch's cuts before any is sent: a row refused there leaves none of it sent.
            sliced = list(
                cuts(
                    batch,
                    nbytes,
                    limit=self.pool.config.max_batch_bytes,
                    per_row=self._stamper.bytes_per_row,
                    max_rows=self.max_batch_rows,
                    table=self.table,
                    position=self._next_offset if at is None and self.offset_column is None else at,
                )
            )
            if len(sliced) == 1:
                yield batch, at, nbytes
            else:
                for cut in sliced:
                    piece = batch.slice(cut.start, cut.length)
                    nbytes_of_piece = cut.nbytes
                    if not in_memory:
                        # A zero-copy slice pins its whole parent until the slice is acknowledged, so
                        # the in-flight slices of a few large streamed batches would hold several
                        # parents (the budget counts slices, not parents). A compact copy lets the
                        # parent go as soon as the reader moves on; in-memory input is held by the
                        # caller anyway, so its slices stay zero-copy. The copy comes from the
                        # system allocator: Arrow's default pool (mimalloc) keeps freed blocks
                        # resident, which measured ~80 MB more peak RSS with 100 MB batches.
                        piece = pa.concat_batches([piece], memory_pool=pa.system_memory_pool())
                        nbytes_of_piece = None  # a compact copy: its own size, measured if needed
                    yield piece, None if at is None else at + cut.start, nbytes_of_piece
                del piece
            # Let go of this batch before the reader builds the next: otherwise two input batches
            # are alive at once, which is what bounds client memory for large batches.
            del batch

    def _prepare(
        self, batch: pa.RecordBatch, at: int | None = None, payload_nbytes: int | None = None
    ) -> _Prepared | None:
        """Stamp and guard one batch (``check_input`` passed it) and claim its row positions.

        ``payload_nbytes``: ``batch.nbytes`` if already measured. Nothing is sent if this raises."""
        if batch.num_rows == 0:
            return None
        emit_ts = dt.datetime.now(dt.UTC)
        with self._lock:
            if self._closed:
                raise SinkClosedError(
                    f"{self.table}: push after close() on sink {self.sink_id}/{self.source}"
                )
            column = self.offset_column
            declared = None if column is None else batch.column(column).cast(pa.int64())  # cast once
            span, runs = position_span(batch, self._next_offset if at is None else at, declared)
            stamped = self._stamper.stamp(batch, span, emit_ts, declared)
            conformed = stamped
            if self.gate is not None:
                if self._last_schema is None or not stamped.schema.equals(self._last_schema):
                    self._target = self.gate.ensure(self.table, stamped.schema, stamped)
                    self._last_schema = stamped.schema
                assert self._target is not None
                conformed = self.gate.conform(self.table, stamped, self._target)
            payload = batch.nbytes if payload_nbytes is None else payload_nbytes
            if conformed is stamped:
                # Unchanged by the gate: the payload's size plus the three stamped columns' (cheap:
                # ``RecordBatch.nbytes`` walks every buffer of every column again).
                nbytes = payload + sum(column.nbytes for column in stamped.columns[-3:])
            else:
                nbytes = conformed.nbytes
            stamped = conformed
            claimed_from = self._next_offset
            self._next_offset = max(self._next_offset, span.end)
            self._batches += 1
            self._rows += stamped.num_rows
            self._bytes += nbytes
            self._payload_bytes += payload
        return _Prepared(stamped, span, runs, nbytes, payload, claimed_from, batch)


__all__ = [
    "ArrowInput",
    "CommitInfo",
    "PartialSendError",
    "Receipt",
    "ZerobusSink",
    "is_in_memory",
]
