"""Coverage against the table: it may lag what is in Delta, never lead it; a killed write resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from tests.support.killed_writer import SOURCE as WRITER_SOURCE
from tests.support.killed_writer import TABLE, orders
from tests.support.runtime_helpers import fast_config, resume_config
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import OFFSET, SOURCE
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri


def _offsets_in_delta(runtime: ZerobusRuntime, table: str) -> pa.Array:
    rows = DeltaTable(table_uri(runtime.config.warehouse, table)).to_pyarrow_table(columns=[OFFSET])
    return pc.unique(rows.column(OFFSET))


def _missing(spans: tuple[OffsetRange, ...], present: pa.Array) -> list[OffsetRange]:
    found = set(present.to_pylist())
    return [span for span in spans if any(p not in found for p in range(span.start, span.end))]


def test_coverage_never_leads_delta_under_concurrent_writes(tmp_path: Path) -> None:
    """Sample coverage while two writers stream and acks are slow; every covered row must be durable.

    Each sample snapshots coverage first, then has the emulator commit everything it acknowledged,
    then reads Delta. Coverage recorded on submit (instead of after the durable ack) would name rows
    still waiting for their ack, and the check would catch them missing.
    """
    runtime = acquire_runtime(fast_config(tmp_path / "wh"))
    try:
        assert runtime.emulator is not None
        runtime.reconcile(TABLE, pa.schema([("order_id", pa.int64()), ("amount", pa.float64())]))
        for _ in range(2):  # both writers' streams ack slowly: a wide submitted-but-unacked window
            runtime.emulator.faults.add(FaultSpec(kind="delay_acks", table=TABLE, delay_s=0.05, streams=4))
        failures: list[BaseException] = []

        def write(source: str) -> None:
            try:
                runtime.write(TABLE, orders(30_000, 500), source=source)
            except BaseException as exc:  # surfaced by the assertion below
                failures.append(exc)

        writers = [threading.Thread(target=write, args=(f"w{i}",)) for i in range(2)]
        for w in writers:
            w.start()
        samples = 0
        while any(w.is_alive() for w in writers) or samples < 3:
            covered = runtime.coverage_map(TABLE)  # snapshot before the table is read
            runtime.delta_version(TABLE)  # the emulator commits everything it acknowledged
            rows = DeltaTable(table_uri(runtime.config.warehouse, TABLE)).to_pyarrow_table(
                columns=[SOURCE, OFFSET]
            )
            for key, spans in covered.items():
                present = rows.filter(pc.equal(rows[SOURCE], key.source)).column(OFFSET).combine_chunks()
                assert not _missing(spans, present), f"coverage leads Delta for {key}"
            samples += 1
            time.sleep(0.05)
        for w in writers:
            w.join()
        assert not failures, failures
        assert samples >= 3
        # The slow acks happened: the window this test samples existed.
        delayed = runtime.emulator.faults.actions_of(FaultKind.DELAY_ACKS)  # type: ignore[attr-defined]
        assert delayed and {a.table for a in delayed} == {TABLE}, "the delay fault never acted"
        report = runtime.verify(TABLE)
        assert report.verified and report.rows_scanned == 60_000
    finally:
        close_all_runtimes()


@pytest.mark.slow  # a crash test
def test_a_killed_writer_resumes_sending_only_the_gaps(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    rows, batch_rows = 400_000, 2_000
    writer = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[2] / "support" / "killed_writer.py"),
            str(warehouse),
            str(rows),
            str(batch_rows),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert writer.stdout is not None
        for line in writer.stdout:  # let it stream a while, then kill it mid-write
            if line.startswith("batch 40"):
                break
        else:
            raise AssertionError(f"writer ended early with {writer.wait()}")
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()

    runtime = acquire_runtime(resume_config(warehouse))  # a new emulator replays the dead one's WAL
    try:
        covered = runtime.covered(TABLE, source=WRITER_SOURCE)
        covered_rows = sum(len(span) for span in covered)
        assert 0 < covered_rows < rows, "the kill must land mid-write"

        retry = runtime.write(TABLE, orders(rows, batch_rows), source=WRITER_SOURCE)
        # Nothing coverage holds is sent again, nor what the table shows beyond it (acks the kill lost).
        assert retry.rows_skipped >= covered_rows
        assert retry.rows_written + retry.rows_skipped == rows

        present = _offsets_in_delta(runtime, TABLE)
        assert len(present) == rows and pc.min(present).as_py() == 0 and pc.max(present).as_py() == rows - 1
        report = runtime.verify(TABLE, source=WRITER_SOURCE)
        assert report.verified
        # Batches durable but not yet recorded when the writer died are in the table once the new
        # emulator replayed the dead one's WAL, and the resume skipped them too: nothing is in it twice.
        assert report.duplicate_count == 0
        assert report.rows_scanned == rows
    finally:
        close_all_runtimes()
