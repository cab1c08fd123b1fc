"""What the whole-input check costs: a file ingest checked whole before its first row is sent, against the
same ingest streamed (read once, as the write path read files before the check).

``ZerobusRuntime.write(table, read_files(path))`` checks every row against the table before it sends
the first (``sink/input_check.py``: the sink's input checks, the row-size cut and the write-boundary
guard against the target): a Parquet file is read twice, once to check and once to send; a CSV file is
parsed once, its rows spooled to local disk as they pass and sent from there (``spool.py``).
``streamed`` gives the write ``read_files(path).batches()``, a stream: read once, only its first batch
checked ahead (the rest as it is sent), which is what an ingest cost before. ``check`` is the pre-pass
alone (``InputCheck.check_all`` over the file, no spool). Each ``--formats`` file (Parquet as
``pyarrow`` writes it by default, and CSV) of ``--rows`` rows (an id, a DATE, a UTC TIMESTAMP, a
double and a 20-40 character note: the temporal columns are range-scanned by the guard) is written
``--repetitions`` times per kind, the kinds interleaved, each write a new partition of one table
(created by a warm-up write, so no write pays for the table's creation); medians with min and max.

The runtime is the embedded default with the emulator in its own process (daemon mode), through the
official SDK: a write returns once every row is durable. MB = 10^6 bytes of the caller's Arrow payload
(``RecordBatch.nbytes`` of the file's rows). Times are wall clock on a machine other work shares: compare
the kinds with each other (they ran interleaved, side by side), not with another machine.

    python benchmarks/input_check.py --json
    python benchmarks/input_check.py --smoke --json   # tiny run (CI): checks it works, not figures
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.files import DEFAULT_BATCH_ROWS, FileInput, read_files
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.sink.input_check import InputCheck, for_sink

MB = 1_000_000
TABLE = "main.bench.input_check"
KINDS = ("checked", "streamed", "check")
SMOKE = {"rows": 5_000, "repetitions": 1}
WORDS = np.array(["order", "left", "door", "ring", "twice", "fragile", "gift", "wrap", "call", "back"])


def events(rows: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    words = WORDS[rng.integers(0, len(WORDS), size=(rows, 6))]
    notes = [" ".join(row[: 3 + i % 4]) for i, row in enumerate(words)]
    micros = 1_767_225_600_000_000 + ids * 1_250  # from 2026-01-01, 1.25 ms apart
    return pa.table(
        {
            "id": pa.array(ids),
            "day": pa.array((20_454 + ids // 100_000).astype(np.int32)).cast(pa.date32()),
            "at": pa.array(micros).cast(pa.timestamp("us", tz="UTC")),
            "amount": pa.array(np.round(rng.random(rows) * 500, 2)),
            "note": pa.array(notes, pa.string()),
        }
    )


@dataclass(frozen=True)
class Spread:
    median_s: float
    min_s: float
    max_s: float

    @classmethod
    def of(cls, seconds: list[float]) -> Spread:
        return cls(round(statistics.median(seconds), 3), round(min(seconds), 3), round(max(seconds), 3))


@dataclass(frozen=True)
class FormatResult:
    format: str
    rows: int
    file_mb: float
    payload_mb: float
    checked: Spread
    streamed: Spread
    check: Spread
    checked_over_streamed: float  # median checked / median streamed
    check_payload_mb_per_s: float


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(runtime: ZerobusRuntime, path: Path, fmt: str, rows: int, repetitions: int) -> FormatResult:
    def files() -> FileInput:
        return read_files(str(path))

    payload = sum(b.nbytes for b in files().batches())
    runs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    counter = iter(range(10**9))

    def write(data: FileInput | Iterator[pa.RecordBatch]) -> None:
        result = runtime.write(TABLE, data, source=f"bench-{fmt}", partition=f"p{next(counter)}")
        if result.rows_written != rows:
            raise SystemExit(f"{fmt}: wrote {result.rows_written} of {rows} rows")

    def check_only() -> None:
        sink = runtime.sink(TABLE, source=f"bench-{fmt}", partition="check")
        check: InputCheck = for_sink(sink, runtime.metrics)
        check.check_all(files().located())
        if check.rows != rows:
            raise SystemExit(f"{fmt}: checked {check.rows} of {rows} rows")

    for _ in range(repetitions):
        runs["checked"].append(_timed(lambda: write(files())))
        runs["streamed"].append(_timed(lambda: write(files().batches())))
        runs["check"].append(_timed(check_only))
    spreads = {kind: Spread.of(seconds) for kind, seconds in runs.items()}
    return FormatResult(
        format=fmt,
        rows=rows,
        file_mb=round(path.stat().st_size / MB, 1),
        payload_mb=round(payload / MB, 1),
        checked=spreads["checked"],
        streamed=spreads["streamed"],
        check=spreads["check"],
        checked_over_streamed=round(spreads["checked"].median_s / spreads["streamed"].median_s, 3),
        check_payload_mb_per_s=round(payload / MB / spreads["check"].median_s, 1),
    )


def run(rows: int, repetitions: int, formats: list[str]) -> dict[str, object]:
    results: list[FormatResult] = []
    # The daemon may still be writing its own files as it idles out: cleanup must not fail the run.
    with tempfile.TemporaryDirectory(prefix="zerobus-input-check-", ignore_cleanup_errors=True) as tmp:
        table = events(rows)
        paths = {"parquet": Path(tmp) / "events.parquet", "csv": Path(tmp) / "events.csv"}
        pq.write_table(table, paths["parquet"])
        pacsv.write_csv(table, paths["csv"])
        config = ZerobusConfig(
            warehouse=str(Path(tmp) / "wh"), emulator=EmulatorConfig(mode="daemon", idle_shutdown_s=5.0)
        )
        runtime = ZerobusRuntime(config)
        try:
            runtime.write(TABLE, table.slice(0, 10), source="warm-up")  # creates the table, opens streams
            for fmt in formats:
                results.append(measure(runtime, paths[fmt], fmt, rows, repetitions))
        finally:
            runtime.close()
    return {
        "rows": rows,
        "repetitions": repetitions,
        "batch_rows": DEFAULT_BATCH_ROWS,
        "emulator": "own process (daemon mode), official SDK",
        "formats": [asdict(r) for r in results],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--formats", default="parquet,csv")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--smoke", action="store_true", help="a tiny run: the shape, not figures")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rows, repetitions = (SMOKE["rows"], SMOKE["repetitions"]) if args.smoke else (args.rows, args.repetitions)
    data = run(rows, repetitions, [f.strip() for f in args.formats.split(",") if f.strip()])
    if args.json:
        print(json.dumps(data))
        return
    for r in data["formats"]:  # type: ignore[attr-defined]
        print(
            f"{r['format']}: {r['rows']:,} rows ({r['payload_mb']} MB payload): checked "
            f"{r['checked']['median_s']} s, streamed {r['streamed']['median_s']} s "
            f"(x{r['checked_over_streamed']}), the check alone {r['check']['median_s']} s "
            f"({r['check_payload_mb_per_s']} MB/s)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
