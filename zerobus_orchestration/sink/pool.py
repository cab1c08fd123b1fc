"""A small fixed pool of long-lived streams per target table, each with its own ack lane.

Size: ``max(min_streams, ceil(peak_MB_s / per_stream_mb_ceiling))``, logged at open. Members are
opened lazily at the first write and kept for the life of the process (or until ``close``).

Every open happens on the pool's supervisor thread, never on the ingest path: pushers only select a
healthy member, reserve an in-flight slot on its lane and submit. The supervisor also rebuilds
poisoned members (within ``rebuild_budget_s``; the other members keep serving) and retries refused
opens with exponential backoff and jitter shared by the whole pool, so repeated concurrency rejects
can never turn into a reopen storm. A stream the service stops with a concurrency reject mid-stream (its
SDK reconnects refused) waits out the same backoff before it is re-opened, never at once; a retry hint in
the service's status is a floor on every such wait. A transient failure or a concurrency reject at submit
is backed off and retried (``transient_retries`` times), not passed to the writer. A member whose
rebuilt stream fails again before delivering anything waits out its own jittered backoff before the
next rebuild. A batch the service rejects at acknowledgement
every time is given up (its receipt fails, ``flush`` raises) once ``poisoned_submit_attempts`` streams died
at it or ``rebuild_budget_s`` passed since the first did; the batches behind it are re-sent. A member that
failed beyond repair for a cause a retry can fix is re-opened after ``failed_member_cooldown_s``; fatal and
schema-rejected members stay failed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import zlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import (
    ErrorClass,
    SinkClosedError,
    ZerobusOrchestrationError,
    classify,
    retry_delay_s,
)
from zerobus_orchestration.metrics import SinkMetrics, default_metrics
from zerobus_orchestration.ranges import CoverageRecorder, OffsetRange
from zerobus_orchestration.sink.ack_lane import AckLane, LaneState, LaneTelemetry, LaneUnavailable
from zerobus_orchestration.sink.confirmation import (
    Confirmation,
    InFlightBatches,
    LaneKind,
    PendingAck,
    check_lane,
    span_of,
)
from zerobus_orchestration.sink.health import PoolHealth, SampleReservoir, StreamHealth
from zerobus_orchestration.transport.base import Stream, Transport

log = logging.getLogger(__name__)


class PoolUnavailableError(ZerobusOrchestrationError, RuntimeError):
    """No healthy stream became available within ``healthy_member_wait_s``."""


class RebuildBudgetExceededError(PoolUnavailableError):
    """A stream could not be rebuilt within ``rebuild_budget_s`` (opens kept being refused).

    Not fatal: the service may accept opens again, so the supervisor re-opens the member after
    ``failed_member_cooldown_s``. Batches lost with it stay failed.
    """

    error_class = ErrorClass.TRANSIENT


class DeliveryFailedError(ZerobusOrchestrationError, RuntimeError):
    """Some batches could not be delivered (their stream failed beyond repair); coverage excludes them."""


class CoverageNotRecordedError(ZerobusOrchestrationError, RuntimeError):
    """Batches were delivered durably, but recording their coverage failed: a resume would re-send them."""


class PoisonedBatchError(DeliveryFailedError):
    """The service kept rejecting one batch at acknowledgement; it is not re-sent any more.

    Set on that batch's receipt and counted in ``failed_batches``, so ``flush`` raises
    ``DeliveryFailedError``. The other batches of the dead streams are re-sent as usual.
    """


class SubmitFailedError(ZerobusOrchestrationError, RuntimeError):
    """Fresh streams kept refusing one batch at submit; retrying it would only open more streams."""


_FULL_CHANNEL_RESELECT_S = 0.005
"""How long an unkeyed pusher waits on one full channel before looking for room on the others."""
_MAX_BACKOFF_DOUBLINGS = 62  # 2.0 ** n overflows a float past ~1023; the ceiling caps the delay long before


def backoff_ceiling(initial_s: float, max_s: float, failures: int) -> float:
    """``min(max_s, initial_s * 2 ** (failures - 1))`` without overflowing after very many failures."""
    doublings = min(max(failures - 1, 0), _MAX_BACKOFF_DOUBLINGS)
    return min(max_s, initial_s * 2.0**doublings)


class MemberState(StrEnum):
    OPENING = "opening"
    HEALTHY = "healthy"
    REBUILDING = "rebuilding"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True)
class Submitted:
    """Where a batch went: pool member, member-lifetime sequence number, and stream offset."""

    member: int
    seq: int
    offset: int


@dataclass
class _Member:
    index: int
    state: MemberState = MemberState.OPENING
    stream: Stream | None = None
    lane: AckLane | None = None
    next_seq: int = 0
    delivered_base: int = 0
    rows_delivered_base: int = 0
    rebuilds: int = 0
    retries_base: int = 0
    recoveries_base: int = 0
    resent_base: int = 0
    """SDK reconnects and rows possibly re-sent seen by this member's retired lanes."""
    confirm_errors_base: int = 0
    last_confirm_error: str | None = None
    failed_batches: int = 0
    abandoned_seqs: int = 0
    """Seqs skipped by re-opens after failures: their batches failed (``failed_batches``), never delivered."""
    reopens: int = 0
    reopen_at: float | None = None
    """When a failed member with a non-fatal cause is re-opened; None while not failed or failed for good."""
    stream_schema: pa.Schema | None = None
    """The exact schema ``stream`` was opened with (the service refuses batches of any other)."""
    rebuild_started: float | None = None
    fatal: BaseException | None = None
    last_loss: BaseException | None = None
    """Why batches of this member were last given up (for ``DeliveryFailedError``); kept after a re-open."""
    barren_failures: int = 0
    """Consecutive streams of this member that failed before confirming anything (drives its backoff)."""
    open_not_before: float = 0.0
    """The member's next stream is not opened before this (``time.monotonic()``)."""
    counts_as_rebuild: bool = False
    resubmit: list[PendingAck] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def delivered(self) -> int:
        return self.lane.delivered if self.lane is not None else self.delivered_base

    @property
    def rows_delivered(self) -> int:
        lane_rows = self.lane.rows_delivered if self.lane is not None else 0
        return self.rows_delivered_base + lane_rows

    @property
    def recoveries(self) -> int:
        return self.recoveries_base + (self.lane.recoveries if self.lane is not None else 0)

    @property
    def rows_possibly_resent(self) -> int:
        return self.resent_base + (self.lane.rows_possibly_resent if self.lane is not None else 0)


def _serving(member: _Member) -> bool:
    """Healthy and its lane still accepts (a lane that just failed is not yet marked rebuilding)."""
    lane = member.lane
    return member.state is MemberState.HEALTHY and lane is not None and lane.state is LaneState.RUNNING


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
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._open_lock = threading.Lock()
        self._members = [_Member(i) for i in range(self.size)]
        self._schema: pa.Schema | None = None
        self._supervisor: threading.Thread | None = None
        self._closing = False
        self._closed = False
        self._rr = 0
        self._consecutive_rejects = 0
        self._consecutive_supervisor_errors = 0
        self._open_not_before = 0.0
        self.concurrency_rejects = 0
        self.open_attempts = 0
        self.open_refusals = 0
        self.lane_failures = 0
        self.lane_poisonings = 0
        self.supervisor_errors = 0
        self.last_supervisor_error: str | None = None
        self.last_open_backoff_s: float | None = None
        """The most recent backoff before the next open (after a refusal), retry hint included."""
        self._coalesce = SampleReservoir()
        self._latency = SampleReservoir()
        self._m_rejects = self.metrics.concurrency_rejects.labels(table=table)

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
                self._supervisor = threading.Thread(
                    target=self._supervise, name=f"zerobus-pool-{self.table}", daemon=True
                )
                self._supervisor.start()
                self._await_first_open()
                return
            log.info("%s: schema changed; draining and re-opening %d stream(s)", self.table, self.size)
            self.flush()
            self._schema = schema
            for member in self._members:
                with member.lock:
                    if member.state is MemberState.HEALTHY:
                        member.state = MemberState.REBUILDING
                        member.rebuild_started = time.monotonic()
                        member.counts_as_rebuild = False
            self._notify()

    def _await_first_open(self) -> None:
        """Let the supervisor open every member before the first batch, so the pool starts balanced.

        Once the service refused an open, stops waiting as soon as one member is healthy (the rest open
        in the background, after their backoff), and at ``healthy_member_wait_s`` in any case.
        ``_back_off`` and ``_attach`` both notify, so neither a refusal nor an open is slept through.
        """
        deadline = time.monotonic() + self.config.healthy_member_wait_s
        with self._cond:
            while any(m.state is MemberState.OPENING for m in self._members):
                if self.open_refusals and self._healthy_count():
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

        Waits only while the ack channels are full (backpressure; keyed: the key's member's) or, bounded by
        ``healthy_member_wait_s``, while no member is healthy. A submit that poisons its stream is
        retried on a rebuilt stream a few times, backed off; see ``_pause_after_poisoned_submit``.
        ``nbytes``: the batch's size if the caller already knows it (saves recomputing it).
        ``tracker``: counts the batch as in flight until it is settled (a sink's own ``flush`` waits on it).
        """
        check_lane(self.lane_kind, confirmation)
        if self._schema is None:
            raise RuntimeError(f"{self.table}: ensure_open(schema) must run before the first submit")
        deadline = time.monotonic() + self.config.healthy_member_wait_s
        poisoned_submits, first_poisoned_at = 0, 0.0
        retried_submits = 0
        while True:
            member = self._select(key, deadline)
            if key is None:
                member = self._with_room(member)
            lane = member.lane
            if lane is None:
                continue
            try:
                # Unkeyed, the wait is sliced: with every channel full, the first lane to free a slot
                # takes the batch, not necessarily ``member`` (which may be the slow one).
                if not lane.reserve(None if key is not None else _FULL_CHANNEL_RESELECT_S):
                    continue
            except LaneUnavailable:
                continue
            with member.lock:
                stream = member.stream
                if member.state is not MemberState.HEALTHY or member.lane is not lane or stream is None:
                    lane.release()
                    continue
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
                    failure: Exception = exc
                else:
                    seq = member.next_seq
                    member.next_seq += 1
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
                            nbytes=batch.nbytes if nbytes is None else nbytes,
                            tracker=tracker,
                        )
                    )
                    return Submitted(member.index, seq, offset)
            self._notify()
            if error_class is not ErrorClass.POISON:
                retried_submits += 1
                self._pause_after_refused_submit(member, failure, error_class, retried_submits)
                # The wait for a healthy member starts again after the backoff the service asked for.
                deadline = max(deadline, time.monotonic() + self.config.healthy_member_wait_s)
                continue
            poisoned_submits += 1
            if poisoned_submits == 1:
                first_poisoned_at = time.monotonic()
            self._pause_after_poisoned_submit(failure, poisoned_submits, first_poisoned_at)

    def _pause_after_refused_submit(
        self, member: _Member, error: Exception, error_class: ErrorClass, attempts: int
    ) -> None:
        """Back off after a transient failure or a concurrency reject at submit, then let the batch retry.

        A transient failure leaves the stream as it is: the same member is tried again after the
        backoff. A concurrency reject means the SDK gave up the stream (its reconnects were refused):
        the member is rebuilt after the pool-wide backoff (honouring the service's retry hint), and the
        batch goes to whichever member serves first. Bounded by ``pool.transient_retries``.
        """
        cfg = self.config
        if attempts > cfg.transient_retries:
            raise SubmitFailedError(
                f"{self.table}: submitting one batch failed {attempts} time(s) with {error_class} errors "
                f"(last error: {error}); fix: check the service's status and quotas, or raise "
                "pool.transient_retries, then push the batch again"
            ) from error
        if error_class is ErrorClass.CONCURRENCY_REJECT:
            self._back_off(member, error, error_class, what="submitting on")
            return
        ceiling = backoff_ceiling(cfg.open_backoff_initial_s, cfg.open_backoff_max_s, attempts)
        delay = self._honour_hint(ceiling * (0.5 + 0.5 * self._rng.random()), error)
        log.warning(
            "%s: submit on stream %d failed (%s, attempt %d of %d), retry in %.2fs: %s",
            self.table,
            member.index,
            error_class,
            attempts,
            cfg.transient_retries,
            delay,
            error,
        )
        time.sleep(delay)

    def _honour_hint(self, delay: float, error: BaseException) -> float:
        """``delay``, or longer if the service asked for a longer wait (capped by ``rebuild_budget_s``)."""
        hint = retry_delay_s(error)
        if hint is None:
            return delay
        return max(delay, min(hint, self.config.rebuild_budget_s))

    def _pause_after_poisoned_submit(self, error: Exception, attempts: int, since: float) -> None:
        """Bound what one batch that keeps poisoning streams at submit can cost.

        Each poisoned submit rebuilds a stream, so an unbounded retry is a reopen storm. The batch gets
        ``pool.poisoned_submit_attempts`` tries within ``rebuild_budget_s``, spaced by the open backoff
        (jittered); then it is refused loudly while the pool keeps serving other batches.
        """
        cfg = self.config
        elapsed = time.monotonic() - since
        if attempts >= cfg.poisoned_submit_attempts or elapsed >= cfg.rebuild_budget_s:
            raise SubmitFailedError(
                f"{self.table}: submitting one batch poisoned {attempts} stream(s) in {elapsed:.2f}s "
                f"(last error: {error}); not retried further, so as not to reopen streams in a loop. "
                "Fix: check the batch against the table's schema and the service limits (record size, "
                "column values), then push it again; other batches keep flowing"
            ) from error
        ceiling = backoff_ceiling(cfg.open_backoff_initial_s, cfg.open_backoff_max_s, attempts)
        delay = min(ceiling * (0.5 + 0.5 * self._rng.random()), cfg.rebuild_budget_s - elapsed)
        log.warning(
            "%s: submit poisoned a stream (%d of %d attempts for this batch), retry in %.2fs: %s",
            self.table,
            attempts,
            cfg.poisoned_submit_attempts,
            delay,
            error,
        )
        time.sleep(max(delay, 0.0))

    def _with_room(self, chosen: _Member) -> _Member:
        """Round-robin skips a member whose channel is full while another has room.

        Without this, one slow or full stream would hold every pusher (head-of-line blocking) while
        the other members' lanes sit idle. If every channel is full, the pusher waits on ``chosen``
        for at most ``_FULL_CHANNEL_RESELECT_S`` and then looks again (see ``submit``).
        """
        for step in range(self.size):
            candidate = self._members[(chosen.index + step) % self.size]
            lane = candidate.lane
            if _serving(candidate) and lane is not None and lane.has_room:
                return candidate
        return chosen

    def _select(self, key: str | None, deadline: float) -> _Member:
        with self._cond:
            while True:
                if self._closing:
                    raise SinkClosedError(f"{self.table}: the stream pool is closed")
                if key is not None:
                    member = self._members[stable_index(key, self.size)]
                    if _serving(member):
                        return member
                    if member.state is MemberState.FAILED and member.reopen_at is None:
                        raise PoolUnavailableError(
                            f"{self.table}: stream {member.index} for ordering key {key!r} failed: "
                            f"{member.fatal}"
                        )
                else:
                    for step in range(self.size):
                        candidate = self._members[(self._rr + step) % self.size]
                        if _serving(candidate):
                            self._rr = (candidate.index + 1) % self.size
                            return candidate
                    if all(m.state is MemberState.FAILED and m.reopen_at is None for m in self._members):
                        raise PoolUnavailableError(f"{self.table}: every stream failed beyond repair")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    states = ", ".join(f"{m.index}:{m.state}" for m in self._members)
                    raise PoolUnavailableError(
                        f"{self.table}: no healthy stream within {self.config.healthy_member_wait_s}s "
                        f"({states}); raise pool.healthy_member_wait_s or check the service"
                    )
                self._cond.wait(remaining)

    # -- failures (called from lane threads) --------------------------------------------------------

    def on_lane_failed(self, lane: AckLane, error: BaseException, error_class: ErrorClass) -> None:
        with self._cond:
            self.lane_failures += 1
            if error_class is ErrorClass.POISON:
                self.lane_poisonings += 1
        for member in self._members:
            with member.lock:
                owned = member.lane is lane  # also when a refused submit already marked it rebuilding
                if owned and member.state is MemberState.HEALTHY:
                    if error_class in (ErrorClass.FATAL, ErrorClass.SCHEMA_REJECTED):
                        member.fatal = error
                    self._start_rebuild_locked(member, error)
            if owned and error_class is ErrorClass.CONCURRENCY_REJECT:
                # The service refused this stream's reconnects: re-opening at once would be refused too.
                # Back off pool-wide (retry hint honoured); the other members keep sending meanwhile.
                self._back_off(member, error, error_class, what="re-opening")
        self._notify()

    def _start_rebuild_locked(self, member: _Member, error: BaseException) -> None:
        if member.state is not MemberState.HEALTHY:
            return
        log.warning(
            "%s: stream %d (%s) failed; rebuilding: %s",
            self.table,
            member.index,
            member.stream.stream_id if member.stream else "?",
            error,
        )
        member.state = MemberState.REBUILDING
        member.rebuild_started = time.monotonic()
        member.counts_as_rebuild = True

    # -- supervisor ---------------------------------------------------------------------------------

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _supervise(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                due = [
                    m
                    for m in self._members
                    if (m.state is MemberState.REBUILDING and self._rebuild_due(m, now))
                    or (m.state is MemberState.OPENING and not self._closing)
                    or self._reopen_due(m, now)
                ]
                if not due or now < self._open_not_before:
                    wake = [self._open_not_before] if due else []
                    if not self._closing:
                        wake += [
                            m.reopen_at
                            for m in self._members
                            if m.state is MemberState.FAILED and m.reopen_at is not None
                        ]
                    wake += [
                        m.open_not_before
                        for m in self._members
                        if m.state is MemberState.REBUILDING and m.open_not_before > now
                    ]
                    timeout = min(wake) - now if wake else None
                    self._cond.wait(timeout if timeout is None else max(timeout, 0.001))
                    continue
            for member in due:
                try:
                    self._repair(member)
                except Exception as exc:  # never let one bad pass kill the only thread that repairs
                    self._supervisor_error(member, exc)
                else:
                    self._consecutive_supervisor_errors = 0
                if time.monotonic() < self._open_not_before:
                    break  # a reject: every pending open waits out the same backoff

    @staticmethod
    def _rebuild_due(member: _Member, now: float) -> bool:
        # An old lane still to retire is always due: retiring collects its batches and sets the backoff.
        return member.lane is not None or now >= member.open_not_before

    def _reopen_due(self, member: _Member, now: float) -> bool:
        return (
            member.state is MemberState.FAILED
            and member.reopen_at is not None
            and now >= member.reopen_at
            and not self._closing
        )

    def _reopen_failed(self, member: _Member) -> bool:
        """Turn a member that failed for a non-fatal cause into a fresh one, opened like at the first write.

        Its lost batches stay lost: their receipts already failed and ``failed_batches`` keeps them as
        history. Their seqs are skipped so they never show as pending. The rebuild budget applies again,
        so a service still refusing fails the member again and it waits out another cool-down (no storm).
        """
        with member.lock:
            if member.state is not MemberState.FAILED or member.reopen_at is None:
                return False
            member.abandoned_seqs += member.next_seq - member.delivered_base
            member.delivered_base = member.next_seq
            member.state = MemberState.OPENING
            member.fatal = None
            member.reopen_at = None
            member.reopens += 1
            member.rebuild_started = time.monotonic()
            member.counts_as_rebuild = False
        log.info(
            "%s: re-opening stream %d after its cool-down (#%d)", self.table, member.index, member.reopens
        )
        return True

    def _supervisor_error(self, member: _Member, exc: Exception) -> None:
        """Log, count (health shows it), and back off before the next pass instead of spinning."""
        self.supervisor_errors += 1
        self._consecutive_supervisor_errors += 1
        self.last_supervisor_error = f"{type(exc).__name__}: {exc}"
        cfg = self.config
        ceiling = backoff_ceiling(
            cfg.open_backoff_initial_s, cfg.open_backoff_max_s, self._consecutive_supervisor_errors
        )
        self._open_not_before = max(self._open_not_before, time.monotonic() + ceiling)
        log.exception(
            "%s: unexpected error repairing stream %d (%d so far); supervisor keeps running, next pass in "
            "%.2fs",
            self.table,
            member.index,
            self.supervisor_errors,
            ceiling,
        )
        self._notify()

    def _retire(self, member: _Member) -> bool:
        """Stop a rebuilding member's old lane and collect what it did not confirm."""
        lane, stream = member.lane, member.stream
        if lane is None:
            return True
        lane.stop(timeout=self.config.rebuild_budget_s)
        if lane.thread_alive:
            return False  # still waiting on the old stream; try again on the next pass
        kept = lane.take_unconfirmed()
        failed = lane.state is LaneState.FAILED
        with member.lock:
            member.delivered_base = lane.delivered
            member.rows_delivered_base += lane.rows_delivered
            member.retries_base += lane.retries
            member.recoveries_base += lane.recoveries
            member.resent_base += lane.rows_possibly_resent
            member.confirm_errors_base += lane.confirm_errors
            member.last_confirm_error = lane.last_confirm_error or member.last_confirm_error
            member.resubmit = sorted([*member.resubmit, *kept], key=lambda item: item.seq)
            member.lane = None
            member.stream = None
            dropped = self._drop_rejected_locked(member) if lane.error is not None else []
            if failed:
                self._pace_rebuild_locked(member, barren=lane.confirmed == 0)
        self._give_up(member, dropped, lane.error)
        if stream is not None:
            if failed:
                # A dead stream's close may hang (it flushes first); its batches are collected, so it
                # must not hold the supervisor, which repairs every member.
                threading.Thread(
                    target=self._close_quietly, args=(stream,), name="zerobus-close-dead", daemon=True
                ).start()
            else:
                self._close_quietly(stream)
        return True

    def _close_quietly(self, stream: Stream) -> None:
        try:
            stream.close()
        except Exception as exc:  # a dead stream may refuse to close; its batches were collected
            log.info("%s: closing failed stream %s: %s", self.table, stream.stream_id, exc)

    def _pace_rebuild_locked(self, member: _Member, *, barren: bool) -> None:
        """Back off before re-opening a member whose streams keep failing without delivering anything.

        A stream that dies at once on every rebuild (a rejected batch, a service failing every new
        stream) would otherwise be re-opened in a tight loop: each successful open used to clear the
        pool's backoff. Jittered like the pool's open backoff, so pools never retry in lock-step.
        """
        member.barren_failures = member.barren_failures + 1 if barren else 0
        if member.barren_failures < 2:
            member.open_not_before = 0.0  # the first failure after a delivering stream rebuilds at once
            return
        cfg = self.config
        ceiling = backoff_ceiling(
            cfg.open_backoff_initial_s, cfg.open_backoff_max_s, member.barren_failures - 1
        )
        delay = ceiling * (0.5 + 0.5 * self._rng.random())
        member.open_not_before = time.monotonic() + delay
        log.warning(
            "%s: stream %d failed %d time(s) in a row without delivering anything; next rebuild in %.2fs",
            self.table,
            member.index,
            member.barren_failures,
            delay,
        )

    def _drop_rejected_locked(self, member: _Member) -> list[PendingAck]:
        """Take out of ``member.resubmit`` the batches the service rejected too often to send again.

        A batch is given up once ``poisoned_submit_attempts`` streams died at it, or ``rebuild_budget_s``
        passed since the first did: re-sending it would only kill the next stream too (a reopen loop,
        and a ``flush`` that never returns). Their seqs count as abandoned, so they never show as pending.
        """
        cfg = self.config
        now = time.monotonic()

        def rejected(item: PendingAck) -> bool:
            if item.first_poisoned_at is None:
                return False
            return (
                item.poisonings >= cfg.poisoned_submit_attempts
                or now - item.first_poisoned_at >= cfg.rebuild_budget_s
            )

        dropped = [item for item in member.resubmit if rejected(item)]
        if not dropped:
            return []
        member.resubmit = [item for item in member.resubmit if not rejected(item)]
        member.failed_batches += len(dropped)
        member.abandoned_seqs += len(dropped)
        if not member.resubmit and member.lane is None:
            # Nothing older is left to confirm, so the seq high-water can pass the given-up batches
            # (no new batch reaches a member while it is rebuilding).
            member.delivered_base = max(member.delivered_base, member.next_seq)
        return dropped

    def _give_up(self, member: _Member, dropped: list[PendingAck], cause: BaseException | None) -> None:
        """Fail the receipts of batches ``_drop_rejected_locked`` took out, naming table, cause and fix."""
        if not dropped:
            return
        now = time.monotonic()
        last: PoisonedBatchError | None = None
        for item in dropped:
            span = span_of(item.confirmation)
            since = now - (item.first_poisoned_at or now)
            last = PoisonedBatchError(
                f"{self.table}: one batch ({item.rows} row(s)"
                f"{f', positions [{span.start}, {span.end})' if span is not None else ''}) "
                f"was rejected at acknowledgement by {item.poisonings} stream(s) in {since:.2f}s "
                f"(last error: {cause}); it is not re-sent, so as not to reopen streams in a loop, and "
                "coverage excludes it. Fix: check the batch against the table's schema and the service "
                "limits (record size, column values), then send it again; the other batches keep flowing"
            )
            last.__cause__ = cause
            item.settle(last)
        with member.lock:
            member.last_loss = last
        log.error(
            "%s: stream %d: %d batch(es) given up after the service kept rejecting them: %s",
            self.table,
            member.index,
            len(dropped),
            cause,
        )

    def _repair(self, member: _Member) -> None:
        if member.state is MemberState.FAILED and not self._reopen_failed(member):
            return
        if member.state is MemberState.REBUILDING and not self._retire(member):
            return
        if member.fatal is None and time.monotonic() < member.open_not_before:
            return  # backing off after a barren stream; the supervisor wakes for it at open_not_before
        if member.fatal is not None:
            self._fail_member(member, member.fatal)
            return
        started = member.rebuild_started
        if started is not None and time.monotonic() - started > self.config.rebuild_budget_s:
            self._fail_member(
                member,
                RebuildBudgetExceededError(
                    f"{self.table}: stream {member.index} not rebuilt within rebuild_budget_s="
                    f"{self.config.rebuild_budget_s}"
                ),
            )
            return
        if time.monotonic() < self._open_not_before:
            return  # retiring met a refusal (a lane stopped by a concurrency reject): wait out its backoff
        schema = self._schema
        assert schema is not None
        self.open_attempts += 1
        try:
            stream = self.transport.open_stream(self.table, schema)
        except Exception as exc:
            error_class = classify(exc)
            if error_class in (ErrorClass.FATAL, ErrorClass.SCHEMA_REJECTED):
                self._fail_member(member, exc)
                return
            self._back_off(member, exc, error_class)
            return
        if self._attach(member, stream, schema):
            self._consecutive_rejects = 0  # only a usable stream ends the backoff, not a bare open

    def _back_off(
        self, member: _Member, exc: BaseException, error_class: ErrorClass, what: str = "opening"
    ) -> None:
        if error_class is ErrorClass.CONCURRENCY_REJECT:
            self.concurrency_rejects += 1
            self._m_rejects.inc()
        self.open_refusals += 1
        self._consecutive_rejects += 1
        cfg = self.config
        rejects = self._consecutive_rejects
        ceiling = backoff_ceiling(cfg.open_backoff_initial_s, cfg.open_backoff_max_s, rejects)
        # Jitter: never in lock-step with other pools. The service's retry hint, if any, is a floor.
        delay = self._honour_hint(ceiling * (0.5 + 0.5 * self._rng.random()), exc)
        self._open_not_before = max(self._open_not_before, time.monotonic() + delay)
        self.last_open_backoff_s = delay
        log.warning(
            "%s: %s stream %d refused (%s), retry in %.2fs; %d healthy member(s) keep sending: %s",
            self.table,
            what,
            member.index,
            error_class,
            delay,
            self._healthy_count(),
            exc,
        )
        self._notify()  # a first write waiting in _await_first_open may go ahead on the healthy members

    def _attach(self, member: _Member, stream: Stream, schema: pa.Schema) -> bool:
        """Start ``stream``'s lane and re-submit what the member's old stream left; False if that failed.

        ``schema`` is what ``stream`` was opened with. If ``ensure_open`` moved the pool to a new schema
        while the open was in flight, the stream is not put in service: it takes its re-submits (batches of
        its own schema), then is drained and re-opened with the new schema, like every other member.
        """
        telemetry = LaneTelemetry(
            self.metrics, self.table, str(member.index), self._coalesce, self._latency, str(self.lane_kind)
        )
        lane = AckLane(
            stream,
            kind=self.lane_kind,
            capacity=self.config.ack_channel_capacity,
            telemetry=telemetry,
            recorder=self.recorder,
            observer=self,
            transient_retries=self.config.transient_retries,
            delivered=member.delivered_base,
            salvage_timeout_s=self.config.rebuild_budget_s,
        ).start()
        with member.lock:
            rebuilt = member.state is MemberState.REBUILDING and member.counts_as_rebuild
            pending, member.resubmit = member.resubmit, []
            member.stream, member.lane, member.stream_schema = stream, lane, schema
            resubmit_error: Exception | None = None
            dropped: list[PendingAck] = []
            stale = False
            for index, item in enumerate(pending):
                try:
                    offset = stream.submit(item.batch)
                except Exception as exc:
                    if index == 0 and classify(exc) is ErrorClass.POISON:
                        # The first batch on a fresh stream, refused at submit rather than at its ack: the
                        # same batch to blame, the same bound. A later refusal may come from an earlier
                        # batch killing the stream; the lane blames that one when it collects them.
                        item = item.poisoned(time.monotonic())
                    member.resubmit = [item, *pending[index + 1 :]]
                    member.state = MemberState.REBUILDING
                    resubmit_error = exc
                    dropped = self._drop_rejected_locked(member)
                    break
                lane.put_resubmitted(item.moved_to(offset))
            else:
                member.state = MemberState.HEALTHY
                member.rebuild_started = None
                if rebuilt:
                    member.rebuilds += 1
                    self.metrics.stream_rebuilds.labels(
                        table=self.table, stream=str(member.index), lane=str(self.lane_kind)
                    ).inc()
                # Checked under the member lock: ``ensure_open`` assigns the schema before it marks
                # HEALTHY members (under this lock) for re-opening, so no stale stream is left serving.
                stale = self._schema is not schema
                if stale:
                    member.state = MemberState.REBUILDING
                    member.rebuild_started = time.monotonic()
                    member.counts_as_rebuild = False
        if stale:
            log.info(
                "%s: stream %d (%s) was opened with the previous schema; draining and re-opening it",
                self.table,
                member.index,
                stream.stream_id,
            )
            self._notify()
            return True
        if resubmit_error is not None:
            self._give_up(member, dropped, resubmit_error)
            # Backed off like a refused open: re-opening at once would meet the same failure, in a loop.
            self._back_off(member, resubmit_error, classify(resubmit_error), what="re-submitting on new")
            return False
        log.info(
            "%s: stream %d open (%s)%s",
            self.table,
            member.index,
            stream.stream_id,
            f", {len(pending)} unacknowledged batch(es) re-submitted" if pending else "",
        )
        self._notify()
        return True

    def _fail_member(self, member: _Member, error: BaseException) -> None:
        # The pool lives as long as the process: a member lost to a passing outage must come back, or
        # every later write to the table fails. What a retry cannot fix (auth, config, schema) stays failed.
        recoverable = classify(error) not in (ErrorClass.FATAL, ErrorClass.SCHEMA_REJECTED)
        with member.lock:
            pending, member.resubmit = member.resubmit, []
            member.state = MemberState.FAILED
            member.fatal = error
            member.failed_batches += len(pending)
            if pending:
                member.last_loss = error
            member.reopen_at = (
                time.monotonic() + self.config.failed_member_cooldown_s if recoverable else None
            )
        for item in pending:
            item.settle(error)
        log.error(
            "%s: stream %d failed beyond repair, %d batch(es) not delivered%s: %s",
            self.table,
            member.index,
            len(pending),
            f"; re-opening it in {self.config.failed_member_cooldown_s}s" if recoverable else "",
            error,
        )
        self._notify()

    def _healthy_count(self) -> int:
        return sum(1 for m in self._members if m.state is MemberState.HEALTHY)

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
        return sum(
            m.confirm_errors_base + (m.lane.confirm_errors if m.lane is not None else 0)
            for m in self._members
        )

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
            raise DeliveryFailedError(
                f"{self.table}: {failed} batch(es) were not delivered ({errors}). Their receipts carry "
                "the cause and coverage excludes them, so a re-run re-sends exactly those ranges once "
                "the cause is fixed"
            )
        unrecorded = 0 if unrecorded_before is None else self.confirm_errors - unrecorded_before
        if unrecorded > 0:
            raise CoverageNotRecordedError(
                f"{self.table}: {unrecorded} batch(es) reached the table durably, but recording their "
                f"coverage failed ({self.last_confirm_error}). The rows are in the table; a resume would "
                "send them again. Fix: make the coverage store writable (zerobus.coverage.location), "
                "then run read-back to list the rows outside coverage"
            )

    def close(self, timeout: float | None = None) -> None:
        """Graceful drain: stop accepting, confirm everything outstanding, then close every stream."""
        with self._open_lock:
            if self._closed:
                return
            self._closing = True
        self._notify()
        try:
            if self._schema is not None:
                self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            if self._supervisor is not None:
                self._supervisor.join(timeout=5)
            for member in self._members:
                with member.lock:
                    lane, stream = member.lane, member.stream
                    if member.state is not MemberState.FAILED:
                        member.state = MemberState.CLOSED
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
        streams = []
        for m in self._members:
            lane = m.lane
            submitted = m.next_seq
            delivered = m.delivered - m.abandoned_seqs
            streams.append(
                StreamHealth(
                    index=m.index,
                    stream_id=m.stream.stream_id if m.stream is not None else None,
                    alive=m.state is MemberState.HEALTHY and lane is not None and lane.alive,
                    rebuilding=m.state is MemberState.REBUILDING,
                    failed=m.state is MemberState.FAILED,
                    pending=submitted - delivered - m.abandoned_seqs,
                    backpressured=lane.backpressured if lane is not None else False,
                    submitted=submitted,
                    delivered=delivered,
                    rebuilds=m.rebuilds,
                    recoveries=m.recoveries,
                    reopens=m.reopens,
                    reopen_in_s=(
                        max(0.0, m.reopen_at - time.monotonic())
                        if m.state is MemberState.FAILED and m.reopen_at is not None
                        else None
                    ),
                )
            )
        retries = sum(m.retries_base + (m.lane.retries if m.lane is not None else 0) for m in self._members)
        confirm_errors = self.confirm_errors
        return PoolHealth(
            table=self.table,
            lane=str(self.lane_kind),
            size=self.size,
            alive=sum(1 for s in streams if s.alive),
            rebuilding=sum(1 for s in streams if s.rebuilding),
            submitted=sum(s.submitted for s in streams),
            delivered=sum(s.delivered for s in streams),
            pending=sum(s.pending for s in streams),
            failed_batches=sum(m.failed_batches for m in self._members),
            rows_delivered=sum(m.rows_delivered for m in self._members),
            rebuilds=sum(m.rebuilds for m in self._members),
            recoveries=sum(m.recoveries for m in self._members),
            rows_possibly_resent=sum(m.rows_possibly_resent for m in self._members),
            reopens=sum(m.reopens for m in self._members),
            concurrency_rejects=self.concurrency_rejects,
            ack_retries=retries,
            poisoned=self.lane_poisonings,
            lane_failures=self.lane_failures,
            coalesce_ratio_p50=self._coalesce.percentile(50),
            coalesce_ratio_mean=self._coalesce.mean(),
            delivery_latency_p50_s=self._latency.percentile(50),
            delivery_latency_p99_s=self._latency.percentile(99),
            closed=self._closed,
            streams=tuple(streams),
            supervisor_errors=self.supervisor_errors,
            last_supervisor_error=self.last_supervisor_error,
            confirm_errors=confirm_errors,
        )
