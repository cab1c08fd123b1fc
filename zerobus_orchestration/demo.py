"""``zerobus-orch demo``: synthetic Arrow batches through ``ZerobusSink`` and a report of what landed.

Stage 1 runs over the in-process ``MemoryTransport`` with Zerobus's documented ~150 ms time to
durability scaled down tenfold, so the demo finishes in seconds. Every number in the summary is
measured: rows acknowledged come from the ack lanes, rows durable from the transport's store, and
``verified`` compares the store with what was pushed. Swapping in the emulator + official SDK only
changes ``make_transport``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import CollectorRegistry

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import RecordingCoverage, StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

DEMO_TABLE = "main.zerobus_demo.events"
DEMO_SOURCE = "zerobus-orch/demo"
DOCUMENTED_ACK_LATENCY_S = 0.150  # Zerobus p50 time to durability (reference/zerobus-protocol.md §7)
TIME_SCALE = 0.1  # the demo runs ten times faster than the real service acknowledges
BATCH_ROWS = 10_000

DEMO_SCHEMA = pa.schema(
    [("event_id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64()), ("kind", pa.string())]
)


def make_transport(cfg: ZerobusConfig) -> MemoryTransport:
    """The one place the demo builds its transport (stage 2 returns the emulator + SDK transport here)."""
    del cfg  # stage 1 ignores endpoint/emulator settings: everything runs in-process
    return MemoryTransport(LatencyModel.around(DOCUMENTED_ACK_LATENCY_S * TIME_SCALE, spread=0.3, seed=150))


def synthetic_batches(rows: int, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Deterministic synthetic events, produced lazily so memory stays bounded by the sink."""
    kinds = pa.array(["view", "click", "order", "refund"])
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        ids = pa.array(range(start, start + n), pa.int64())
        customer = pc.binary_join_element_wise("cust-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), "")
        amount = pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 7919), 65535), pa.float64()), 100.0)
        kind = pc.take(kinds, pc.bit_wise_and(ids, 3))
        yield pa.record_batch([ids, customer, amount, kind], schema=DEMO_SCHEMA)


def _progress(done: int, total: int) -> None:
    sys.stderr.write(f"\r  pushed {done:,}/{total:,} rows")
    sys.stderr.flush()


def run_demo(cfg: ZerobusConfig, rows: int, progress: bool) -> dict[str, Any]:
    """Push ``rows`` synthetic rows, drain to durable, and report measured results."""
    if rows < 0:
        raise ValueError(f"--rows must be >= 0, got {rows}")
    transport = make_transport(cfg)
    recorder = RecordingCoverage()
    metrics = SinkMetrics(CollectorRegistry())
    pool = StreamPool(transport, DEMO_TABLE, cfg.pool, recorder=recorder, metrics=metrics)
    sink = ZerobusSink(pool, source=DEMO_SOURCE)
    started = time.monotonic()
    pushed_rows = 0
    pushed_bytes = 0
    try:
        with sink:
            for batch in synthetic_batches(rows):
                sink.push(batch)
                pushed_rows += batch.num_rows
                pushed_bytes += batch.nbytes
                if progress:
                    _progress(pushed_rows, rows)
            info, span = sink.finish()
        elapsed = time.monotonic() - started  # the sink's close() drained to durable
        health = pool.health()
    finally:
        pool.close()
        transport.close()
    if progress:
        sys.stderr.write("\n")
    durable_rows = transport.durable_rows(DEMO_TABLE)
    landed_positions = _distinct_positions(transport) if durable_rows else 0
    key_rows = recorder.covered()
    verified = (
        durable_rows == pushed_rows
        and landed_positions == pushed_rows
        and health.rows_delivered == pushed_rows
        and key_rows == pushed_rows
        and span.end - span.start == pushed_rows
    )
    return {
        "mode": "memory",
        "table": DEMO_TABLE,
        "rows_written": pushed_rows,
        "rows_acknowledged": health.rows_delivered,
        "rows_durable": durable_rows,
        "rows_covered": key_rows,
        "batches": info.batches,
        "streams": pool.size,
        "coalesce_ratio_p50": health.coalesce_ratio_p50,
        "delivery_latency_p50_s": health.delivery_latency_p50_s,
        "delivery_latency_p99_s": health.delivery_latency_p99_s,
        "ack_latency_model_s": DOCUMENTED_ACK_LATENCY_S * TIME_SCALE,
        "elapsed_s": round(elapsed, 3),
        "mb_per_s": round(pushed_bytes / 1e6 / elapsed, 2) if elapsed > 0 else None,
        "rebuilds": health.rebuilds,
        "verified": verified,
    }


def _distinct_positions(transport: MemoryTransport) -> int:
    offsets = transport.durable_table(DEMO_TABLE).column(OFFSET)
    return len(pc.unique(offsets))


def _fmt(value: Any, unit: str = "", scale: float = 1.0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value * scale:.1f}{unit}"
    return f"{value:,}{unit}"


def render_summary(summary: dict[str, Any]) -> str:
    """A short human report of ``run_demo``'s summary."""
    lines = [
        f"zerobus-orch demo ({summary['mode']} transport) -> {summary['table']}",
        f"  rows written       {_fmt(summary['rows_written'])}",
        f"  rows acknowledged  {_fmt(summary['rows_acknowledged'])}  (ack lanes, after durable acks)",
        f"  rows durable       {_fmt(summary['rows_durable'])}  (transport store)",
        f"  batches / streams  {_fmt(summary['batches'])} / {summary['streams']}",
        f"  coalesce ratio p50 {_fmt(summary['coalesce_ratio_p50'])} batches per wait",
        f"  delivery latency   p50 {_fmt(summary['delivery_latency_p50_s'], ' ms', 1000)}, "
        f"p99 {_fmt(summary['delivery_latency_p99_s'], ' ms', 1000)} "
        f"(ack model {_fmt(summary['ack_latency_model_s'], ' ms', 1000)})",
        f"  throughput         {_fmt(summary['mb_per_s'], ' MB/s')} in {summary['elapsed_s']} s",
        f"  verified           {'yes' if summary['verified'] else 'NO'}",
    ]
    return "\n".join(lines)
