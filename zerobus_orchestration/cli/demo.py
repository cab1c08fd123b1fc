"""``zerobus-orch demo``: the main job on the embedded default, and a report of what it measured.

The demo runs downward: an adapter that wants to run it registers a flavour under the
``zerobus_orchestration.demos`` entry-point group (``dagster_defs`` registers ``dagster``, the Dagster
quickstart materialised in process: contract asset (catalog reconcile) -> blocking primary-raw checks ->
``rows`` orders streamed through the IO manager, the official SDK and the embedded emulator -> the
read-back sensor ticked until Iceberg shows every row), and this module runs the first one that loads.
Without one (no ``dagster`` extra installed) it runs the same data path through the runtime directly.
The core never imports an adapter. Every number in the summary is measured, never assumed; ``verified``
is true only when read-back found every delivered row.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes

CORE_TABLE = "main.zerobus_demo.events"
CORE_SOURCE = "zerobus-orch/demo"
BATCH_ROWS = 50_000

Say = Callable[[str], None]
# Adapters register their demo flavour here (pyproject.toml); the core looks it up, never imports it.
DEMO_ENTRY_POINTS = "zerobus_orchestration.demos"
DemoFlavour = Callable[[ZerobusConfig, int, Say], dict[str, Any]]


def run_demo(cfg: ZerobusConfig, rows: int, progress: bool) -> dict[str, Any]:
    """Run the main job and return its measured summary; the runtime is closed before returning."""
    if rows < 0:
        raise ValueError(f"--rows must be >= 0, got {rows}")
    say: Say = _stderr if progress else _silent
    ticker = _DeliveryTicker(cfg) if progress else None
    try:
        if ticker is not None:
            ticker.start()
        dagster_demo = _dagster_demo(say)
        if dagster_demo is None:
            summary = run_core_demo(cfg, rows, say)
        else:
            summary = {"mode": "dagster", **dagster_demo(cfg, rows, say)}
    finally:
        if ticker is not None:
            ticker.stop()
        close_all_runtimes()
    return summary


def _dagster_demo(say: Say) -> DemoFlavour | None:
    """The ``dagster`` flavour registered under ``DEMO_ENTRY_POINTS``, or None when it cannot load.

    Only an import failure (the adapter's orchestrator is not installed) selects the core demo; any
    other error while loading the flavour is a bug and surfaces.
    """
    for entry in entry_points(group=DEMO_ENTRY_POINTS, name="dagster"):
        try:
            flavour: DemoFlavour = entry.load()
        except ImportError as exc:
            say(f"the {entry.name} demo is not importable ({exc}); running the core data path")
            return None
        return flavour
    say("no Dagster demo is installed; running the core data path")
    return None


def run_core_demo(cfg: ZerobusConfig, rows: int, say: Say) -> dict[str, Any]:
    """The same data path without Dagster: reconcile, stream pipelined, durable, verify via Iceberg."""
    runtime = acquire_runtime(cfg)
    partition = f"run-{int(time.time() * 1000)}"  # every demo run appends its own rows
    say(f"core: streaming {rows:,} rows into {CORE_TABLE}")
    result = runtime.write(CORE_TABLE, synthetic_batches(rows), source=CORE_SOURCE, partition=partition)
    durable_at = time.monotonic()
    say(f"core: {result.rows_written:,} rows durable; waiting for Iceberg")
    report = runtime.verify(CORE_TABLE, source=CORE_SOURCE, partition=partition)
    conditions = runtime.preconditions(CORE_TABLE)
    return {
        "mode": "core",
        "success": report.verified,
        "table": CORE_TABLE,
        "rows_requested": rows,
        "rows_written": result.rows_written,
        "rows_read_back": report.rows_scanned,
        "verified": report.verified and report.rows_scanned >= result.rows_written,
        "write_s": round(result.duration_s, 3),
        "payload_mb_per_s": result.payload_mb_per_s,
        "mb_per_s": result.stamped_mb_per_s,
        "streams": result.streams_used,
        "coalesce_ratio_p50": result.coalesce_ratio_p50,
        "delivery_latency_p50_s": result.delivery_latency_p50_s,
        "delivery_latency_p99_s": result.delivery_latency_p99_s,
        "iceberg_lag_s": round(time.monotonic() - durable_at, 3),
        "checks_passed": sum(1 for c in conditions if c.ok),
        "checks_total": len(conditions),
    }


def synthetic_batches(rows: int, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Deterministic synthetic events, produced lazily so memory stays bounded by the sink."""
    kinds = pa.array(["view", "click", "order", "refund"])
    schema = pa.schema(
        [("event_id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64()), ("kind", pa.string())]
    )
    for start in range(0, rows, batch_rows):
        ids = pa.array(range(start, start + min(batch_rows, rows - start)), pa.int64())
        customer = pc.binary_join_element_wise("cust-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), "")
        amount = pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 7919), 65535), pa.float64()), 100.0)
        yield pa.record_batch([ids, customer, amount, pc.take(kinds, pc.bit_wise_and(ids, 3))], schema=schema)


class _DeliveryTicker:
    """Shows rows delivered (acknowledged durable) while the demo streams, read from pool health."""

    def __init__(self, cfg: ZerobusConfig, interval_s: float = 0.5) -> None:
        self._cfg = cfg
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerobus-demo-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        sys.stderr.write("\n")

    def _run(self) -> None:
        shown = -1
        while not self._stop.wait(self._interval_s):
            delivered = self._delivered()
            if delivered is not None and delivered != shown:
                sys.stderr.write(f"\r  rows delivered (durable): {delivered:,}   ")
                sys.stderr.flush()
                shown = delivered

    def _delivered(self) -> int | None:
        from zerobus_orchestration.runtime.registry import running_runtime

        runtime = running_runtime(self._cfg)
        if runtime is None:
            return None
        return sum(pool.rows_delivered for pool in runtime.health().pools)


def _stderr(message: str) -> None:
    sys.stderr.write(f"\n{message}\n")
    sys.stderr.flush()


def _silent(message: str) -> None:
    del message


def _fmt(value: Any, unit: str = "", scale: float = 1.0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value * scale:,.2f}{unit}"
    if isinstance(value, int):
        return f"{value * scale:,.0f}{unit}" if scale != 1.0 else f"{value:,}{unit}"
    return f"{value}{unit}"


def render_summary(summary: dict[str, Any]) -> str:
    """A short human report of ``run_demo``'s summary."""
    lines = [
        f"zerobus-orch demo ({summary.get('mode')}) -> {summary.get('table')}",
        f"  rows written        {_fmt(summary.get('rows_written'))}",
        f"  rows read back      {_fmt(summary.get('rows_read_back'))}  (Iceberg scan of this run's rows)",
        f"  throughput          {_fmt(summary.get('payload_mb_per_s'), ' MB/s')} of your data "
        f"({_fmt(summary.get('mb_per_s'), ' MB/s')} as sent, with the three _twg_* columns), "
        f"{summary.get('streams')} stream(s)",
        f"  coalesce ratio p50  {_fmt(summary.get('coalesce_ratio_p50'))} batches per durable wait",
        f"  delivery latency    p50 {_fmt(summary.get('delivery_latency_p50_s'), ' ms', 1000)}, "
        f"p99 {_fmt(summary.get('delivery_latency_p99_s'), ' ms', 1000)}",
        f"  Iceberg lag         {_fmt(summary.get('iceberg_lag_s'), ' s')} from durable to verified",
        f"  checks passed       {summary.get('checks_passed')}/{summary.get('checks_total')}",
        f"  verified            {_fmt(bool(summary.get('verified')))}",
    ]
    if summary.get("derived_table"):
        derived = f"{summary['derived_table']} ({_fmt(summary.get('derived_rows'))} rows)"
        lines.append(f"  derived table       {derived}")
    return "\n".join(lines)
