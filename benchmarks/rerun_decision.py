"""What a named run's decision costs on a quiet table now that it may wait for rows on their way.

``runtime/lifecycle.decide`` reads the partition's runs once the table has settled
(``runtime/settled_runs.py``): a table written within the settle period waits about that period; a quiet
one is read at once, after one more read of the Delta log's newest commit. This measures that quiet case,
a fresh partition of primary raw under ``auto`` (nothing to compare), against the reads the decision made
before the wait existed (the catalog's reader, the partition's runs at the latest version), side by side:

* ``before_ms``: ``table_truth.reader_for`` and ``RunHistory(...).live()``, what the decision read;
* ``quiet_ms``: ``lifecycle.decide``, the table's newest commit older than ``coverage.catch_up_max_s``
  (no commit rhythm read);
* ``quiet_recent_ms``: ``lifecycle.decide``, the newest commit older than the settle period but younger
  than ``catch_up_max_s`` (the commit rhythm is read to know the settle period).

The table: ``--commits`` appends of ``--rows`` rows each, runs of ``--partitions`` partitions of one
source in turn (``_twg_source`` tags as the sink writes them). Each kind runs interleaved
``--repetitions`` times after one warm-up; medians with min and max, and the median ratios to
``before_ms``.

    python benchmarks/rerun_decision.py --json
    python benchmarks/rerun_decision.py --smoke --json     # tiny run (CI): the shape only

Times are this process's wall clock on a machine other work shares: compare the kinds with each other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.coverage.run_order import RunHistory
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.reserved import OFFSET, SOURCE
from zerobus_orchestration.resume.rerun import Replay
from zerobus_orchestration.runtime import lifecycle
from zerobus_orchestration.write_modes import PartitionRun, WriteMode, rerun_policy

TABLE = "main.raw.events"
QUIET_S = 2.5  # the table's newest commit at least this old when timing starts


def build(location: str, *, commits: int, rows: int, partitions: int) -> None:
    for i in range(commits):
        tag = f"events[d{i % partitions}@r{i // partitions}]"
        data = pa.table(
            {SOURCE: [tag] * rows, OFFSET: pa.array(range(rows), pa.int64()), "v": pa.array(range(rows))}
        )
        write_deltalake(location, data, mode="append")


def spread(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    catalog = LocalCatalog(str(root / "wh"), registry_path=root / "registry.sqlite")
    location = catalog.location(TABLE)
    build(location, commits=args.commits, rows=args.rows, partitions=args.partitions)
    newest = DeltaTable(location).history(limit=1)[0]["timestamp"] / 1000.0
    time.sleep(max(0.0, newest + QUIET_S - time.time()))

    def config(settle_s: float, max_s: float) -> ZerobusConfig:
        return ZerobusConfig.model_validate(
            {
                "warehouse": str(root / "wh"),
                "coverage": {"catch_up_settle_s": settle_s, "catch_up_max_s": max_s},
            }
        )

    quiet, recent = config(1.0, 2.0), config(2.0, 30.0)  # newest commit past max_s; between settle and max
    store = CoverageStore(root / "coverage.sqlite", TABLE)
    run = PartitionRun.of("events", "dnew@r1")
    policy = rerun_policy(WriteMode.AUTO, Role.PRIMARY_RAW, table=TABLE, named=True)

    def before() -> None:
        reader = table_truth.reader_for(catalog, quiet, TABLE)
        assert reader is not None
        RunHistory(reader, source=run.source, key=run.key).live()

    def decide(settings: ZerobusConfig) -> Callable[[], None]:
        def once() -> None:
            replay = Replay(pa.table({"v": [1]}))
            decision = lifecycle.decide(
                catalog, settings, store, TABLE, run, policy, replay, resume=True, offset_column=None
            )
            assert decision.delivered_by is None and decision.run == run
            replay.close()

        return once

    kinds = {"before_ms": before, "quiet_ms": decide(quiet), "quiet_recent_ms": decide(recent)}
    samples: dict[str, list[float]] = {name: [] for name in kinds}
    for repetition in range(args.repetitions + 1):
        for name, call in kinds.items():
            started = time.perf_counter()
            call()
            if repetition:  # the first round warms the caches up
                samples[name].append((time.perf_counter() - started) * 1000.0)
    store.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "commits": args.commits,
        "rows_per_commit": args.rows,
        "repetitions": args.repetitions,
        **{name: spread(values) for name, values in samples.items()},
        "ratio_quiet": medians["quiet_ms"] / medians["before_ms"],
        "ratio_quiet_recent": medians["quiet_recent_ms"] / medians["before_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="a tiny run: the shape only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.commits, args.rows, args.partitions, args.repetitions = 4, 10, 2, 1
    with tempfile.TemporaryDirectory() as root:
        result = measure(args, Path(root))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name in ("before_ms", "quiet_ms", "quiet_recent_ms"):
            figures = result[name]
            print(f"{name:>16}: {figures['median']:8.1f} ({figures['min']:.1f}-{figures['max']:.1f})")
        print(
            f"ratios to before: quiet {result['ratio_quiet']:.2f}, recent {result['ratio_quiet_recent']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
