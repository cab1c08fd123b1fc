"""Crash safety: SIGKILL the emulator process at random points; every acknowledged row survives once.

The emulator runs as ``python -m zerobus_orchestration.emulator`` (the same code as ``zerobus-orch
serve``). The official SDK ingests with recovery off, so nothing is re-sent after a kill: a row may be
durable without having been acknowledged (then it appears once), but no row may appear twice and no
acknowledged row may be missing. Kills land during ingest, during WAL group commits and during
materialisation (time-to-table is 0.1 s), and each restart replays the WAL before serving (the
last restart runs in-process to keep the test short).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from zerobus import ArrowStreamConfigurationOptions, ZerobusSdk
from zerobus.sdk.shared import ZerobusException

from tests.support.emulator_helpers import SCHEMA, TABLE, create_table, events, read_table
from tests.support.emulator_process import emulator_process
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def options() -> ArrowStreamConfigurationOptions:
    return ArrowStreamConfigurationOptions(
        recovery=False,
        server_lack_of_ack_timeout_ms=3_000,
        flush_timeout_ms=5_000,
        connection_timeout_ms=3_000,
    )


def ingest_until_killed(
    info: dict[str, Any], proc: subprocess.Popen[str], kill_after_s: float, first_id: int, acked: set[int]
) -> int:
    """Open a stream, arm the SIGKILL, send batches of 50 ids (waiting on every third) until the SDK fails.

    Ids of acknowledged offsets go to ``acked``; returns the next unused id.
    """
    sdk = ZerobusSdk(info["endpoint"], info["workspace_url"])
    stream = sdk.create_arrow_stream(TABLE, SCHEMA, info["client_id"], info["client_secret"], options())
    threading.Timer(kill_after_s, proc.send_signal, args=(signal.SIGKILL,)).start()
    pending: dict[int, list[int]] = {}
    next_id = first_id
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            ids = list(range(next_id, next_id + 50))
            next_id += 50
            offset = stream.ingest_batch(events(ids))
            pending[offset] = ids
            if offset % 3 == 2:
                stream.wait_for_offset(offset)
                for off in [o for o in pending if o <= offset]:
                    acked.update(pending.pop(off))
    except ZerobusException:
        pass  # the server was killed under us; only what was acknowledged counts
    return next_id


def assert_exactly_once(warehouse: Path, acked: set[int]) -> None:
    ids = read_table(warehouse).column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row was committed twice"
    missing = acked - set(ids)
    assert not missing, f"{len(missing)} acknowledged rows lost, e.g. {sorted(missing)[:5]}"


def test_sigkill_at_random_points_never_loses_or_duplicates_acknowledged_rows(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    create_table(warehouse)
    rng = random.Random(20261129)
    acked: set[int] = set()
    next_id = 0
    for _ in range(3):
        with emulator_process(warehouse, tmp_path, "--time-to-table", "0.1") as (proc, info):
            next_id = ingest_until_killed(info, proc, rng.uniform(0.05, 0.5), next_id, acked)
            proc.wait(timeout=30)
            assert proc.returncode == -signal.SIGKILL
    assert acked, "nothing was acknowledged before the kills; the test proved nothing"
    with Emulator(str(warehouse), EmulatorConfig(), iceberg=False):  # the last restart replays in-process
        pass
    assert_exactly_once(warehouse, acked)


def test_injected_crash_fault_exits_after_a_durable_batch_and_replays_it(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    create_table(warehouse)
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"kind": "crash", "after_batches": 2, "exit_code": 41}]))
    acked: set[int] = set()
    with emulator_process(warehouse, tmp_path, "--faults", str(faults), "--time-to-table", "3600") as (
        proc,
        info,
    ):
        sdk = ZerobusSdk(info["endpoint"], info["workspace_url"])
        stream = sdk.create_arrow_stream(TABLE, SCHEMA, info["client_id"], info["client_secret"], options())
        for i in range(2):
            stream.wait_for_offset(stream.ingest_batch(events([i])))
            acked.add(i)
        stream.ingest_batch(events([2]))  # written and fsync'd, then the process exits before the ack
        with pytest.raises(ZerobusException):
            stream.flush()
        assert proc.wait(timeout=30) == 41
    with Emulator(str(warehouse), EmulatorConfig(time_to_table_s=3600), iceberg=False) as restarted:
        assert restarted.replayed == {TABLE: 3}
    assert_exactly_once(warehouse, acked)
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [0, 1, 2]
