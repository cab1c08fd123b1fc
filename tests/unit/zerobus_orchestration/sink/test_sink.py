"""ZerobusSink API: stamping, gate seam, receipts, finish/flush, inputs, lanes, thread safety, metrics."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, CountingRecorder, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import SinkClosedError, WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, RESERVED_FIELDS, SOURCE
from zerobus_orchestration.sink import (
    ConfirmationLaneError,
    LaneKind,
    PartialSendError,
    StreamPool,
    ZerobusSink,
)
from zerobus_orchestration.sink.confirmation import DerivedCoverage, PendingAck, RawAnchor
from zerobus_orchestration.sink.pool import stable_index
from zerobus_orchestration.sink.schema_gate import SchemaGate
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport


def make_pool(
    transport: MemoryTransport, metrics: SinkMetrics, recorder: object = None, lane: LaneKind = LaneKind.RAW
) -> StreamPool:
    config = PoolConfig(min_streams=2, ack_channel_capacity=8)
    return StreamPool(transport, TABLE, config, lane=lane, recorder=recorder, metrics=metrics)  # type: ignore[arg-type]


def test_stamps_reserved_columns_and_anchors_exact_row_positions(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport()
    pool = make_pool(transport, metrics, recorder)
    before = dt.datetime.now(dt.UTC)
    with ZerobusSink(pool, source="asset/orders", partition="2026-11-29", start_offset=100) as sink:
        sink.push(rows(0, 3))
        sink.push(pa.Table.from_batches([rows(3, 2), rows(5, 4)]))
    landed = transport.durable_table(TABLE).sort_by(OFFSET)
    assert landed.schema.field(EMIT_TS).type == RESERVED_FIELDS[0].type
    assert landed.column(OFFSET).to_pylist() == list(range(100, 109))
    assert set(landed.column(SOURCE).to_pylist()) == {"asset/orders"}
    assert all(before <= ts <= dt.datetime.now(dt.UTC) for ts in landed.column(EMIT_TS).to_pylist())
    key = CoverageKey(TABLE, "asset/orders", "2026-11-29")
    assert sorted(recorder.counts) == [
        (key, OffsetRange(100, 103)),
        (key, OffsetRange(103, 105)),
        (key, OffsetRange(105, 109)),
    ]
    pool.close()


def test_declared_offset_column_drives_positions_and_its_gaps_stay_out_of_coverage(
    metrics: SinkMetrics,
) -> None:
    """Kafka-style offsets have gaps (compaction, transaction markers) and may arrive in any order.

    Coverage must record exactly the positions that were sent: a gap recorded as covered would make
    read-back look for rows that never existed, and a resume skip positions never delivered.
    """
    recorder = CountingRecorder()
    transport = MemoryTransport()
    pool = make_pool(transport, metrics, recorder)
    sink = ZerobusSink(pool, source="s", offset_column="pos")
    sink.send(pa.record_batch({"pos": pa.array([7, 8, 9], pa.int32()), "v": ["a", "b", "c"]}))
    sink.push(pa.record_batch({"pos": pa.array([14, 10, 12, 15], pa.int32()), "v": ["d", "e", "f", "g"]}))
    with pytest.raises(ValueError, match="declared offset column 'pos' is missing"):
        sink.push(pa.record_batch({"v": ["x"]}))
    with pytest.raises(ValueError, match=r"main\.raw\.events: offset column 'pos' holds a negative position"):
        sink.push(pa.record_batch({"pos": pa.array([20, -1], pa.int32()), "v": ["y", "z"]}))
    sink.flush()
    # Each batch keeps the source's own order; the two batches rode different streams, so the order
    # between them is whichever acknowledged first.
    landed = [b.batch.column(OFFSET).to_pylist() for b in transport.durable_batches(TABLE) if b.batch]
    assert sorted(landed) == [[7, 8, 9], [14, 10, 12, 15]]
    assert recorder.spans() == [
        OffsetRange(7, 10),
        OffsetRange(10, 11),
        OffsetRange(12, 13),
        OffsetRange(14, 16),
    ]
    assert recorder.covered() == 7
    assert sink.finish()[1] == OffsetRange(0, 16)
    pool.close()


def test_reserved_column_in_input_is_refused_naming_it(metrics: SinkMetrics) -> None:
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="s")
    with pytest.raises(ValueError, match="'_twg_offset' is reserved"):
        sink.push(pa.record_batch({"_twg_offset": [1]}))
    assert transport.open_attempts == 0
    pool.close()


class FakeGate:
    """Declares ``v`` as int64 and refuses strings, like the catalog's write-boundary guard."""

    def __init__(self, metrics: SinkMetrics) -> None:
        self.ensured: list[pa.Schema] = []
        self.checked = 0
        self.metrics = metrics  # a gate counts its own outcomes (SchemaGate.conform)

    def ensure(self, table: str, schema: pa.Schema, first: pa.RecordBatch | None = None) -> pa.Schema:
        assert first is None or first.schema.equals(schema)
        self.ensured.append(schema)
        fields = [pa.field(f.name, pa.int64()) if f.name == "v" else f for f in schema]
        return pa.schema(fields)

    def conform(self, table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
        self.checked += 1
        incoming = batch.schema.field("v").type
        if pa.types.is_string(incoming):
            raise WriteBoundaryError(
                f"{table}: column v is {incoming}, declared bigint; fix: cast before writing",
                table=table,
                column="v",
                kind="type",
            )
        self.metrics.type_reconcile.labels(table=table, kind="cast").inc()
        return batch.cast(target)


def test_gate_is_called_on_schema_change_casts_and_refuses_before_sending(metrics: SinkMetrics) -> None:
    gate = FakeGate(metrics)
    assert isinstance(gate, SchemaGate)
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="s", gate=gate)
    sink.push(pa.record_batch({"v": pa.array([1, 2], pa.int32())}))
    sink.push(pa.record_batch({"v": pa.array([3], pa.int32())}))
    assert len(gate.ensured) == 1 and gate.checked == 2  # same schema: ensure once
    assert gate.ensured[0].names == ["v", EMIT_TS, SOURCE, OFFSET]  # the gate sees the stamped schema
    with pytest.raises(WriteBoundaryError, match="column v is string"):
        sink.push(pa.record_batch({"v": ["nope"]}))
    assert len(gate.ensured) == 2  # new incoming schema: ensure again
    sink.flush()
    landed = transport.durable_table(TABLE)
    assert landed.schema.field("v").type == pa.int64()
    assert landed.num_rows == 3  # nothing of the refused batch was sent
    assert sink.finish()[1] == OffsetRange(0, 3)  # and it claimed no row positions
    assert metrics.sample("zerobus_type_reconcile_total", {"table": TABLE, "kind": "cast"}) == 2
    pool.close()


def test_receipts_resolve_only_after_the_durable_ack_and_finish_does_not_wait(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport()
    pool = make_pool(transport, metrics, recorder)
    sink = ZerobusSink(pool, source="s")
    sink.push(rows(0, 1))
    sink.flush()  # pool open and warm
    transport.pause_acks()
    receipts = sink.send([rows(1, 2), rows(3, 3)])
    info, span = sink.finish()  # returns at once with the submitted high-water
    assert (info.batches, info.rows, span) == (3, 6, OffsetRange(0, 6))
    time.sleep(0.05)
    assert not any(r.future.done() for r in receipts)
    assert recorder.covered() == 1  # coverage has not moved past what is durable
    assert pool.health().pending == 2
    transport.resume_acks()
    assert [r.durable(timeout=5) for r in receipts] == [OffsetRange(1, 3), OffsetRange(3, 6)]
    sink.flush()
    assert recorder.covered() == 6
    pool.close()


def test_record_batch_reader_and_iterables_are_accepted(metrics: SinkMetrics) -> None:
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="s", max_batch_rows=4)
    schema = rows(0, 1).schema
    reader = pa.RecordBatchReader.from_batches(schema, (rows(i * 10, 10) for i in range(3)))
    receipts = sink.send(reader)
    sink.push(iter([rows(30, 2)]))
    sink.flush()
    assert len(receipts) == 9  # 10-row batches sliced to at most 4 rows
    assert transport.durable_rows(TABLE) == 32
    with pytest.raises(TypeError, match="expected Arrow record batches"):
        sink.push([{"v": 1}])  # type: ignore[list-item]
    pool.close()


def test_derived_lane_refuses_raw_anchor_at_construction(metrics: SinkMetrics) -> None:
    derived = make_pool(MemoryTransport(), metrics, lane=LaneKind.DERIVED)
    with pytest.raises(ConfirmationLaneError, match="raw-lane sink cannot write through a derived-lane"):
        ZerobusSink(derived, source="s", lane=LaneKind.RAW)
    key, span = CoverageKey("k", "s"), OffsetRange(0, 1)
    with pytest.raises(ConfirmationLaneError, match="RawAnchor"):
        PendingAck(LaneKind.DERIVED, 0, 0, RawAnchor(key, span), 0.0, rows(0, 1))
    with pytest.raises(ConfirmationLaneError, match="DerivedCoverage"):
        PendingAck(LaneKind.RAW, 0, 0, DerivedCoverage(key, span), 0.0, rows(0, 1))
    recorder = CountingRecorder()
    ok = make_pool(MemoryTransport(), metrics, recorder, lane=LaneKind.DERIVED)
    with ZerobusSink(ok, source="s") as sink:  # the lane's own kind: DerivedCoverage
        sink.push(rows(0, 2))
    assert recorder.spans() == [OffsetRange(0, 2)]
    ok.close()


def test_concurrent_pushers_get_disjoint_contiguous_positions(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.001, jitter_s=0.002))
    pool = make_pool(transport, metrics, recorder)
    sink = ZerobusSink(pool, source="s")

    def pusher(worker: int) -> None:
        for i in range(50):
            sink.push(rows(worker * 1000 + i, 1 + (i % 3)))

    threads = [threading.Thread(target=pusher, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    spans = recorder.spans()
    total = sum(1 + (i % 3) for i in range(50)) * 4
    assert spans[0].start == 0 and spans[-1].end == total
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))  # no overlap, no gap
    assert sorted(transport.durable_table(TABLE).column(OFFSET).to_pylist()) == list(range(total))
    with pytest.raises(SinkClosedError):
        sink.push(rows(0, 1))
    pool.close()


def test_health_snapshot_and_metric_names(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.002))
    pool = make_pool(transport, metrics)
    with ZerobusSink(pool, source="s") as sink:
        for i in range(20):
            sink.push(rows(i, 1))
    health = sink.health()
    data = health.as_dict()
    json.dumps(data)  # renderable as Dagster metadata / an Airflow log line
    assert data["submitted"] == data["delivered"] == 20 and data["pending"] == 0 and data["healthy"]
    assert health.coalesce_ratio_p50 is not None and health.delivery_latency_p99_s is not None
    assert {s["index"] for s in data["streams"]} == {0, 1}
    names = {m.name for m in metrics.registry.collect()}
    for name in (
        "zerobus_ack_coalesce_ratio",
        "zerobus_pending_offsets",
        "zerobus_delivery_latency_seconds",
        "zerobus_ack_lane_retry",
        "zerobus_ack_lane_poisoned",
        "zerobus_stream_rebuilds",
        "zerobus_concurrency_rejects",
        "zerobus_type_reconcile",
        "zerobus_rows_submitted",
        "zerobus_bytes_submitted",
        "zerobus_rows_delivered",
        "zerobus_bytes_delivered",
    ):
        assert name in names
    labels = {"table": TABLE, "stream": "0", "lane": "raw"}
    rows_0 = metrics.sample("zerobus_rows_delivered_total", labels) or 0
    rows_1 = (
        metrics.sample("zerobus_rows_delivered_total", {"table": TABLE, "stream": "1", "lane": "raw"}) or 0
    )
    assert rows_0 + rows_1 == 20
    pool.close()


def test_no_confirm_resolves_receipts_without_recording(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    pool = make_pool(MemoryTransport(), metrics, recorder)
    sink = ZerobusSink(pool, source="s", confirm=False)
    receipts = sink.send(rows(0, 2))
    assert receipts[0].durable(timeout=5) is None
    assert isinstance(receipts[0].future, Future) and recorder.spans() == []
    pool.close()


def test_push_at_places_rows_at_explicit_positions_for_resume(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport()
    pool = make_pool(transport, metrics, recorder)
    sink = ZerobusSink(pool, source="s")
    sink.push(rows(0, 3))  # positions 0..2
    sink.push(pa.Table.from_batches([rows(10, 2), rows(12, 2)]), at=10)  # resume after a covered gap
    sink.push(rows(20, 1))  # continues after the highest position claimed
    with pytest.raises(ValueError, match="at=-1 needs a non-negative position"):
        sink.push(rows(0, 1), at=-1)
    sink.flush()
    assert recorder.spans() == [
        OffsetRange(0, 3),
        OffsetRange(10, 12),
        OffsetRange(12, 14),
        OffsetRange(14, 15),
    ]
    assert sink.finish()[1] == OffsetRange(0, 15)
    pool.close()


def test_context_exit_on_error_still_drains_and_keeps_the_error(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    pool = make_pool(MemoryTransport(LatencyModel(base_s=0.005)), metrics, recorder)
    with pytest.raises(RuntimeError, match="asset failed"), ZerobusSink(pool, source="s") as sink:
        sink.push(rows(0, 3))
        raise RuntimeError("asset failed")
    assert recorder.spans() == [OffsetRange(0, 3)]  # what was submitted was drained, not lost
    pool.close()


def test_large_batches_are_stamped_with_exact_positions_and_source(metrics: SinkMetrics) -> None:
    """The buffer-built reserved columns (numpy positions, two-buffer source tag) equal the obvious ones;
    the tag is built as large_utf8 (its wire type: int64 offsets, so no int32 limit to fall back from)."""
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="asset/ünïcode", start_offset=2**40)
    sink.push(rows(0, 50_000))
    sink.push(rows(50_000, 3))
    sink.flush()
    landed = transport.durable_table(TABLE).sort_by(OFFSET)
    assert landed.column(OFFSET).to_pylist() == list(range(2**40, 2**40 + 50_003))
    assert landed.column(SOURCE).type == pa.large_string()
    assert landed.column(SOURCE).to_pylist() == ["asset/ünïcode"] * 50_003
    assert landed.column("v").to_pylist() == list(range(50_003))
    pool.close()


def test_offset_column_gap_deep_in_a_large_batch_splits_only_its_coverage(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    pool = make_pool(MemoryTransport(), metrics, recorder)
    sink = ZerobusSink(pool, source="s", offset_column="pos")
    positions = list(range(10, 20_010))
    positions[15_000:] = [p + 1 for p in positions[15_000:]]  # offset 15_010 never existed
    receipts = sink.send(pa.record_batch({"pos": pa.array(positions, pa.int64())}))
    sink.flush()
    assert len(receipts) == 1 and receipts[0].span == OffsetRange(10, 20_011)  # one batch, one submit
    assert recorder.spans() == [OffsetRange(10, 15_010), OffsetRange(15_011, 20_011)]
    assert pool.health().rows_delivered == 20_000
    pool.close()


def test_a_sinks_flush_returns_for_its_own_batches_while_a_sibling_keeps_pushing(
    metrics: SinkMetrics,
) -> None:
    """Sinks share the table's pool; waiting for the whole pool to go idle let a busy sibling starve
    a flush forever. Here the sibling's stream never acknowledges while the test runs."""
    transport = MemoryTransport(LatencyModel(base_s=0.001))
    pool = StreamPool(transport, TABLE, PoolConfig(min_streams=2, ack_channel_capacity=4), metrics=metrics)
    key_for = {stable_index(key, 2): key for key in (f"key-{i}" for i in range(50))}
    busy = ZerobusSink(pool, source="busy", ordering_key=key_for[0])
    quiet = ZerobusSink(pool, source="quiet", ordering_key=key_for[1])
    busy.push(rows(0, 1))
    busy.flush(timeout=10)
    busy_stream_id = pool.health().streams[0].stream_id
    held = next(s for s in transport.streams(TABLE) if s.stream_id == busy_stream_id)
    held.hold_acks()
    stop = threading.Event()

    def keep_pushing() -> None:
        while not stop.is_set():
            busy.push(rows(0, 1))  # waits once its channel is full: it stays busy, never idle

    pusher = threading.Thread(target=keep_pushing, daemon=True)
    pusher.start()
    try:
        deadline = time.monotonic() + 10
        while pool.health().streams[0].pending < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        receipt = quiet.send(rows(100, 2))[0]
        quiet.flush(timeout=5)
        assert receipt.future.done() and receipt.durable() == OffsetRange(0, 2)
        assert pool.health().streams[0].pending >= 4  # the sibling's batches are still not durable
    finally:
        stop.set()
        held.release_acks()
        pusher.join(timeout=10)
    busy.flush(timeout=10)
    pool.close()


def test_an_in_memory_input_with_one_bad_batch_sends_nothing(metrics: SinkMetrics) -> None:
    """Checked whole before the first submit: a bad third batch used to leave the first two sent with
    no receipt handed back for them."""
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="s")
    with pytest.raises(ValueError, match="'_twg_offset' is reserved"):
        sink.send([rows(0, 2), rows(2, 2), pa.record_batch({"_twg_offset": [1]})])
    keyed = ZerobusSink(pool, source="k", offset_column="pos")
    table = pa.Table.from_batches(
        [pa.record_batch({"pos": pa.array(p, pa.int64())}) for p in ([0, 1], [2, 3], [4, -1])]
    )
    with pytest.raises(ValueError, match="offset column 'pos' holds a negative position"):
        keyed.send(table)
    assert sink.finish()[0].batches == keyed.finish()[0].batches == 0
    assert transport.open_attempts == 0  # nothing reached the pool
    sink.send([rows(0, 2)])
    sink.flush()
    assert transport.durable_rows(TABLE) == 2
    pool.close()


def test_a_streamed_input_failing_part_way_hands_back_the_receipts_already_issued(
    metrics: SinkMetrics,
) -> None:
    transport = MemoryTransport()
    pool = make_pool(transport, metrics)
    sink = ZerobusSink(pool, source="s")

    def generate() -> Iterator[pa.RecordBatch]:
        yield rows(0, 2)
        yield rows(2, 2)
        yield pa.record_batch({"_twg_offset": [1]})

    with pytest.raises(
        PartialSendError, match=r"after 2 batch\(es\) were already submitted.*\.receipts"
    ) as info:
        sink.send(generate())
    assert isinstance(info.value.__cause__, ValueError)
    receipts = info.value.receipts
    assert [r.span for r in receipts] == [OffsetRange(0, 2), OffsetRange(2, 4)]
    sink.flush()
    assert [r.durable(timeout=5) for r in receipts] == [OffsetRange(0, 2), OffsetRange(2, 4)]
    pool.close()


def test_finish_counts_the_callers_bytes_apart_from_the_stamped_bytes_sent(metrics: SinkMetrics) -> None:
    """``payload_bytes`` is the caller's own Arrow bytes; ``bytes`` what was sent, reserved columns
    included, summed over what the transport received. A streamed batch cut into slices (compact
    copies) still counts each payload byte once."""
    transport = MemoryTransport()
    config = PoolConfig(min_streams=2, ack_channel_capacity=8, max_batch_bytes=64 * 1024)
    pool = StreamPool(transport, TABLE, config, metrics=metrics)
    sink = ZerobusSink(pool, source="asset/orders")
    whole = rows(0, 1_000)
    streamed = pa.record_batch({"v": pa.array(range(30_000), pa.int64()), "s": ["x" * 20] * 30_000})
    sink.push(whole)
    sink.push(iter([streamed]))  # 840 KB as sent: cut into slices under 64 KiB
    sink.flush()
    info, _ = sink.finish()
    assert info.batches > 2  # the streamed batch was sliced
    assert info.payload_bytes == whole.nbytes + streamed.nbytes
    sent = sum(batch.nbytes for batch in transport.durable_batches(TABLE))
    assert info.bytes == sent
    assert info.bytes > info.payload_bytes + 1_000 * 8  # the three reserved columns, per row
    pool.close()
