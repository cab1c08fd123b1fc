"""Per-stream isolation: with one of a table's two streams acknowledging late, the other keeps its rate.

Official SDK (``SdkTransport``) + the local emulator in its own process, the pool's defaults (2 streams
per table, ``pool.max_inflight_bytes`` 32 MiB, so a share of 16 MiB per stream), one pushing thread. The
emulator throttles every stream to ``--per-stream-mb-s`` (standing in for the service's per-stream
quota), so a stream's own rate is that bound, not whatever CPU the other stream leaves it. Two
scenarios run interleaved, each on a fresh table:

* ``baseline``: no fault;
* ``delayed``: the table's second stream (connection 1, ``FaultSpec.stream``) acknowledges every batch
  ``--delay-s`` late (``delay_acks``, each ack on its own).

Per scenario: each stream's rate is the stamped bytes it delivered over the time from the first push to
its last acknowledgement. ``ratio`` is the healthy stream's rate in ``delayed`` over the mean per-stream
rate in ``baseline`` (1.0: the late stream costs the other nothing; the target is >= 0.9). Memory: the
in-flight bytes sampled every 5 ms (``inflight_peak_mb``, bounded by ``pool.max_inflight_bytes``) and
the process's RSS growth over its level before the scenario (``rss_growth_mb``; ``rss_bound_mb`` is the
documented figure, about twice the budget plus one input batch: README.md, "The budget trades memory for
throughput"). An unmeasured warm-up run goes first, and the pairs alternate which scenario runs first.

    python benchmarks/isolation.py --json                 # 256 MB per scenario, delay 2 s per ack
    python benchmarks/isolation.py --repetitions 3 --json # medians of 3 interleaved pairs
    python benchmarks/isolation.py --smoke --json         # tiny run (CI): checks it works, not figures
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
from pydantic import SecretStr
from scaling import Endpoint, emulator_process, machine  # the sibling script, run from benchmarks/

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig, SdkStreamOptions
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import RESERVED_FIELDS
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.sdk import SdkTransport, bypass_proxy_for_loopback

MB = 1_000_000
SOURCE = "isolation"
SCENARIOS = ("baseline", "delayed")
WARMUP_BATCHES = 4  # one unmeasured run first: the first connection and table load pay one-off costs
SMOKE = {"mb": 16.0, "batch_mb": 1.0, "delay_s": 0.5}
PAYLOAD = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.float64())])
SAMPLE_S = 0.005


@dataclass(frozen=True)
class Run:
    scenario: str
    stream_mb_s: list[float]  # per pool member: its stamped MB over the time to its last ack
    healthy_mb_s: float  # baseline: the mean of the streams; delayed: the stream acking on time
    # delayed: the late stream is member 1, its rate (far under the throttle) shows the fault acted
    push_s: float  # first push to the last push returning
    inflight_peak_mb: float
    rss_growth_mb: float


@dataclass(frozen=True)
class Result:
    transport: str
    machine: str
    cpus: int
    mb_per_scenario: float
    batch_mb: float
    delay_s: float
    per_stream_mb_s_limit: float
    streams: int
    max_inflight_mb: float
    repetitions: int
    baseline_mb_s: float  # medians over the repetitions
    delayed_healthy_mb_s: float
    ratio: float
    ratio_min: float
    ratio_max: float
    inflight_peak_mb: float
    rss_growth_mb: float
    rss_bound_mb: float  # documented: about twice pool.max_inflight_bytes plus one input batch
    runs: list[Run]


def rss_mb() -> float:
    """This process's resident set now (Linux ``/proc``; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / MB


def template(batch_mb: float) -> pa.RecordBatch:
    rows = max(1, int(batch_mb * MB / 16))
    ids = pa.array(range(rows), pa.int64())
    return pa.record_batch([ids, pa.array([i / 7 for i in range(rows)], pa.float64())], schema=PAYLOAD)


def one_run(
    emu: Endpoint,
    warehouse: str,
    table: str,
    scenario: str,
    batch: pa.RecordBatch,
    batches: int,
    config: PoolConfig,
) -> tuple[Run, list[float]]:
    transport = SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(emu.client_secret),
        options=SdkStreamOptions(flush_timeout_ms=600_000),
    )
    metrics = SinkMetrics()
    store = CoverageStore(Path(warehouse) / "_zerobus" / f"coverage-{table}.sqlite", table)
    pool = StreamPool(transport, table, config, recorder=store, metrics=metrics)
    sink = ZerobusSink(pool, source=SOURCE, gate=CatalogGate(LocalCatalog(warehouse)))
    last_ack: dict[int, float] = {}
    lock = threading.Lock()
    peak = [0]
    done = threading.Event()
    rss_before = rss_mb()
    rss_peak = [rss_before]

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], pool.inflight_bytes)
            rss_peak[0] = max(rss_peak[0], rss_mb())
            done.wait(SAMPLE_S)

    watcher = threading.Thread(target=watch, daemon=True)
    started = time.perf_counter()
    watcher.start()
    for _ in range(batches):
        for receipt in sink.send(batch):

            def acked(_: Future[OffsetRange | None], member: int = receipt.member) -> None:
                at = time.perf_counter() - started
                with lock:
                    last_ack[member] = max(last_ack.get(member, 0.0), at)

            receipt.future.add_done_callback(acked)
    push_s = time.perf_counter() - started
    sink.flush()
    done.set()
    watcher.join()
    rates = []
    for member in range(pool.size):
        labels = {"table": table, "stream": str(member), "lane": "raw"}
        sent = metrics.sample("zerobus_bytes_delivered_total", labels) or 0.0
        rates.append(round(sent / MB / last_ack[member], 2) if member in last_ack else 0.0)
    pool.close()
    store.close()
    # The delayed stream is member 1 (the pool opens its members in order; the fault is on connection 1).
    healthy = statistics.mean(rates) if scenario == "baseline" else rates[0]
    return (
        Run(
            scenario=scenario,
            stream_mb_s=rates,
            healthy_mb_s=round(healthy, 2),
            push_s=round(push_s, 3),
            inflight_peak_mb=round(peak[0] / MB, 2),
            rss_growth_mb=round(rss_peak[0] - rss_before, 1),
        ),
        rates,
    )


def run(
    mb: float,
    batch_mb: float,
    delay_s: float,
    per_stream_mb_s: float,
    repetitions: int,
    scratch: str,
    config: PoolConfig,
) -> Result:
    warehouse = str(Path(scratch) / "warehouse")
    batch = template(batch_mb)
    batches = max(2, int(mb / batch_mb))
    names = {(s, rep): f"main.bench_isolation.{s}_r{rep}" for s in SCENARIOS for rep in range(repetitions)}
    names[("warmup", 0)] = "main.bench_isolation.warmup"
    gate = CatalogGate(LocalCatalog(warehouse))
    for table in names.values():  # before the emulator starts: it finds them at open
        gate.ensure(table, pa.schema([*PAYLOAD, *RESERVED_FIELDS]))
    faults = [
        FaultSpec(kind=FaultKind.DELAY_ACKS, table=names[("delayed", rep)], stream=1, delay_s=delay_s)
        for rep in range(repetitions)
    ]
    faults_file = Path(scratch) / "faults.json"
    faults_file.write_text(json.dumps([f.model_dump(mode="json") for f in faults]))
    extra = ("--no-iceberg", "--per-stream-mb-s", str(per_stream_mb_s), "--faults", str(faults_file))
    runs: list[Run] = []
    with (Path(scratch) / "emulator.log").open("wb") as log, emulator_process(warehouse, log, extra) as emu:
        bypass_proxy_for_loopback(emu.endpoint)
        bypass_proxy_for_loopback(emu.workspace_url)
        one_run(emu, warehouse, names[("warmup", 0)], "baseline", batch, WARMUP_BATCHES, config)
        for rep in range(repetitions):
            order = SCENARIOS if rep % 2 == 0 else SCENARIOS[::-1]  # neither always runs first
            for scenario in order:
                result, _ = one_run(emu, warehouse, names[(scenario, rep)], scenario, batch, batches, config)
                runs.append(result)
    baseline = [r.healthy_mb_s for r in runs if r.scenario == "baseline"]
    delayed = [r.healthy_mb_s for r in runs if r.scenario == "delayed"]
    ratios = [d / b for d, b in zip(delayed, baseline, strict=True) if b > 0]
    return Result(
        transport="official SDK (SdkTransport) + local emulator in its own process (--no-iceberg)",
        machine=machine(),
        cpus=os.cpu_count() or 0,
        mb_per_scenario=round(batches * batch.nbytes / MB, 1),
        batch_mb=round(batch.nbytes / MB, 2),
        delay_s=delay_s,
        per_stream_mb_s_limit=per_stream_mb_s,
        streams=config.streams_for_table(),
        max_inflight_mb=round(config.max_inflight_bytes / MB, 2),
        repetitions=repetitions,
        baseline_mb_s=round(statistics.median(baseline), 2),
        delayed_healthy_mb_s=round(statistics.median(delayed), 2),
        ratio=round(statistics.median(ratios), 3) if ratios else 0.0,
        ratio_min=round(min(ratios), 3) if ratios else 0.0,
        ratio_max=round(max(ratios), 3) if ratios else 0.0,
        inflight_peak_mb=max(r.inflight_peak_mb for r in runs),
        rss_growth_mb=max(r.rss_growth_mb for r in runs),
        rss_bound_mb=round(2 * config.max_inflight_bytes / MB + batch.nbytes / MB, 1),
        runs=runs,
    )


def render(result: Result) -> str:
    lines = [
        f"{result.transport}; {result.machine}",
        f"{result.streams} streams per table, pool.max_inflight_bytes {result.max_inflight_mb} MB, "
        f"{result.mb_per_scenario} MB payload per scenario in {result.batch_mb} MB batches, every stream "
        f"throttled to {result.per_stream_mb_s_limit} MB/s, one stream's acks {result.delay_s} s late",
        "",
        f"{'scenario':>10}{'stream MB/s (stamped)':>26}{'healthy MB/s':>14}{'push s':>9}{'in-flight MB':>14}"
        f"{'RSS +MB':>9}",
    ]
    for r in result.runs:
        streams = ", ".join(f"{v:.1f}" for v in r.stream_mb_s)
        lines.append(
            f"{r.scenario:>10}{streams:>26}{r.healthy_mb_s:>14.1f}{r.push_s:>9.2f}{r.inflight_peak_mb:>14.1f}"
            f"{r.rss_growth_mb:>9.1f}"
        )
    lines.append(
        f"ratio (healthy stream, delayed / baseline): {result.ratio:.3f} "
        f"({result.ratio_min:.3f}-{result.ratio_max:.3f}, {result.repetitions} interleaved pair(s)); "
        f"in flight at most {result.inflight_peak_mb} MB of {result.max_inflight_mb}; RSS growth at most "
        f"{result.rss_growth_mb} MB (documented about {result.rss_bound_mb} MB)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=256.0, help="payload MB per scenario")
    parser.add_argument("--batch-mb", type=float, default=4.0, help="payload MB per batch (default 4)")
    parser.add_argument("--delay-s", type=float, default=2.0, help="how late the delayed stream acks")
    parser.add_argument(
        "--per-stream-mb-s", type=float, default=10.0, help="the emulator's per-stream throttle"
    )
    parser.add_argument("--repetitions", type=int, default=1, help="interleaved pairs of runs (medians)")
    parser.add_argument(
        "--streams", type=int, default=None, help="pool.min_streams (default: the pool's default, 2)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--smoke", action="store_true", help=f"tiny run (CI), checks the shape ({SMOKE})")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mb, args.batch_mb, args.delay_s = SMOKE["mb"], SMOKE["batch_mb"], SMOKE["delay_s"]
    if args.mb <= 0 or args.batch_mb <= 0 or args.delay_s < 0 or args.repetitions < 1:
        parser.error("--mb and --batch-mb must be > 0, --delay-s >= 0, --repetitions >= 1")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RUST_LOG", "error")
    with tempfile.TemporaryDirectory(prefix="zerobus-isolation-", ignore_cleanup_errors=True) as scratch:
        try:
            config = PoolConfig() if args.streams is None else PoolConfig(min_streams=args.streams)
            result = run(
                args.mb, args.batch_mb, args.delay_s, args.per_stream_mb_s, args.repetitions, scratch, config
            )
        except BaseException:
            log = Path(scratch) / "emulator.log"
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
    print(json.dumps(asdict(result), indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
