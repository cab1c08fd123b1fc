"""Ack lane: coalesced waits, confirmation only after the modelled durable ack, exactly once, in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.sink_helpers import KEY, ScriptedStream, make_lane, one_row, span
from zerobus_orchestration.coverage.digest import RangeDigest, rows_digest
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.sink import confirmation as confirmation_module
from zerobus_orchestration.sink.ack_lane import AckLane, LaneState
from zerobus_orchestration.sink.confirmation import LaneKind, NoConfirm, PendingAck, RawAnchor


@dataclass
class WatermarkRecorder:
    """Records each fired span with the model's durable watermark at that instant."""

    stream: ScriptedStream
    fired: list[tuple[int, int]] = field(default_factory=list)
    calls: int = 0

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        self.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        self.calls += 1
        durable = self.stream.durable()
        self.fired.extend((span.start, durable) for _, span in items)


def submit(lane: AckLane, stream: ScriptedStream, seq: int) -> None:
    assert lane.reserve(timeout=5)
    batch = one_row(seq)
    offset = stream.submit(batch)
    lane.put(PendingAck(LaneKind.RAW, seq, offset, RawAnchor(KEY, span(offset)), time.monotonic(), batch))


def eventually(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.001)
    return False


Op = tuple[str, int]
ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 6)),
        st.tuples(st.just("ack"), st.integers(0, 60)),
        st.tuples(st.just("transient"), st.integers(1, 3)),
        st.tuples(st.just("yield"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_random_interleavings_confirm_once_in_order_after_durable_ack(ops: list[Op]) -> None:
    metrics = SinkMetrics(CollectorRegistry())
    stream = ScriptedStream()
    recorder = WatermarkRecorder(stream)
    lane = make_lane(stream, metrics, recorder).start()
    submitted = 0
    delivered_seen = [lane.delivered]
    for op, n in ops:
        if op == "submit":
            for _ in range(n):
                submit(lane, stream, submitted)
                submitted += 1
        elif op == "ack":
            stream.ack_to(n)
        elif op == "transient":
            stream.fail_next_waits(n)
        else:
            time.sleep(0.0005)  # let the lane thread interleave
        delivered_seen.append(lane.delivered)
        # Never confirmed on submit: every fired offset is at or below the model's watermark.
        assert all(offset <= stream.durable() for offset, _ in list(recorder.fired))
    stream.ack_to(submitted - 1)
    assert lane.wait_idle(timeout=10)
    delivered_seen.append(lane.delivered)
    lane.stop(timeout=5)

    offsets = [offset for offset, _ in recorder.fired]
    assert offsets == list(range(submitted)), "each confirmation fires exactly once, in offset order"
    assert all(offset <= watermark for offset, watermark in recorder.fired), "fired before its durable ack"
    assert delivered_seen == sorted(delivered_seen), "delivered went backwards"
    assert lane.delivered == submitted
    assert lane.state is LaneState.STOPPED


def test_one_wait_confirms_every_lower_offset(metrics: SinkMetrics) -> None:
    stream = ScriptedStream()
    recorder = WatermarkRecorder(stream)
    lane = make_lane(stream, metrics, recorder)
    for seq in range(10):
        submit(lane, stream, seq)  # queued before the lane runs: one burst
    stream.ack_to(9)
    lane.start()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert stream.waits == [9]
    assert [o for o, _ in recorder.fired] == list(range(10))
    assert (
        metrics.sample(
            "zerobus_ack_coalesce_ratio_sum", {"table": "main.test.t", "stream": "0", "lane": "raw"}
        )
        == 10
    )
    assert (
        metrics.sample(
            "zerobus_ack_coalesce_ratio_count", {"table": "main.test.t", "stream": "0", "lane": "raw"}
        )
        == 1
    )


def test_nothing_fires_on_submit_only_on_the_ack(metrics: SinkMetrics) -> None:
    stream = ScriptedStream()
    recorder = WatermarkRecorder(stream)
    lane = make_lane(stream, metrics, recorder).start()
    for seq in range(5):
        submit(lane, stream, seq)
    assert eventually(lambda: len(stream.waits) >= 1)  # the lane is waiting on the stream
    assert recorder.fired == [] and lane.delivered == 0
    stream.ack_to(2)  # the lane may be waiting for a higher offset of its burst: at most 0..2 fire
    time.sleep(0.05)
    assert [o for o, _ in recorder.fired] in ([], [0], [0, 1], [0, 1, 2])
    stream.ack_to(4)
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert [o for o, _ in recorder.fired] == [0, 1, 2, 3, 4]


def test_pending_gauge_shows_the_backlog_while_the_ack_is_stalled(metrics: SinkMetrics) -> None:
    """The gauge exists to show a stalled ack: it must rise while the lane waits, not only after."""
    stream = ScriptedStream()
    lane = make_lane(stream, metrics, WatermarkRecorder(stream))
    labels = {"table": "main.test.t", "stream": "0", "lane": "raw"}
    for seq in range(5):
        submit(lane, stream, seq)  # queued before the lane runs: one burst
    lane.start()
    assert eventually(lambda: stream.waits == [4])  # the lane waits on the burst, ack withheld
    assert metrics.sample("zerobus_pending_offsets", labels) == 5
    stream.ack_to(4)
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert metrics.sample("zerobus_pending_offsets", labels) == 0


def test_transient_wait_failures_are_retried_without_double_confirming(metrics: SinkMetrics) -> None:
    stream = ScriptedStream()
    recorder = WatermarkRecorder(stream)
    lane = make_lane(stream, metrics, recorder)
    stream.fail_next_waits(3)
    for seq in range(4):
        submit(lane, stream, seq)
    stream.ack_to(3)
    lane.start()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert [o for o, _ in recorder.fired] == [0, 1, 2, 3]
    assert lane.retries == 3 and lane.delivered == 4
    assert (
        metrics.sample("zerobus_ack_lane_retry_total", {"table": "main.test.t", "stream": "0", "lane": "raw"})
        == 3
    )


class FailureObserver:
    def __init__(self) -> None:
        self.failed = threading.Event()
        self.lanes: list[AckLane] = []

    def on_lane_failed(self, lane: AckLane, error: BaseException, error_class: object) -> None:
        self.lanes.append(lane)
        self.failed.set()


def test_poison_stops_confirming_keeps_unconfirmed_and_reports(metrics: SinkMetrics) -> None:
    stream = ScriptedStream()
    recorder = WatermarkRecorder(stream)
    observer = FailureObserver()
    lane = make_lane(stream, metrics, recorder)
    lane._observer = observer
    for seq in range(6):
        submit(lane, stream, seq)
    stream.ack_to(1)
    stream.poison()
    lane.start()
    assert observer.failed.wait(10)
    assert observer.lanes == [lane] and lane.state is LaneState.FAILED
    # What the dead stream still reports durable is confirmed; nothing above it.
    assert [o for o, _ in recorder.fired] == [0, 1]
    assert lane.delivered == 2
    kept = lane.take_unconfirmed()
    assert [item.seq for item in kept] == [2, 3, 4, 5]
    assert (
        metrics.sample(
            "zerobus_ack_lane_poisoned_total", {"table": "main.test.t", "stream": "0", "lane": "raw"}
        )
        == 1
    )


def test_full_channel_makes_reserve_wait_until_confirmations_fire(metrics: SinkMetrics) -> None:
    stream = ScriptedStream()
    lane = make_lane(stream, metrics, WatermarkRecorder(stream), capacity=2).start()
    submit(lane, stream, 0)
    submit(lane, stream, 1)
    assert lane.reserve(timeout=0.05) is False  # two pending acks: the push would wait (backpressure)
    assert lane.backpressured is False  # the timed-out pusher is no longer waiting
    stream.ack_to(1)  # only the durable ack (and its confirmations) frees the slots
    assert lane.reserve(timeout=5) is True
    lane.release()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert lane.outstanding == 0


@dataclass
class BurstRecorder:
    """Keeps each ``record_many`` call, and whether any of the burst's futures had resolved before it."""

    futures: list[Future[OffsetRange | None]]
    calls: list[list[OffsetRange]] = field(default_factory=list)
    resolved_before: list[int] = field(default_factory=list)
    fail: bool = False

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        raise AssertionError("the ack lane must record a burst with one record_many call")

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        self.calls.append([span for _, span in items])
        self.resolved_before.append(sum(f.done() for f in self.futures))
        if self.fail:
            raise OSError("disk full")


def submit_with_future(
    lane: AckLane, stream: ScriptedStream, seq: int, confirm: bool = True
) -> Future[OffsetRange | None]:
    assert lane.reserve(timeout=5)
    batch = one_row(seq)
    offset = stream.submit(batch)
    future: Future[OffsetRange | None] = Future()
    confirmation = RawAnchor(KEY, span(offset)) if confirm else NoConfirm()
    lane.put(PendingAck(LaneKind.RAW, seq, offset, confirmation, time.monotonic(), batch, future))
    return future


def test_a_burst_is_recorded_with_one_call_in_offset_order_before_its_futures_resolve(
    metrics: SinkMetrics,
) -> None:
    stream = ScriptedStream()
    futures: list[Future[OffsetRange | None]] = []
    recorder = BurstRecorder(futures)
    lane = make_lane(stream, metrics, recorder)
    futures.extend(submit_with_future(lane, stream, seq) for seq in range(10))  # one burst
    stream.ack_to(9)
    lane.start()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert recorder.calls == [[span(i) for i in range(10)]]  # one transaction, offset order
    assert recorder.resolved_before == [0]  # no receipt resolves before its range is recorded
    assert [f.result(timeout=0) for f in futures] == [span(i) for i in range(10)]


def test_a_failed_burst_record_fails_its_receipts_and_no_confirm_ones_still_resolve(
    metrics: SinkMetrics,
) -> None:
    stream = ScriptedStream()
    futures: list[Future[OffsetRange | None]] = []
    recorder = BurstRecorder(futures, fail=True)
    lane = make_lane(stream, metrics, recorder)
    futures.extend(submit_with_future(lane, stream, seq, confirm=seq != 1) for seq in range(3))
    stream.ack_to(2)
    lane.start()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert recorder.calls == [[span(0), span(2)]]
    assert isinstance(futures[0].exception(timeout=0), OSError)
    assert isinstance(futures[2].exception(timeout=0), OSError)
    assert futures[1].result(timeout=0) is None
    assert lane.confirm_errors == 2 and lane.delivered == 3  # durable all the same


def test_batch_size_is_measured_once_and_carried_through_a_resubmission(metrics: SinkMetrics) -> None:
    """The lane counts the size the sink measured (``nbytes=``), never re-measuring the batch."""
    stream = ScriptedStream()
    lane = make_lane(stream, metrics, WatermarkRecorder(stream))
    batch = one_row(0)
    item = PendingAck(LaneKind.RAW, 0, 0, RawAnchor(KEY, span(0)), time.monotonic(), batch, nbytes=12345)
    moved = item.moved_to(7)
    assert (moved.rows, moved.nbytes, moved.resubmitted) == (1, 12345, True)
    assert PendingAck(LaneKind.RAW, 1, 1, RawAnchor(KEY, span(1)), 0.0, batch).nbytes == batch.nbytes
    assert lane.reserve(timeout=5)
    lane.put(
        PendingAck(LaneKind.RAW, 0, stream.submit(batch), RawAnchor(KEY, span(0)), 0.0, batch, nbytes=99)
    )
    stream.ack_to(0)
    lane.start()
    assert lane.wait_idle(timeout=10)
    lane.stop()
    labels = {"table": "main.test.t", "stream": "0", "lane": "raw"}
    assert metrics.sample("zerobus_bytes_submitted_total", labels) == 99
    assert metrics.sample("zerobus_bytes_delivered_total", labels) == 99


@dataclass
class DigestKeeper:
    """A recorder that keeps digests (``record_delivered``), as ``coverage.store.CoverageStore`` does."""

    delivered: list[tuple[list[OffsetRange], list[RangeDigest]]] = field(default_factory=list)

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        self.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        self.record_delivered(items, ())

    def record_delivered(
        self, items: Iterable[tuple[CoverageKey, OffsetRange]], digests: Iterable[RangeDigest]
    ) -> None:
        self.delivered.append(([s for _, s in items], list(digests)))


def test_digests_are_hashed_while_the_ack_travels_and_recorded_only_after_it(
    metrics: SinkMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane hashes a burst's payloads before it waits (the buffers are still in cache, and the
    hashing overlaps the round trip), once each, and records nothing until the durable ack."""
    hashed: list[int] = []

    def counting_digest(rows: pa.RecordBatch, order_by: str | None = None) -> bytes:
        hashed.append(rows.num_rows)
        return rows_digest(rows, order_by)

    monkeypatch.setattr(confirmation_module, "rows_digest", counting_digest)
    stream, recorder = ScriptedStream(), DigestKeeper()
    lane = make_lane(stream, metrics, recorder)
    payloads = [pa.record_batch({"v": pa.array([seq, seq], pa.int64())}) for seq in range(3)]
    for seq, payload in enumerate(payloads):  # queued before the lane runs: one burst
        assert lane.reserve(timeout=5)
        offset = stream.submit(payload)
        anchor = RawAnchor(KEY, OffsetRange(2 * seq, 2 * seq + 2), None, payload)
        lane.put(PendingAck(LaneKind.RAW, seq, offset, anchor, time.monotonic(), payload))
    lane.start()
    assert eventually(lambda: stream.waits == [2])  # waiting for the ack, which is withheld
    assert hashed == [2, 2, 2] and recorder.delivered == []  # hashed ahead, nothing recorded
    stream.ack_to(2)
    assert lane.wait_idle(timeout=10)
    lane.stop()
    assert hashed == [2, 2, 2]  # not hashed again when recorded
    ((spans, digests),) = recorder.delivered
    assert spans == [OffsetRange(0, 2), OffsetRange(2, 4), OffsetRange(4, 6)]
    assert [d.digest for d in digests] == [rows_digest(p) for p in payloads]
