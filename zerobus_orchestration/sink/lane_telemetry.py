"""Where an ack lane reports: its labelled metric series, the pool's sample reservoirs, and the SDK's
reconnects observed inside its stream.

Kept apart from ``ack_lane.py`` so the lane reads as what it does (wait, confirm, fail, salvage) and
every metric and log line about a lane's delivery is found in one place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink.confirmation import PendingAck
from zerobus_orchestration.sink.health import SampleReservoir
from zerobus_orchestration.transport.base import Stream

log = logging.getLogger("zerobus_orchestration.sink.ack_lane")  # the lane's own log lines, as before


@dataclass(frozen=True)
class LaneTelemetry:
    """Where a lane reports: metric families with its labels, and the pool's sample reservoirs."""

    metrics: SinkMetrics
    table: str
    stream_label: str
    coalesce: SampleReservoir
    latency: SampleReservoir
    lane: str = "raw"
    """The pool's lane kind (raw / derived), the ``lane`` label of every per-stream metric."""


class LaneMetrics:
    """One lane's metric series (labels bound once) and what a burst adds to them."""

    def __init__(self, telemetry: LaneTelemetry) -> None:
        self._telemetry = telemetry
        labels = {"table": telemetry.table, "stream": telemetry.stream_label, "lane": telemetry.lane}
        m = telemetry.metrics
        self._coalesce = m.ack_coalesce_ratio.labels(**labels)
        self.pending = m.pending_offsets.labels(**labels)
        self.inflight_bytes = m.inflight_bytes.labels(**labels)
        self._latency = m.delivery_latency.labels(**labels)
        self.retries = m.ack_lane_retries.labels(**labels)
        self.poisoned = m.ack_lane_poisoned.labels(**labels)
        self._rows_sub = m.rows_submitted.labels(**labels)
        self._bytes_sub = m.bytes_submitted.labels(**labels)
        self._rows_del = m.rows_delivered.labels(**labels)
        self._bytes_del = m.bytes_delivered.labels(**labels)
        self.recoveries = m.stream_recoveries.labels(**labels)

    def submitted(self, burst: list[PendingAck]) -> None:
        fresh = [item for item in burst if not item.resubmitted]  # re-sends were counted already
        if fresh:
            self._rows_sub.inc(sum(item.rows for item in fresh))
            self._bytes_sub.inc(sum(item.nbytes for item in fresh))

    def delivered(self, burst: list[PendingAck], now: float) -> tuple[int, int]:
        """Latency per batch, rows and bytes, and the burst's size as one coalesce sample; (rows, bytes)."""
        for item in burst:
            self._telemetry.latency.add(now - item.submitted_at)
            self._latency.observe(now - item.submitted_at)
        rows, nbytes = sum(item.rows for item in burst), sum(item.nbytes for item in burst)
        self._rows_del.inc(rows)
        self._bytes_del.inc(nbytes)
        self._telemetry.coalesce.add(len(burst))
        self._coalesce.observe(len(burst))
        return rows, nbytes


@runtime_checkable
class ReportsReplays(Protocol):
    """A stream that can tell when its transport reconnected inside it and replayed batches.

    Both counts only grow. The official SDK's streams do (``transport/sdk.py`` says what is observable).
    """

    @property
    def recoveries(self) -> int: ...

    @property
    def rows_possibly_resent(self) -> int: ...


class ReplayWatch:
    """Counts and reports reconnects the transport made inside one stream since the last look.

    Each one replayed the batches not yet acknowledged; those the service had already made durable
    land twice while every wait reports success, so this is the only trace of it.
    """

    def __init__(self, stream: Stream, telemetry: LaneTelemetry, metrics: LaneMetrics) -> None:
        self._stream = stream
        self._replays = stream if isinstance(stream, ReportsReplays) else None
        self._telemetry = telemetry
        self._metrics = metrics
        self.recoveries = 0
        self.rows_possibly_resent = 0

    def observe(self) -> None:
        stream = self._replays
        if stream is None:
            return
        recoveries, resent = stream.recoveries, stream.rows_possibly_resent
        new, new_rows = recoveries - self.recoveries, resent - self.rows_possibly_resent
        if new <= 0 and new_rows <= 0:
            return
        self.recoveries, self.rows_possibly_resent = recoveries, resent
        self._metrics.recoveries.inc(max(new, 0))
        log.warning(
            "%s: stream %s (%s, lane %s) was reconnected %d time(s) by the SDK, which re-sent every batch "
            "not yet acknowledged: up to %d row(s) may have landed twice (%d so far on this stream). "
            "Delivery is at-least-once; read-back counts the actual duplicates",
            self._telemetry.table,
            self._telemetry.stream_label,
            self._stream.stream_id,
            self._telemetry.lane,
            new,
            new_rows,
            resent,
        )
