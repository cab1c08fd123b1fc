"""No call over ``max_batch_bytes`` as sent (stamped), whatever the rows; a row too large for any call
is refused before it is sent (past the service's message limit the SDK would retry it forever)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, positions_landed
from zerobus_orchestration.config import MAX_CALL_BYTES, PoolConfig
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.slicing import ROW_TOO_LARGE
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

LIMIT = 64 * 1024


def uneven(tiny: int, large: int, large_bytes: int) -> pa.RecordBatch:
    """``tiny`` one-byte documents, then ``large`` documents of ``large_bytes`` each."""
    docs = ["x"] * tiny + ["y" * large_bytes] * large
    return pa.record_batch({"id": pa.array(range(len(docs)), pa.int64()), "doc": pa.array(docs)})


def sink_over(transport: MemoryTransport, metrics: SinkMetrics, source: str = "s") -> ZerobusSink:
    pool = StreamPool(transport, TABLE, PoolConfig(max_batch_bytes=LIMIT), metrics=metrics)
    return ZerobusSink(pool, source=source, owns_pool=True)


def test_uneven_rows_are_cut_so_no_call_is_over_the_limit_as_sent(metrics: SinkMetrics) -> None:
    """2,000 tiny rows then 40 of 20 KB: sliced by the average row, the slice holding the large ones
    would be ~800 KB; it is halved until every call fits, each row still sent exactly once."""
    transport = MemoryTransport(LatencyModel())
    batch = uneven(2_000, 40, 20_000)
    with sink_over(transport, metrics) as sink:
        sink.push(batch)
    landed = transport.durable_batches(TABLE)
    assert max(b.nbytes for b in landed) <= LIMIT
    assert positions_landed(transport) == list(range(batch.num_rows))


def test_a_narrow_table_with_a_long_source_tag_is_cut_by_its_size_as_sent(metrics: SinkMetrics) -> None:
    """One int64 column (8 bytes a row) stamped with a 100-character tag (~130 bytes a row): cut by
    the payload alone, each call would be ~17 times the limit."""
    transport = MemoryTransport(LatencyModel())
    batch = pa.record_batch({"v": pa.array(range(20_000), pa.int64())})  # 160 KB, ~2.8 MB as sent
    with sink_over(transport, metrics, source="s" * 100) as sink:
        sink.push(batch)
    landed = transport.durable_batches(TABLE)
    assert max(b.nbytes for b in landed) <= LIMIT
    assert sum(b.nbytes for b in landed) > 10 * batch.nbytes  # the stamped size is what was cut
    assert positions_landed(transport) == list(range(20_000))


def test_a_row_over_what_one_call_carries_is_refused_whole_input_nothing_sent(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(LatencyModel())
    batch = uneven(10, 1, MAX_CALL_BYTES)  # row 10 alone is over the per-call limit
    with pytest.raises(WriteBoundaryError) as info, sink_over(transport, metrics) as sink:
        sink.push(batch)
    error = info.value
    assert (error.table, error.column, error.kind) == (TABLE, "doc", ROW_TOO_LARGE)
    assert "row position 10" in str(error) and "Fix:" in str(error)
    assert transport.durable_rows(TABLE) == 0  # in-memory input is cut whole before anything is sent
    assert sink.finish()[0].rows == 0  # and no position was claimed


def test_a_streamed_row_over_the_call_limit_stops_the_stream_at_that_row(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(LatencyModel())

    def reader() -> Iterator[pa.RecordBatch]:
        yield uneven(100, 0, 0)
        yield uneven(1, 1, MAX_CALL_BYTES + 1)

    with pytest.raises(WriteBoundaryError) as info, sink_over(transport, metrics) as sink:
        sink.push(reader())
    assert info.value.kind == ROW_TOO_LARGE
    assert transport.durable_rows(TABLE) == 100  # the batch before went; nothing of the refused one


def test_a_row_over_max_batch_bytes_but_within_one_call_is_sent_alone(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(LatencyModel())
    batch = uneven(5, 1, 3 * LIMIT)
    with sink_over(transport, metrics) as sink:
        sink.push(batch)
    landed = transport.durable_batches(TABLE)
    assert [b.num_rows for b in landed if b.nbytes > LIMIT] == [1]
    assert positions_landed(transport) == list(range(6))
