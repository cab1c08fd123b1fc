"""In-process fake of Zerobus for fast unit, property and soak tests, the demo and the benchmark.

Each ``submit`` draws an acknowledgement latency from a seeded distribution; a batch becomes durable
at ``max(previous batch's durable time, submit time + latency)``, so acknowledgements are cumulative
and in offset order, as on the real service. What became durable is kept per table, in order, so a
test can assert exactly what landed (and nothing that was only submitted).

Like the official SDK, a stream may cap its unacknowledged batches (``max_inflight_batches``): a
``submit`` at the cap blocks until an acknowledgement frees a place, and counts itself in
``blocked_submits``, so a test can prove the pool never pushes a stream that far.

Faults are declared up front in a :class:`FaultPlan` and keyed by the stream's *open index* (0 for the
first stream this transport opened, 1 for the next, ...), so a rebuilt stream is a new index and does
not inherit the fault of the stream it replaces.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from zerobus_orchestration.errors import ConcurrencyRejectedError, StreamPoisonedError, TransientError


@dataclass(frozen=True)
class LatencyModel:
    """Acknowledgement latency: ``base_s`` plus a uniform jitter in ``[0, jitter_s)``, seeded."""

    base_s: float = 0.0
    jitter_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.jitter_s < 0:
            raise ValueError("LatencyModel: base_s and jitter_s must be >= 0")

    @classmethod
    def around(cls, median_s: float, spread: float = 0.3, seed: int = 0) -> LatencyModel:
        """A band of +-``spread`` (fraction) around ``median_s``, e.g. Zerobus's ~150 ms to durability."""
        return cls(base_s=median_s * (1 - spread), jitter_s=2 * median_s * spread, seed=seed)


@dataclass(frozen=True)
class FaultPlan:
    """Injectable faults. Stream keys are open indexes (order in which this transport opened them)."""

    poison_at: Mapping[int, int] = field(default_factory=dict)
    """open index -> stream offset: that batch is never acknowledged and the stream fails on reaching it."""
    transient_wait_failures: Mapping[int, int] = field(default_factory=dict)
    """open index -> how many ``wait_for_offset`` calls raise ``TransientError`` before waits succeed."""
    transient_submit_failures: Mapping[int, int] = field(default_factory=dict)
    """open index -> how many ``submit`` calls raise ``TransientError`` (nothing queued) before submits
    succeed; the message carries a ``retry after`` hint of ``submit_retry_hint_s`` if set."""
    submit_retry_hint_s: float | None = None
    transient_wait_rate: float = 0.0
    """Probability (seeded) that any ``wait_for_offset`` raises ``TransientError`` once."""
    reject_first_opens: int = 0
    """The first K ``open_stream`` calls raise ``ConcurrencyRejectedError``."""
    max_streams_per_table: int | None = None
    """Opening more live streams than this for one table raises ``ConcurrencyRejectedError``."""
    slow_streams: Mapping[int, float] = field(default_factory=dict)
    """open index -> latency multiplier (a slow stream, not a dead one)."""
    rejects_batch: Callable[[pa.RecordBatch], bool] | None = None
    """A batch the service rejects on every stream: any stream fails (INVALID_ARGUMENT) on reaching a
    batch this returns True for, like ``poison_at`` but following the batch across rebuilt streams."""
    seed: int = 0


@dataclass(frozen=True)
class DurableBatch:
    """One acknowledged batch as the service kept it."""

    stream_id: str
    offset: int
    num_rows: int
    nbytes: int
    batch: pa.RecordBatch | None  # None when the transport was told not to keep payloads


class MemoryTransport:
    """A ``Transport`` whose streams live in this process. Thread-safe."""

    def __init__(
        self,
        latency: LatencyModel | None = None,
        faults: FaultPlan | None = None,
        *,
        keep_payloads: bool = True,
        clock: Callable[[], float] = time.monotonic,
        max_inflight_batches: int | None = None,
    ) -> None:
        """``max_inflight_batches``: each stream's cap on unacknowledged batches (None: no cap)."""
        self.latency = latency or LatencyModel()
        self.max_inflight_batches = max_inflight_batches
        self.faults = faults or FaultPlan()
        self.keep_payloads = keep_payloads
        self._clock = clock
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._latency_rng = random.Random(self.latency.seed)
        self._fault_rng = random.Random(self.faults.seed)
        self._durable: dict[str, list[DurableBatch]] = {}
        self._streams: list[MemoryStream] = []
        self._open_attempts = 0
        self._rejected_opens = 0
        self._acks_paused = threading.Event()
        self._closed = False

    # -- Transport protocol -------------------------------------------------------------------------

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        # Lock order is stream -> transport (a settling stream records durable batches under the
        # transport lock), so liveness is read with the transport lock released; ``_open_lock`` keeps
        # opens serial, so the limit check and the append still act as one step.
        with self._open_lock:
            with self._lock:
                self._open_attempts += 1
                attempt = self._open_attempts
                existing = [s for s in self._streams if s.table == table]
            live = sum(1 for s in existing if s.is_live)
            limit = self.faults.max_streams_per_table
            with self._lock:
                if attempt <= self.faults.reject_first_opens or (limit is not None and live >= limit):
                    self._rejected_opens += 1
                    raise ConcurrencyRejectedError(
                        f"{table}: RESOURCE_EXHAUSTED: too many concurrent streams ({live} open)"
                    )
                index = len(self._streams)
                stream = MemoryStream(self, table, schema, index)
                self._streams.append(stream)
                return stream

    def close(self) -> None:
        with self._lock:
            streams = list(self._streams)
            self._closed = True
        for stream in streams:
            stream.abort()

    # -- fault controls -----------------------------------------------------------------------------

    def pause_acks(self) -> None:
        """Stall every acknowledgement (an ack stall) until ``resume_acks``."""
        self._acks_paused.set()

    def resume_acks(self) -> None:
        self._acks_paused.clear()
        for stream in self.streams():
            stream.wake()

    @property
    def acks_paused(self) -> bool:
        return self._acks_paused.is_set()

    # -- inspection ---------------------------------------------------------------------------------

    def streams(self, table: str | None = None) -> list[MemoryStream]:
        with self._lock:
            return [s for s in self._streams if table is None or s.table == table]

    @property
    def open_attempts(self) -> int:
        return self._open_attempts

    @property
    def rejected_opens(self) -> int:
        return self._rejected_opens

    def durable_batches(self, table: str) -> list[DurableBatch]:
        """Everything acknowledged for ``table`` so far, in acknowledgement order."""
        for stream in self.streams(table):
            stream.settle()
        with self._lock:
            return list(self._durable.get(table, ()))

    def durable_rows(self, table: str) -> int:
        return sum(b.num_rows for b in self.durable_batches(table))

    def durable_table(self, table: str) -> pa.Table:
        batches = [b.batch for b in self.durable_batches(table) if b.batch is not None]
        if not batches:
            raise ValueError(f"{table}: nothing durable (or the transport does not keep payloads)")
        return pa.Table.from_batches(batches)

    # -- used by MemoryStream -----------------------------------------------------------------------

    def _draw_latency(self, multiplier: float) -> float:
        with self._lock:
            jitter = self._latency_rng.random() * self.latency.jitter_s if self.latency.jitter_s else 0.0
        return (self.latency.base_s + jitter) * multiplier

    def _draw_transient(self) -> bool:
        if self.faults.transient_wait_rate <= 0:
            return False
        with self._lock:
            return self._fault_rng.random() < self.faults.transient_wait_rate

    def _make_durable(self, entry: DurableBatch, table: str) -> None:
        with self._lock:
            self._durable.setdefault(table, []).append(entry)

    def _now(self) -> float:
        return self._clock()


@dataclass
class _InFlight:
    offset: int
    batch: pa.RecordBatch
    durable_at: float
    rejected: bool = False


class MemoryStream:
    """One fake stream. Offsets are 0, 1, 2, ... per stream; acknowledgements are cumulative."""

    def __init__(self, transport: MemoryTransport, table: str, schema: pa.Schema, open_index: int) -> None:
        self._transport = transport
        self._table = table
        self.schema = schema
        self.open_index = open_index
        self._id = f"mem-{open_index}"
        faults = transport.faults
        self._poison_at = faults.poison_at.get(open_index)
        self._transient_left = faults.transient_wait_failures.get(open_index, 0)
        self._submit_failures_left = faults.transient_submit_failures.get(open_index, 0)
        self._submit_hint_s = faults.submit_retry_hint_s
        self._latency_multiplier = faults.slow_streams.get(open_index, 1.0)
        self._rejects_batch = faults.rejects_batch
        self._held = False
        self._cond = threading.Condition()
        self._inflight: deque[_InFlight] = deque()  # submitted, not yet durable, in offset order
        self._next_offset = 0
        self._durable_offset = -1
        self._last_durable_at = 0.0
        self._failed: StreamPoisonedError | None = None
        self._closed = False
        self.submits = 0
        self.refused_submits = 0
        self.blocked_submits = 0
        """Submits that found the stream at its in-flight cap and waited for an ack (the SDK's behaviour)."""
        self.waits = 0

    # -- Stream protocol ----------------------------------------------------------------------------

    @property
    def table(self) -> str:
        return self._table

    @property
    def stream_id(self) -> str:
        return self._id

    @property
    def max_inflight_batches(self) -> int | None:
        return self._transport.max_inflight_batches

    def submit(self, batch: pa.RecordBatch) -> int:
        latency = self._transport._draw_latency(self._latency_multiplier)
        with self._cond:
            self._settle_locked()
            self._wait_below_cap_locked()
            if self._failed is not None:
                raise self._failed
            if self._closed:
                raise StreamPoisonedError(f"{self._table}: stream {self._id} is closed", code="CANCELLED")
            if self._submit_failures_left > 0:
                self._submit_failures_left -= 1
                self.refused_submits += 1
                hint = "" if self._submit_hint_s is None else f"; retry after {self._submit_hint_s}s"
                raise TransientError(
                    f"{self._table}: stream {self._id}: UNAVAILABLE: injected submit failure{hint}",
                    code="UNAVAILABLE",
                )
            offset = self._next_offset
            self._next_offset += 1
            durable_at = max(self._last_durable_at, self._transport._now() + latency)
            self._last_durable_at = durable_at
            rejected = self._rejects_batch is not None and self._rejects_batch(batch)
            self._inflight.append(_InFlight(offset, batch, durable_at, rejected))
            self.submits += 1
            # No notify: a waiter always has an earlier in-flight batch and a timed wait on its ack.
            return offset

    def _wait_below_cap_locked(self) -> None:
        cap = self._transport.max_inflight_batches
        if cap is None or len(self._inflight) < cap:
            return
        self.blocked_submits += 1
        while len(self._inflight) >= cap and self._failed is None and not self._closed:
            self._cond.wait(timeout=self._time_to_next_ack_locked())
            self._settle_locked()

    def wait_for_offset(self, offset: int) -> None:
        with self._cond:
            self.waits += 1
            if offset >= self._next_offset:
                raise ValueError(f"{self._id}: offset {offset} was never submitted")
            if self._transient_left > 0:
                self._transient_left -= 1
                raise TransientError(f"{self._table}: UNAVAILABLE: injected transient wait failure")
            if self._transport._draw_transient():
                raise TransientError(f"{self._table}: UNAVAILABLE: injected transient wait failure (rate)")
            while True:
                self._settle_locked()
                if self._durable_offset >= offset:
                    return
                if self._failed is not None:
                    raise self._failed
                if self._closed:
                    raise StreamPoisonedError(f"{self._table}: stream {self._id} closed", code="CANCELLED")
                self._cond.wait(timeout=self._time_to_next_ack_locked())

    def flush(self) -> None:
        with self._cond:
            last = self._next_offset - 1
        if last >= 0:
            self.wait_for_offset(last)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
        try:
            if self._failed is None:
                self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def unacked(self) -> list[pa.RecordBatch]:
        with self._cond:
            self._settle_locked()
            return [item.batch for item in self._inflight]

    # -- inspection and control ---------------------------------------------------------------------

    @property
    def is_live(self) -> bool:
        with self._cond:
            return not self._closed and self._failed is None

    @property
    def durable_offset(self) -> int:
        """Highest acknowledged offset (-1 before the first ack): the model's durable watermark."""
        with self._cond:
            self._settle_locked()
            return self._durable_offset

    @property
    def failed(self) -> bool:
        with self._cond:
            self._settle_locked()
            return self._failed is not None

    def settle(self) -> None:
        with self._cond:
            self._settle_locked()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def hold_acks(self) -> None:
        """Stall this stream's acknowledgements only (others keep acknowledging) until ``release_acks``."""
        with self._cond:
            self._held = True

    def release_acks(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- internals ----------------------------------------------------------------------------------

    def _settle_locked(self) -> None:
        """Move every batch whose acknowledgement time has passed into the durable store."""
        if self._transport.acks_paused or self._held or self._closed:
            return
        now = self._transport._now()
        while self._inflight and self._failed is None:
            head = self._inflight[0]
            if head.offset == self._poison_at or head.rejected:
                if head.durable_at <= now:
                    self._failed = StreamPoisonedError(
                        f"{self._table}: stream {self._id} failed at offset {head.offset}: "
                        "INVALID_ARGUMENT: injected poison",
                        code="INVALID_ARGUMENT",
                    )
                    self._cond.notify_all()
                return
            if head.durable_at > now:
                return
            self._inflight.popleft()
            self._durable_offset = head.offset
            keep = head.batch if self._transport.keep_payloads else None
            entry = DurableBatch(self._id, head.offset, head.batch.num_rows, head.batch.nbytes, keep)
            self._transport._make_durable(entry, self._table)

    def _time_to_next_ack_locked(self) -> float | None:
        stalled = self._transport.acks_paused or self._held
        if stalled or not self._inflight:
            return 0.05 if stalled else None
        return max(0.0, self._inflight[0].durable_at - self._transport._now())
