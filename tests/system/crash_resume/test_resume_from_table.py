"""A killed writer's re-run skips what the table shows delivered, not only what its coverage cache holds.

Real processes: a writer is SIGKILLed mid-write, a second one resumes. Either on the same state dir
(its cache lags the table: acknowledgements withheld by the emulator, so rows are durable but never
recorded), or on a state dir of its own (an empty cache: another host), against a shared emulator.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from tests.support.killed_writer import SOURCE, TABLE, orders
from tests.support.runtime_helpers import RESUME_CAPACITY
from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.intervals import covered_count
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.reserved import SOURCE as SOURCE_COLUMN
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.settings import TEST_SDK_OPTIONS

pytestmark = pytest.mark.slow  # crash tests: writers SIGKILLed mid-write

ROWS, BATCH_ROWS = 200_000, 2_000
FAST_CATCH_UP = {"catch_up_settle_s": 0.5, "catch_up_max_s": 15.0}
# One stream per writer: a withhold or throttle armed for "the writer's stream" then covers all it sends.
ONE_STREAM = {"min_streams": 1, "ack_channel_capacity": RESUME_CAPACITY}


@pytest.fixture(autouse=True)
def _no_runtime_left() -> Iterator[None]:
    yield
    close_all_runtimes()


def kill_writer_after(settings: dict[str, Any], batch: int, *extra: str, linger_s: float = 0.0) -> None:
    """Start ``truth_writer`` with ``settings`` and SIGKILL it ``linger_s`` after it took ``batch`` batches."""
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.truth_writer",
            json.dumps(settings),
            str(ROWS),
            str(BATCH_ROWS),
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert writer.stdout is not None
        for line in writer.stdout:
            if line.strip() == f"batch {batch}":
                break
        else:
            raise AssertionError(f"writer ended early with {writer.wait()}")
        time.sleep(linger_s)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()


def offsets_in_table(warehouse: Path) -> pa.Array:
    rows = DeltaTable(table_uri(str(warehouse), TABLE)).to_pyarrow_table(columns=[SOURCE_COLUMN, OFFSET])
    return rows.filter(pc.equal(rows[SOURCE_COLUMN], SOURCE)).column(OFFSET).combine_chunks()


def visible(runtime: ZerobusRuntime) -> int:
    """Positions of the writer's source the table shows now (every acknowledged row committed first)."""
    runtime.delta_version(TABLE)
    count: int = pc.count_distinct(offsets_in_table(Path(runtime.config.warehouse))).as_py()
    return count


def test_same_state_dir_skips_rows_durable_but_never_recorded(tmp_path: Path) -> None:
    """The writer's emulator withholds acks after batch 5: what follows is durable, never recorded."""
    settings: dict[str, Any] = {
        "warehouse": str(tmp_path / "wh"),
        "emulator": {"mode": "in_process", "time_to_table_s": 0.2, "iceberg_lag_s": 0.3},
        "sdk": TEST_SDK_OPTIONS.model_dump(),
        "pool": ONE_STREAM,
        "coverage": FAST_CATCH_UP,
    }
    # Acks stop after batch 5; kill well before the ack channel fills (a full channel blocks the writer
    # until the SDK's lack-of-ack timeout reconnects on a stream the fault no longer covers), once the
    # unacknowledged batches had a moment to reach the write-ahead log.
    kill_writer_after(settings, 8, "5", linger_s=0.3)

    runtime = acquire_runtime(ZerobusConfig.model_validate(settings))  # replays the dead writer's WAL
    cached = covered_count(runtime.covered(TABLE, source=SOURCE))
    durable = visible(runtime)
    assert cached <= 6 * BATCH_ROWS, "acknowledgements after batch 5 were withheld"
    assert durable > cached, "the withheld batches must be durable (the fault acted)"

    result = runtime.write(TABLE, orders(ROWS, BATCH_ROWS), source=SOURCE)
    assert result.rows_skipped == durable  # the table's word, not only the cache's
    assert result.rows_written + result.rows_skipped == ROWS
    present = offsets_in_table(tmp_path / "wh")
    assert pc.count_distinct(present).as_py() == ROWS
    assert len(present) == ROWS, "nothing durable was sent again"
    # Learnt from the table into the cache: rows visible in the table are durable.
    assert runtime.covered(TABLE, source=SOURCE)[0].end == ROWS


@pytest.fixture
def shared_emulator(tmp_path: Path) -> Iterator[Emulator]:
    """One Zerobus endpoint both writers reach over the network, committing on its own (like Zerobus)."""
    emulator = Emulator(
        str(tmp_path / "wh"), EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0), iceberg=False
    ).start()
    try:
        yield emulator
    finally:
        emulator.stop()


def remote_settings(emulator: Emulator, warehouse: Path, state_dir: Path) -> dict[str, Any]:
    return {
        "endpoint": emulator.endpoint,
        "workspace_url": emulator.workspace_url,
        "client_id": emulator.client_id,
        "client_secret": emulator.client_secret,
        "warehouse": str(warehouse),
        "state_dir": str(state_dir),
        "sdk": TEST_SDK_OPTIONS.model_dump(),
        "pool": ONE_STREAM,
        "coverage": FAST_CATCH_UP,
    }


def test_another_state_dir_resumes_from_the_table(tmp_path: Path, shared_emulator: Emulator) -> None:
    """Writer B has its own state dir (an empty cache, as on another host): the table tells it all."""
    warehouse = tmp_path / "wh"
    kill_writer_after(remote_settings(shared_emulator, warehouse, tmp_path / "host-a"), 40)

    runtime = acquire_runtime(
        ZerobusConfig.model_validate(remote_settings(shared_emulator, warehouse, tmp_path / "host-b"))
    )
    assert runtime.covered(TABLE, source=SOURCE) == ()  # nothing shared with host A but the lakehouse
    result = runtime.write(TABLE, orders(ROWS, BATCH_ROWS), source=SOURCE)

    shared_emulator.materialize_now(TABLE)
    present = offsets_in_table(warehouse)
    delivered_by_a = len(present) - result.rows_written
    assert result.rows_skipped > 0 and result.rows_skipped == delivered_by_a
    assert result.rows_written + result.rows_skipped == ROWS
    assert pc.count_distinct(present).as_py() == ROWS
    assert len(present) == ROWS, "nothing host A delivered was sent again"
    assert result.rows_resent_after_crash == 0  # A's rows were contiguous: no hole was re-sent


def test_rows_resent_after_crash_counts_every_duplicate_the_resume_sends(tmp_path: Path) -> None:
    """Rows the killed writer sent that neither the cache nor the resume's read of the table showed are
    sent again: the count must hold them (docs/guides/coverage-and-resume.md: it never under-counts), not
    only those below the highest position the cache or the table knew.

    The table is not consulted here (``consult_table = false``), the deterministic stand-in for a table
    read that missed rows still on their way (a shared emulator committing them after the catch-up).
    """
    settings: dict[str, Any] = {
        "warehouse": str(tmp_path / "wh"),
        "emulator": {"mode": "in_process", "time_to_table_s": 0.2, "iceberg_lag_s": 0.3},
        "sdk": TEST_SDK_OPTIONS.model_dump(),
        "pool": ONE_STREAM,
        "coverage": {**FAST_CATCH_UP, "consult_table": False},
    }
    kill_writer_after(settings, 8, "5", linger_s=0.3)  # acks withheld after batch 5: durable, unrecorded

    runtime = acquire_runtime(ZerobusConfig.model_validate(settings))  # replays the dead writer's WAL
    cached = covered_count(runtime.covered(TABLE, source=SOURCE))
    assert cached <= 6 * BATCH_ROWS, "acknowledgements after batch 5 were withheld"
    result = runtime.write(TABLE, orders(ROWS, BATCH_ROWS), source=SOURCE)
    assert (result.rows_skipped, result.rows_written) == (cached, ROWS - cached)

    runtime.delta_version(TABLE)  # every acknowledged row committed
    present = offsets_in_table(tmp_path / "wh")
    duplicates = len(present) - pc.count_distinct(present).as_py()
    assert pc.count_distinct(present).as_py() == ROWS
    assert duplicates > 0, "the killed writer's unrecorded rows must be durable (the fault acted)"
    assert result.rows_resent_after_crash >= duplicates
    # Bounded by how far the killed writer got, not every row the resume sent.
    assert result.rows_resent_after_crash < result.rows_written
    assert runtime.health().rows_resent_after_crash == result.rows_resent_after_crash


def longest_commit_gap_s(warehouse: Path) -> float:
    """The longest gap between the table's data commits so far (0 before two): its commit cadence."""
    try:
        history = DeltaTable(table_uri(str(warehouse), TABLE)).history()
    except Exception:  # not created yet
        return 0.0
    stamps = sorted(commit["timestamp"] for commit in history if commit["operation"] == "WRITE")
    return max((later - earlier for earlier, later in itertools.pairwise(stamps)), default=0) / 1000.0


@pytest.mark.slow  # ~17 s: two of the service's 2.5 s periods before the kill, then its settle period
def test_another_host_waits_out_a_service_that_commits_slowly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The service commits every 2.5 s, longer than the configured 0.5 s settle period (a loaded Zerobus).
    Host A is killed just after a commit, with rows acknowledged since; host B resumes at once. Read
    between two commits, the table would look settled and B would send those rows again; the service's
    commit rhythm within A's write (its data commits 2.5 s apart) makes B wait for the next commit."""
    warehouse = tmp_path / "wh"
    emulator = Emulator(
        str(warehouse),
        EmulatorConfig(time_to_table_s=2.5, iceberg_lag_s=0.0, per_stream_mb_s=1.0),
        iceberg=False,
    ).start()
    try:
        writer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.truth_writer",
                json.dumps(remote_settings(emulator, warehouse, tmp_path / "host-a")),
                str(ROWS),
                str(BATCH_ROWS),
            ],
            stdout=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[3],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            deadline = time.monotonic() + 60
            # Until A's commits span two of the service's periods (one period may commit in two steps,
            # milliseconds apart, when rows arrive while it commits): the cadence shows in the log.
            while longest_commit_gap_s(warehouse) < 2.0:
                assert writer.poll() is None and time.monotonic() < deadline, "writer A ended early"
                time.sleep(0.02)
            time.sleep(0.3)  # rows acknowledged after that commit, not in the table until the next
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
        finally:
            if writer.poll() is None:
                writer.kill()
        visible_at_kill = len(offsets_in_table(warehouse))

        runtime = acquire_runtime(
            ZerobusConfig.model_validate(remote_settings(emulator, warehouse, tmp_path / "host-b"))
        )
        with caplog.at_level(logging.INFO, logger="zerobus_orchestration.resume.truth"):
            result = runtime.write(TABLE, orders(ROWS, BATCH_ROWS), source=SOURCE)
        emulator.materialize_now(TABLE)
        present = offsets_in_table(warehouse)
    finally:
        close_all_runtimes()  # B's streams, before their service goes
        emulator.stop()

    assert pc.count_distinct(present).as_py() == ROWS
    assert len(present) == ROWS, f"{len(present) - ROWS} row(s) A delivered were sent again"
    # The fault acted: B skipped rows that reached the table only after the kill (it waited for them).
    assert result.rows_skipped > visible_at_kill
    settle = re.search(r"settle period ([0-9.]+) s", caplog.text)
    assert settle is not None and float(settle.group(1)) >= 3.7  # 1.5 x the 2.5 s rhythm, not 0.5 s


def data_commit_stamps(warehouse: Path) -> list[float]:
    """Unix times of the table's data commits, oldest first."""
    history = DeltaTable(table_uri(str(warehouse), TABLE)).history()
    return sorted(commit["timestamp"] / 1000.0 for commit in history if commit["operation"] == "WRITE")


@pytest.mark.slow  # ~20 s: an earlier run, 4 s idle, host A's whole write, 2 s, host B's resume
def test_another_host_resuming_after_an_idle_pause_waits_the_service_s_rhythm_not_the_pause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier run, 4 s idle, then host A writes the partition whole; host B (its own state dir) runs
    the same write 2 s after A's last commit. Before, the idle gap between the two runs' commits was
    taken for the service's commit cadence: B waited twice that (8 s) with the default settings, and
    the whole catch_up_max_s (30 s) when the pause was 15 s, warning that rows may be sent again.
    Now the settle period comes from the gaps between commits of one write: B waits no longer than
    twice the service's commit interval, and warns of nothing, since nothing was re-sent."""
    warehouse = tmp_path / "wh"
    emulator = Emulator(
        str(warehouse),
        EmulatorConfig(time_to_table_s=1.0, iceberg_lag_s=0.0, per_stream_mb_s=1.0),
        iceberg=False,
    ).start()

    def settings(host: str) -> dict[str, Any]:  # the default coverage settings: settle 2 s, at most 30 s
        return {**remote_settings(emulator, warehouse, tmp_path / host), "coverage": {}}

    def config(host: str) -> ZerobusConfig:
        return ZerobusConfig.model_validate(settings(host))

    try:
        earlier = ZerobusRuntime(config("host-0"))
        try:
            earlier.write(TABLE, orders(20_000, BATCH_ROWS), source="earlier-run")
        finally:
            earlier.close()
        time.sleep(4.0)  # idle: nobody writes the table
        a_started = time.time()
        writer = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.support.truth_writer",
                json.dumps(settings("host-a")),
                str(ROWS),
                str(BATCH_ROWS),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[3],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert "finished" in writer.stdout, writer.stderr[-2000:]
        emulator.materialize_now(TABLE)
        stamps = data_commit_stamps(warehouse)
        a_commits = [stamp for stamp in stamps if stamp >= a_started]
        assert len(a_commits) >= 3, "host A's write must span the service's commits to show its rhythm"
        pause = a_commits[0] - max(s for s in stamps if s < a_started)
        assert pause > 2.0  # the idle pause shows in the log, longer than any gap of one write
        interval = max(later - earlier for earlier, later in itertools.pairwise(a_commits))
        time.sleep(max(0.0, stamps[-1] + 2.0 - time.time()))  # B starts 2 s after A's last commit

        runtime = acquire_runtime(config("host-b"))
        with caplog.at_level(logging.INFO, logger="zerobus_orchestration.resume.truth"):
            result = runtime.write(TABLE, orders(ROWS, BATCH_ROWS), source=SOURCE)
        emulator.materialize_now(TABLE)
        present = offsets_in_table(warehouse)
    finally:
        close_all_runtimes()
        emulator.stop()

    assert (result.rows_written, result.rows_skipped) == (0, ROWS)  # A wrote it all: nothing to send
    assert len(present) == ROWS  # nothing A delivered was sent again
    caught = re.search(r"after a ([0-9.]+) s catch-up \(settle period ([0-9.]+) s", caplog.text)
    assert caught is not None, caplog.text
    waited, settle = float(caught.group(1)), float(caught.group(2))
    assert settle <= 2 * interval, (settle, interval)
    assert waited <= 2 * interval, (waited, interval)
    assert "may be sent again" not in caplog.text
