"""A small fixed pool of long-lived streams per target table, each with its own ack lane.

Size: ``max(min_streams, ceil(peak_MB_s / per_stream_mb_ceiling))``, logged at open. Members are
opened lazily at the first write and kept for the life of the process (or until ``close``).

This module is the ingest path and the pool's lifecycle. Every open happens on the pool's supervisor
thread (``supervisor.py``), never on the ingest path: a pusher only selects a healthy member with room in
its share of the byte budget (``byte_budget.py``), reserves an in-flight slot on its lane and submits. A
member whose stream fails at submit is handed to the supervisor to rebuild; a transient failure or a
concurrency reject at submit is backed off and retried within the batch's budget (``submit_retry.py``),
not passed to the writer. ``flush`` waits until every
submitted batch is durable (through rebuilds) and raises for batches lost beyond repair; ``close``
drains, stops the supervisor and closes every stream.

Beside it: ``member.py`` (one member's state machine), ``supervisor.py`` (opens, rebuilds, backoff,
salvage), ``submit_retry.py`` (one batch's retry budget at submit), ``health.py`` (the snapshot).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
from prometheus_client import Counter

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import (
    ErrorClass,
    SinkClosedError,
    TableUnavailableError,
    ZerobusOrchestrationError,
    needing_operator,
    restated,
)
from zerobus_orchestration.metrics import SinkMetrics, default_metrics
from zerobus_orchestration.ranges import CoverageRecorder, OffsetRange
from zerobus_orchestration.sink.ack_lane import AckLane
from zerobus_orchestration.sink.byte_budget import ByteBudget, Share
from zerobus_orchestration.sink.confirmation import (
    Confirmation,
    InFlightBatches,
    LaneKind,
    PendingAck,
    check_lane,
)
from zerobus_orchestration.sink.errors import (
    CoverageNotRecordedError,
    DeliveryFailedError,
    LaneUnavailable,
    PoolUnavailableError,
)
from zerobus_orchestration.sink.health import BudgetFigures, PoolHealth, SampleReservoir, pool_health
from zerobus_orchestration.sink.lane_telemetry import LaneTelemetry
from zerobus_orchestration.sink.member import Member, MemberState
from zerobus_orchestration.sink.submit_retry import SubmitRetry
from zerobus_orchestration.sink.supervisor import Supervisor
from zerobus_orchestration.transport.base import Transport
from zerobus_orchestration.transport.classify import classify

log = logging.getLogger(__name__)


_FULL_CHANNEL_RESELECT_S = 0.005
"""How long an unkeyed pusher waits on one full channel before looking for room on the others."""


@dataclass(frozen=True)
class Submitted:
    """Where a batch went: pool member, member-lifetime sequence number, and stream offset."""

    member: int
    seq: int
    offset: int


def stable_index(key: str, size: int) -> int:
    """A process-independent hash of an ordering key to a member index (``hash()`` is salted)."""
    return zlib.crc32(key.encode("utf-8")) % size


class StreamPool:
    """Streams for one table. Thread-safe; one pool per (transport, table) for the life of the process."""

    def __init__(
        self,
        transport: Transport,
        table: str,
        config: PoolConfig | None = None,
        *,
        lane: LaneKind = LaneKind.RAW,
        recorder: CoverageRecorder | None = None,
        metrics: SinkMetrics | None = None,
        seed: int | None = None,
    ) -> None:
        self.transport = transport
        self.table = table
        self.config = config or PoolConfig()
        self.lane_kind = lane
        self.recorder = recorder
        self.metrics = metrics or default_metrics()
        self.size = self.config.streams_for_table()
        self._cond = threading.Condition()
        self._open_lock = threading.Lock()
        self._members = [Member(i) for i in range(self.size)]
        self._schema: pa.Schema | None = None
        self._closing = False
        self._closed = False
        self._rr = 0
        self.lane_failures = 0
        self.lane_poisonings = 0
        self._coalesce = SampleReservoir()
        self._latency = SampleReservoir()
        self._supervisor = Supervisor(self, seed=seed)  # its thread starts at the first ``ensure_open``
        self._budget = ByteBudget(
            self.config.max_inflight_bytes, self.size, table=table, counters=self._budget_counters
        )
        for member, share in zip(self._members, self._budget.shares, strict=True):
            member.share = share

    def _budget_counters(self, stream: str) -> tuple[Counter, Counter]:
        labels = {"table": self.table, "stream": stream, "lane": str(self.lane_kind)}
        return (
            self.metrics.inflight_budget_waits.labels(**labels),
            self.metrics.inflight_budget_wait_seconds.labels(**labels),
        )

    @property
    def inflight_bytes(self) -> int:
        """Bytes submitted and not yet settled (durable, or given up on), over every stream's share."""
        return self._budget.in_flight

    @property
    def budget(self) -> ByteBudget:
        return self._budget

    # -- counters kept by the supervisor ------------------------------------------------------------

    @property
    def concurrency_rejects(self) -> int:
        return self._supervisor.concurrency_rejects

    @property
    def open_attempts(self) -> int:
        return self._supervisor.open_attempts

    @property
    def open_refusals(self) -> int:
        return self._supervisor.open_refusals

    @property
    def supervisor_errors(self) -> int:
        return self._supervisor.errors

    @property
    def last_supervisor_error(self) -> str | None:
        return self._supervisor.last_error

    @property
    def last_open_backoff_s(self) -> float | None:
        """The most recent backoff before the next open (after a refusal), retry hint included."""
        return self._supervisor.last_open_backoff_s

    # -- opening ------------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def closed(self) -> bool:
        """``close`` ran: nothing in flight settles any more."""
        return self._closed

    @property
    def opened(self) -> bool:
        return self._schema is not None

    @property
    def schema(self) -> pa.Schema | None:
        return self._schema

    def ensure_open(self, schema: pa.Schema) -> None:
        """Open the pool at the first write; on a new schema, drain and re-open every member with it."""
        with self._open_lock:
            if self._closing:
                raise SinkClosedError(f"{self.table}: the stream pool is closed")
            # Metadata counts, as it does for the SDK: streams are opened with exactly this schema.
            if self._schema is not None and self._schema.equals(schema, check_metadata=True):
                return
            if self._schema is None:
                self._schema = schema
                log.info(
                    "%s: opening %d stream(s) (min_streams=%d, peak_mb_s=%s, per_stream_mb_ceiling=%s), "
                    "lane=%s",
                    self.table,
                    self.size,
                    self.config.min_streams,
                    self.config.peak_mb_s,
                    self.config.per_stream_mb_ceiling,
                    self.lane_kind,
                )
                self._supervisor.start()
                self._await_first_open()
                return
            log.info("%s: schema changed; draining and re-opening %d stream(s)", self.table, self.size)
            self.flush()
            self._schema = schema
            for member in self._members:
                with member.lock:
                    member.start_reopen(time.monotonic())
            self.notify()

    def _await_first_open(self) -> None:
        """Let the supervisor open every member before the first batch, so the pool starts balanced.

        Once the service refused an open, stops waiting as soon as one member is healthy (the rest open
        in the background, after their backoff), and at ``healthy_member_wait_s`` in any case.
        The supervisor notifies after a refusal and after an open, so neither is slept through.
        """
        deadline = time.monotonic() + self.config.healthy_member_wait_s
        with self._cond:
            while any(m.state is MemberState.OPENING for m in self._members):
                if self._supervisor.open_refusals and self.healthy_count():
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    # -- the ingest path ----------------------------------------------------------------------------

    def submit(
        self,
        batch: pa.RecordBatch,
        confirmation: Confirmation,
        *,
        key: str | None = None,
        future: Future[OffsetRange | None] | None = None,
        nbytes: int | None = None,
        tracker: InFlightBatches | None = None,
    ) -> Submitted:
        """Submit ``batch`` on a healthy member without waiting for durability.

        Waits while every stream's share of the byte budget (``max_inflight_bytes``) is spent or every
        ack channel is full (backpressure; keyed: the key's member's share and channel only;
        ``health().backpressure`` says which), or, bounded by ``healthy_member_wait_s``, while no member
        is healthy. A submit that poisons its stream is
        retried on a rebuilt stream a few times, backed off; see ``SubmitRetry``.
        ``nbytes``: the batch's size if the caller already knows it (saves recomputing it).
        ``tracker``: counts the batch as in flight until it is settled (a sink's own ``flush`` waits on it).
        """
        check_lane(self.lane_kind, confirmation)
        if self._schema is None:
            raise RuntimeError(f"{self.table}: ensure_open(schema) must run before the first submit")
        size = batch.nbytes if nbytes is None else nbytes
        deadline = time.monotonic() + self.config.healthy_member_wait_s
        retry: SubmitRetry | None = None  # built at the first refused submit: the common path never pays
        while True:
            # Bytes first, then a channel slot: both are the same backpressure point, and the bytes come
            # back only when the batch settles (``PendingAck.settle``), or here if it never reaches a lane.
            member, share = self._place(key, size, deadline)
            try:
                outcome = self._submit_on(member, share, batch, confirmation, key, future, size, tracker)
            except BaseException:
                share.release(size)
                raise
            if isinstance(outcome, Submitted):
                return outcome
            share.release(size)
            if outcome is None:
                continue  # the member changed, or its channel stayed full: select again
            failure, error_class = outcome
            self.notify()
            if retry is None:
                retry = SubmitRetry(self.table, self.config, self._supervisor)
            retry.after_failure(member, failure, error_class)
            if error_class is not ErrorClass.POISON:
                # The wait for a healthy member starts again after the backoff the service asked for.
                deadline = max(deadline, time.monotonic() + self.config.healthy_member_wait_s)

    def _beyond_repair(self, what: str, fatal: BaseException | None) -> ZerobusOrchestrationError:
        """The error a pusher gets from a pool that cannot send: the cause itself where no retry can help
        until someone acts (refused credentials, a refused table: ``needing_operator``), so the caller
        sees what failed; otherwise ``PoolUnavailableError`` naming the cause."""
        operator = None if fatal is None else needing_operator(fatal)
        if operator is not None:
            error: ZerobusOrchestrationError = restated(operator, str(operator))
            if isinstance(error, TableUnavailableError) and error.table is None:
                error.table = self.table
        else:
            error = PoolUnavailableError(
                f"{self.table}: {what}" + ("" if fatal is None else f": {fatal}"), table=self.table
            )
        error.__cause__ = fatal
        return error

    def _place(self, key: str | None, nbytes: int, deadline: float) -> tuple[Member, Share]:
        """A serving member for the batch and ``nbytes`` of its share of the byte budget.

        Keyed, the key's member, waiting for its own share only. Unkeyed, the first member in round-robin
        order whose share has room, preferring those whose channel has room too: one slow stream spends
        its own share and holds back only the batches pinned to it (head-of-line blocking otherwise).
        """
        while True:
            member = self._select(key, deadline)
            if key is not None:
                return member, self._budget.acquire(nbytes, member.index)
            share = self._budget.acquire_any(nbytes, self._candidates(member), self._serving)
            if share is not None:
                return self._members[share.index], share

    def _candidates(self, chosen: Member) -> list[int]:
        """Serving members from ``chosen`` on in round-robin order, those with channel room first."""
        ring = [self._members[(chosen.index + step) % self.size] for step in range(self.size)]
        serving = [m for m in ring if m.serving]
        roomy = [m.index for m in serving if m.lane is not None and m.lane.has_room]
        return roomy + [m.index for m in serving if m.index not in roomy]

    def _serving(self, index: int) -> bool:
        return self._members[index].serving

    def _submit_on(
        self,
        member: Member,
        share: Share,
        batch: pa.RecordBatch,
        confirmation: Confirmation,
        key: str | None,
        future: Future[OffsetRange | None] | None,
        nbytes: int,
        tracker: InFlightBatches | None,
    ) -> Submitted | tuple[Exception, ErrorClass] | None:
        """Submit on ``member`` holding ``nbytes`` of ``share``: where it went, why it was refused (a
        failure to retry), or None to select again (the caller gives the bytes back unless submitted)."""
        lane = member.lane
        if lane is None:
            return None
        unkeyed = key is None
        try:
            # Unkeyed, the wait is sliced: with every channel full, the first lane to free a slot takes
            # the batch, not necessarily ``member`` (which may be the slow one).
            if not lane.reserve(_FULL_CHANNEL_RESELECT_S if unkeyed else None):
                return None
        except LaneUnavailable:
            return None
        # The lane's capacity keeps the stream under its own in-flight cap (``lane_capacity``), so a submit
        # does not wait inside the transport; should one still take long, an unkeyed pusher goes elsewhere
        # rather than queue behind it.
        if not member.lock.acquire(timeout=_FULL_CHANNEL_RESELECT_S if unkeyed else -1):
            lane.release()
            return None
        try:
            stream = member.stream
            if member.state is not MemberState.HEALTHY or member.lane is not lane or stream is None:
                lane.release()
                return None
            submitted_at = time.monotonic()
            try:
                offset = stream.submit(batch)
            except Exception as exc:
                lane.release()
                error_class = classify(exc)
                if error_class not in (
                    ErrorClass.POISON,
                    ErrorClass.TRANSIENT,
                    ErrorClass.CONCURRENCY_REJECT,
                ):
                    raise
                if error_class is not ErrorClass.TRANSIENT:
                    self._start_rebuild_locked(member, exc)
                return exc, error_class
            seq = member.take_seq()
            if tracker is not None:
                tracker.add()  # before the lane can confirm it, so the count never goes below zero
            lane.put(
                PendingAck(
                    self.lane_kind,
                    seq,
                    offset,
                    confirmation,
                    submitted_at,
                    batch,
                    future,
                    nbytes=nbytes,
                    tracker=tracker,
                    budget=share,
                )
            )
            return Submitted(member.index, seq, offset)
        finally:
            member.lock.release()

    def _select(self, key: str | None, deadline: float) -> Member:
        with self._cond:
            while True:
                if self._closing:
                    raise SinkClosedError(f"{self.table}: the stream pool is closed")
                if key is not None:
                    member = self._members[stable_index(key, self.size)]
                    if member.serving:
                        return member
                    if member.failed_for_good:
                        raise self._beyond_repair(
                            f"stream {member.index} for ordering key {key!r} failed", member.fatal
                        )
                else:
                    for step in range(self.size):
                        candidate = self._members[(self._rr + step) % self.size]
                        if candidate.serving:
                            self._rr = (candidate.index + 1) % self.size
                            return candidate
                    if all(m.failed_for_good for m in self._members):
                        fatal = next((m.fatal for m in self._members if m.fatal is not None), None)
                        raise self._beyond_repair("every stream failed beyond repair", fatal)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    states = ", ".join(f"{m.index}:{m.state}" for m in self._members)
                    refused = self._supervisor.last_refusal
                    endpoint = getattr(self.transport, "endpoint", None)
                    raise PoolUnavailableError(
                        f"{self.table}: no healthy stream within {self.config.healthy_member_wait_s}s "
                        f"({states})"
                        + ("" if endpoint is None else f" at {endpoint} (zerobus.endpoint)")
                        + ("" if refused is None else f"; last refusal: {refused}")
                        + "; raise pool.healthy_member_wait_s or check the service",
                        table=self.table,
                    ) from refused
                self._cond.wait(remaining)

    # -- failures (called from lane threads) --------------------------------------------------------

    def on_lane_failed(self, lane: AckLane, error: BaseException, error_class: ErrorClass) -> None:
        with self._cond:
            self.lane_failures += 1
            if error_class is ErrorClass.POISON:
                self.lane_poisonings += 1
        # Only the owner's lock: another member's may be held by a pusher submitting on a slow stream,
        # and this lane's failure must not wait for that stream.
        owner = next((m for m in self._members if m.lane is lane), None)
        if owner is not None:
            with owner.lock:
                owned = owner.lane is lane  # also when a refused submit already marked it rebuilding
                if owned and owner.state is MemberState.HEALTHY:
                    if error_class in (ErrorClass.FATAL, ErrorClass.SCHEMA_REJECTED):
                        owner.fatal = error
                    self._start_rebuild_locked(owner, error)
            if owned and error_class is ErrorClass.CONCURRENCY_REJECT:
                # The service refused this stream's reconnects: re-opening at once would be refused too.
                # Back off pool-wide (retry hint honoured); the other members keep sending meanwhile.
                self._supervisor.back_off(owner, error, error_class, what="re-opening")
        self.notify()

    def _start_rebuild_locked(self, member: Member, error: BaseException) -> None:
        """Hand a member whose stream failed to the supervisor (the caller holds ``member.lock``)."""
        if member.start_rebuild(time.monotonic()):
            log.warning(
                "%s: stream %d (%s) failed; rebuilding: %s",
                self.table,
                member.index,
                member.stream.stream_id if member.stream else "?",
                error,
            )

    # -- what the supervisor uses (``supervisor.SupervisedPool``) --------------------------------------

    @property
    def members(self) -> Sequence[Member]:
        return self._members

    @property
    def changed(self) -> threading.Condition:
        """Notified whenever a member changes state, a submit fails or the pool closes."""
        return self._cond

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
        self._budget.wake()  # a pusher waiting for any stream's share looks again at which streams serve

    def healthy_count(self) -> int:
        return sum(1 for m in self._members if m.state is MemberState.HEALTHY)

    def lane_telemetry(self, member: Member) -> LaneTelemetry:
        """Where the lane of ``member``'s next stream reports (labels, and the pool's reservoirs)."""
        return LaneTelemetry(
            self.metrics, self.table, str(member.index), self._coalesce, self._latency, str(self.lane_kind)
        )

    # -- draining -----------------------------------------------------------------------------------

    @property
    def failed_batches(self) -> int:
        """Batches lost with members that failed beyond repair, over the pool's life."""
        return sum(m.failed_batches for m in self._members)

    @property
    def recoveries(self) -> int:
        """SDK reconnects observed inside this pool's streams, over the pool's life."""
        return sum(m.recoveries for m in self._members)

    @property
    def rows_possibly_resent(self) -> int:
        """Rows the SDK may have sent twice when it reconnected inside a stream, over the pool's life.

        A write takes the difference across its own run (the pool outlives every write)."""
        return sum(m.rows_possibly_resent for m in self._members)

    @property
    def confirm_errors(self) -> int:
        """Batches delivered durably whose coverage record failed, over the pool's life."""
        return sum(m.confirm_errors for m in self._members)

    @property
    def last_confirm_error(self) -> str | None:
        """The most recent coverage-record failure of any stream, as text (for error messages)."""
        errors = [m.lane.last_confirm_error for m in self._members if m.lane is not None]
        errors += [m.last_confirm_error for m in self._members]
        return next((e for e in errors if e is not None), None)

    def flush(
        self,
        timeout: float | None = None,
        *,
        failed_before: int = 0,
        unrecorded_before: int | None = None,
    ) -> None:
        """Wait until every submitted batch is durable and confirmed (through rebuilds).

        Raises ``DeliveryFailedError`` if more than ``failed_before`` batches were lost with members that
        failed beyond repair. A sink passes the count it saw when it started, so a write is not failed
        for batches an earlier write lost: the pool outlives every sink. Likewise, given
        ``unrecorded_before``, raises ``CoverageNotRecordedError`` if more batches than that were
        delivered without their coverage being recorded.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for member in self._members:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{self.table}: flush did not finish within {timeout}s")
                state, lane = member.state, member.lane
                if state in (MemberState.FAILED, MemberState.CLOSED):
                    break
                if state is MemberState.OPENING and not member.resubmit:
                    break
                if state is MemberState.HEALTHY and lane is not None:
                    lane.wait_idle(remaining)
                    if member.lane is lane and lane.outstanding == 0 and member.state is MemberState.HEALTHY:
                        break
                    continue
                with self._cond:
                    self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))
        self.raise_for_losses(failed_before=failed_before, unrecorded_before=unrecorded_before)

    def raise_for_losses(self, *, failed_before: int = 0, unrecorded_before: int | None = None) -> None:
        """Raise ``DeliveryFailedError`` / ``CoverageNotRecordedError`` for losses past the given counts.

        ``flush`` calls it once drained; a sink calls it after waiting for its own batches only.
        """
        failed = self.failed_batches - failed_before
        if failed > 0:
            errors = "; ".join(
                f"stream {m.index}: {m.last_loss or m.fatal}" for m in self._members if m.failed_batches
            )
            causes = [m.last_loss or m.fatal for m in self._members if m.failed_batches]
            raise DeliveryFailedError(
                f"{self.table}: {failed} batch(es) were not delivered ({errors}). Their receipts carry "
                "the cause and coverage excludes them, so a re-run re-sends exactly those ranges once "
                "the cause is fixed",
                table=self.table,
                failed_batches=failed,
            ) from next((c for c in causes if c is not None), None)
        unrecorded = 0 if unrecorded_before is None else self.confirm_errors - unrecorded_before
        if unrecorded > 0:
            raise CoverageNotRecordedError(
                f"{self.table}: {unrecorded} batch(es) reached the table durably, but recording their "
                f"coverage failed ({self.last_confirm_error}). The rows are in the table; a resume would "
                "send them again. Fix: make the coverage store writable (zerobus.coverage.location), "
                "then run read-back to list the rows outside coverage",
                table=self.table,
                batches=unrecorded,
            )

    def close(self, timeout: float | None = None) -> None:
        """Graceful drain: stop accepting, confirm everything outstanding, then close every stream."""
        with self._open_lock:
            if self._closed:
                return
            self._closing = True
        self.notify()
        try:
            if self._schema is not None:
                self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._budget.close()
            self._supervisor.join(timeout=5)
            for member in self._members:
                with member.lock:
                    lane, stream = member.close()
                if lane is not None:
                    lane.stop(timeout=5)
                if stream is not None:
                    try:
                        stream.close()
                    except Exception as exc:
                        log.warning("%s: closing stream %s: %s", self.table, stream.stream_id, exc)
            log.info("%s: stream pool closed", self.table)

    # -- health -------------------------------------------------------------------------------------

    def health(self) -> PoolHealth:
        supervisor, budget = self._supervisor, self._budget
        return pool_health(
            table=self.table,
            lane=str(self.lane_kind),
            members=self._members,
            coalesce=self._coalesce,
            latency=self._latency,
            concurrency_rejects=supervisor.concurrency_rejects,
            poisoned=self.lane_poisonings,
            lane_failures=self.lane_failures,
            supervisor_errors=supervisor.errors,
            last_supervisor_error=supervisor.last_error,
            closed=self._closed,
            now=time.monotonic(),
            budget=BudgetFigures(
                in_flight=budget.in_flight,
                limit=budget.limit,
                waiting=budget.waiting,
                waits=budget.waits,
                wait_s=budget.wait_s,
            ),
        )
