"""Client peak memory while ``ZerobusRuntime.write`` streams a generated ``RecordBatchReader``.

The reader yields fresh batches of about ``--batch-mb`` MB each (an ``id``, a float and an ~80-character
string column) until ``--gb`` GB were produced; nothing is kept by the generator, so whatever the client
holds beyond one batch is the sink's in-flight data. The embedded emulator runs in daemon mode: its own
process, so this process's peak RSS (``getrusage``, ``ru_maxrss``) is the client's alone.

In-flight data is bounded by ``pool.max_inflight_bytes`` (unacknowledged bytes per table) and batches
over ``pool.max_batch_bytes`` are sliced before submit; ``--inflight-mb`` / ``--max-batch-mb`` override
them (left unset: the defaults).

    python benchmarks/memory.py --json                       # 5 GB in ~100 MB batches
    python benchmarks/memory.py --gb 0.5 --batch-mb 100 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.config import EmulatorConfig, PoolConfig, ZerobusConfig
from zerobus_orchestration.runtime import ZerobusRuntime

TABLE = "main.bench.memory"
TEXT_PREFIX = "x" * 72
MB = 1_000_000


@dataclass(frozen=True)
class Result:
    gb: float
    batch_mb: float
    batches: int
    rows: int
    input_mb: float
    seconds: float
    peak_rss_mb: float
    baseline_rss_mb: float
    peak_arrow_mb: float  # Arrow's own allocations (sampled): what RSS holds beyond it is allocator cache
    rss_over_time: list[list[float]]  # [seconds since the write started, RSS MB, Arrow MB], sampled
    max_inflight_bytes: int | None
    max_batch_bytes: int | None
    emulator: str
    machine: str


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def current_rss_mb() -> float:
    """This process's resident set now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize() / MB
    except OSError:
        return 0.0


class ArrowPeak:
    """Samples ``pa.total_allocated_bytes`` every few milliseconds on a thread, and RSS over time."""

    SERIES_EVERY_S = 0.1

    def __init__(self) -> None:
        self.peak = 0
        self.series: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arrow-peak", daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        next_point = started
        while not self._stop.wait(0.005):
            allocated = pa.total_allocated_bytes()
            self.peak = max(self.peak, allocated)
            now = time.monotonic()
            if now >= next_point:
                next_point = now + self.SERIES_EVERY_S
                self.series.append(
                    [round(now - started, 2), round(current_rss_mb(), 1), round(allocated / MB, 1)]
                )

    def __enter__(self) -> ArrowPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def batch(start: int, rows: int) -> pa.RecordBatch:
    ids = pa.array(np.arange(start, start + rows, dtype=np.int64))
    # A 72-character prefix and the id's digits. Not ``utf8_lpad``: it reserves four bytes per padded
    # character, so a 100 MB batch peaked at 340 MB of Arrow memory inside the generator alone.
    text = pc.binary_join_element_wise(TEXT_PREFIX, pc.cast(ids, pa.string()), "")
    return pa.record_batch({"id": ids, "value": pc.divide(pc.cast(ids, pa.float64()), 7.0), "text": text})


def reader(total_bytes: int, batch_rows: int, produced: list[int]) -> pa.RecordBatchReader:
    schema = batch(0, 1).schema

    def generate() -> Iterator[pa.RecordBatch]:
        start = 0
        sent = 0
        while sent < total_bytes:
            piece = batch(start, batch_rows)
            start += batch_rows
            sent += piece.nbytes
            produced[0] += 1
            produced[1] += batch_rows
            produced[2] += piece.nbytes
            yield piece
            del piece  # a reader does not keep what it handed over while it builds the next batch

    return pa.RecordBatchReader.from_batches(schema, generate())


def run(gb: float, batch_mb: float, inflight_mb: float | None, max_batch_mb: float | None) -> Result:
    pool_settings: dict[str, Any] = {}
    if inflight_mb is not None:
        pool_settings["max_inflight_bytes"] = int(inflight_mb * MB)
    if max_batch_mb is not None:
        pool_settings["max_batch_bytes"] = int(max_batch_mb * MB)
    # The daemon may still be writing its own files as it idles out: cleanup must not fail the run.
    with tempfile.TemporaryDirectory(prefix="zerobus-memory-", ignore_cleanup_errors=True) as warehouse:
        config = ZerobusConfig(
            warehouse=warehouse,
            emulator=EmulatorConfig(mode="daemon", idle_shutdown_s=5.0),
            pool=PoolConfig(**pool_settings),
        )
        runtime = ZerobusRuntime(config)
        try:
            baseline = peak_rss_mb()
            produced = [0, 0, 0]
            sample = batch(0, 10_000)
            batch_rows = max(1, math.ceil(batch_mb * MB / (sample.nbytes / sample.num_rows)))
            started = time.monotonic()
            with ArrowPeak() as arrow:
                result = runtime.write(TABLE, reader(int(gb * 1e9), batch_rows, produced), source="memory")
            seconds = time.monotonic() - started
            if result.rows_written != produced[1]:
                raise SystemExit(f"wrote {result.rows_written} rows of {produced[1]}")
            pool = runtime.config.pool
        finally:
            runtime.close()
    return Result(
        gb=gb,
        batch_mb=batch_mb,
        batches=produced[0],
        rows=produced[1],
        input_mb=round(produced[2] / MB, 1),
        seconds=round(seconds, 2),
        peak_rss_mb=round(peak_rss_mb(), 1),
        baseline_rss_mb=round(baseline, 1),
        peak_arrow_mb=round(arrow.peak / MB, 1),
        rss_over_time=thin(arrow.series, 300),
        max_inflight_bytes=getattr(pool, "max_inflight_bytes", None),
        max_batch_bytes=getattr(pool, "max_batch_bytes", None),
        emulator="own process (daemon mode)",
        machine=f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}",
    )


def thin(series: list[list[float]], points: int) -> list[list[float]]:
    """At most about ``points`` samples, evenly spaced, the peak-RSS sample kept."""
    if len(series) <= points:
        return series
    step = len(series) / points
    keep = {int(i * step) for i in range(points)} | {max(range(len(series)), key=lambda i: series[i][1])}
    return [series[i] for i in sorted(keep)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--gb", type=float, default=5.0, help="GB the reader produces (default 5)")
    parser.add_argument("--batch-mb", type=float, default=100.0, help="MB per input batch (default 100)")
    parser.add_argument("--inflight-mb", type=float, default=None, help="pool.max_inflight_bytes in MB")
    parser.add_argument("--max-batch-mb", type=float, default=None, help="pool.max_batch_bytes in MB")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args.gb, args.batch_mb, args.inflight_mb, args.max_batch_mb)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        for name, value in asdict(result).items():
            print(f"{name:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
