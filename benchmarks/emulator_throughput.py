"""Throughput through the official SDK into the local emulator: Arrow vs JSON records, sink vs bare SDK.

The emulator runs in its own process (``python -m zerobus_orchestration.emulator``), so the CPU time of
this process (``time.process_time``: every thread, the SDK's native ones included) is the client's alone.

* ``arrow``: ``create_arrow_stream`` + ``ingest_batch`` per batch + one ``flush``, the payload columns
  only (the Arrow Flight path), once.
* ``json`` (slow at full size; skipped by ``--no-json``): ``create_stream`` +
  ``ingest_records_offset([json strings])`` per batch + one ``flush``: what dlt's Zerobus loader and
  most hand-written loaders do. Its rate includes turning the Arrow rows into JSON strings on the
  client; the rate without that is reported too.
* ``bare`` vs ``sink``, like for like: the bare loop sends exactly the batches the sink sends, the
  payload stamped with the reserved columns (``_twg_emit_ts``, ``_twg_source``, ``_twg_offset``) by the
  sink's own ``Stamper`` and put in the wire schema by the sink's own catalog gate (the Arrow types the
  Zerobus server compares with, docs/architecture.md#the-wire-contract: strings as ``large_utf8``,
  decimals as text) before the clock starts; the sink (``ZerobusSink`` over ``StreamPool`` over
  ``SdkTransport``: catalog gate, stamping, ack lane, SQLite coverage) gets the unstamped payload and
  stamps it itself, so its stamping cost counts against it. Both run ``--repetitions`` times in
  interleaved order (bare, sink, bare, sink, ...) into the same table; ratios are taken per pair and
  reported as median with min and max.

Bytes counted (MB = 10^6 bytes, GB = 10^9; every ``mb_per_s`` and ``cpu_s_per_gb`` uses its phase's):

* ``arrow``: the payload's Arrow bytes (``RecordBatch.nbytes``) as the caller holds them, no reserved
  columns (the phase sends them in their wire types, converted before the clock starts);
* ``json``: the JSON text sent (UTF-8 characters of the records);
* ``bare`` and ``sink``: the *stamped* Arrow bytes as sent, payload plus the three ``_twg_*`` columns in
  their wire types (``stamped_bytes`` per run), so their MB/s are not comparable with
  ``arrow_mb_per_s``; the payload of the same rows is ``payload_bytes`` (payload MB/s = stamped MB/s x
  payload_bytes / stamped_bytes).

``--schema``: ``events`` (the default: an id, a short string, a double, a boolean, a timestamp) or
``decimals`` (an id, four DECIMAL columns of 9 to 38 digits and a short string: the sink turns each
decimal into its text, the costliest conversion of the wire schema; no JSON path).

Client and emulator share the machine's cores, so the figures compare paths with one another; they are
not Zerobus service figures. Acknowledgements are durable (fsync'd WAL); Delta materialisation is off
while timing, and the emulator commits everything on SIGTERM, after which the row counts are verified.

    python benchmarks/emulator_throughput.py                  # table
    python benchmarks/emulator_throughput.py --json --rows 2000000
    python benchmarks/emulator_throughput.py --schema decimals --no-json
    python benchmarks/emulator_throughput.py --smoke --json   # tiny run (CI): checks it works, not figures
    python benchmarks/emulator_throughput.py --profile-sink   # cProfile of the sink phases
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import functools
import io
import json
import logging
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from scaling import Endpoint as Endpoint  # the sibling script (run from benchmarks/); re-exported
from scaling import emulator_process as scaling_emulator_process

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig, SdkStreamOptions
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import RESERVED_FIELDS
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.stamping import Stamper
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.sdk import SdkTransport, arrow_stream_options, bypass_proxy_for_loopback
from zerobus_orchestration.wire_schema import wire_type_of_arrow
from zerobus_orchestration.wire_values import to_wire

ARROW_TABLE = "main.bench.arrow_path"
JSON_TABLE = "main.bench.json_path"
SINK_TABLE = "main.bench.sink_path"
WARMUP_TABLE = "main.bench.warmup"
SOURCE = "benchmark"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
MB = 1_000_000
GB = 1_000_000_000
JSON_CALL_LIMIT = 10_420_224  # the SDK's per-call payload limit on the row path (10 MiB - 64 KiB)
SMOKE = {"rows": 2_000, "batch_rows": 500, "repetitions": 2}
PAYLOAD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("device", pa.string()),
        pa.field("reading", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)
DECIMALS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.decimal128(18, 2)),
        pa.field("price", pa.decimal128(38, 18)),
        pa.field("rate", pa.decimal128(9, 6)),
        pa.field("quantity", pa.decimal128(12, 0)),
        pa.field("currency", pa.string()),
    ]
)
SCHEMAS = {"events": PAYLOAD, "decimals": DECIMALS}


@dataclass(frozen=True)
class Phase:
    name: str
    rows: int
    bytes: int
    seconds: float
    cpu_s: float  # this process's CPU time (all threads) over the phase

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds

    @property
    def cpu_s_per_gb(self) -> float:
        return self.cpu_s / (self.bytes / GB)


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


@dataclass(frozen=True)
class PathFigures:
    """One path's figures over the repetitions; ``mb_per_s`` and ``cpu_s_per_gb`` count stamped bytes."""

    rows_per_s: Spread
    mb_per_s: Spread
    cpu_s_per_gb: Spread

    @classmethod
    def of(cls, phases: list[Phase]) -> PathFigures:
        return cls(
            Spread.of([p.rows_per_s for p in phases]),
            Spread.of([p.mb_per_s for p in phases]),
            Spread.of([p.cpu_s_per_gb for p in phases]),
        )


@dataclass(frozen=True)
class Result:
    rows: int
    batch_rows: int
    cpus: int
    repetitions: int
    emulator: str  # where the emulator ran: "own process"
    schema: str  # the payload: "events" or "decimals" (``--schema``)
    stamped_bytes: int  # Arrow bytes the bare loop and the sink each send per repetition (payload + _twg_*)
    payload_bytes: int  # the payload's own Arrow bytes per repetition (what the caller gave the sink)
    arrow_rows_per_s: float
    arrow_mb_per_s: float  # payload Arrow bytes only (no reserved columns): not comparable with bare/sink
    json_rows_per_s: float | None
    json_mb_per_s: float | None  # JSON text bytes
    json_ingest_rows_per_s: float | None
    json_encode_s: float | None
    arrow_over_json: float | None
    bare: PathFigures
    sink: PathFigures
    sink_over_bare: float  # median over the interleaved pairs of sink rows/s over bare rows/s
    sink_over_bare_min: float
    sink_over_bare_max: float
    client_cpu_per_gb_sink_over_bare: float  # median over the pairs; 1.0 = the sink costs no extra CPU
    sink_coverage: bool
    verified: bool


# -- data -------------------------------------------------------------------------------------------


def generate(rows: int, batch_rows: int, schema: str = "events") -> list[pa.RecordBatch]:
    ids = pa.array(range(rows), pa.int64())
    if schema == "decimals":
        decimal_batches: list[pa.RecordBatch] = decimal_table(ids).to_batches(max_chunksize=batch_rows)
        return decimal_batches
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


def decimal_table(ids: pa.Array) -> pa.Table:
    """The ``decimals`` payload, built from buffers: each decimal's unscaled value a mix of the id."""
    n = len(ids)
    base = ids.to_numpy().astype(np.int64)

    def decimals(kind: pa.DataType, unscaled: np.ndarray[Any, Any]) -> pa.Array:
        # Two's complement 128-bit little endian: the int64 and its sign extension.
        words = np.stack([unscaled, unscaled >> 63], axis=1).astype(np.int64)
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(words.tobytes())])

    mixed = (base * 2_654_435_761) % 10**15
    sign = np.where(base % 3 == 0, -1, 1)
    columns = [
        ids,
        decimals(DECIMALS.field("amount").type, sign * mixed),
        decimals(DECIMALS.field("price").type, mixed * 1_000 + base % 997),
        decimals(DECIMALS.field("rate").type, (base * 7919) % 10**9),
        decimals(DECIMALS.field("quantity").type, sign * (base % 10**12)),
        pc.binary_join_element_wise("cur-", pc.cast(pc.bit_wise_and(ids, 15), pa.string()), ""),
    ]
    return pa.table(columns, schema=DECIMALS)


def wire_form(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A payload batch (its columns in their declared types) in the wire types, as the Arrow path sends it."""
    fields = [f.with_type(wire_type_of_arrow(f.type)) for f in batch.schema]
    columns = [to_wire(c, f.type) for c, f in zip(batch.columns, fields, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def stamped(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The batches as the sink sends them: the sink's own ``Stamper``, positions counted from 0."""
    stamper, emit_ts, at, out = Stamper(SOURCE), dt.datetime.now(dt.UTC), 0, []
    for batch in batches:
        out.append(stamper.stamp(batch, OffsetRange(at, at + batch.num_rows), emit_ts, None))
        at += batch.num_rows
    return out


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


# -- the emulator, out of process -------------------------------------------------------------------


@contextmanager
def emulator_process(warehouse: str, log: IO[bytes]) -> Iterator[Endpoint]:
    """The emulator in its own process (``scaling.emulator_process``), materialisation effectively off
    while timing (it would compete for the cores) and no Iceberg mirror; SIGTERM commits and stops it."""
    with scaling_emulator_process(warehouse, log, ("--no-iceberg", "--time-to-table", "3600")) as emu:
        yield emu


# -- phases -----------------------------------------------------------------------------------------


def sdk_options() -> SdkStreamOptions:
    return SdkStreamOptions(recovery_retries=1, recovery_backoff_ms=100, flush_timeout_ms=600_000)


def timed(name: str, rows: int, nbytes: int, run: Callable[[], None]) -> Phase:
    cpu, start = time.process_time(), time.perf_counter()
    run()
    return Phase(name, rows, nbytes, time.perf_counter() - start, time.process_time() - cpu)


def arrow_loop(emu: Endpoint, table: str, batches: list[pa.RecordBatch]) -> None:
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


def json_loop(emu: Endpoint, table: str, calls: list[list[str]]) -> None:
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
    repetitions: int = 5
    with_json: bool = True
    coverage: bool = True  # the sink records coverage in SQLite, as the runtime does
    profiler: SinkProfiler | None = None
    schema: str = "events"


def sink_run(
    emu: Endpoint, warehouse: str, batches: list[pa.RecordBatch], settings: Settings, run_no: int
) -> None:
    from pydantic import SecretStr

    transport = SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(emu.client_secret),
        options=sdk_options(),
    )
    # A coverage store per repetition: each run's positions start at 0 again, as a fresh write would.
    store = CoverageStore(Path(warehouse) / "_zerobus" / f"coverage-{run_no}.sqlite", SINK_TABLE)
    recorder = store if settings.coverage else None
    pool = StreamPool(transport, SINK_TABLE, PoolConfig(), recorder=recorder, metrics=SinkMetrics())
    sink = ZerobusSink(pool, source=SOURCE, gate=CatalogGate(LocalCatalog(warehouse)))
    with settings.profiler.active() if settings.profiler else nullcontext():
        for batch in batches:
            sink.push(batch)
        sink.flush()
    pool.close()
    store.close()


class SinkProfiler:
    """cProfile of the pushing thread plus every sink thread started while it runs (ack lanes,
    supervisor). The SDK's native threads are invisible to it: the question is where the sink's
    Python spends its time."""

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


def create_payload_table(warehouse: str, table: str, schema: pa.Schema) -> None:
    uri = table_uri(warehouse, table)
    os.makedirs(uri, exist_ok=True)
    DeltaTable.create(uri, schema=schema)


def prepare_sink_table(warehouse: str, schema: pa.Schema) -> None:
    """The catalog creates the sink's table (reserved columns included) before the clock starts."""
    gate = CatalogGate(LocalCatalog(warehouse))
    gate.ensure(SINK_TABLE, pa.schema([*schema, *RESERVED_FIELDS]))


def as_the_sink_sends(warehouse: str, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The sink's own batches, for the bare loop: its stamper, then its catalog gate's guard, which puts
    them in the wire schema (``catalog/guard.py``)."""
    gate = CatalogGate(LocalCatalog(warehouse))
    stamped_batches = stamped(batches)
    target = gate.ensure(SINK_TABLE, stamped_batches[0].schema)
    return [gate.conform(SINK_TABLE, b, target) for b in stamped_batches]


def delta_count(warehouse: str, table: str) -> int:
    return int(DeltaTable(table_uri(warehouse, table)).count())


def json_path(emu: Endpoint, batches: list[pa.RecordBatch]) -> tuple[Phase, Phase, float]:
    """(ingest only, ingest plus client-side encoding, encoding seconds) for the JSON record path."""
    rows = sum(b.num_rows for b in batches)
    cpu, encode_start = time.process_time(), time.perf_counter()
    calls = [call for batch in batches for call in json_calls(to_json_records(batch))]
    encode_s, encode_cpu = time.perf_counter() - encode_start, time.process_time() - cpu
    json_bytes = sum(len(r) for call in calls for r in call)
    ingest = timed("json, encoding excluded", rows, json_bytes, lambda: json_loop(emu, JSON_TABLE, calls))
    whole = Phase(
        "json (SDK record stream)", rows, json_bytes, ingest.seconds + encode_s, ingest.cpu_s + encode_cpu
    )
    return ingest, whole, encode_s


def measure(
    settings: Settings, warehouse: str, emu: Endpoint, batches: list[pa.RecordBatch]
) -> tuple[Phase, tuple[Phase, Phase, float] | None, list[Phase], list[Phase]]:
    rows = settings.rows
    sent = as_the_sink_sends(warehouse, batches)
    stamped_bytes = sum(b.nbytes for b in sent)
    payload = [wire_form(b) for b in batches]
    # Untimed: the SDK's first stream pays for its runtime, token cache and connection set-up.
    arrow_loop(emu, WARMUP_TABLE, payload[:1])
    if settings.with_json:
        json_loop(emu, WARMUP_TABLE, list(json_calls(to_json_records(batches[0].slice(0, 100)))))
    arrow_bytes = sum(b.nbytes for b in batches)
    arrow = timed(
        "arrow (SDK Arrow stream)", rows, arrow_bytes, lambda: arrow_loop(emu, ARROW_TABLE, payload)
    )
    json_phases = json_path(emu, batches) if settings.with_json else None
    bares: list[Phase] = []
    sinks: list[Phase] = []
    for run_no in range(settings.repetitions):  # interleaved: drift in the machine hits both alike
        bares.append(timed("bare SDK loop", rows, stamped_bytes, lambda: arrow_loop(emu, SINK_TABLE, sent)))
        sinks.append(
            timed(
                "sink over SdkTransport",
                rows,
                stamped_bytes,
                functools.partial(sink_run, emu, warehouse, batches, settings, run_no),
            )
        )
    return arrow, json_phases, bares, sinks


def run(settings: Settings, warehouse: str, log: IO[bytes]) -> tuple[Result, list[Phase]]:
    rows, batch_rows = settings.rows, settings.batch_rows
    batches = generate(rows, batch_rows, settings.schema)
    declared = SCHEMAS[settings.schema]
    for table in (ARROW_TABLE, JSON_TABLE, WARMUP_TABLE):
        create_payload_table(warehouse, table, declared)
    prepare_sink_table(warehouse, declared)

    with emulator_process(warehouse, log) as emu:
        bypass_proxy_for_loopback(emu.endpoint)
        arrow, json_phases, bares, sinks = measure(settings, warehouse, emu, batches)
    # The emulator committed everything acknowledged to Delta on its way out.
    expected = {ARROW_TABLE: rows, SINK_TABLE: 2 * settings.repetitions * rows} | (
        {JSON_TABLE: rows} if settings.with_json else {}
    )
    counts = {table: delta_count(warehouse, table) for table in expected}
    verified = counts == expected
    if not verified:
        logging.error("row counts in Delta %s differ from what was sent %s", counts, expected)

    pairs = list(zip(bares, sinks, strict=True))
    speed = Spread.of([s.rows_per_s / b.rows_per_s for b, s in pairs])
    cpu = statistics.median([s.cpu_s_per_gb / b.cpu_s_per_gb for b, s in pairs])
    ingest, json_phase, encode_s = json_phases if json_phases else (None, None, None)
    result = Result(
        rows=rows,
        batch_rows=batch_rows,
        cpus=os.cpu_count() or 0,
        repetitions=settings.repetitions,
        emulator="own process",
        schema=settings.schema,
        stamped_bytes=bares[0].bytes,
        payload_bytes=arrow.bytes,
        arrow_rows_per_s=arrow.rows_per_s,
        arrow_mb_per_s=arrow.mb_per_s,
        json_rows_per_s=json_phase.rows_per_s if json_phase else None,
        json_mb_per_s=json_phase.mb_per_s if json_phase else None,
        json_ingest_rows_per_s=ingest.rows_per_s if ingest else None,
        json_encode_s=encode_s,
        arrow_over_json=arrow.rows_per_s / json_phase.rows_per_s if json_phase else None,
        bare=PathFigures.of(bares),
        sink=PathFigures.of(sinks),
        sink_over_bare=speed.median,
        sink_over_bare_min=speed.min,
        sink_over_bare_max=speed.max,
        client_cpu_per_gb_sink_over_bare=cpu,
        sink_coverage=settings.coverage,
        verified=verified,
    )
    return result, [arrow, *(json_phases[:2] if json_phases else ()), *bares, *sinks]


def bytes_counted(phase: Phase) -> str:
    """What a phase's MB/s counts: the Arrow path sends the payload, the JSON path text, the rest stamped."""
    if phase.name.startswith("arrow"):
        return "payload Arrow bytes"
    if phase.name.startswith("json"):
        return "JSON text bytes"
    return "stamped Arrow bytes (payload + _twg_*)"


def render(result: Result, phases: list[Phase]) -> str:
    lines = [
        f"{result.rows:,} rows ({result.schema}) in batches of {result.batch_rows:,}, {result.cpus} CPU(s), "
        f"emulator in its own process, bare/sink x{result.repetitions} interleaved, "
        f"{result.stamped_bytes / MB:.1f} MB stamped per bare/sink run (as sent, in the wire schema)",
        "",
        f"{'phase':<30}{'seconds':>9}{'rows/s':>14}{'MB/s':>9}{'client CPU s/GB':>17}  bytes counted",
    ]
    for phase in phases:
        lines.append(
            f"{phase.name:<30}{phase.seconds:>9.2f}{phase.rows_per_s:>14,.0f}{phase.mb_per_s:>9.1f}"
            f"{phase.cpu_s_per_gb:>17.2f}  {bytes_counted(phase)}"
        )
    lines.append("MB = 10^6 bytes; MB/s and CPU s/GB count the bytes named in the last column.")
    lines.append("")
    for name, fig in (("bare", result.bare), ("sink", result.sink)):
        lines.append(
            f"{name} median: {fig.rows_per_s.median:,.0f} rows/s, {fig.mb_per_s.median:.1f} MB/s stamped "
            f"(min {fig.mb_per_s.min:.1f}, max {fig.mb_per_s.max:.1f}), "
            f"{fig.cpu_s_per_gb.median:.2f} client CPU s per stamped GB"
        )
    lines += [
        f"Arrow over JSON (JSON incl. {result.json_encode_s:.2f}s client encoding): "
        f"{result.arrow_over_json:.1f}x"
        if result.arrow_over_json is not None
        else "JSON path skipped",
        f"sink over bare SDK, like for like: {result.sink_over_bare:.2f} median "
        f"(min {result.sink_over_bare_min:.2f}, max {result.sink_over_bare_max:.2f}; 1.00 = no overhead; "
        f"coverage store {'on' if result.sink_coverage else 'off'})",
        f"client CPU per GB, sink over bare: {result.client_cpu_per_gb_sink_over_bare:.2f} median",
        f"row counts verified in Delta: {result.verified}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per phase (default 1,000,000)")
    parser.add_argument("--batch-rows", type=int, default=20_000, help="rows per batch (default 20,000)")
    parser.add_argument("--repetitions", type=int, default=5, help="bare/sink pairs, interleaved (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--warehouse", help="warehouse folder (default: a temporary one, removed after)")
    parser.add_argument("--no-json", action="store_true", help="skip the (slow) JSON record path")
    parser.add_argument(
        "--schema",
        choices=sorted(SCHEMAS),
        default="events",
        help="the payload: events (default) or decimals (four DECIMAL columns; no JSON path)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny run that checks the benchmark works, not its figures ({SMOKE})",
    )
    parser.add_argument(
        "--no-coverage",
        action="store_true",
        help="sink without its SQLite coverage store (isolates its cost)",
    )
    parser.add_argument("--profile-sink", action="store_true", help="cProfile the sink phases (to stderr)")
    parser.add_argument("--profile-top", type=int, default=25, help="functions listed per profile view")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.batch_rows, args.repetitions = (
            SMOKE["rows"],
            SMOKE["batch_rows"],
            SMOKE["repetitions"],
        )
    if args.rows < 1 or args.batch_rows < 1 or args.repetitions < 1:
        parser.error("--rows, --batch-rows and --repetitions must be >= 1")
    if args.schema != "events" and not args.no_json:
        parser.error(f"--schema {args.schema} has no JSON path: add --no-json")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RUST_LOG", "error")  # the SDK's per-stream INFO lines would drown the table

    profiler = SinkProfiler() if args.profile_sink else None
    settings = Settings(
        args.rows,
        args.batch_rows,
        args.repetitions,
        not args.no_json,
        not args.no_coverage,
        profiler,
        args.schema,
    )
    with tempfile.TemporaryDirectory(prefix="zerobus-bench-") as scratch:
        log_path = Path(scratch) / "emulator.log"
        warehouse = args.warehouse or str(Path(scratch) / "warehouse")
        try:
            with log_path.open("wb") as log:
                result, phases = run(settings, warehouse, log)
        except BaseException:
            sys.stderr.write(log_path.read_text(errors="replace") if log_path.exists() else "")
            raise
    if profiler is not None:
        print(profiler.report(args.profile_top), file=sys.stderr)
    print(json.dumps(asdict(result), indent=2) if args.json else render(result, phases))
    return 0 if result.verified else 1


if __name__ == "__main__":
    sys.exit(main())
