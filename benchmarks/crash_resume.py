"""How many rows a crashing writer loses or duplicates when every re-run resumes.

A writer process streams ``--rows`` deterministic rows into one (source, partition) with
``ZerobusRuntime.write(..., resume=True)``, the default, as a new user would (default pool settings).
It is SIGKILLed ``--kills`` times at random points (positions drawn uniformly over the input, in
increasing order: a writer is killed once its input passes the next one), re-started after each kill,
then run once more to completion. The Delta table is then read directly: ``missing`` is positions of
the input absent from it, ``duplicates`` is rows beyond one per position.

Both emulator modes (``--mode``): ``in_process`` (each writer runs its own emulator, which dies with it;
the next one replays the write-ahead log) and ``daemon`` (one shared emulator process outlives the
writers). Targets: 0 missing, duplicates at most 1 % of rows.

    python benchmarks/crash_resume.py --json                 # 2,000,000 rows, 10 kills, both modes
    python benchmarks/crash_resume.py --mode daemon --json
    python benchmarks/crash_resume.py --smoke --json         # tiny, for CI
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from zerobus_orchestration.config import EmulatorConfig, EmulatorMode, ZerobusConfig
from zerobus_orchestration.runtime.facade import ZerobusRuntime

TABLE = "main.bench.crash_resume"
SOURCE = "crash"
MODES: tuple[EmulatorMode, ...] = ("in_process", "daemon")
MAX_DUPLICATE_FRACTION = 0.01
WRITER_TIMEOUT_S = 600.0


def config(warehouse: str, mode: EmulatorMode) -> ZerobusConfig:
    # The daemon exits soon after the last writer: nothing is left running once the figures are in.
    return ZerobusConfig(warehouse=warehouse, emulator=EmulatorConfig(mode=mode, idle_shutdown_s=10.0))


def batches(rows: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The same rows on every run; reports each batch's end as it is taken (the parent kills on it)."""
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        ids = pa.array(range(start, start + n), pa.int64())
        text = pc.utf8_lpad(pc.cast(ids, pa.string()), width=40, padding="x")
        yield pa.record_batch({"id": ids, "amount": pc.divide(pc.cast(ids, pa.float64()), 7.0), "text": text})
        print(f"at {start + n}", flush=True)


def writer_main(warehouse: str, mode: EmulatorMode, rows: int, batch_rows: int) -> None:
    """The writer process: one resumed write, then its result as one JSON line."""
    runtime = ZerobusRuntime(config(warehouse, mode))
    try:
        result = runtime.write(TABLE, batches(rows, batch_rows), source=SOURCE)
        print(
            "result "
            + json.dumps(
                {
                    "rows_written": result.rows_written,
                    "rows_skipped": result.rows_skipped,
                    # Absent before the resume consulted the table: reported as 0 then.
                    "rows_resent_after_crash": getattr(result, "rows_resent_after_crash", 0),
                }
            ),
            flush=True,
        )
    finally:
        runtime.close()


def run_writer(warehouse: str, mode: EmulatorMode, rows: int, batch_rows: int, kill_at: int | None) -> Any:
    """One writer process; SIGKILLed once its input passes position ``kill_at``. Its result, or None."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--writer", warehouse, mode, str(rows), str(batch_rows)],
        stdout=subprocess.PIPE,
        text=True,
    )
    result: Any = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if kill_at is not None and line.startswith("at ") and int(line.split()[1]) >= kill_at:
                process.send_signal(signal.SIGKILL)
                break
            if line.startswith("result "):
                result = json.loads(line.removeprefix("result "))
        code = process.wait(timeout=WRITER_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if kill_at is None and code != 0:
        raise SystemExit(f"the final writer exited {code}")
    return result


def settled_offsets(warehouse: str, mode: EmulatorMode) -> pa.Array:
    """Every ``_twg_offset`` of the source once the emulator committed all it acknowledged."""
    from deltalake import DeltaTable

    runtime = ZerobusRuntime(config(warehouse, mode))
    try:
        # A dead writer's last requests may still be in the daemon: wait until commits stop.
        version, stable_since = runtime.delta_version(TABLE), time.monotonic()
        while time.monotonic() - stable_since < 2.0:
            time.sleep(0.25)
            latest = runtime.delta_version(TABLE)
            if latest != version:
                version, stable_since = latest, time.monotonic()
        state = runtime.catalog.describe(TABLE)
        assert state is not None and state.location is not None
        rows = DeltaTable(state.location).to_pyarrow_table(columns=["_twg_source", "_twg_offset"])
    finally:
        runtime.close()
    return rows.filter(pc.equal(rows["_twg_source"], SOURCE)).column("_twg_offset").combine_chunks()


def ranges(positions: list[int]) -> list[list[int]]:
    """Sorted distinct positions as half-open ``[start, end)`` runs."""
    runs: list[list[int]] = []
    for position in sorted(positions):
        if runs and position == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([position, position + 1])
    return runs


def run_mode(mode: EmulatorMode, rows: int, kills: int, batch_rows: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    kill_points = sorted(rng.randrange(batch_rows, rows) for _ in range(kills))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zerobus-crash-", ignore_cleanup_errors=True) as warehouse:
        killed = 0
        for point in kill_points:
            if run_writer(warehouse, mode, rows, batch_rows, point) is None:
                killed += 1
        final = run_writer(warehouse, mode, rows, batch_rows, None)
        offsets = settled_offsets(warehouse, mode)
    distinct = pc.count_distinct(offsets).as_py()
    in_range = pc.sum(pc.and_(pc.greater_equal(offsets, 0), pc.less(offsets, rows))).as_py() or 0
    present = pc.count_distinct(offsets.filter(pc.and_(pc.greater_equal(offsets, 0), pc.less(offsets, rows))))
    duplicates = len(offsets) - distinct
    counts = pc.value_counts(offsets)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    return {
        "mode": mode,
        "rows": rows,
        "kills": killed,
        "missing": rows - present.as_py(),
        "duplicates": duplicates,
        "duplicate_fraction": round(duplicates / rows, 6),
        "unexpected_positions": len(offsets) - in_range,
        # Where the duplicates are (first few ranges of repeated positions): which kill left them.
        "duplicate_ranges": ranges(repeated.to_pylist())[:5],
        "final_rows_written": final["rows_written"],
        "final_rows_skipped": final["rows_skipped"],
        "final_rows_resent_after_crash": final["rows_resent_after_crash"],
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--writer"]:
        warehouse, mode, rows, batch_rows = argv[1:5]
        writer_main(warehouse, _mode(mode), int(rows), int(batch_rows))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows the writer streams (default 2M)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs before the final run (default 10)")
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per input batch")
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both", help="emulator mode(s)")
    parser.add_argument("--seed", type=int, default=14, help="seed of the kill points")
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI: 10,000 rows, 1 kill")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.smoke:
        args.rows, args.kills, args.batch_rows = 10_000, 1, 1_000
    modes = MODES if args.mode == "both" else (_mode(args.mode),)
    runs = [run_mode(mode, args.rows, args.kills, args.batch_rows, args.seed) for mode in modes]
    summary = {
        "rows": args.rows,
        "kills": args.kills,
        "batch_rows": args.batch_rows,
        "missing": sum(run["missing"] for run in runs),
        "duplicates": max(run["duplicates"] for run in runs),
        "duplicate_fraction": max(run["duplicate_fraction"] for run in runs),
        "meets_target": all(
            run["missing"] == 0 and run["duplicate_fraction"] <= MAX_DUPLICATE_FRACTION for run in runs
        ),
        "runs": runs,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        for run in runs:
            print(", ".join(f"{name}={value}" for name, value in run.items()))
        print(f"meets target: {summary['meets_target']}")
    return 0


def _mode(text: str) -> EmulatorMode:
    if text not in MODES:
        raise SystemExit(f"unknown emulator mode {text!r}; one of {', '.join(MODES)}")
    return "daemon" if text == "daemon" else "in_process"


if __name__ == "__main__":
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    sys.exit(main())
