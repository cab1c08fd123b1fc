"""``zerobus-orch readback`` right after an orchestrated run reuses the warehouse's shared emulator.

Dagster and Airflow run embedded in ``emulator.mode = "daemon"`` (one emulator process per warehouse,
idling out minutes later); the CLI has the same default, so it attaches to that daemon instead of
starting an emulator of its own, which only one process may do on a warehouse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_helpers import TABLE, daemon_config, kill_daemons, rows, state_of
from zerobus_orchestration.emulator.advert import ADVERT_FILE, read_advertisement
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes

SCRIPT = Path(sys.executable).with_name("zerobus-orch")


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "wh"
    try:
        yield path
    finally:
        close_all_runtimes()
        kill_daemons(path)


def test_readback_after_a_daemon_mode_run_attaches_to_the_running_daemon(warehouse: Path) -> None:
    runtime = acquire_runtime(daemon_config(warehouse, idle_shutdown_s=120))
    written = runtime.write(TABLE, rows(50), source="run-1")
    assert written.rows_written == 50
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert advert is not None  # the orchestrator's daemon serves the warehouse while the CLI runs
    close_all_runtimes()  # the run ended; its daemon stays up until it idles out, as after a real run

    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    command = ["readback", "--table", TABLE, "--source", "run-1", "--warehouse", str(warehouse)]
    done = subprocess.run(
        [str(SCRIPT), *command, "--wait", "30", "--force", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )

    assert "already running" not in done.stderr
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["verified"] is True
    assert summary["rows_scanned"] == 50
    after = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert after is not None and after.pid == advert.pid  # the same daemon served it, none was started
