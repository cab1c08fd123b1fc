"""The SDK's Arrow IPC compression (``sdk.ipc_compression``): client CPU and wire bytes per payload byte.

The sink (catalog gate, stamping, ack lane, SQLite coverage with content digests: every integrity
feature on) writes the same realistic rows once per codec, ``none``, ``lz4_frame`` and ``zstd``, through
the official SDK into the emulator in its own process, repeated ``--repetitions`` times with the codecs
interleaved. Between the SDK and the emulator runs a byte-counting TCP proxy (its own process, so its
CPU is not the client's): **wire bytes** are what the client sent on the gRPC connection (HTTP/2
frames, gRPC messages, the Arrow IPC bodies as the codec left them), counted after ``flush`` returned
(every batch acknowledged). The OAuth token request goes to the token endpoint, not through the proxy.

The rows (``orders``): a sequential id, a customer id of 50,000, one of five statuses, an amount with
two decimals, a creation time a few milliseconds apart, a country code, and a 30-60 character note of
words; the sink stamps its three ``_twg_*`` columns (one source tag per row, which compresses to nearly
nothing, sequential positions, one timestamp per batch).

Bytes counted (MB = 10^6, GB = 10^9): **payload** is the caller's Arrow bytes (``RecordBatch.nbytes``),
the unit of every per-GB and per-byte figure here; **stamped** adds the reserved columns.

    python benchmarks/ipc_compression.py --json
    python benchmarks/ipc_compression.py --smoke --json   # tiny run (CI): checks it works, not figures
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import mmap
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
from emulator_throughput import Endpoint, Spread, emulator_process
from pydantic import SecretStr

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig, SdkStreamOptions
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.reserved import RESERVED_FIELDS
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.sdk import SdkTransport, bypass_proxy_for_loopback

MB = 1_000_000
GB = 1_000_000_000
CODECS = ("none", "lz4_frame", "zstd")
TABLE = "main.bench.compression"
SOURCE = "orders/raw"
SMOKE = {"rows": 4_000, "batch_rows": 1_000, "repetitions": 1}
_COUNTS = struct.Struct("<QQ")  # bytes client -> server, server -> client
STATUSES = np.array(["created", "paid", "shipped", "delivered", "refunded"])
COUNTRIES = np.array(["DE", "FR", "US", "GB", "NL", "SE", "ES", "IT", "PL", "JP", "BR", "IN", "CA", "AU"])
WORDS = np.array(
    [
        *("the", "order", "was", "left", "at", "the", "door", "please", "ring", "twice", "fragile", "gift"),
        *("wrap", "call", "before", "delivery", "back", "entrance", "leave", "with", "neighbour", "no"),
        "plastic",
    ]
)


def orders(rows: int, batch_rows: int, seed: int = 7) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    words = WORDS[rng.integers(0, len(WORDS), size=(rows, 8))]
    notes = [" ".join(row[: 5 + i % 4]) for i, row in enumerate(words)]
    table = pa.table(
        {
            "order_id": ids,
            "customer": pa.array([f"cust-{c:05d}" for c in rng.integers(0, 50_000, rows)]),
            "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), rows)]),
            "amount": np.round(rng.gamma(2.0, 40.0, rows), 2),
            "created_at": pa.array(
                1_767_225_600_000_000 + ids * 3_000 + rng.integers(0, 1_000, rows),
                pa.timestamp("us", tz="UTC"),
            ),
            "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), rows)]),
            "note": pa.array(notes),
        }
    )
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=batch_rows)
    return batches


# -- the counting proxy (its own process) --------------------------------------------------------------


def serve_proxy(target_port: int, counts_path: str) -> None:
    """Forward 127.0.0.1:<free port> to ``target_port``, counting bytes into ``counts_path`` (mmap)."""
    with open(counts_path, "r+b") as backing:
        counts = mmap.mmap(backing.fileno(), _COUNTS.size)
    totals = [0, 0]

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: int) -> None:
        try:
            while data := await reader.read(1 << 20):
                writer.write(data)
                totals[way] += len(data)
                _COUNTS.pack_into(counts, 0, *totals)
                await writer.drain()
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pump(client_r, server_w, 0), pump(server_r, client_w, 1), return_exceptions=True)

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@contextlib.contextmanager
def counting_proxy(target_port: int, scratch: Path) -> Iterator[tuple[int, mmap.mmap]]:
    path = scratch / "counts.bin"
    path.write_bytes(bytes(_COUNTS.size))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-proxy", str(target_port), str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with open(path, "r+b") as backing:
            counts = mmap.mmap(backing.fileno(), _COUNTS.size)
        yield port, counts
    finally:
        # SIGKILL, not SIGTERM: the proxy keeps no state, and a SIGTERM ignored in a parent (SIG_IGN is
        # inherited through exec) left it alive holding the caller's stderr, so the smoke test hung 120 s.
        proc.kill()
        proc.wait()


# -- one codec's run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    codec: str
    seconds: float
    cpu_s: float
    wire_bytes: int


def sink_run(
    emu: Endpoint,
    endpoint: str,
    warehouse: str,
    batches: list[pa.RecordBatch],
    codec: str,
    n: int,
    counts: mmap.mmap,
) -> Phase:
    options = SdkStreamOptions(
        recovery_retries=1, recovery_backoff_ms=100, flush_timeout_ms=600_000, ipc_compression=codec
    )  # type: ignore[arg-type]
    transport = SdkTransport(
        endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(emu.client_secret),
        options=options,
    )
    store = CoverageStore(Path(warehouse) / "_zerobus" / f"coverage-{codec}-{n}.sqlite", TABLE)
    pool = StreamPool(transport, TABLE, PoolConfig(), recorder=store, metrics=SinkMetrics())
    sink = ZerobusSink(pool, source=SOURCE, gate=CatalogGate(LocalCatalog(warehouse)))
    sent_before = _COUNTS.unpack_from(counts)[0]
    cpu, start = time.process_time(), time.perf_counter()
    for batch in batches:
        sink.push(batch)
    sink.flush()
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    wire = _COUNTS.unpack_from(counts)[0] - sent_before
    pool.close()
    store.close()
    return Phase(codec, seconds, cpu_s, wire)


@dataclass(frozen=True)
class CodecFigures:
    codec: str
    wire_bytes: int  # median over the runs
    wire_per_payload_byte: float
    wire_per_stamped_byte: float
    client_cpu_s_per_payload_gb: Spread
    payload_mb_per_s: Spread  # wall clock; the emulator shares the cores


@dataclass(frozen=True)
class Result:
    rows: int
    batch_rows: int
    repetitions: int
    cpus: int
    payload_bytes: int
    stamped_bytes: int
    codecs: list[CodecFigures]


def run(rows: int, batch_rows: int, repetitions: int, scratch: Path, log: IO[bytes]) -> Result:
    warehouse = str(scratch / "warehouse")
    batches = orders(rows, batch_rows)
    payload = sum(b.nbytes for b in batches)
    gate = CatalogGate(LocalCatalog(warehouse))
    gate.ensure(TABLE, pa.schema([*batches[0].schema, *RESERVED_FIELDS]))
    phases: dict[str, list[Phase]] = {codec: [] for codec in CODECS}
    with emulator_process(warehouse, log) as emu:
        port = int(emu.endpoint.rsplit(":", 1)[1])
        with counting_proxy(port, scratch) as (proxy_port, counts):
            endpoint = f"http://127.0.0.1:{proxy_port}"
            bypass_proxy_for_loopback(endpoint)
            sink_run(emu, endpoint, warehouse, batches[:1], "none", -1, counts)  # warm-up, untimed
            for n in range(repetitions):
                for codec in CODECS:  # interleaved: drift in the machine hits every codec alike
                    phases[codec].append(sink_run(emu, endpoint, warehouse, batches, codec, n, counts))
    stamped = _stamped_bytes(batches)
    figures = []
    for codec in CODECS:
        runs = phases[codec]
        wire = int(statistics.median(p.wire_bytes for p in runs))
        figures.append(
            CodecFigures(
                codec,
                wire,
                round(wire / payload, 3),
                round(wire / stamped, 3),
                Spread.of([p.cpu_s / (payload / GB) for p in runs]),
                Spread.of([payload / MB / p.seconds for p in runs]),
            )
        )
    return Result(rows, batch_rows, repetitions, os.cpu_count() or 0, payload, stamped, figures)


def _stamped_bytes(batches: list[pa.RecordBatch]) -> int:
    import datetime as dt

    from zerobus_orchestration.ranges import OffsetRange
    from zerobus_orchestration.sink.stamping import Stamper

    stamper, at, total = Stamper(SOURCE), 0, 0
    now = dt.datetime.now(dt.UTC)
    for batch in batches:
        total += stamper.stamp(batch, OffsetRange(at, at + batch.num_rows), now, None).nbytes
        at += batch.num_rows
    return total


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--serve-proxy"]:
        serve_proxy(int(sys.argv[2]), sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per run (default 1,000,000)")
    parser.add_argument("--batch-rows", type=int, default=20_000, help="rows per batch (default 20,000)")
    parser.add_argument(
        "--repetitions", type=int, default=3, help="runs of each codec, interleaved (default 3)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--smoke", action="store_true", help=f"tiny run (CI), checks the shape ({SMOKE})")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.batch_rows, args.repetitions = (
            SMOKE["rows"],
            SMOKE["batch_rows"],
            SMOKE["repetitions"],
        )
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RUST_LOG", "error")
    with tempfile.TemporaryDirectory(prefix="zerobus-compression-") as tmp:
        log_path = Path(tmp) / "emulator.log"
        try:
            with log_path.open("wb") as log:
                result = run(args.rows, args.batch_rows, args.repetitions, Path(tmp), log)
        except BaseException:
            sys.stderr.write(log_path.read_text(errors="replace") if log_path.exists() else "")
            raise
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return 0
    print(
        f"{result.rows:,} rows, {result.payload_bytes / MB:.1f} MB payload "
        f"({result.stamped_bytes / MB:.1f} MB stamped), x{result.repetitions} interleaved"
    )
    for fig in result.codecs:
        print(
            f"{fig.codec:<10} wire/payload {fig.wire_per_payload_byte:.3f}, client CPU "
            f"{fig.client_cpu_s_per_payload_gb.median:.2f} s per payload GB, "
            f"{fig.payload_mb_per_s.median:.1f} payload MB/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
