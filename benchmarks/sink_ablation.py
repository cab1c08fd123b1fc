"""Where the sink's own client CPU goes: emulator_throughput.py's bare loop against the sink with pieces off.

The same batches, emulator (its own process) and sink as ``emulator_throughput.py``, and the same
like-for-like bare loop (handed the sink's own stamped, wire-converted batches before its clock starts).
Each round runs every variant once, in order, so drift in a shared machine hits them alike; the figure
is this process's CPU time (``time.process_time``: every thread, the SDK's native ones included) per
1,000,000 rows, median (min-max) over the rounds:

* ``bare``: the bare official-SDK loop (``emulator_throughput.arrow_loop``);
* ``sink``: the sink as the benchmark runs it, every integrity feature on;
* ``no-digests``: coverage recorded without content digests (nothing hashed);
* ``no-coverage``: no coverage store at all (no digest, no SQLite);
* ``one-stream``: every feature on, the pool at one stream (``pool.min_streams = 1``; the default is 2,
  and the bare loop opens one).

A variant's difference from ``sink`` is what that piece costs. This is a diagnosis, not a target: the
targets are ``emulator_throughput.py``'s ratios.

    python benchmarks/sink_ablation.py                      # events, 1,000,000 rows, 7 rounds
    python benchmarks/sink_ablation.py --schema decimals --json
    python benchmarks/sink_ablation.py --smoke --json       # tiny run (CI): checks it works, not figures
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import emulator_throughput as et  # the sibling script (run from benchmarks/)
import pyarrow as pa
from pydantic import SecretStr

from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, CoverageRecorder, OffsetRange
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.sdk import SdkTransport, bypass_proxy_for_loopback

VARIANTS = ("bare", "sink", "no-digests", "no-coverage", "one-stream")


class RangesOnly:
    """A coverage recorder that keeps the ranges and no digests (the ack lane then hashes nothing)."""

    def __init__(self, store: CoverageStore) -> None:
        self._store = store

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        self._store.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        self._store.record_many(items)


def sink_variant(emu: et.Endpoint, warehouse: str, batches: list[pa.RecordBatch], variant: str) -> None:
    """``emulator_throughput.sink_run`` with one piece changed as ``variant`` says."""
    transport = SdkTransport(
        emu.endpoint,
        emu.workspace_url,
        client_id=emu.client_id,
        client_secret=SecretStr(emu.client_secret),
        options=et.sdk_options(),
    )
    store = CoverageStore(Path(warehouse) / "_zerobus" / f"coverage-{uuid.uuid4().hex}.sqlite", et.SINK_TABLE)
    recorder: CoverageRecorder | None = {"no-digests": RangesOnly(store), "no-coverage": None}.get(
        variant, store
    )
    config = PoolConfig(min_streams=1) if variant == "one-stream" else PoolConfig()
    pool = StreamPool(transport, et.SINK_TABLE, config, recorder=recorder, metrics=SinkMetrics())
    sink = ZerobusSink(pool, source=et.SOURCE, gate=CatalogGate(LocalCatalog(warehouse)))
    for batch in batches:
        sink.push(batch)
    sink.flush()
    pool.close()
    store.close()


def measure(schema: str, rows: int, rounds: int, variants: list[str]) -> dict[str, list[float]]:
    """Client CPU ms per 1,000,000 rows of each variant, one figure per round."""
    batches = et.generate(rows, 20_000, schema)
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="zerobus-ablation-") as scratch:
        warehouse = str(Path(scratch) / "warehouse")
        declared = et.SCHEMAS[schema]
        et.create_payload_table(warehouse, et.WARMUP_TABLE, declared)
        et.prepare_sink_table(warehouse, declared)
        with (Path(scratch) / "emulator.log").open("wb") as log, et.emulator_process(warehouse, log) as emu:
            bypass_proxy_for_loopback(emu.endpoint)
            sent = et.as_the_sink_sends(warehouse, batches)
            et.arrow_loop(emu, et.WARMUP_TABLE, [et.wire_form(b) for b in batches[:1]])  # SDK warm-up
            for _ in range(rounds):
                for variant in variants:
                    run: Callable[[], None] = (
                        functools.partial(et.arrow_loop, emu, et.SINK_TABLE, sent)
                        if variant == "bare"
                        else functools.partial(sink_variant, emu, warehouse, batches, variant)
                    )
                    start = time.process_time()
                    run()
                    cpu[variant].append((time.process_time() - start) * 1000 * 1_000_000 / rows)
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schema", choices=sorted(et.SCHEMAS), default="events")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per run (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--smoke", action="store_true", help="tiny run (CI): checks it works, not figures")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.rounds = 2_000, 1
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or args.rows < 1 or args.rounds < 1:
        parser.error(f"unknown variant(s) {unknown} or --rows/--rounds below 1")
    os.environ.setdefault("RUST_LOG", "error")
    cpu = measure(args.schema, args.rows, args.rounds, variants)
    figures = {
        v: {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
        for v, xs in cpu.items()
    }
    if args.json:
        print(
            json.dumps(
                {
                    "schema": args.schema,
                    "rows": args.rows,
                    "rounds": args.rounds,
                    "cpu_ms_per_1m_rows": figures,
                }
            )
        )
        return 0
    print(
        f"client CPU ms per 1,000,000 rows ({args.schema}, 20,000-row batches, "
        f"{args.rounds} interleaved rounds)"
    )
    for v, f in figures.items():
        print(f"{v:<12}{f['median']:>8.0f}  ({f['min']:.0f}-{f['max']:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
