"""Issue 14, item 5 for Dagster: a multiprocess run whose steps each have their own state dir writes through
the production configuration against one ``zerobus-orch serve``; one step is SIGKILLed mid-write, and its
re-execution on another host (other state dirs) skips what the killed step delivered; the read-back
sensor, evaluated in another process with its own empty state dir, verifies each materialisation from its
own record.

Every process (the run with its step children, the sensor) gets only the ``ZEROBUS_*`` variables of the
production path, its own ``ZEROBUS_STATE_DIR`` and an empty ``ZEROBUS_WAREHOUSE`` of its own; what they
share is the service (Zerobus, Unity Catalog, the lakehouse) and the Dagster instance (its event log is
the materialisations' record, as the daemon's and the run workers' shared instance database would be).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from tests.support.dagster_many_machines import (
    ASSETS,
    CHECK,
    EVENT_ROWS,
    EVENTS,
    PID_FILE_ENV,
    ROWS,
    STEPS,
)
from tests.support.local_cloud import Cloud, clean_env, production_env, serve
from zerobus_orchestration.tables import table_uri

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a crash test, ~50 s

REPO = Path(__file__).resolve().parents[3]  # the hosts run ``python -m tests.support.dagster_many_machines``
SECRET = "many-machines-dagster-secret"


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[Cloud]:
    """``zerobus-orch serve --json`` on a fresh folder warehouse, its client secret set the documented way."""
    # Throttled per stream, so that a step killed after its first commit is still mid-write.
    env = clean_env("DAGSTER_") | {
        "ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET,
        "ZEROBUS_EMULATOR__PER_STREAM_MB_S": "4",
    }
    with serve(str(tmp_path / "cloud"), env) as info:
        yield Cloud(info)


def _host(cloud: Cloud, root: Path, instance: Path) -> dict[str, str]:
    """A worker's environment: the production variables, its own state folder and empty warehouse."""
    return clean_env("DAGSTER_") | production_env(cloud.info, SECRET, root) | {"DAGSTER_HOME": str(instance)}


HOST_MODULE = [sys.executable, "-m", "tests.support.dagster_many_machines"]


def _host_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HOST_MODULE, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=240, check=False
    )


def _rows_in(cloud: Cloud, table: str) -> int:
    try:
        served = table_uri(str(cloud.info["warehouse"]), table)
        return DeltaTable(served).to_pyarrow_dataset().count_rows()
    except Exception:  # not created yet: ask again
        return 0


def _kill_events_step_mid_write(cloud: Cloud, run: subprocess.Popen[str], pid_file: Path) -> None:
    """SIGKILL the ``mh/events`` step process once some, not all, of its rows are durable in the table."""
    deadline = time.monotonic() + 180
    while not pid_file.exists() or _rows_in(cloud, "main.mh.events") == 0:
        assert run.poll() is None, (run.stderr.read() if run.stderr else "")[-3000:]
        assert time.monotonic() < deadline, "the events step delivered nothing within 180 s"
        time.sleep(0.05)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_killed_step_resumes_on_other_state_dirs_and_a_sensor_elsewhere_verifies(
    tmp_path: Path, local_cloud: Cloud
) -> None:
    instance = tmp_path / "dagster_home"
    instance.mkdir()
    (instance / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")

    # Run worker A: each step process writes with the state dir of its own step; mh/events is
    # SIGKILLed mid-write from outside, as an evicted pod would be.
    steps_a = tmp_path / "steps_a"
    pid_file = tmp_path / "events.pid"
    host_a = _host(local_cloud, tmp_path / "host_a", instance) | {PID_FILE_ENV: str(pid_file)}
    out_a = tmp_path / "run_a.json"
    args = ["run", str(instance), str(steps_a), str(out_a)]
    run = subprocess.Popen([*HOST_MODULE, *args], env=host_a, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        _kill_events_step_mid_write(local_cloud, run, pid_file)
        assert run.wait(timeout=120) == 0, (run.stderr.read() if run.stderr else "")[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    run_a = json.loads(out_a.read_text())
    assert set(run_a["pids"]) == set(STEPS)
    assert len(set(run_a["pids"].values())) == len(STEPS), "each step runs in its own process"
    # The fault acted: only the killed step failed, with part of its rows durable and part not.
    assert not run_a["success"] and {f.split(":")[0] for f in run_a["failures"]} == {"mh__events"}
    assert set(run_a["written"]) == {"mh/meters", "mh/readings"}
    assert 0 < _rows_in(local_cloud, "main.mh.events") < EVENT_ROWS
    for step in STEPS:  # each step kept its write cache in its own state dir, and only there
        assert (steps_a / step / "coverage.sqlite").is_file(), step
    assert not (tmp_path / "host_a" / "state" / "coverage.sqlite").exists()
    assert list((tmp_path / "host_a" / "warehouse").iterdir()) == []  # rows went to the service

    # Run worker B, another pod: the re-execution from failure, with state dirs of its own (empty).
    steps_b = tmp_path / "steps_b"
    out_b = tmp_path / "run_b.json"
    host_b = _host(local_cloud, tmp_path / "host_b", instance)
    ran = _host_process(host_b, "run", str(instance), str(steps_b), str(out_b), run_a["run_id"])
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run_b = json.loads(out_b.read_text())
    assert run_b["success"], run_b["failures"]
    assert set(run_b["pids"]) == {"mh__events"}
    resumed = run_b["written"]["mh/events"]
    # B skipped what A delivered, though nothing of A's is on B's disk: it learnt it from the table.
    assert resumed["zerobus/rows_skipped"] > 0 and resumed["zerobus/rows_written"] > 0, resumed
    assert resumed["zerobus/rows_written"] + resumed["zerobus/rows_skipped"] == EVENT_ROWS, resumed
    assert resumed["zerobus/partition"] == f"@{run_a['run_id']}"  # the root run's coverage, resumed
    assert (steps_b / "mh__events" / "coverage.sqlite").is_file()

    # The daemon's pod: its own empty state dir and warehouse, nothing of the run workers' but the
    # instance's event log; it keeps no coverage of its own either.
    sensor_out = tmp_path / "sensor.json"
    ticked = _host_process(
        _host(local_cloud, tmp_path / "host_c", instance), "sensor", str(instance), str(sensor_out)
    )
    assert ticked.returncode == 0, ticked.stdout[-3000:] + ticked.stderr[-3000:]
    ticks: list[dict[str, Any]] = json.loads(sensor_out.read_text())["ticks"]
    emitted = [e for t in ticks for e in t["events"]]
    assert all(t["runs"] == 0 for t in ticks), ticks  # no recovery run was needed

    expected = {"mh/meters": ROWS, "mh/readings": ROWS, "mh/events": EVENT_ROWS}
    for key in ASSETS:
        name = key.to_user_string()
        observations = [e for e in emitted if e["kind"] == "observation" and e["asset"] == name]
        assert len(observations) == 1, ticks
        seen = observations[0]
        assert seen["readback/verified"] is True and seen["readback/missing_rows"] == 0, seen
        # Verified from the materialisation's own record (source, partition, ranges), not from files.
        assert seen["readback/expected_from"] == "write_record", seen
        assert seen["readback/expected_rows"] == expected[name], seen
        assert seen["zerobus/table"] == f"main.{key.path[0]}.{key.path[1]}", seen
        checks = [e for e in emitted if e["kind"] == "check" and e["asset"] == name]
        assert [(c["check"], c["passed"]) for c in checks] == [(CHECK, True)], ticks
    judged = " ".join(t["skip"] or "" for t in ticks)
    for name, rows in expected.items():
        assert f"verified {rows} delivered row(s) of main.{name.replace('/', '.')}" in judged, ticks
    duplicates = {e["asset"]: e["readback/duplicate_count"] for e in emitted if e["kind"] == "observation"}
    assert duplicates["mh/meters"] == duplicates["mh/readings"] == 0, duplicates
    assert duplicates[EVENTS.to_user_string()] <= EVENT_ROWS // 100, duplicates  # issue 14's bound
    assert not (tmp_path / "host_c" / "state" / "coverage.sqlite").exists()
    assert list((tmp_path / "host_c" / "warehouse").iterdir()) == []
