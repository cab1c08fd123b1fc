"""A shared emulator that dies under its writers is replaced, and their writes resume on its successor.

Before the fix a writer kept retrying the dead daemon's endpoint until the pool gave up
(``PoolUnavailableError`` after ``healthy_member_wait_s``); now the handle sees the pid gone, starts a
successor (on the same ports when it can) and the pool's rebuilt streams re-send what was not
acknowledged (at-least-once: what the dead daemon acknowledged is in its WAL, replayed on start).
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections import Counter
from pathlib import Path

import pytest

from tests.support.daemon_helpers import TABLE, daemon_config, delta_rows, rows, state_of, wait_until_gone
from zerobus_orchestration.config import PoolConfig, ZerobusConfig
from zerobus_orchestration.emulator.advert import ADVERT_FILE, LOG_FILE, http_json, pid_alive
from zerobus_orchestration.emulator.handle import RemoteEmulator
from zerobus_orchestration.emulator.private import SECRET_FILE
from zerobus_orchestration.runtime.facade import ZerobusRuntime

pytestmark = pytest.mark.slow  # crash tests: daemons SIGKILLed


def _config(warehouse: Path, *, faults: bool = False) -> ZerobusConfig:
    base = daemon_config(warehouse)
    emulator = base.emulator.model_copy(update={"faults_enabled": faults})
    # Bounded: without a successor the write fails here instead of hanging (what it did before).
    pool = PoolConfig(healthy_member_wait_s=20.0)
    return base.model_copy(update={"emulator": emulator, "pool": pool})


def _handle(rt: ZerobusRuntime) -> RemoteEmulator:
    assert isinstance(rt.emulator, RemoteEmulator)
    return rt.emulator


def test_a_killed_daemon_is_replaced_and_the_next_write_lands(warehouse: Path) -> None:
    rt = ZerobusRuntime(_config(warehouse))
    try:
        handle = _handle(rt)
        assert rt.write(TABLE, rows(100), source="before").rows_written == 100
        dead = handle.pid
        os.kill(dead, signal.SIGKILL)
        assert wait_until_gone(dead, 10)

        result = rt.write(TABLE, rows(100, 100), source="after")

        assert result.rows_written == 100
        successor = handle.pid
        assert successor != dead and pid_alive(successor)
        assert handle.replaced == [(dead, successor)]
        # Every acknowledged row of both writes is in the table once (the first write's came back
        # from the dead daemon's WAL or its Delta commits).
        assert sorted(delta_rows(warehouse)["id"].to_pylist()) == list(range(200))
        # Read-back goes to the successor's Iceberg facade, with a token it issued.
        assert rt.verify(TABLE, source="after").verified
    finally:
        rt.close()


def test_a_daemon_dying_mid_write_is_replaced_and_the_same_write_completes(warehouse: Path) -> None:
    rt = ZerobusRuntime(_config(warehouse, faults=True))
    try:
        handle = _handle(rt)
        dead = handle.pid
        # The daemon makes the first batch of the next stream durable, then exits before acking it.
        fault = {"kind": "crash", "table": TABLE, "after_batches": 0}
        status, body = http_json(
            handle.workspace_url + "/_emulator/faults",
            method="POST",
            body=json.dumps(fault).encode(),
            authorization=f"Bearer {handle.access_token().get_secret_value()}",
        )
        assert status == 200, body

        result = rt.write(TABLE, rows(500), source="through-the-crash")

        assert result.rows_written == 500
        assert not pid_alive(dead), "the crash fault never fired"
        assert "injected crash after WAL position" in (state_of(warehouse) / LOG_FILE).read_text()
        assert [d for d, _ in handle.replaced] == [dead] and pid_alive(handle.pid)
        ids = delta_rows(warehouse)["id"].to_pylist()
        # None lost. The crashed batch was durable but unacknowledged, so it may be there twice
        # (replayed from the dead daemon's WAL and re-sent): at-least-once, never more than that.
        assert sorted(set(ids)) == list(range(500))
        assert set(Counter(ids).values()) <= {1, 2}
    finally:
        rt.close()


def test_a_cleanly_stopped_daemon_is_not_restarted_until_it_is_needed(warehouse: Path) -> None:
    rt = ZerobusRuntime(_config(warehouse))
    try:
        handle = _handle(rt)
        stopped = handle.pid
        os.kill(stopped, signal.SIGTERM)  # an operator's stop: it unadvertises before exiting
        assert wait_until_gone(stopped, 30)
        assert not (state_of(warehouse) / ADVERT_FILE).exists()
        assert handle.replaced == [], "a clean stop must not start a daemon nobody asked for"
        assert rt.write(TABLE, rows(10), source="later").rows_written == 10
        assert handle.pid != stopped and handle.replaced == [(stopped, handle.pid)]
    finally:
        rt.close()


def test_daemon_state_is_owner_only(warehouse: Path) -> None:
    previous = os.umask(0o022)  # the modes must hold under the usual umask
    try:
        rt = ZerobusRuntime(_config(warehouse))
    finally:
        os.umask(previous)
    try:
        state = state_of(warehouse)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (state / ADVERT_FILE, state / SECRET_FILE)}
        modes.update(
            {p.name: stat.S_IMODE(p.stat().st_mode) for p in (state / LOG_FILE, state / "emulator.lock")}
        )
        assert modes == dict.fromkeys(modes, 0o600)
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / "wal").stat().st_mode) == 0o700
        secret = (state / SECRET_FILE).read_text().strip()
        assert secret not in (state / ADVERT_FILE).read_text()
        assert secret not in (state / LOG_FILE).read_text()
    finally:
        rt.close()
