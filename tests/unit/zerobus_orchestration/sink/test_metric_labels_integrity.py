"""Every sink metric carries the table, the stream and the pool's lane (raw / derived), so streams and
lanes never blend (issue 12, item 12; issue 26). The write-boundary guard's two counters are the
exception: they count batches before any stream is chosen."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from tests.support.sink_helpers import TABLE, CountingRecorder, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.confirmation import LaneKind
from zerobus_orchestration.transport.memory import FaultPlan, MemoryTransport

PER_STREAM = (
    "zerobus_ack_coalesce_ratio",
    "zerobus_pending_offsets",
    "zerobus_inflight_bytes",
    "zerobus_delivery_latency_seconds",
    "zerobus_ack_lane_retry_total",
    "zerobus_ack_lane_poisoned_total",
    "zerobus_stream_rebuilds_total",
    "zerobus_stream_recoveries_total",
    "zerobus_rows_submitted_total",
    "zerobus_bytes_submitted_total",
    "zerobus_rows_delivered_total",
    "zerobus_bytes_delivered_total",
    "zerobus_inflight_budget_waits_total",
    "zerobus_inflight_budget_wait_seconds_total",
    "zerobus_concurrency_rejects_total",
)
BEFORE_ANY_STREAM = ("zerobus_type_reconcile_total", "zerobus_type_unreconcilable_total")


def test_every_per_stream_family_has_the_lane_label(metrics: SinkMetrics) -> None:
    families = {
        family.describe()[0].name: family
        for family in vars(metrics).values()
        if isinstance(family, Counter | Gauge | Histogram)
    }
    per_stream = {name for name, family in families.items() if "stream" in family._labelnames}
    assert per_stream == {name.removesuffix("_total") for name in PER_STREAM}  # names unchanged
    assert set(families) == per_stream | {name.removesuffix("_total") for name in BEFORE_ANY_STREAM}
    for name in per_stream:
        assert families[name]._labelnames == ("table", "stream", "lane"), name


def test_raw_and_derived_pools_of_one_table_report_apart(metrics: SinkMetrics) -> None:
    config = PoolConfig(min_streams=1, ack_channel_capacity=8)
    raw_transport = MemoryTransport(faults=FaultPlan(poison_at={0: 1}))
    raw = StreamPool(raw_transport, TABLE, config, recorder=CountingRecorder(), metrics=metrics)
    derived = StreamPool(
        MemoryTransport(), TABLE, config, lane=LaneKind.DERIVED, recorder=CountingRecorder(), metrics=metrics
    )
    with ZerobusSink(raw, source="s") as sink:
        sink.send([rows(i * 3, 3) for i in range(4)])
    with ZerobusSink(derived, source="s") as sink:
        sink.push(rows(0, 5))
    labels = {"table": TABLE, "stream": "0"}
    assert metrics.sample("zerobus_rows_delivered_total", {**labels, "lane": "raw"}) == 12
    assert metrics.sample("zerobus_rows_delivered_total", {**labels, "lane": "derived"}) == 5
    assert metrics.sample("zerobus_stream_rebuilds_total", {**labels, "lane": "raw"}) == 1
    assert metrics.sample("zerobus_stream_rebuilds_total", {**labels, "lane": "derived"}) is None
    assert metrics.sample("zerobus_ack_lane_poisoned_total", {**labels, "lane": "raw"}) == 1
    assert metrics.sample("zerobus_ack_lane_poisoned_total", {**labels, "lane": "derived"}) == 0
    raw.close()
    derived.close()
