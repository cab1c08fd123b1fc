"""Slices of a large *streamed* batch hold only their own rows, so in-flight slices never pin the parent.

The byte budget counts the bytes of the slices in flight. A zero-copy slice keeps its parent's whole
buffers alive, so a few large reader batches, sliced and in flight, would hold several parents while the
budget saw only a fraction of them: client memory grew with the batch size (issue 15).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import pyarrow as pa

from tests.support.sink_helpers import TABLE
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

ROWS = 4_000  # one int64 column: 32,000 bytes per input batch, sliced into pieces of <= 4,096 bytes
SCHEMA = pa.schema([("v", pa.int64())])


def big(i: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())], schema=SCHEMA)


def payload_buffer_bytes(batch: pa.RecordBatch) -> int:
    """Bytes the batch's payload column keeps alive (whole buffers, wherever the slice starts)."""
    return sum(b.size for b in batch.column("v").buffers() if b is not None)


def push_and_collect(data: object, metrics: SinkMetrics) -> list[pa.RecordBatch]:
    transport = MemoryTransport(LatencyModel(base_s=0.0))
    pool = StreamPool(transport, TABLE, PoolConfig(max_batch_bytes=4_096), metrics=metrics)
    sink = ZerobusSink(pool, source="big")
    sink.push(data)  # type: ignore[arg-type]
    sink.flush(timeout=30)
    pool.close()
    return [entry.batch for entry in transport.durable_batches(TABLE) if entry.batch is not None]


def test_slices_of_a_streamed_batch_do_not_hold_the_parent_buffers(metrics: SinkMetrics) -> None:
    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(3):
            yield big(i)

    landed = push_and_collect(pa.RecordBatchReader.from_batches(SCHEMA, generate()), metrics)
    assert sum(b.num_rows for b in landed) == 3 * ROWS
    assert len(landed) > 3  # really sliced
    for batch in landed:
        own = batch.num_rows * 8
        # The payload column holds its own rows (64-byte padding at most), not the 32,000-byte parent.
        assert payload_buffer_bytes(batch) <= own + 64, (payload_buffer_bytes(batch), own)
    values = sorted(v for b in landed for v in b.column("v").to_pylist())
    assert values == list(range(3 * ROWS))


def test_slices_of_in_memory_input_stay_zero_copy(metrics: SinkMetrics) -> None:
    table = pa.Table.from_batches([big(0)])
    landed = push_and_collect(table, metrics)
    assert len(landed) > 1
    # The caller holds the whole table anyway: copying its slices would only double the memory.
    assert any(payload_buffer_bytes(b) > b.num_rows * 8 + 64 for b in landed)


def test_a_streamed_batch_is_released_before_the_reader_builds_the_next(metrics: SinkMetrics) -> None:
    # Holding the previous batch while the reader produces the next puts two large input batches in
    # memory at once; with 100 MB batches that alone is 200 MB of a 512 MB worker.
    alive_when_next_built: list[bool] = []
    previous: list[weakref.ref[pa.RecordBatch]] = []

    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(4):
            if previous:
                alive_when_next_built.append(previous[-1]() is not None)
            batch = big(i)
            previous.append(weakref.ref(batch))
            yield batch
            del batch

    landed = push_and_collect(generate(), metrics)
    assert sum(b.num_rows for b in landed) == 4 * ROWS
    assert alive_when_next_built == [False, False, False]
