"""The emulator materialiser's Parquet codecs side by side: CPU per GB and bytes written, one run.

Materialising (WAL -> Delta) is mostly Parquet encoding, and it shares the emulator's process with the
gRPC handlers acknowledging batches, so its CPU per GB bounds what the emulator sustains. The codec
follows the table (``emulator/parquet_codec.py``): Snappy, or Zstandard for tables with Iceberg reads
on, as on Databricks. This writes the same rows (``scaling.py``'s payload shape: an id, a device name,
a reading, a timestamp) with the materialiser's own writer properties for each codec, interleaved over
``--repetitions`` fresh tables, and reports the medians: process CPU seconds per GB of Arrow input
(delta-rs encodes on its own threads; process CPU counts them all) and the Parquet bytes per Arrow
byte. Zstandard at the default level 3 is measured beside level 1 (the one the emulator uses).

    python benchmarks/parquet_codec.py                       # 256 MB of rows, 3 repetitions
    python benchmarks/parquet_codec.py --mb 64 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import WriterProperties, write_deltalake

from zerobus_orchestration.emulator.materializer import COLUMN_PROPERTIES, WRITER_PROPERTIES
from zerobus_orchestration.emulator.parquet_codec import SNAPPY, ZSTD

MB = 1_000_000
CODECS = {
    "snappy": WRITER_PROPERTIES[SNAPPY],
    "zstd-1": WRITER_PROPERTIES[ZSTD],
    "zstd-3": WriterProperties(
        compression="ZSTD",
        compression_level=3,
        default_column_properties=COLUMN_PROPERTIES,
    ),
}
EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Row:
    codec: str
    cpu_s_per_gb: float  # process CPU seconds per 10^9 Arrow input bytes (median)
    wall_s_per_gb: float
    parquet_bytes_per_arrow_byte: float
    cpu_ratio_to_snappy: float


def payload(mb: float) -> pa.Table:
    """About ``mb`` MB of Arrow rows shaped like ``scaling.py``'s payload."""
    count = max(1, int(mb * MB / 30))  # int64 + ~10 bytes of text + float64 + timestamp, with offsets
    ids = pa.array(range(count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "device": pc.binary_join_element_wise(
                "device-", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""
            ),
            "reading": pc.divide(pc.cast(pc.bit_wise_and(ids, 65535), pa.float64()), 7.0),
            "at": pc.cast(pc.add(pc.multiply(ids, 1_000), EPOCH_US), pa.timestamp("us", tz="UTC")),
        }
    )


def measure(table: pa.Table, repetitions: int) -> list[Row]:
    cpu: dict[str, list[float]] = {name: [] for name in CODECS}
    wall: dict[str, list[float]] = {name: [] for name in CODECS}
    size: dict[str, list[float]] = {name: [] for name in CODECS}
    gb = table.nbytes / 1e9
    with tempfile.TemporaryDirectory(prefix="zerobus-codec-") as scratch:
        for rep in range(repetitions):
            for name, properties in CODECS.items():  # interleaved: drift on a shared machine hits all
                path = Path(scratch) / f"{name}-{rep}"
                cpu0, wall0 = time.process_time(), time.perf_counter()
                write_deltalake(str(path), table, writer_properties=properties)
                cpu[name].append((time.process_time() - cpu0) / gb)
                wall[name].append((time.perf_counter() - wall0) / gb)
                parquet = sum(p.stat().st_size for p in path.glob("*.parquet"))
                size[name].append(parquet / table.nbytes)
    base = statistics.median(cpu["snappy"])
    return [
        Row(
            name,
            round(statistics.median(cpu[name]), 3),
            round(statistics.median(wall[name]), 3),
            round(statistics.median(size[name]), 4),
            round(statistics.median(cpu[name]) / base, 3),
        )
        for name in CODECS
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=256.0, help="Arrow MB of rows per write")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.mb <= 0 or args.repetitions < 1:
        parser.error("--mb must be > 0 and --repetitions >= 1")
    table = payload(args.mb)
    results = measure(table, args.repetitions)
    if args.json:
        print(json.dumps({"arrow_mb": round(table.nbytes / MB, 1), "results": [asdict(r) for r in results]}))
        return 0
    print(f"{table.nbytes / MB:.1f} Arrow MB per write, median of {args.repetitions} (interleaved)")
    print(f"{'codec':8} {'CPU s/GB':>9} {'wall s/GB':>10} {'bytes out/in':>13} {'CPU vs snappy':>14}")
    for r in results:
        print(
            f"{r.codec:8} {r.cpu_s_per_gb:9.2f} {r.wall_s_per_gb:10.2f} "
            f"{r.parquet_bytes_per_arrow_byte:13.3f} {r.cpu_ratio_to_snappy:14.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
