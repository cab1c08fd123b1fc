"""Helpers for sink tests: a stream whose acknowledgements the test releases by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pyarrow as pa

from zerobus_orchestration.errors import StreamPoisonedError, TransientError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.sink.ack_lane import AckLane
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.sink.health import SampleReservoir
from zerobus_orchestration.sink.lane_telemetry import LaneTelemetry

KEY = CoverageKey("sink", "src", "")


class ScriptedStream:
    """A ``Stream`` whose durable watermark moves only when the test calls ``ack_to`` (the model)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.batches: list[pa.RecordBatch] = []
        self.acked = -1
        self.poisoned_from: int | None = None
        self.transient_left = 0
        self.waits: list[int] = []

    @property
    def table(self) -> str:
        return "main.test.t"

    @property
    def stream_id(self) -> str:
        return "scripted"

    def submit(self, batch: pa.RecordBatch) -> int:
        with self._cond:
            self.batches.append(batch)
            return len(self.batches) - 1

    def ack_to(self, offset: int) -> None:
        with self._cond:
            if self.poisoned_from is not None:
                offset = min(offset, self.poisoned_from - 1)
            self.acked = max(self.acked, min(offset, len(self.batches) - 1))
            self._cond.notify_all()

    def poison(self) -> None:
        """Everything not yet acknowledged is lost; waits beyond the watermark fail from now on."""
        with self._cond:
            self.poisoned_from = self.acked + 1
            self._cond.notify_all()

    def fail_next_waits(self, count: int) -> None:
        with self._cond:
            self.transient_left += count

    def durable(self) -> int:
        with self._cond:
            return self.acked

    def wait_for_offset(self, offset: int) -> None:
        with self._cond:
            self.waits.append(offset)
            if self.transient_left > 0:
                self.transient_left -= 1
                raise TransientError("UNAVAILABLE: scripted")
            while self.acked < offset:
                if self.poisoned_from is not None:
                    raise StreamPoisonedError("INVALID_ARGUMENT: scripted poison")
                self._cond.wait()

    def flush(self) -> None:
        self.wait_for_offset(len(self.batches) - 1)

    def close(self) -> None:
        pass

    def unacked(self) -> list[pa.RecordBatch]:
        with self._cond:
            return self.batches[self.acked + 1 :]


def one_row(i: int) -> pa.RecordBatch:
    return pa.record_batch({"i": [i]})


def make_lane(
    stream: ScriptedStream, metrics: SinkMetrics, recorder: object, capacity: int = 1024
) -> AckLane:
    telemetry = LaneTelemetry(metrics, "main.test.t", "0", SampleReservoir(), SampleReservoir())
    return AckLane(
        stream,
        kind=LaneKind.RAW,
        capacity=capacity,
        telemetry=telemetry,
        recorder=recorder,  # type: ignore[arg-type]
        transient_retries=1000,
        retry_backoff_s=0.0,
    )


def span(i: int) -> OffsetRange:
    return OffsetRange(i, i + 1)


TABLE = "main.raw.events"


def rows(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"v": pa.array(range(start, start + n), pa.int64())})


def positions_landed(transport: object, table: str = TABLE) -> list[int]:
    """Every ``_twg_offset`` the transport holds durably (duplicates kept: at-least-once)."""
    landed = transport.durable_table(table)  # type: ignore[attr-defined]
    return sorted(landed.column("_twg_offset").to_pylist())


class CountingRecorder:
    """A ``CoverageRecorder`` that counts how often each span was recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[CoverageKey, OffsetRange], int] = {}

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        self.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        with self._lock:
            for item in items:
                self.counts[item] = self.counts.get(item, 0) + 1

    def spans(self) -> list[OffsetRange]:
        with self._lock:
            return sorted(span for _, span in self.counts)

    def covered(self) -> int:
        return sum(len(s) for s in self.spans())

    def recorded_twice(self) -> list[OffsetRange]:
        with self._lock:
            return [span for (_, span), n in self.counts.items() if n != 1]
