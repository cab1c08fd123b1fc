"""Throughput through the official SDK into the local emulator: Arrow vs JSON records, sink vs bare SDK.

Four phases on one emulator, the same generated rows for each, one run:

* ``arrow``: ``create_arrow_stream`` + ``ingest_batch`` per batch + one ``flush`` (the Arrow Flight path).
* ``json``: ``create_stream(TableProperties(table))`` + ``ingest_records_offset([json strings])`` per
  batch + one ``flush``: what dlt's Zerobus loader and most hand-written loaders do. Its rate includes
  turning the Arrow rows into JSON strings on the client; the rate without that is reported too.
* ``bare``: the Arrow loop again, into the sink's table (reserved columns omitted, they are nullable):
  the baseline for the sink.
* ``sink``: ``ZerobusSink`` over ``StreamPool`` over ``SdkTransport`` (catalog gate, reserved-column
  stamping, ack lane, SQLite coverage) from first push to ``flush``.

Client and emulator share this process's cores (Python, GIL), so the figures compare paths with one
another; they are not Zerobus service figures. The emulator decodes JSON rows in Python, which weighs
on the JSON path more than the real service would. Acknowledgements are durable (fsync'd WAL); Delta
materialisation is switched off while timing and run once at the end to verify the row counts.

    python benchmarks/emulator_throughput.py                  # table
    python benchmarks/emulator_throughput.py --json --rows 2000000
    python benchmarks/emulator_throughput.py --profile-sink   # cProfile of the sink phase
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import logging
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import EmulatorConfig, PoolConfig, SdkStreamOptions
from zerobus_orchestration.coverage import CoverageStore
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.sdk import SdkTransport, arrow_stream_options, bypass_proxy_for_loopback

ARROW_TABLE = "bench.default.arrow_path"
JSON_TABLE = "bench.default.json_path"
SINK_TABLE = "bench.default.sink_path"
WARMUP_TABLE = "bench.default.warmup"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
MB = 1_000_000
JSON_CALL_LIMIT = 10_420_224  # the SDK's per-call payload limit on the row path (10 MiB - 64 KiB)
PAYLOAD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("device", pa.string()),
        pa.field("reading", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class Phase:
    name: str
    rows: int
    bytes: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds


@dataclass(frozen=True)
class Result:
    rows: int
    batch_rows: int
    cpus: int
    arrow_rows_per_s: float
    arrow_mb_per_s: float
    json_rows_per_s: float | None
    json_mb_per_s: float | None
    json_ingest_rows_per_s: float | None
    json_encode_s: float | None
    arrow_over_json: float | None
    bare_sdk_rows_per_s: float
    sink_rows_per_s: float
    sink_mb_per_s: float
    sink_over_bare: float
    sink_coverage: bool
    verified: bool


# -- data -------------------------------------------------------------------------------------------


def generate(rows: int, batch_rows: int) -> list[pa.RecordBatch]:
    ids = pa.array(range(rows), pa.int64())
    micros = pc.add(pc.multiply(ids, 1_000), int(EPOCH.timestamp() * 1_000_000))
    table = pa.table(
        [
            ids,
            pc.binary_join_element_wise("device-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
            pc.divide(pc.cast(pc.bit_wise_and(ids, 65535), pa.float64()), 7.0),
            pc.equal(pc.bit_wise_and(ids, 3), 0),
            pc.cast(micros, pa.timestamp("us", tz="UTC")),
        ],
        schema=PAYLOAD,
    )
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=batch_rows)
    return batches


def to_json_records(batch: pa.RecordBatch) -> list[str]:
    """Rows as JSON objects, timestamps as epoch microseconds (how Zerobus JSON carries TIMESTAMP)."""
    columns = batch.set_column(4, "at", pc.cast(batch.column("at"), pa.int64())).to_pydict()
    names = list(columns)
    dumps = json.dumps
    return [dumps(dict(zip(names, values, strict=True))) for values in zip(*columns.values(), strict=True)]


def json_calls(records: list[str]) -> Iterator[list[str]]:
    """Split one batch's records so that no ingest call exceeds the SDK's payload limit."""
    call: list[str] = []
    size = 0
    for record in records:
        if call and size + len(record) > JSON_CALL_LIMIT:
            yield call
            call, size = [], 0
        call.append(record)
        size += len(record)
    if call:
        yield call


# -- phases -----------------------------------------------------------------------------------------


def sdk_options() -> SdkStreamOptions:
    return SdkStreamOptions(recovery_retries=1, recovery_backoff_ms=100, flush_timeout_ms=600_000)


def timed(name: str, rows: int, nbytes: int, run: Callable[[], None]) -> Phase:
    start = time.perf_counter()
    run()
    return Phase(name, rows, nbytes, time.perf_counter() - start)


def arrow_loop(emu: Emulator, table: str, batches: list[pa.RecordBatch]) -> None:
    """The bare official-SDK Arrow loop: create, ingest every batch, one flush, close."""
    from zerobus.sdk.sync import ZerobusSdk

    sdk = ZerobusSdk(emu.endpoint, emu.workspace_url)
    stream = sdk.create_arrow_stream(
        table, batches[0].schema, emu.client_id, emu.client_secret, arrow_stream_options(sdk_options())
    )
    for batch in batches:
        stream.ingest_batch(batch)
    stream.flush()
    stream.close()


def json_loop(emu: Emulator, table: str, calls: list[list[str]]) -> None:
    from zerobus.sdk.shared import StreamConfigurationOptions, TableProperties
    from zerobus.sdk.sync import ZerobusSdk

    sdk = ZerobusSdk(emu.endpoint, emu.workspace_url)
    options = StreamConfigurationOptions(
        recovery_retries=1, recovery_backoff_ms=100, flush_timeout_ms=600_000
    )
    stream = sdk.create_stream(emu.client_id, emu.client_secret, TableProperties(table), options)
    for call in calls:
        stream.ingest_records_offset(call)
    stream.flush()
    stream.close()


@dataclass(frozen=True)
class Settings:
    rows: int
    batch_rows: int
    with_json: bool = True
    coverage: bool = True  # the sink records coverage in SQLite, as the runtime does
    profiler: SinkProfiler | None = None


def sink_run(emu: Emulator, warehouse: str, batches: list[pa.RecordBatch], settings: Settings) -> None:
    transport = SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=emu.config.client_secret,
        options=sdk_options(),
    )
    store = CoverageStore(Path(warehouse) / "_zerobus" / "coverage.sqlite", SINK_TABLE)
    recorder = store if settings.coverage else None
    pool = StreamPool(transport, SINK_TABLE, PoolConfig(), recorder=recorder, metrics=SinkMetrics())
    sink = ZerobusSink(pool, source="benchmark", gate=CatalogGate(LocalCatalog(warehouse)))
    with settings.profiler.active() if settings.profiler else nullcontext():
        for batch in batches:
            sink.push(batch)
        sink.flush()
    pool.close()
    store.close()


class SinkProfiler:
    """cProfile of the pushing thread plus every sink thread started while it runs (ack lanes,
    supervisor). Emulator threads started meanwhile (gRPC handlers) are left out: the question is
    where the sink spends its time."""

    def __init__(self) -> None:
        self.main = cProfile.Profile()
        self.threads: list[cProfile.Profile] = []

    @contextmanager
    def active(self) -> Iterator[None]:
        threading.setprofile(self._on_thread_start)
        self.main.enable()
        try:
            yield
        finally:
            self.main.disable()
            threading.setprofile(None)

    def _on_thread_start(self, frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        if threading.current_thread().name.startswith(("zerobus-ack", "zerobus-pool")):
            profile = cProfile.Profile()
            self.threads.append(profile)
            profile.enable()

    def report(self, top: int) -> str:
        out = io.StringIO()
        stats = pstats.Stats(self.main, stream=out)
        for profile in self.threads:  # those threads ended with the pool
            stats.add(profile)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        return out.getvalue()


# -- driver -----------------------------------------------------------------------------------------


def create_payload_table(warehouse: str, table: str) -> None:
    uri = table_uri(warehouse, table)
    os.makedirs(uri, exist_ok=True)
    DeltaTable.create(uri, schema=PAYLOAD)


def prepare_sink_table(warehouse: str, batch: pa.RecordBatch) -> None:
    """The catalog creates the sink's table (reserved columns included) before the clock starts."""
    from zerobus_orchestration.reserved import RESERVED_FIELDS

    gate = CatalogGate(LocalCatalog(warehouse))
    gate.ensure(SINK_TABLE, pa.schema([*batch.schema, *RESERVED_FIELDS]))


def delta_count(emu: Emulator, table: str) -> int:
    emu.materialize_now(table)
    return int(DeltaTable(table_uri(emu.warehouse, table)).count())


def json_path(emu: Emulator, batches: list[pa.RecordBatch]) -> tuple[Phase, Phase, float]:
    """(ingest only, ingest plus client-side encoding, encoding seconds) for the JSON record path."""
    rows = sum(b.num_rows for b in batches)
    encode_start = time.perf_counter()
    calls = [call for batch in batches for call in json_calls(to_json_records(batch))]
    encode_s = time.perf_counter() - encode_start
    json_bytes = sum(len(r) for call in calls for r in call)
    ingest = timed("json, encoding excluded", rows, json_bytes, lambda: json_loop(emu, JSON_TABLE, calls))
    return ingest, Phase("json (SDK record stream)", rows, json_bytes, ingest.seconds + encode_s), encode_s


def run(settings: Settings, warehouse: str) -> tuple[Result, list[Phase]]:
    rows, batch_rows = settings.rows, settings.batch_rows
    batches = generate(rows, batch_rows)
    arrow_bytes = sum(b.nbytes for b in batches)
    for table in (ARROW_TABLE, JSON_TABLE, WARMUP_TABLE):
        create_payload_table(warehouse, table)
    prepare_sink_table(warehouse, batches[0])

    # Materialisation off while timing: it would compete for the same cores.
    config = EmulatorConfig(time_to_table_s=3600.0, iceberg_lag_s=0.0)
    with Emulator(warehouse, config, iceberg=False) as emu:
        bypass_proxy_for_loopback(emu.endpoint)
        # Untimed: the SDK's first stream pays for its runtime, token cache and connection set-up.
        arrow_loop(emu, WARMUP_TABLE, batches[:1])
        json_loop(emu, WARMUP_TABLE, list(json_calls(to_json_records(batches[0].slice(0, 100)))))
        arrow = timed(
            "arrow (SDK Arrow stream)", rows, arrow_bytes, lambda: arrow_loop(emu, ARROW_TABLE, batches)
        )

        json_phases = json_path(emu, batches) if settings.with_json else None

        bare = timed("bare SDK Arrow loop", rows, arrow_bytes, lambda: arrow_loop(emu, SINK_TABLE, batches))
        sink = timed(
            "sink over SdkTransport", rows, arrow_bytes, lambda: sink_run(emu, warehouse, batches, settings)
        )

        expected = {ARROW_TABLE: rows, SINK_TABLE: 2 * rows} | (
            {JSON_TABLE: rows} if settings.with_json else {}
        )
        counts = {table: delta_count(emu, table) for table in expected}
    verified = counts == expected
    if not verified:
        logging.error("row counts in Delta %s differ from what was sent %s", counts, expected)

    phases = [arrow, *(json_phases[:2] if json_phases else ()), bare, sink]
    ingest, json_phase, encode_s = json_phases if json_phases else (None, None, None)
    result = Result(
        rows=rows,
        batch_rows=batch_rows,
        cpus=os.cpu_count() or 0,
        arrow_rows_per_s=arrow.rows_per_s,
        arrow_mb_per_s=arrow.mb_per_s,
        json_rows_per_s=json_phase.rows_per_s if json_phase else None,
        json_mb_per_s=json_phase.mb_per_s if json_phase else None,
        json_ingest_rows_per_s=ingest.rows_per_s if ingest else None,
        json_encode_s=encode_s,
        arrow_over_json=arrow.rows_per_s / json_phase.rows_per_s if json_phase else None,
        bare_sdk_rows_per_s=bare.rows_per_s,
        sink_rows_per_s=sink.rows_per_s,
        sink_mb_per_s=sink.mb_per_s,
        sink_over_bare=sink.rows_per_s / bare.rows_per_s,
        sink_coverage=settings.coverage,
        verified=verified,
    )
    return result, phases


def render(result: Result, phases: list[Phase]) -> str:
    lines = [
        f"{result.rows:,} rows in batches of {result.batch_rows:,}, {result.cpus} CPU(s), one run",
        "",
        f"{'phase':<34}{'seconds':>9}{'rows/s':>14}{'MB/s':>9}",
    ]
    for phase in phases:
        lines.append(f"{phase.name:<34}{phase.seconds:>9.2f}{phase.rows_per_s:>14,.0f}{phase.mb_per_s:>9.1f}")
    lines += [
        "",
        f"Arrow over JSON (JSON incl. {result.json_encode_s:.2f}s client encoding): "
        f"{result.arrow_over_json:.1f}x"
        if result.arrow_over_json is not None
        else "JSON path skipped (--no-json)",
        f"sink over bare SDK: {result.sink_over_bare:.2f} (1.00 = no overhead; "
        f"coverage store {'on' if result.sink_coverage else 'off'})",
        f"row counts verified in Delta: {result.verified}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per phase (default 1,000,000)")
    parser.add_argument("--batch-rows", type=int, default=20_000, help="rows per batch (default 20,000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--warehouse", help="warehouse folder (default: a temporary one, removed after)")
    parser.add_argument("--no-json", action="store_true", help="skip the (slow) JSON record path")
    parser.add_argument(
        "--no-coverage",
        action="store_true",
        help="sink without its SQLite coverage store (isolates its cost)",
    )
    parser.add_argument("--profile-sink", action="store_true", help="cProfile the sink phase (to stderr)")
    parser.add_argument("--profile-top", type=int, default=25, help="functions listed per profile view")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.batch_rows < 1:
        parser.error("--rows and --batch-rows must be >= 1")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RUST_LOG", "error")  # the SDK's per-stream INFO lines would drown the table

    profiler = SinkProfiler() if args.profile_sink else None
    with tempfile.TemporaryDirectory(prefix="zerobus-bench-") as scratch:
        settings = Settings(args.rows, args.batch_rows, not args.no_json, not args.no_coverage, profiler)
        result, phases = run(settings, args.warehouse or scratch)
    if profiler is not None:
        print(profiler.report(args.profile_top), file=sys.stderr)
    print(json.dumps(asdict(result), indent=2) if args.json else render(result, phases))
    return 0 if result.verified else 1


if __name__ == "__main__":
    sys.exit(main())
