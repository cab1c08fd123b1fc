"""Aggregate throughput into the local emulator with 1, 2 and 4 streams per table, and two tables at once.

The emulator runs in its own process with its embedded defaults (WAL fsync'd before every ack, Delta
materialisation every ``time_to_table_s``, the Iceberg mirror on), so the figures are what a user of
the default gets on this machine, client and emulator sharing its cores. Each configuration writes
fresh tables through ``ZerobusSink`` over ``StreamPool`` over the official SDK (``SdkTransport``), one
pushing thread per table, coverage recorded in SQLite as the runtime does. Configurations run one after
the other in one emulator; each starts once the emulator is idle again (CPU under 5 % of a core for
0.6 s), so the previous configuration's Iceberg conversion does not run on its clock.

* ``mb_per_s_durable``: stamped bytes over the time from the first push to every batch acknowledged
  (durable in the emulator's WAL; ``flush`` returned);
* ``mb_per_s_visible``: the same bytes over the time until every row is readable in the Delta table
  (the materialiser committed it);
* ``p50_ack_s`` / ``p99_ack_s``: per batch, from its submit to its durable acknowledgement reaching
  the sink (the receipt resolving), over every batch of the configuration;
* ``client_cpu_s_per_gb``, ``emulator_cpu_s_per_gb_durable`` / ``_visible``: CPU seconds per stamped
  GB of this process until durable, and of the emulator's process until durable and until visible
  (Linux ``/proc``; 0 elsewhere): what bounds the rate on a machine whose cores they share.

``--repetitions N`` runs every configuration N times, interleaved (1x1, 2x1, ..., then 1x1, 2x1, ...
again; fresh tables each time), and reports the median of each figure, with the lowest and highest
durable and visible MB/s beside it (``mb_per_s_durable_min`` / ``_max``, ...): on a shared machine one
burst of a few hundred MB varies by a fifth from run to run (where the materialiser's period falls).

    python benchmarks/scaling.py --json                # 256 MB per configuration
    python benchmarks/scaling.py --mb 1024 --json
    python benchmarks/scaling.py --repetitions 3 --json   # each configuration 3 times: medians
    python benchmarks/scaling.py --smoke --json        # tiny run (CI): checks it works, not figures
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pydantic import SecretStr

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig, SdkStreamOptions
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import RESERVED_FIELDS
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.sdk import SdkTransport, bypass_proxy_for_loopback

MB = 1_000_000
SOURCE = "scaling"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CONFIGS = ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2))  # (streams per table, tables)
SMOKE = {"mb": 2.0, "batch_rows": 2_000}
VISIBLE_POLL_S = 0.05
VISIBLE_TIMEOUT_S = 600.0
IDLE_POLL_S = 0.2
DEFAULTS = "defaults: WAL fsync'd before each ack, Delta commit every 1 s, Iceberg mirror on"
PAYLOAD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("device", pa.string()),
        pa.field("reading", pa.float64()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class Row:
    streams: int  # per table
    tables: int
    mb: float  # stamped MB written, all tables together
    mb_per_s_durable: float
    mb_per_s_visible: float
    p50_ack_s: float
    p99_ack_s: float
    durable_s: float
    visible_s: float
    # CPU seconds per stamped GB (GB = 10^9 bytes): this process (the sink, the SDK, the pushing and
    # polling threads) from the first push to durable, and the emulator's process from the first push
    # to durable and to visible (the latter includes the former; the Iceberg mirror may still run after).
    client_cpu_s_per_gb: float
    emulator_cpu_s_per_gb_durable: float
    emulator_cpu_s_per_gb_visible: float
    # Over the repetitions (every other figure is their median; one repetition: min = max = the figure).
    repetitions: int
    mb_per_s_durable_min: float
    mb_per_s_durable_max: float
    mb_per_s_visible_min: float
    mb_per_s_visible_max: float


@dataclass(frozen=True)
class Result:
    transport: str
    emulator: str
    machine: str
    cpus: int
    batch_rows: int
    mb_per_table: float
    results: list[Row]


def generate(rows: int, batch_rows: int) -> list[pa.RecordBatch]:
    ids = pa.array(range(rows), pa.int64())
    micros = pc.add(pc.multiply(ids, 1_000), int(EPOCH.timestamp() * 1_000_000))
    table = pa.table(
        [
            ids,
            pc.binary_join_element_wise("device-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
            pc.divide(pc.cast(pc.bit_wise_and(ids, 65535), pa.float64()), 7.0),
            pc.cast(micros, pa.timestamp("us", tz="UTC")),
        ],
        schema=PAYLOAD,
    )
    # Own buffers per batch: what a reader hands over, and nothing pins the whole table.
    return [pa.concat_batches([b]) for b in table.to_batches(max_chunksize=batch_rows)]


@dataclass(frozen=True)
class Endpoint:
    endpoint: str
    workspace_url: str
    client_id: str
    client_secret: str
    pid: int


@contextmanager
def emulator_process(warehouse: str, log: IO[bytes], extra: tuple[str, ...] = ()) -> Iterator[Endpoint]:
    """``python -m zerobus_orchestration.emulator`` (its defaults unless ``extra`` flags), own process."""
    command = [sys.executable, "-m", "zerobus_orchestration.emulator", "--warehouse", warehouse, "--json"]
    command += list(extra)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the emulator exited before serving (exit {proc.wait()}); see its log")
        info = json.loads(line)
        yield Endpoint(
            str(info["endpoint"]),
            str(info["workspace_url"]),
            str(info["client_id"]),
            Path(info["client_secret_file"]).read_text().strip(),  # the warehouse's own secret
            proc.pid,
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def delta_rows(warehouse: str, table: str) -> int:
    uri = table_uri(warehouse, table)
    try:
        return int(DeltaTable(uri).count())
    except Exception:  # not committed yet (a commit in progress is retried at the next poll)
        return 0


def write_table(
    emu: Endpoint,
    warehouse: str,
    table: str,
    streams: int,
    batches: list[pa.RecordBatch],
    latencies: list[float],
    errors: list[BaseException],
) -> None:
    try:
        transport = SdkTransport(
            emu.endpoint,
            emu.workspace_url,
            client_id=emu.client_id,
            client_secret=SecretStr(emu.client_secret),
            options=SdkStreamOptions(flush_timeout_ms=600_000),
        )
        store = CoverageStore(Path(warehouse) / "_zerobus" / f"coverage-{table}.sqlite", table)
        config = PoolConfig(min_streams=streams)
        pool = StreamPool(transport, table, config, recorder=store, metrics=SinkMetrics())
        sink = ZerobusSink(pool, source=SOURCE, gate=CatalogGate(LocalCatalog(warehouse)))
        lock = threading.Lock()
        for batch in batches:
            submitted = time.perf_counter()

            def done(_: object, at: float = submitted) -> None:
                elapsed = time.perf_counter() - at
                with lock:
                    latencies.append(elapsed)

            for receipt in sink.send(batch):
                receipt.future.add_done_callback(done)
        sink.flush()
        pool.close()
        store.close()
    except BaseException as exc:  # handed to the driver thread
        errors.append(exc)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds ``pid`` has used (Linux ``/proc``; 0 where it is not available)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(
    pid: int, *, busy_share: float = 0.05, quiet_polls: int = 3, timeout_s: float = 120.0
) -> None:
    """Until ``pid`` used under ``busy_share`` of one core for ``quiet_polls`` polls in a row."""
    deadline = time.monotonic() + timeout_s
    quiet, last = 0, cpu_seconds(pid)
    while quiet < quiet_polls and time.monotonic() < deadline:
        time.sleep(IDLE_POLL_S)
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now - last < busy_share * IDLE_POLL_S else 0
        last = now


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (1..99) of ``values``, interpolated."""
    if len(values) == 1:
        return values[0]
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


def run_config(
    emu: Endpoint, warehouse: str, tables: list[str], streams: int, batches: list[pa.RecordBatch]
) -> Row:
    rows = sum(b.num_rows for b in batches)
    latencies: list[float] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=write_table, args=(emu, warehouse, t, streams, batches, latencies, errors), daemon=True
        )
        for t in tables
    ]
    client_cpu, emulator_cpu = time.process_time(), cpu_seconds(emu.pid)
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    durable_s = time.perf_counter() - started
    client_cpu_durable = time.process_time() - client_cpu
    emulator_cpu_durable = cpu_seconds(emu.pid) - emulator_cpu
    if errors:
        raise errors[0]
    pending = set(tables)
    while pending:
        pending = {t for t in pending if delta_rows(warehouse, t) < rows}
        if pending:
            if time.perf_counter() - started > VISIBLE_TIMEOUT_S:
                raise RuntimeError(f"{sorted(pending)}: rows not visible in Delta after {VISIBLE_TIMEOUT_S}s")
            time.sleep(VISIBLE_POLL_S)
    visible_s = time.perf_counter() - started
    emulator_cpu_visible = cpu_seconds(emu.pid) - emulator_cpu
    stamped = stamped_mb(batches) * len(tables)
    gb = stamped / 1000
    durable, visible = round(stamped / durable_s, 1), round(stamped / visible_s, 1)
    return Row(
        streams=streams,
        tables=len(tables),
        mb=round(stamped, 1),
        mb_per_s_durable=durable,
        mb_per_s_visible=visible,
        p50_ack_s=round(percentile(latencies, 50), 4),
        p99_ack_s=round(percentile(latencies, 99), 4),
        durable_s=round(durable_s, 3),
        visible_s=round(visible_s, 3),
        client_cpu_s_per_gb=round(client_cpu_durable / gb, 2),
        emulator_cpu_s_per_gb_durable=round(emulator_cpu_durable / gb, 2),
        emulator_cpu_s_per_gb_visible=round(emulator_cpu_visible / gb, 2),
        repetitions=1,
        mb_per_s_durable_min=durable,
        mb_per_s_durable_max=durable,
        mb_per_s_visible_min=visible,
        mb_per_s_visible_max=visible,
    )


def combine(runs: list[Row]) -> Row:
    """One configuration's repetitions: the median of every figure, the spread of the two rates."""

    def median(name: str) -> float:
        return float(statistics.median(getattr(r, name) for r in runs))

    return Row(
        streams=runs[0].streams,
        tables=runs[0].tables,
        mb=runs[0].mb,
        mb_per_s_durable=round(median("mb_per_s_durable"), 1),
        mb_per_s_visible=round(median("mb_per_s_visible"), 1),
        p50_ack_s=round(median("p50_ack_s"), 4),
        p99_ack_s=round(median("p99_ack_s"), 4),
        durable_s=round(median("durable_s"), 3),
        visible_s=round(median("visible_s"), 3),
        client_cpu_s_per_gb=round(median("client_cpu_s_per_gb"), 2),
        emulator_cpu_s_per_gb_durable=round(median("emulator_cpu_s_per_gb_durable"), 2),
        emulator_cpu_s_per_gb_visible=round(median("emulator_cpu_s_per_gb_visible"), 2),
        repetitions=len(runs),
        mb_per_s_durable_min=min(r.mb_per_s_durable for r in runs),
        mb_per_s_durable_max=max(r.mb_per_s_durable for r in runs),
        mb_per_s_visible_min=min(r.mb_per_s_visible for r in runs),
        mb_per_s_visible_max=max(r.mb_per_s_visible for r in runs),
    )


def stamped_mb(batches: list[pa.RecordBatch]) -> float:
    """MB as the sink sends them: payload plus the reserved columns (8 + ~11 + 8 bytes a row here)."""
    payload: int = sum(b.nbytes for b in batches)
    rows: int = sum(b.num_rows for b in batches)
    source_bytes = len(SOURCE.encode()) + 4  # string data plus its int32 offset
    return (payload + rows * (8 + source_bytes + 8)) / MB


def run(
    mb: float,
    batch_rows: int,
    configs: tuple[tuple[int, int], ...],
    log: IO[bytes],
    scratch: str,
    emulator_args: tuple[str, ...] = (),
    repetitions: int = 1,
) -> Result:
    warehouse = str(Path(scratch) / "warehouse")
    row_bytes = generate(1_000, 1_000)[0].nbytes / 1_000
    batches = generate(max(1, int(mb * MB / row_bytes)), batch_rows)
    names = {
        (s, t, rep): [f"main.bench_scaling.s{s}_t{t}_r{rep}_{i}" for i in range(t)]
        for s, t in configs
        for rep in range(repetitions)
    }
    gate = CatalogGate(LocalCatalog(warehouse))
    for tables in names.values():
        for table in tables:  # before the clock and before the emulator starts: it finds them at open
            gate.ensure(table, pa.schema([*PAYLOAD, *RESERVED_FIELDS]))
    runs: dict[tuple[int, int], list[Row]] = {config: [] for config in configs}
    with emulator_process(warehouse, log, emulator_args) as emu:
        bypass_proxy_for_loopback(emu.endpoint)
        bypass_proxy_for_loopback(emu.workspace_url)
        for rep in range(repetitions):
            for streams, count in configs:
                # Each configuration starts on an idle emulator: the previous one's Iceberg mirror work
                # (it follows Delta-visible, which is all ``run_config`` waits for) must not share its
                # clock.
                wait_until_idle(emu.pid)
                tables = names[(streams, count, rep)]
                runs[(streams, count)].append(run_config(emu, warehouse, tables, streams, batches))
    results = [combine(runs[config]) for config in configs]
    return Result(
        transport="official SDK (SdkTransport) + local emulator in its own process",
        emulator=" ".join(emulator_args) if emulator_args else DEFAULTS,
        machine=machine(),
        cpus=os.cpu_count() or 0,
        batch_rows=batch_rows,
        mb_per_table=round(stamped_mb(batches), 1),
        results=results,
    )


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = model or platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} CPU(s), {platform.system()}, Python {platform.python_version()}"


def render(result: Result) -> str:
    lines = [
        f"{result.transport}; {result.emulator}",
        f"{result.machine}; {result.mb_per_table} MB per table, batches of {result.batch_rows:,} rows",
        "",
        f"{'streams':>8}{'tables':>8}{'MB/s durable':>14}{'(min-max)':>14}{'MB/s visible':>14}"
        f"{'(min-max)':>14}{'p50 ack s':>11}{'p99 ack s':>11}",
    ]
    for r in result.results:
        durable = f"{r.mb_per_s_durable_min:.0f}-{r.mb_per_s_durable_max:.0f}"
        visible = f"{r.mb_per_s_visible_min:.0f}-{r.mb_per_s_visible_max:.0f}"
        lines.append(
            f"{r.streams:>8}{r.tables:>8}{r.mb_per_s_durable:>14.1f}{durable:>14}{r.mb_per_s_visible:>14.1f}"
            f"{visible:>14}{r.p50_ack_s:>11.3f}{r.p99_ack_s:>11.3f}"
        )
    repetitions = result.results[0].repetitions if result.results else 1
    lines.append(f"median of {repetitions} run(s) per configuration, interleaved")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=256.0, help="payload MB per table and configuration")
    parser.add_argument("--batch-rows", type=int, default=50_000, help="rows per batch (default 50,000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--emulator-arg",
        action="append",
        default=[],
        help="extra flag for the emulator, repeatable (e.g. --emulator-arg=--no-iceberg) to isolate a cost",
    )
    parser.add_argument(
        "--configs",
        default=",".join(f"{s}x{t}" for s, t in CONFIGS),
        help="streams x tables to run (default %(default)s)",
    )
    parser.add_argument(
        "--repetitions", type=int, default=1, help="runs of each configuration, interleaved (medians)"
    )
    parser.add_argument("--smoke", action="store_true", help=f"tiny run (CI), checks the shape ({SMOKE})")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mb, args.batch_rows = SMOKE["mb"], int(SMOKE["batch_rows"])
    if args.mb <= 0 or args.batch_rows < 1 or args.repetitions < 1:
        parser.error("--mb must be > 0, --batch-rows and --repetitions >= 1")
    try:
        configs = tuple(
            (int(s), int(t)) for s, t in (item.split("x") for item in args.configs.split(",") if item)
        )
    except ValueError:
        parser.error(f"--configs: expected e.g. 1x1,2x1, got {args.configs!r}")
    if len(set(configs)) != len(configs):  # the same tables twice: the second run would find its rows
        parser.error(f"--configs lists a configuration twice ({args.configs}); use --repetitions")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RUST_LOG", "error")
    with tempfile.TemporaryDirectory(prefix="zerobus-scaling-", ignore_cleanup_errors=True) as scratch:
        log_path = Path(scratch) / "emulator.log"
        try:
            with log_path.open("wb") as log:
                result = run(
                    args.mb,
                    args.batch_rows,
                    configs,
                    log,
                    scratch,
                    tuple(args.emulator_arg),
                    args.repetitions,
                )
        except BaseException:
            sys.stderr.write(log_path.read_text(errors="replace") if log_path.exists() else "")
            raise
    print(json.dumps(asdict(result), indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
