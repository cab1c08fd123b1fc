"""Cost as tables and history grow: a resume's catch-up, a read-back, and the coverage file over a year.

**The table.** ``--sizes`` tables (rows each), every one written as ``--writers`` interleaved writers
would leave it: writer ``w`` runs one job a day (its own source, so the writers' tags sort far apart, the
case where ``_twg_source`` statistics stop pruning), runs of ``--run-rows`` rows, all writers' runs of
a day at once; every ~1 s service commit holds two batches of each writer still running (the emulator's
materialiser layout: one Delta commit of what was acknowledged since the last, Parquet written with its
writer settings, rows stamped by the sink's own ``Stamper``). The Iceberg mirror then converts it (the
read-back reads through it). A 100M-row table is 1,000 runs over 250 days. The tables are built
directly rather than sent through the emulator: the read paths measured here depend on the layout, not
on how fast it was written, and 100M rows through the SDK would take this shared machine an hour.

**Measured** for the latest run of writer 0 (the run a resume or a read-back is about), each table and
kind interleaved ``--repetitions`` times, medians with min and max:

* ``catch_up_*``: ``resume.truth.learn_from_table``, the resume's table read (the catalog's reader, the
  Delta log, the offsets of the run), without the settle period (``settle=False``; with it, a resume
  waits ``coverage.catch_up_settle_s``, 2 s by default, on top). ``unbounded``: a host that knows nothing
  of the run (every file whose tag statistics admit it); ``bounded``: the read bounded by when the run
  can first have been stamped (``resume.truth.emission_bound``: the write's ``not_before`` or this host's
  first look, less ``coverage.emit_margin_s`` = 1 h).
* ``readback_*``: the read-back's Iceberg scan of the run's tag (``readback/verify.py``: load the table,
  scan, check the delivered ranges), unbounded and bounded the same way.

**Coverage over a year** (``--days`` daily partitions of ``--batches`` delivered batches each, real
``CoverageStore`` records with their content digests): the file's size and the time to open it and read
one partition's ranges and digests, without compaction and with it running daily as a write runs it.

    python benchmarks/history.py --json                                  # 1M, 10M and 100M rows
    python benchmarks/history.py --sizes 1000000,10000000 --json        # the growth curve, smaller
    python benchmarks/history.py --smoke --json                          # tiny run (CI): the shape only

MB = 10^6 bytes. Times are this process's wall clock on a machine other work shares: compare the sizes
and kinds with each other (they ran interleaved, side by side), not with another machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage.compaction import compact
from zerobus_orchestration.coverage.digest import RangeDigest, rows_digest
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.emulator.materializer import WRITER_PROPERTIES
from zerobus_orchestration.emulator.parquet_codec import parquet_codec
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.coverage_check import check_coverage
from zerobus_orchestration.readback.verify import _scan_sources
from zerobus_orchestration.reserved import RESERVED_FIELDS
from zerobus_orchestration.resume.truth import emission_bound, learn_from_table
from zerobus_orchestration.sink.stamping import Stamper
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.write_modes import source_tag

MB = 1_000_000
SINK = "zerobus-orchestration"
SOURCES = ("clicks/raw", "orders/raw", "payments/raw", "refunds/raw", "sessions/raw", "views/raw")
BATCH_ROWS = 25_000
BATCHES_PER_COMMIT = 2  # per writer still running: about a second of each writer per service commit
DAY_ONE = dt.datetime(2025, 1, 1, 2, tzinfo=dt.UTC)  # every writer's daily job starts at 02:00
PAYLOAD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("device", pa.string()),
        pa.field("reading", pa.float64()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)
SMOKE = {"size": 200_000, "run_rows": 50_000, "repetitions": 1, "days": 3, "batches": 5}


@dataclass(frozen=True)
class Run:
    """One writer's daily run: its coverage key and when it began."""

    writer: int
    day: int
    source: str
    partition: str
    began: dt.datetime

    @property
    def tag(self) -> str:
        return source_tag(self.source, self.partition)

    @property
    def key(self) -> CoverageKey:
        return CoverageKey(SINK, self.tag, self.partition)


def plan_runs(rows: int, run_rows: int, writers: int) -> list[Run]:
    runs = []
    for number in range(rows // run_rows):
        writer, day = number % writers, number // writers
        date = (DAY_ONE + dt.timedelta(days=day)).date().isoformat()
        partition = f"{date}@run-{number:08x}{'0' * 24}"  # a Dagster-like "<partition key>@<root run id>"
        runs.append(Run(writer, day, SOURCES[writer], partition, DAY_ONE + dt.timedelta(days=day)))
    return runs


def payload(start: int, n: int, at: dt.datetime) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    micros = pc.add(pc.multiply(ids, 1_000), int(at.timestamp() * 1_000_000))
    return pa.record_batch(
        [
            ids,
            pc.binary_join_element_wise("device-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
            pc.divide(pc.cast(pc.bit_wise_and(ids, 65535), pa.float64()), 7.0),
            pc.cast(micros, pa.timestamp("us", tz="UTC")),
        ],
        schema=PAYLOAD,
    )


def commits(runs: list[Run], run_rows: int) -> Iterator[pa.Table]:
    """The table's commits in order: each day's runs at once, two batches per running writer a second."""
    by_day: dict[int, list[Run]] = {}
    for run in runs:
        by_day.setdefault(run.day, []).append(run)
    for day in sorted(by_day):
        todays = by_day[day]
        stampers = {run.tag: Stamper(run.tag) for run in todays}
        sent = dict.fromkeys((run.tag for run in todays), 0)
        second = 0
        while any(sent[run.tag] < run_rows for run in todays):
            at = todays[0].began + dt.timedelta(seconds=second)
            parts = []
            for run in todays:
                for _ in range(BATCHES_PER_COMMIT):
                    start = sent[run.tag]
                    n = min(BATCH_ROWS, run_rows - start)
                    if n <= 0:
                        break
                    batch = payload(start, n, at)
                    parts.append(stampers[run.tag].stamp(batch, OffsetRange(start, start + n), at, None))
                    sent[run.tag] = start + n
            yield pa.Table.from_batches(parts)
            second += 1


@dataclass(frozen=True)
class Built:
    rows: int
    runs: int
    files: int
    build_s: float
    mirror_s: float
    table_mb: float
    table: str
    target: Run


def build(warehouse: str, rows: int, run_rows: int, writers: int) -> Built:
    """The table of ``rows`` rows (see the module docstring), created through the catalog, and its mirror."""
    table = f"main.history.rows_{rows}"
    runs = plan_runs(rows, run_rows, writers)
    CatalogGate(LocalCatalog(warehouse)).ensure(table, pa.schema([*PAYLOAD, *RESERVED_FIELDS]))
    uri = table_uri(warehouse, table)
    # The emulator's own Parquet settings for this table (its codec follows the table's Iceberg reads).
    properties = WRITER_PROPERTIES[parquet_codec(DeltaTable(uri).metadata().configuration)]
    started = time.perf_counter()
    for data in commits(runs, run_rows):
        write_deltalake(uri, data, mode="append", writer_properties=properties)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    IcebergMirror(warehouse, poll_interval_s=None).sync_now(table)
    mirror_s = time.perf_counter() - started
    files = DeltaTable(uri).file_uris()
    size = sum(Path(f).stat().st_size for f in files)
    latest = max((run for run in runs if run.writer == 0), key=lambda run: run.day)
    return Built(rows, len(runs), len(files), build_s, mirror_s, size / MB, table, latest)


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(round(statistics.median(values), 4), round(min(values), 4), round(max(values), 4))


def catch_up(warehouse: str, built: Built, bounded: bool, scratch: Path) -> float:
    """One resume's table read of the target run, as a host without coverage of it does it."""
    config = ZerobusConfig(warehouse=warehouse)
    run = built.target
    since = emission_bound(run.began, None, config.coverage.emit_margin_s) if bounded else None
    with CoverageStore(scratch / f"cache-{time.monotonic_ns()}.sqlite", built.table) as cache:
        started = time.perf_counter()
        found = learn_from_table(
            LocalCatalog(warehouse),
            config,
            run.key,
            table=built.table,
            source=run.source,
            cached=(),
            cache=cache,
            commit=None,
            settle=False,
            emitted_since=since,
        )
        elapsed = time.perf_counter() - started
    if found != (OffsetRange(0, (built.rows // built.runs)),):
        raise AssertionError(f"{built.table}: the catch-up found {found}, not the run's rows")
    return elapsed


def readback(warehouse: str, built: Built, bounded: bool) -> float:
    """The read-back's scan of the target run through the Iceberg mirror, and its coverage check."""
    run = built.target
    coverage = {run.key: (OffsetRange(0, built.rows // built.runs),)}
    since = emission_bound(run.began, None, 3_600.0) if bounded else None
    mirror = IcebergMirror(warehouse, poll_interval_s=None)
    started = time.perf_counter()
    loaded = mirror.load_iceberg_table(built.table)
    rows = _scan_sources(loaded, built.table, coverage, None, since)
    check = check_coverage(rows, coverage)
    elapsed = time.perf_counter() - started
    if check.missing or check.duplicate_count:
        raise AssertionError(f"{built.table}: read-back found {check}")
    return elapsed


def measure_tables(
    warehouse: str, tables: list[Built], repetitions: int, scratch: Path
) -> list[dict[str, Any]]:
    kinds: dict[str, Callable[[Built], float]] = {
        "catch_up_unbounded_s": lambda b: catch_up(warehouse, b, False, scratch),
        "catch_up_bounded_s": lambda b: catch_up(warehouse, b, True, scratch),
        "readback_unbounded_s": lambda b: readback(warehouse, b, False),
        "readback_bounded_s": lambda b: readback(warehouse, b, True),
    }
    for built in tables:  # untimed: the first read of a process imports pyarrow.dataset (and pandas)
        kinds["catch_up_bounded_s"](built)
        kinds["readback_bounded_s"](built)
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(repetitions):  # interleaved: sizes and kinds side by side in every round
        for built in tables:
            for kind, run in kinds.items():
                times.setdefault((built.rows, kind), []).append(run(built))
    results = []
    for built in tables:
        entry: dict[str, Any] = {
            "rows": built.rows,
            "runs": built.runs,
            "files": built.files,
            "table_mb": round(built.table_mb, 1),
            "build_s": round(built.build_s, 1),
            "mirror_s": round(built.mirror_s, 1),
        }
        for kind in kinds:
            entry[kind] = asdict(Spread.of(times[(built.rows, kind)]))
        results.append(entry)
    smallest = results[0]
    for entry in results:
        for kind in kinds:
            entry[f"{kind.removesuffix('_s')}_over_smallest"] = round(
                entry[kind]["median"] / smallest[kind]["median"], 2
            )
    return results


# -- coverage over a year ---------------------------------------------------------------------------


def year_of_coverage(path: Path, days: int, batches: int, daily_compaction: bool) -> dict[str, Any]:
    """``days`` daily partitions of ``batches`` delivered batches each, recorded as the ack lane does."""
    table = "main.history.coverage"
    rows_per_batch = 20_000
    sample = payload(0, 100, DAY_ONE)  # a digest's cost does not matter here, only what is kept
    started = time.perf_counter()
    with CoverageStore(path, table) as store:
        for day in range(days):
            date = (DAY_ONE + dt.timedelta(days=day)).date().isoformat()
            partition = f"{date}@run-{day:08x}{'0' * 24}"
            key = CoverageKey(SINK, source_tag("orders/raw", partition), partition)
            for batch in range(batches):
                span = OffsetRange(batch * rows_per_batch, (batch + 1) * rows_per_batch)
                digest = rows_digest(sample.slice(batch % 100, 1))
                store.record_delivered([(key, span)], [RangeDigest(key, span, None, rows_per_batch, digest)])
            if daily_compaction:  # the day's partition settled: the next write packs it
                compact(store, compact_after_s=0, retention_days=None)
        keys = store.keys()
    record_s = time.perf_counter() - started
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))
    opens = []
    for i in range(7):
        key = keys[(i * 53) % len(keys)]
        started = time.perf_counter()
        with CoverageStore(path, table) as fresh:  # a new connection, as a new process's write opens it
            fresh.ranges(key)
            fresh.digests(key)
        opens.append(time.perf_counter() - started)
    return {
        "daily_compaction": daily_compaction,
        "partitions": len(keys),
        "record_s": round(record_s, 1),
        "file_mb": round(size / MB, 2),
        "open_and_read_one_partition_s": asdict(Spread.of(opens)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        default="1000000,10000000,100000000",
        help="table sizes in rows, comma-separated; the first is the baseline (default %(default)s)",
    )
    parser.add_argument("--run-rows", type=int, default=100_000, help="rows per run (default 100,000)")
    parser.add_argument("--writers", type=int, default=4, help="interleaved writers (default 4)")
    parser.add_argument("--repetitions", type=int, default=3, help="rounds of every measurement (default 3)")
    parser.add_argument("--days", type=int, default=365, help="daily partitions of coverage (default 365)")
    parser.add_argument("--batches", type=int, default=100, help="batches per partition (default 100)")
    parser.add_argument("--warehouse", help="warehouse folder to keep (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--smoke", action="store_true", help=f"tiny run (CI), checks the shape ({SMOKE})")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    if args.smoke:
        sizes, args.run_rows, args.repetitions = [SMOKE["size"]], SMOKE["run_rows"], SMOKE["repetitions"]
        args.days, args.batches = SMOKE["days"], SMOKE["batches"]
    if not sizes or any(s < args.run_rows for s in sizes) or not 1 <= args.writers <= len(SOURCES):
        parser.error(f"--sizes must each hold a run (--run-rows); --writers from 1 to {len(SOURCES)}")
    # Each catch-up warns that the positions it learnt are unverified: true, and the point of the run.
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="zerobus-history-") as tmp:
        scratch = Path(tmp)
        warehouse = args.warehouse or str(scratch / "warehouse")
        tables = [build(warehouse, rows, args.run_rows, args.writers) for rows in sorted(sizes)]
        results = measure_tables(warehouse, tables, args.repetitions, scratch)
        coverage = [
            year_of_coverage(scratch / f"coverage-{flag}.sqlite", args.days, args.batches, flag)
            for flag in (False, True)
        ]
    out = {
        "run_rows": args.run_rows,
        "writers": args.writers,
        "repetitions": args.repetitions,
        "cpus": os.cpu_count() or 0,
        "emit_margin_s": ZerobusConfig(warehouse=".").coverage.emit_margin_s,
        "tables": results,
        "coverage": {"days": args.days, "batches": args.batches, "runs": coverage},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for entry in results:
            medians = {k: v["median"] for k, v in entry.items() if isinstance(v, dict)}
            print(
                f"{entry['rows']:>12,} rows, {entry['files']:>5} files: catch-up "
                f"{medians['catch_up_unbounded_s']:.3f} s unbounded, {medians['catch_up_bounded_s']:.3f} s "
                f"bounded; read-back {medians['readback_unbounded_s']:.3f} s unbounded, "
                f"{medians['readback_bounded_s']:.3f} s bounded"
            )
        for run in coverage:
            opened = run["open_and_read_one_partition_s"]["median"]
            print(
                f"coverage, {args.days} x {args.batches}, daily compaction {run['daily_compaction']}: "
                f"{run['file_mb']} MB, open + one partition {opened:.4f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
