"""One ack lane per stream: the only place that waits for durability and the only one that confirms.

The lane thread takes one ``PendingAck``, drains whatever else is queued without blocking, calls
``wait_for_offset`` once for the highest offset, then fires every confirmation in offset order. One
wait thereby acknowledges a whole burst (the coalesce ratio), which is what lets ingest run ahead of
durability instead of paying one round trip per batch.

The channel is bounded by *pending acks*: batches reserved, queued or in hand, not yet confirmed. A
pusher reserves a slot before submitting; a full channel makes ``reserve`` wait (with the pool's byte
budget, ``sink/byte_budget.py``, the only backpressure: ``StreamPool.health()`` names which binds).
Slots free up when their confirmations fire, so ``capacity`` is exactly the number of batches one
stream may have in flight: throughput is bounded by ``capacity / ack latency`` per stream (Little's
law) and by ``max_inflight_bytes / ack latency`` per table, whatever the input size.

Failures: a transient wait failure is retried in place (nothing is re-advanced, nothing confirmed
twice). A poisoned stream stops the lane: what the dead stream still reports durable is confirmed
(within ``salvage_timeout_s``), the rest is kept for the pool, which rebuilds the stream and
re-submits it. The first batch kept is blamed for the death (``PendingAck.poisoned``), so the pool can
stop re-sending a batch the service rejects every time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from enum import StrEnum
from typing import Protocol

from zerobus_orchestration.errors import ErrorClass
from zerobus_orchestration.ranges import CoverageRecorder
from zerobus_orchestration.retry import Backoff
from zerobus_orchestration.sink.confirmation import (
    LaneKind,
    NoConfirm,
    PendingAck,
    check_lane,
    fire_all,
    hash_ahead,
    keeps_digests,
    settle_all,
)
from zerobus_orchestration.sink.errors import LaneUnavailable
from zerobus_orchestration.sink.lane_telemetry import LaneMetrics, LaneTelemetry, ReplayWatch
from zerobus_orchestration.transport.base import CapsInFlight, Stream
from zerobus_orchestration.transport.classify import classify

log = logging.getLogger(__name__)


def lane_capacity(configured: int, stream: Stream) -> int:
    """Pending acks a lane on ``stream`` may hold: ``configured``, but never more than the stream's own
    in-flight cap. A submit past that cap blocks inside the transport (the official SDK's
    ``ingest_batch`` waits for an ack), with the pusher holding the stream; a pusher waiting for a
    channel slot instead holds nothing, and an unkeyed one moves to another stream."""
    cap = stream.max_inflight_batches if isinstance(stream, CapsInFlight) else None
    return configured if cap is None else max(1, min(configured, cap))


class LaneState(StrEnum):
    RUNNING = "running"
    STOPPING = "stopping"  # graceful: confirm what is queued, then exit
    STOPPED = "stopped"
    FAILED = "failed"  # the stream failed; unconfirmed items are kept for the pool


class LaneObserver(Protocol):
    """Told when a lane stops on a failed stream (implemented by the pool)."""

    def on_lane_failed(self, lane: AckLane, error: BaseException, error_class: ErrorClass) -> None: ...


class AckLane:
    """The ack lane of one stream. Start with ``start()``; feed with ``reserve()`` + ``put()``."""

    def __init__(
        self,
        stream: Stream,
        *,
        kind: LaneKind,
        capacity: int,
        telemetry: LaneTelemetry,
        recorder: CoverageRecorder | None = None,
        observer: LaneObserver | None = None,
        transient_retries: int = 5,
        retry_backoff_s: float = 0.05,
        delivered: int = 0,
        salvage_timeout_s: float = 60.0,
    ) -> None:
        if capacity < 1:
            raise ValueError("ack channel capacity must be >= 1")
        self.stream = stream
        self.kind = kind
        self.capacity = capacity
        self._telemetry = telemetry
        self._recorder = recorder
        self._keeps_digests = keeps_digests(recorder)
        self._observer = observer
        self._transient_retries = transient_retries
        self._retry_backoff = Backoff(min(retry_backoff_s, 1.0), 1.0)
        self._salvage_timeout_s = salvage_timeout_s
        self._cond = threading.Condition()
        self._queue: deque[PendingAck] = deque()
        self._in_hand: list[PendingAck] = []
        self._kept: list[PendingAck] = []
        self._unconfirmed = 0  # reserved + queued + in hand: the pending acks the bound applies to
        self._unconfirmed_bytes = 0  # queued + in hand (the pool's byte budget bounds their sum)
        self._waiting_pushers = 0
        self._state = LaneState.RUNNING
        self._delivered = delivered  # seq high-water: every seq below it is confirmed
        self._durable_offset = -1  # highest stream offset the lane saw acknowledged
        self.rows_delivered = 0
        self.bytes_delivered = 0
        self.confirmed = 0
        self.bursts = 0
        self.retries = 0
        self.confirm_errors = 0
        self.last_confirm_error: str | None = None
        self.error: BaseException | None = None
        self.error_class: ErrorClass | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"zerobus-ack-{telemetry.table}-{telemetry.stream_label}", daemon=True
        )
        self._metrics = LaneMetrics(telemetry)
        self._replays = ReplayWatch(stream, telemetry, self._metrics)

    # -- producer side ------------------------------------------------------------------------------

    def start(self) -> AckLane:
        self._thread.start()
        return self

    def reserve(self, timeout: float | None = None) -> bool:
        """Claim one in-flight slot, waiting while the channel is full. False on timeout.

        Raises ``LaneUnavailable`` once the lane stopped accepting (failed or stopping).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting_pushers += 1
            try:
                while True:
                    if self._state is not LaneState.RUNNING:
                        raise LaneUnavailable(f"ack lane {self._telemetry.stream_label} is {self._state}")
                    if self._unconfirmed < self.capacity:
                        self._unconfirmed += 1
                        return True
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._waiting_pushers -= 1

    def release(self) -> None:
        """Give back a reserved slot that was not used (the submit did not happen)."""
        with self._cond:
            self._unconfirmed -= 1
            self._cond.notify_all()

    def put(self, item: PendingAck) -> None:
        """Queue a submitted batch on a slot claimed with ``reserve``. Never blocks."""
        if item.lane is not self.kind:  # PendingAck validated its confirmation against item.lane
            check_lane(self.kind, item.confirmation)
        with self._cond:
            self._queue.append(item)
            self._unconfirmed_bytes += item.nbytes
            self._cond.notify_all()

    def put_resubmitted(self, item: PendingAck) -> None:
        """Queue a batch re-submitted after a rebuild, without a reservation (bounded by the old lane)."""
        check_lane(self.kind, item.confirmation)
        with self._cond:
            self._unconfirmed += 1
            self._unconfirmed_bytes += item.nbytes
            self._queue.append(item)
            self._cond.notify_all()

    # -- lifecycle ----------------------------------------------------------------------------------

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued batch is confirmed, or the lane stopped. False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._unconfirmed > 0 and self._state in (LaneState.RUNNING, LaneState.STOPPING):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def stop(self, timeout: float | None = None) -> None:
        """Stop accepting, confirm what is queued, and end the thread."""
        with self._cond:
            if self._state is LaneState.RUNNING:
                self._state = LaneState.STOPPING
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def take_unconfirmed(self) -> list[PendingAck]:
        """After a failure: every batch not confirmed, in seq order. Empties the lane."""
        with self._cond:
            items = self._kept + self._in_hand + list(self._queue)
            self._kept, self._in_hand = [], []
            self._queue.clear()
            self._unconfirmed = 0
            self._unconfirmed_bytes = 0
            self._metrics.inflight_bytes.set(0)  # the pool re-submits them on another lane, or settles them
            self._cond.notify_all()
        return sorted(items, key=lambda item: item.seq)

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def state(self) -> LaneState:
        return self._state

    @property
    def delivered(self) -> int:
        """Seq high-water of confirmed batches; monotonic, advanced only after a durable ack."""
        return self._delivered

    @property
    def durable_offset(self) -> int:
        return self._durable_offset

    @property
    def outstanding(self) -> int:
        return self._unconfirmed

    @property
    def has_room(self) -> bool:
        """A hint (unlocked read) that ``reserve`` would not wait right now."""
        return self._unconfirmed < self.capacity and self._state is LaneState.RUNNING

    @property
    def backpressured(self) -> bool:
        """A pusher waits on this full channel (``reserve`` counts every caller, waiting or not)."""
        return self._waiting_pushers > 0 and self._unconfirmed >= self.capacity

    @property
    def recoveries(self) -> int:
        """Reconnects the transport made inside this stream (each replayed its unacknowledged batches)."""
        return self._replays.recoveries

    @property
    def rows_possibly_resent(self) -> int:
        return self._replays.rows_possibly_resent

    @property
    def thread_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._state is LaneState.RUNNING

    # -- the lane thread ----------------------------------------------------------------------------

    def _next_burst(self) -> list[PendingAck] | None:
        with self._cond:
            while not self._queue:
                if self._state is not LaneState.RUNNING:
                    return None
                self._cond.wait()
            burst = list(self._queue)  # one received, the rest drained without blocking
            self._queue.clear()
            self._in_hand = burst
            # Set here too, not only after a confirm: while the ack this burst waits for is stalled,
            # the gauge must show the backlog, not the (lower) value left by the previous burst.
            self._metrics.pending.set(self._unconfirmed)
            self._metrics.inflight_bytes.set(self._unconfirmed_bytes)
        burst.sort(key=lambda item: item.offset)
        return burst

    def _run(self) -> None:
        while True:
            burst = self._next_burst()
            if burst is None:
                with self._cond:
                    if self._state is LaneState.STOPPING:
                        self._state = LaneState.STOPPED
                    self._cond.notify_all()
                return
            self._metrics.submitted(burst)
            # Hash while the acknowledgement travels (recorded only after it: ``_confirm``).
            if self._keeps_digests:
                hash_ahead(item.confirmation for item in burst)
            failure = self._wait_durable(burst[-1].offset)
            self._replays.observe()
            if failure is None:
                self._confirm(burst)
                continue
            self._fail(burst, *failure)
            return

    def _wait_durable(self, offset: int) -> tuple[BaseException, ErrorClass] | None:
        attempt = 0
        while True:
            try:
                self.stream.wait_for_offset(offset)
                return None
            except Exception as exc:
                error_class = classify(exc)
                if error_class is ErrorClass.TRANSIENT and attempt < self._transient_retries:
                    attempt += 1
                    self.retries += 1
                    self._metrics.retries.inc()
                    log.warning(
                        "ack lane %s: transient wait failure, retry %d: %s",
                        self._telemetry.stream_label,
                        attempt,
                        exc,
                    )
                    time.sleep(self._retry_backoff.delay(attempt - 1))
                    continue
                return exc, error_class

    def _confirm(self, burst: list[PendingAck]) -> None:
        """Record the whole (offset-ordered) burst with one call, then resolve its futures."""
        now = time.monotonic()
        failure: Exception | None = None
        try:
            fire_all([item.confirmation for item in burst], self._recorder)
        except Exception as exc:  # the data is durable; only its coverage record failed
            failure = exc
            recorded = [item for item in burst if not isinstance(item.confirmation, NoConfirm)]
            self.confirm_errors += len(recorded)
            self.last_confirm_error = f"{type(exc).__name__}: {exc}"
            log.error(
                "ack lane %s: recording %d range(s) (%s .. %s) failed: %s",
                self._telemetry.stream_label,
                len(recorded),
                recorded[0].confirmation if recorded else None,
                recorded[-1].confirmation if recorded else None,
                exc,
            )
        settle_all(
            (item, failure if failure is not None and not isinstance(item.confirmation, NoConfirm) else None)
            for item in burst
        )
        rows, nbytes = self._metrics.delivered(burst, now)
        self.rows_delivered += rows
        self.bytes_delivered += nbytes
        with self._cond:
            self._delivered = max(self._delivered, burst[-1].seq + 1)
            self._durable_offset = max(self._durable_offset, burst[-1].offset)
            self.confirmed += len(burst)
            self.bursts += 1
            self._unconfirmed -= len(burst)
            self._unconfirmed_bytes -= nbytes
            self._in_hand = []
            self._metrics.pending.set(self._unconfirmed)
            self._metrics.inflight_bytes.set(self._unconfirmed_bytes)
            self._cond.notify_all()

    def _fail(self, burst: list[PendingAck], error: BaseException, error_class: ErrorClass) -> None:
        """Stop on a failed stream: confirm what it still reports durable, keep the rest."""
        with self._cond:
            self._state = LaneState.FAILED
            burst = sorted([*burst, *self._queue], key=lambda item: item.offset)
            self._queue.clear()
            self._in_hand = burst
            self._cond.notify_all()
        # A stream that died (poisoned, or its reconnects refused) still reports what it made durable:
        # confirm that, or it is re-sent and lands twice.
        dead = error_class in (ErrorClass.POISON, ErrorClass.CONCURRENCY_REJECT)
        salvaged = self._salvage(burst) if dead else []
        if salvaged:
            self._confirm(salvaged)
        kept = burst[len(salvaged) :]
        if error_class is ErrorClass.POISON and kept:
            # Acks are cumulative and in order, so the stream died at its first unacknowledged batch.
            # Blaming only that one keeps the batches queued behind it from being given up with it.
            kept[0] = kept[0].poisoned(time.monotonic())
        with self._cond:
            self._kept = kept
            self._in_hand = []
            self.error, self.error_class = error, error_class
            self._cond.notify_all()
        if error_class is ErrorClass.POISON:
            # Only a dead stream counts here: an exhausted transient retry or a fatal error is not the
            # "our stream died" signal the runbook branches on (see metrics.py).
            self._metrics.poisoned.inc()
        log.warning(
            "ack lane %s (%s): stream failed (%s), %d confirmed from the dead stream, %d kept: %s",
            self._telemetry.stream_label,
            self.stream.stream_id,
            error_class,
            len(salvaged),
            len(self._kept),
            error,
        )
        if self._observer is not None:
            self._observer.on_lane_failed(self, error, error_class)

    def _salvage(self, burst: list[PendingAck]) -> list[PendingAck]:
        """The leading batches of ``burst`` the dead stream still reports durable.

        Waited for on a helper thread, for at most ``salvage_timeout_s``: ``wait_for_offset`` takes no
        timeout, and a dead stream whose waits hang would otherwise hold this lane, and with it the
        member's rebuild, forever. Only what the helper saw acknowledged by the deadline is returned;
        what it sees later is re-sent (at-least-once), never confirmed without an ack.
        """
        lock = threading.Lock()
        acknowledged = [0]

        def probe() -> None:
            for item in burst:
                try:
                    self.stream.wait_for_offset(item.offset)
                except Exception:
                    return
                with lock:
                    acknowledged[0] += 1

        helper = threading.Thread(
            target=probe, name=f"zerobus-salvage-{self._telemetry.stream_label}", daemon=True
        )
        helper.start()
        helper.join(self._salvage_timeout_s)
        with lock:
            count = acknowledged[0]
        if helper.is_alive():
            log.warning(
                "ack lane %s (%s): the dead stream did not answer within %.1fs; %d batch(es) salvaged, "
                "the rest is re-sent",
                self._telemetry.stream_label,
                self.stream.stream_id,
                self._salvage_timeout_s,
                count,
            )
        return burst[:count]
