"""Anti-regression soak: ingest must run ahead of durability and acks must coalesce.

If anyone re-introduces an inline wait per batch, pending offsets never exceed 1 and every wait
confirms a single batch, so both assertions below fail.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, CountingRecorder
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

MAX_BATCHES = 4000
PUSH_WINDOW_S = 4.0  # bounds the run length only; nothing asserts on time


@pytest.mark.slow
def test_pending_climbs_and_acks_coalesce_under_load(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel.around(0.05, spread=0.3, seed=11), keep_payloads=False)
    pool = StreamPool(
        transport,
        TABLE,
        PoolConfig(min_streams=2, ack_channel_capacity=64),
        recorder=recorder,
        metrics=metrics,
    )
    sink = ZerobusSink(pool, source="soak")
    batch = pa.record_batch({"v": pa.array(range(100), pa.int64())})
    pending_samples = []
    pushed = 0
    stop_at = time.monotonic() + PUSH_WINDOW_S
    while pushed < MAX_BATCHES and time.monotonic() < stop_at:
        sink.push(batch)
        pushed += 1
        if pushed % 10 == 0:
            pending_samples.append(pool.health().pending)
    sink.close()
    health = pool.health()
    pool.close()

    assert recorder.covered() == pushed * 100 == transport.durable_rows(TABLE)
    assert max(pending_samples) > 1, f"pending never exceeded 1 (max {max(pending_samples)}): inline waits?"
    assert health.coalesce_ratio_p50 is not None and health.coalesce_ratio_p50 >= 2, (
        f"coalesce ratio p50 {health.coalesce_ratio_p50}: one wait per batch?"
    )
