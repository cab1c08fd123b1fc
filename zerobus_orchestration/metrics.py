"""Prometheus metrics of the sink (names are part of the interface; docs/runbook.md explains each).

Everything here is updated from the ack lanes and the pool supervisor, never from a ``push`` that goes
straight through: the ingest path only bumps plain integers. The one exception is the byte budget's
wait counters, bumped by a pusher that is about to block on ``pool.max_inflight_bytes`` anyway.
``zerobus_ack_lane_poisoned_total`` (our stream died) and a growing ``zerobus_delivery_latency_seconds``
with a steady poisoned count (the service is slow) are deliberately separate signals; docs/runbook.md
branches on them.

By default all sinks in a process share one dedicated ``CollectorRegistry`` (never prometheus'
global one), so importing this package cannot collide with an application's own metrics; tests
pass a fresh registry each.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Every sink metric is per stream: ``stream`` is the pool member's index (bounded by the pool's size, not
# by its rebuilds), ``lane`` raw or derived (the pool's lane kind), so a derived table's slow acks never
# read as the raw one's. The byte budget's waits also use ``stream="any"``: a push free to go to any
# stream that waited because every stream's share was spent.
_STREAM_LABELS = ("table", "stream", "lane")
_COALESCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class SinkMetrics:
    """The sink's metric families, registered on one ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ack_coalesce_ratio = Histogram(
            "zerobus_ack_coalesce_ratio",
            "Batches confirmed by one wait_for_offset (burst size).",
            _STREAM_LABELS,
            buckets=_COALESCE_BUCKETS,
            registry=r,
        )
        self.pending_offsets = Gauge(
            "zerobus_pending_offsets",
            "Batches in the stream's ack channel: submitted and not yet confirmed durable (at most its "
            "capacity, min(pool.ack_channel_capacity, sdk.max_inflight_batches)).",
            _STREAM_LABELS,
            registry=r,
        )
        self.inflight_bytes = Gauge(
            "zerobus_inflight_bytes",
            "Bytes submitted and not yet durable on one stream (bounded by its share of "
            "pool.max_inflight_bytes; summed per table, bounded by pool.max_inflight_bytes).",
            _STREAM_LABELS,
            registry=r,
        )
        # Bumped by a pusher only once it has to wait on the budget (it is about to block anyway); a push
        # that fits never touches them. docs/runbook.md#backpressure reads them against a full channel.
        self.inflight_budget_waits = Counter(
            "zerobus_inflight_budget_waits",
            "Pushes that waited for a stream's share of pool.max_inflight_bytes (the per-table byte budget, "
            "split evenly between the table's streams) to have room; counted when the wait starts. "
            'stream="any": a push without an ordering key that waited because every share was spent.',
            _STREAM_LABELS,
            registry=r,
        )
        self.inflight_budget_wait_seconds = Counter(
            "zerobus_inflight_budget_wait_seconds",
            "Seconds pushers spent waiting on a stream's share of pool.max_inflight_bytes (stream=any: "
            "on every share), summed over pushers and added at least every second while a wait lasts: a "
            "rate near the number of pushers means the budget binds throughput.",
            _STREAM_LABELS,
            registry=r,
        )
        self.delivery_latency = Histogram(
            "zerobus_delivery_latency_seconds",
            "Time from submit to the durable acknowledgement being confirmed.",
            _STREAM_LABELS,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ack_lane_retries = Counter(
            "zerobus_ack_lane_retry_total",
            "Transient wait failures retried by an ack lane.",
            _STREAM_LABELS,
            registry=r,
        )
        self.ack_lane_poisoned = Counter(
            "zerobus_ack_lane_poisoned_total",
            "Ack lanes stopped by a poisoned stream (error class poison only; lanes stopped by exhausted "
            "transient retries or fatal errors are not counted: they show in rebuilds and retries).",
            _STREAM_LABELS,
            registry=r,
        )
        self.stream_rebuilds = Counter(
            "zerobus_stream_rebuilds_total",
            "Pool members back in service on a new stream after theirs failed (poisoned, stopped by a "
            "concurrency reject, transient retries spent, or refused at submit); re-opens for a schema "
            "change are not counted.",
            _STREAM_LABELS,
            registry=r,
        )
        self.stream_recoveries = Counter(
            "zerobus_stream_recoveries_total",
            "Reconnects the SDK made inside one of our streams (lack-of-ack timeout, rotation, retryable "
            "failure), each replaying the batches not yet acknowledged: rows may land twice. Counted "
            "from what the transport can observe; see transport/sdk.py.",
            _STREAM_LABELS,
            registry=r,
        )
        self.concurrency_rejects = Counter(
            "zerobus_concurrency_rejects_total",
            "Refusals by the service's concurrent-stream limit (RESOURCE_EXHAUSTED) met by one pool member: "
            "stream opens and re-opens, submits, and streams stopped mid-way because the SDK's reconnects "
            "were refused. Each one backs off every open of the pool.",
            _STREAM_LABELS,
            registry=r,
        )
        self.type_reconcile = Counter(
            "zerobus_type_reconcile_total",
            "Batches the write-boundary guard cast or aligned.",
            ("table", "kind"),
            registry=r,
        )
        # Separate and per column on purpose: these never heal by themselves (nested into STRING, a
        # time zone into TIMESTAMP_NTZ, ...), a producer must change; docs/alerts.yml pages on any.
        self.type_unreconcilable = Counter(
            "zerobus_type_unreconcilable_total",
            "Batches refused by the write-boundary guard for a type no cast can bridge, per column.",
            ("table", "column", "kind"),
            registry=r,
        )
        self.rows_submitted = Counter(
            "zerobus_rows_submitted_total", "Rows submitted.", _STREAM_LABELS, registry=r
        )
        self.bytes_submitted = Counter(
            "zerobus_bytes_submitted_total", "Arrow bytes submitted.", _STREAM_LABELS, registry=r
        )
        self.rows_delivered = Counter(
            "zerobus_rows_delivered_total",
            "Rows acknowledged durable and confirmed.",
            _STREAM_LABELS,
            registry=r,
        )
        self.bytes_delivered = Counter(
            "zerobus_bytes_delivered_total",
            "Arrow bytes acknowledged durable and confirmed.",
            _STREAM_LABELS,
            registry=r,
        )

    def sample(self, name: str, labels: dict[str, str]) -> float | None:
        """Current value of one sample (tests, health checks)."""
        return self.registry.get_sample_value(name, labels)


_default_lock = threading.Lock()
_default: SinkMetrics | None = None


def default_metrics() -> SinkMetrics:
    """The process-wide metrics on a dedicated registry (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SinkMetrics()
        return _default
