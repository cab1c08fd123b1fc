"""Client peak memory while ``ZerobusRuntime.write`` streams a generated ``RecordBatchReader``.

Units: every figure this script prints is in MB = 10^6 bytes (``peak_rss_mb``, ``baseline_rss_mb``,
``peak_arrow_mb``, ``input_mb``, ``rss_over_time``, ``--batch-mb``, ``--inflight-mb``, ``--max-batch-mb``
and the ``--breakdown`` figures); ``peak_rss_mib`` gives the peak in MiB = 2^20 bytes beside it, the unit
the unit of ``ru_maxrss`` and of the pool's byte settings' defaults (the flags' help gives both).

The reader yields fresh batches of about ``--batch-mb`` MB each (an ``id``, a float and an ~80-character
string column) until ``--gb`` GB were produced; nothing is kept by the generator, so whatever the client
holds beyond one batch is the sink's in-flight data. The embedded emulator runs in daemon mode: its own
process, so this process's peak RSS (``getrusage``, ``ru_maxrss``) is the client's alone. (The Python
API's default, ``emulator.mode = "in_process"``, runs the emulator inside the client: its WAL tail and
materialiser buffers then count in the same RSS, so the figures here do not hold for that mode.)

In-flight data is bounded by ``pool.max_inflight_bytes`` (unacknowledged bytes per table) and batches
over ``pool.max_batch_bytes`` are sliced before submit; ``--inflight-mb`` / ``--max-batch-mb`` override
them (left unset: the defaults).

    python benchmarks/memory.py --json                       # 5 GB in ~100 MB batches
    python benchmarks/memory.py --gb 0.5 --batch-mb 100 --json
    python benchmarks/memory.py --gb 1 --breakdown           # where RSS is at its peak (to stderr)
    python benchmarks/memory.py --smoke --json               # tiny run (CI): checks it works, not figures

``--breakdown`` tells what the peak is made of, which ``tracemalloc`` cannot (Arrow, the SDK's Rust
core and glibc's heap are invisible to it): anonymous and file-backed RSS, Arrow's own allocations, and
glibc's heap in use, free but kept (``mallinfo2``) and mmapped, at the sample with the highest RSS.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
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
from zerobus_orchestration.runtime.facade import ZerobusRuntime

TABLE = "main.bench.memory"
TEXT_PREFIX = "x" * 72
MB = 1_000_000
MIB = 1024 * 1024
SMOKE = {"gb": 0.005, "batch_mb": 1.0}  # five ~1 MB batches: the whole path, in seconds


@dataclass(frozen=True)
class Result:
    gb: float
    batch_mb: float
    batches: int
    rows: int
    input_mb: float
    seconds: float
    peak_rss_mb: float  # this process's peak RSS (ru_maxrss), MB = 10^6 bytes: the issue's < 512 target
    peak_rss_mib: float  # the same peak in MiB = 2^20 bytes
    baseline_rss_mb: float  # peak RSS before the write (the imports), MB
    peak_arrow_mb: float  # Arrow's own allocations (sampled), MB: what RSS holds beyond it is allocator cache
    rss_over_time: list[list[float]]  # [seconds since the write started, RSS MB, Arrow MB], sampled
    max_inflight_bytes: int | None
    max_batch_bytes: int | None
    emulator: str
    machine: str


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def current_rss_mb() -> float:
    """This process's resident set now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize() / MB
    except OSError:
        return 0.0


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (every field a ``size_t``)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (*_MALLINFO2, "keepcost")]


def _glibc() -> Any:
    """glibc, if this process runs on it and it has ``mallinfo2`` (2.33+); None elsewhere."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is None or not hasattr(libc, "mallinfo2"):
            return None
    except OSError:
        return None
    libc.mallinfo2.restype = _MallInfo2
    return libc


def breakdown() -> dict[str, float]:
    """RSS by kind (``/proc/self/status``), Arrow's allocations and glibc's heap, now, in MB (10^6 bytes,
    the unit of every figure here)."""
    parts: dict[str, float] = {"arrow": pa.total_allocated_bytes() / MB}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    parts[key] = int(value.split()[0]) * 1024 / MB  # "kB" there means KiB
    except OSError:
        pass
    libc = _glibc()
    if libc is not None:
        info = libc.mallinfo2()
        parts["glibc_heap_in_use"] = info.uordblks / MB
        parts["glibc_heap_free_kept"] = info.fordblks / MB
        parts["glibc_mmapped"] = info.hblkhd / MB
    return {key: round(value, 1) for key, value in parts.items()}


class ArrowPeak:
    """Samples ``pa.total_allocated_bytes`` every few milliseconds on a thread, and RSS over time.

    With ``breakdown``, also what RSS is made of at its highest sample (see ``breakdown()``)."""

    SERIES_EVERY_S = 0.1

    def __init__(self, breakdown: bool = False) -> None:
        self.peak = 0
        self.series: list[list[float]] = []
        self.breakdown = breakdown
        self.at_peak: dict[str, float] = {}
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
                rss = current_rss_mb()
                self.series.append([round(now - started, 2), round(rss, 1), round(allocated / MB, 1)])
                if self.breakdown and rss > self.at_peak.get("VmRSS", 0.0):
                    self.at_peak = breakdown()

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


def run(
    gb: float,
    batch_mb: float,
    inflight_mb: float | None,
    max_batch_mb: float | None,
    *,
    show_breakdown: bool = False,
) -> Result:
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
            baseline = peak_rss_bytes()
            produced = [0, 0, 0]
            sample = batch(0, 10_000)
            batch_rows = max(1, math.ceil(batch_mb * MB / (sample.nbytes / sample.num_rows)))
            started = time.monotonic()
            with ArrowPeak(breakdown=show_breakdown) as arrow:
                result = runtime.write(TABLE, reader(int(gb * 1e9), batch_rows, produced), source="memory")
            seconds = time.monotonic() - started
            if show_breakdown:
                print(f"at the highest RSS sample (MB): {json.dumps(arrow.at_peak)}", file=sys.stderr)
            if result.rows_written != produced[1]:
                raise SystemExit(f"wrote {result.rows_written} rows of {produced[1]}")
            pool = runtime.config.pool
        finally:
            runtime.close()
    peak = peak_rss_bytes()
    return Result(
        gb=gb,
        batch_mb=batch_mb,
        batches=produced[0],
        rows=produced[1],
        input_mb=round(produced[2] / MB, 1),
        seconds=round(seconds, 2),
        peak_rss_mb=round(peak / MB, 1),
        peak_rss_mib=round(peak / MIB, 1),
        baseline_rss_mb=round(baseline / MB, 1),
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


def _mib_and_mb(size: int) -> str:
    """A byte setting as the config quotes it (MiB) and in this script's unit (MB)."""
    return f"{size / MIB:g} MiB = {size / MB:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    defaults = PoolConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--gb", type=float, default=5.0, help="GB (10^9 bytes) the reader produces (default 5)"
    )
    parser.add_argument(
        "--batch-mb", type=float, default=100.0, help="MB (10^6 bytes) per input batch (default 100)"
    )
    parser.add_argument(
        "--inflight-mb",
        type=float,
        default=None,
        help=f"pool.max_inflight_bytes in MB (10^6 bytes; default "
        f"{_mib_and_mb(defaults.max_inflight_bytes)})",
    )
    parser.add_argument(
        "--max-batch-mb",
        type=float,
        default=None,
        help=f"pool.max_batch_bytes in MB (10^6 bytes; default {_mib_and_mb(defaults.max_batch_bytes)})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--smoke", action="store_true", help=f"tiny run (CI: checks it works, not figures): {SMOKE}"
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="print what RSS is made of at its peak (stderr)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.gb, args.batch_mb = SMOKE["gb"], SMOKE["batch_mb"]
    logging.basicConfig(level=logging.WARNING)
    result = run(args.gb, args.batch_mb, args.inflight_mb, args.max_batch_mb, show_breakdown=args.breakdown)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print("MB = 10^6 bytes, MiB = 2^20 bytes")
        for name, value in asdict(result).items():
            print(f"{name:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
