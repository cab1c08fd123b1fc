"""The pool's budget of unacknowledged bytes, and slicing of batches over ``max_batch_bytes``.

Push waits at the budget (never for its own batch's ack) and goes on when earlier batches settle,
confirmed or given up; a batch larger than the whole budget is sent alone; an oversized batch is sliced
by rows, each slice keeping its positions and recorded in coverage with its digest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, positions_landed, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.digest import rows_digest
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.errors import SinkClosedError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.byte_budget import ByteBudget
from zerobus_orchestration.sink.errors import DeliveryFailedError
from zerobus_orchestration.transport.memory import FaultPlan, LatencyModel, MemoryTransport

ROWS = 1_000  # one int64 column: 8,000 bytes per input batch


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def stamped_bytes() -> int:
    """What one ``rows(_, ROWS)`` batch weighs once stamped (the bytes the budget counts)."""
    transport = MemoryTransport(LatencyModel(base_s=0.0))
    pool = StreamPool(transport, TABLE, PoolConfig())
    sink = ZerobusSink(pool, source="big")  # the source is stamped on every row: same one as the tests
    sink.push(rows(0, ROWS))
    info, _ = sink.finish()
    pool.close()
    return info.bytes


def pusher(sink: ZerobusSink, batches: int) -> tuple[threading.Thread, list[int], list[BaseException]]:
    produced: list[int] = []
    errors: list[BaseException] = []

    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(batches):
            produced.append(i)
            yield rows(i * ROWS, ROWS)

    def run() -> None:
        try:
            sink.push(generate())
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, produced, errors


def test_push_waits_at_the_byte_budget_and_goes_on_as_acks_release_bytes(metrics: SinkMetrics) -> None:
    one = stamped_bytes()
    transport = MemoryTransport(LatencyModel(base_s=0.0))
    # Channels far larger than the budget: only the bytes can hold the pusher.
    config = PoolConfig(min_streams=1, ack_channel_capacity=1000, max_inflight_bytes=3 * one)
    pool = StreamPool(transport, TABLE, config, metrics=metrics)
    sink = ZerobusSink(pool, source="big")
    transport.pause_acks()
    thread, produced, errors = pusher(sink, 10)
    wait_for(lambda: pool.budget.waiting == 1)
    # Three batches fit; the fourth was read and waits for bytes, not for its own ack.
    assert len(produced) == 4 and sink.finish()[0].batches == 4
    assert pool.inflight_bytes == 3 * one == pool.health().inflight_bytes
    assert transport.durable_rows(TABLE) == 0
    labels = {"table": TABLE, "stream": "0", "lane": "raw"}
    # Set by the lane (never on the push path) when it takes a burst: at least the stalled first batch.
    wait_for(lambda: (metrics.sample("zerobus_inflight_bytes", labels) or 0) >= one)
    transport.resume_acks()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    sink.flush(timeout=30)
    assert transport.durable_rows(TABLE) == 10 * ROWS
    assert positions_landed(transport) == list(range(10 * ROWS))
    assert pool.inflight_bytes == 0 and pool.budget.waits >= 1
    assert metrics.sample("zerobus_inflight_bytes", labels) == 0
    pool.close()


def test_a_batch_larger_than_the_whole_budget_is_sent_alone_not_deadlocked(metrics: SinkMetrics) -> None:
    one = stamped_bytes()
    transport = MemoryTransport(LatencyModel(base_s=0.0))
    pool = StreamPool(
        transport, TABLE, PoolConfig(min_streams=1, max_inflight_bytes=one // 2), metrics=metrics
    )
    sink = ZerobusSink(pool, source="big")
    transport.pause_acks()
    thread, produced, errors = pusher(sink, 3)
    wait_for(lambda: pool.budget.waiting == 1)
    assert len(produced) == 2 and pool.inflight_bytes == one  # the first went through, alone
    transport.resume_acks()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    sink.flush(timeout=30)
    assert positions_landed(transport) == list(range(3 * ROWS))
    pool.close()


def rejects_first(batch: pa.RecordBatch) -> bool:
    return 0 in batch.column("v").to_pylist()


def test_a_batch_given_up_on_releases_its_bytes_so_the_waiting_pusher_goes_on(metrics: SinkMetrics) -> None:
    """The service rejects the first batch at every ack until it is given up (settled with an error).
    Its bytes must come back then, or the pusher waiting behind it waits forever."""
    one = stamped_bytes()
    transport = MemoryTransport(LatencyModel(base_s=0.001), FaultPlan(rejects_batch=rejects_first))
    config = PoolConfig(
        min_streams=1,
        max_inflight_bytes=one,
        open_backoff_initial_s=0.01,
        open_backoff_max_s=0.02,
        poisoned_submit_attempts=2,
    )
    pool = StreamPool(transport, TABLE, config, metrics=metrics)
    sink = ZerobusSink(pool, source="big")
    thread, _produced, errors = pusher(sink, 3)
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    with pytest.raises(DeliveryFailedError, match="1 batch"):
        sink.flush(timeout=30)
    assert transport.open_attempts >= 2  # the fault acted: the rejected batch killed streams
    assert positions_landed(transport) == list(range(ROWS, 3 * ROWS))
    assert pool.inflight_bytes == 0
    with pytest.raises(DeliveryFailedError):
        pool.close(timeout=10)


def test_a_pusher_waiting_for_bytes_is_woken_by_close() -> None:
    budget = ByteBudget(10, table=TABLE)
    budget.acquire(8)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            budget.acquire(8)
        except SinkClosedError as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: budget.waiting == 1)
    budget.close()
    thread.join(timeout=10)
    assert len(raised) == 1 and budget.in_flight == 8


def test_an_oversized_batch_is_sliced_with_its_positions_coverage_and_digests(
    metrics: SinkMetrics, tmp_path: Path
) -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.001))
    store = CoverageStore(tmp_path / "coverage.sqlite", TABLE)
    config = PoolConfig(min_streams=1, max_batch_bytes=2_048)  # one stream: lands in submit order
    pool = StreamPool(transport, TABLE, config, recorder=store, metrics=metrics)
    sink = ZerobusSink(pool, source="big", start_offset=100)
    # 8,000 payload bytes, 35,000 as sent: each row also carries 8 + 8 bytes of stamps and the tag
    # "big" with its 8-byte offset (large_utf8 on the wire; one more offset per piece). So that each
    # piece *as sent* is at most 2,048 bytes: 58 rows.
    big = rows(0, ROWS)
    receipts = sink.send(big)
    sink.flush(timeout=30)
    spans = [r.span for r in receipts]
    assert spans == [OffsetRange(100 + s, 100 + min(s + 58, ROWS)) for s in range(0, ROWS, 58)]
    landed = transport.durable_batches(TABLE)
    assert [b.num_rows for b in landed] == [58] * 17 + [14]
    assert max(b.nbytes for b in landed) <= 2_048
    assert positions_landed(transport) == list(range(100, 100 + ROWS))
    table = transport.durable_table(TABLE).sort_by("_twg_offset")
    assert table.column("v").to_pylist() == list(range(ROWS))  # each row at its own position
    key = CoverageKey(TABLE, "big", "")
    assert store.ranges(key) == (OffsetRange(100, 100 + ROWS),)
    digests = store.digests(key)
    assert [d.span for d in digests] == spans
    for digest, span in zip(digests, spans, strict=True):
        assert digest.digest == rows_digest(big.slice(span.start - 100, span.end - span.start))
    pool.close()
    store.close()
