"""Streaming a large RecordBatchReader keeps memory bounded by the ack channels, not the input size."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from tests.support.sink_helpers import TABLE
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

ROWS_PER_BATCH = 16_384
BATCHES = 300
CAPACITY = 4
STREAMS = 2


def test_reader_streaming_memory_is_bounded_by_channel_capacity(metrics: SinkMetrics) -> None:
    # The fake service drops payloads once durable, as the real one does on our side of the wire.
    transport = MemoryTransport(LatencyModel(base_s=0.002, jitter_s=0.002, seed=5), keep_payloads=False)
    config = PoolConfig(min_streams=STREAMS, ack_channel_capacity=CAPACITY)
    pool = StreamPool(transport, TABLE, config, metrics=metrics)
    sink = ZerobusSink(pool, source="big")
    schema = pa.schema([("v", pa.int64())])
    baseline = pa.total_allocated_bytes()
    peak = 0
    produced = 0

    def generate() -> Iterator[pa.RecordBatch]:
        nonlocal peak, produced
        for i in range(BATCHES):
            peak = max(peak, pa.total_allocated_bytes() - baseline)
            produced += 1
            yield pa.record_batch(
                [pa.array(range(i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH), pa.int64())], schema=schema
            )

    sink.push(pa.RecordBatchReader.from_batches(schema, generate()))
    sink.close()
    pool.close()
    assert produced == BATCHES
    assert transport.durable_rows(TABLE) == BATCHES * ROWS_PER_BATCH

    sample = pa.record_batch([pa.array(range(ROWS_PER_BATCH), pa.int64())], schema=schema)
    stamped_bytes = sample.nbytes * 4  # payload + emit ts + source + offset columns, generously
    # At most `capacity` pending acks per stream, plus the batches being read and prepared.
    bound = (CAPACITY * STREAMS + 4) * stamped_bytes
    total_input = BATCHES * sample.nbytes
    assert peak <= bound, f"peak {peak} bytes > bound {bound} (input {total_input})"
    assert peak < total_input / 5
