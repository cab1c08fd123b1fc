"""The shared emulator's life: stale advertisements, idle shutdown, SIGTERM, a start that fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon_helpers import (
    TABLE,
    daemon_config,
    delta_rows,
    rows,
    starts_logged,
    state_of,
    wait_until_gone,
)
from zerobus_orchestration.emulator.advert import (
    ADVERT_FILE,
    LOG_FILE,
    Advertisement,
    pid_alive,
    read_advertisement,
    write_advertisement,
)
from zerobus_orchestration.emulator.errors import EmulatorDaemonError
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _push_unmaterialised(rt: ZerobusRuntime, n: int) -> None:
    """Acknowledged (in the daemon's WAL) but not committed: ``flush`` is durability, not Delta."""
    rt.reconcile(TABLE, rows(1).schema)
    sink = rt.sink(TABLE, source="pushed")
    sink.push(rows(n))
    sink.flush()


def test_stale_advertisement_is_replaced(warehouse: Path) -> None:
    state = state_of(warehouse)
    state.mkdir(parents=True)
    dead = _dead_pid()
    stale = Advertisement(
        pid=dead,
        endpoint="http://127.0.0.1:9",
        workspace_url="http://127.0.0.1:9",
        iceberg_rest_uri="http://127.0.0.1:9/api/2.1/unity-catalog/iceberg-rest",
        warehouse=str(warehouse),
        started_at=0.0,
        idle_shutdown_s=30.0,
        settings="crashed",
    )
    write_advertisement(state / ADVERT_FILE, stale)

    rt = acquire_runtime(daemon_config(warehouse))
    advert = read_advertisement(state / ADVERT_FILE)
    assert advert is not None and advert.pid != dead and pid_alive(advert.pid)
    assert rt.emulator is not None and rt.emulator.endpoint == advert.endpoint
    assert starts_logged(warehouse) == 1
    assert rt.write(TABLE, rows(50), source="after-crash").rows_written == 50
    assert delta_rows(warehouse).num_rows == 50


def test_idle_shutdown_commits_the_wal_and_unadvertises(warehouse: Path) -> None:
    # The materialiser never runs on its own (1 h), so only the idle shutdown can commit these rows.
    cfg = daemon_config(warehouse, idle_shutdown_s=1.0, time_to_table_s=3600)
    rt = acquire_runtime(cfg)
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert advert is not None
    _push_unmaterialised(rt, 400)
    assert delta_rows(warehouse).num_rows == 0

    rt.close()  # closes the streams and ends the lease: from here the daemon has no client
    assert wait_until_gone(advert.pid, 30), "the daemon did not idle out"
    assert not (state_of(warehouse) / ADVERT_FILE).exists()
    table = delta_rows(warehouse)
    assert sorted(table["id"].to_pylist()) == list(range(400))
    assert f"daemon {advert.pid} stopping: idle for 1 s" in (state_of(warehouse) / LOG_FILE).read_text()


def test_lease_keeps_an_idle_client_s_daemon_alive(warehouse: Path) -> None:
    rt = acquire_runtime(daemon_config(warehouse, idle_shutdown_s=0.6))
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert advert is not None
    assert not wait_until_gone(advert.pid, 2.5), "a daemon with a live client must not idle out"
    assert rt.write(TABLE, rows(10), source="late").rows_written == 10  # no stream was open until now


def test_sigterm_commits_the_wal_and_unadvertises(warehouse: Path) -> None:
    rt = acquire_runtime(daemon_config(warehouse, time_to_table_s=3600))
    advert = read_advertisement(state_of(warehouse) / ADVERT_FILE)
    assert advert is not None
    _push_unmaterialised(rt, 300)
    os.kill(advert.pid, signal.SIGTERM)
    assert wait_until_gone(advert.pid, 30)
    assert not (state_of(warehouse) / ADVERT_FILE).exists()
    assert sorted(delta_rows(warehouse)["id"].to_pylist()) == list(range(300))


def test_a_daemon_that_cannot_start_names_its_log(warehouse: Path) -> None:
    # An in-process emulator holds the warehouse's WAL lock, so the daemon's emulator cannot start.
    in_process = daemon_config(warehouse).model_copy(
        update={"emulator": daemon_config(warehouse).emulator.model_copy(update={"mode": "in_process"})}
    )
    acquire_runtime(in_process)
    log = state_of(warehouse) / LOG_FILE
    with pytest.raises(EmulatorDaemonError) as caught:
        acquire_runtime(daemon_config(warehouse))
    message = str(caught.value)
    assert str(log) in message
    assert "exited with code 1" in message
    assert "another emulator is already running" in message  # the log's tail says why
    assert not (state_of(warehouse) / ADVERT_FILE).exists()
