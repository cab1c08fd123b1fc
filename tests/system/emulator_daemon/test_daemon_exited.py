"""A shared emulator daemon killed mid-write: replaced when it can be (the write completes, see
test_daemon_recovery.py); when its successor cannot start, the write fails within 15 s saying the emulator
daemon exited, with its pid and its log, instead of "the token endpoint refused the client credentials"
(a refused connection to the dead token endpoint was read as refused credentials) or a pool timeout.

Through the Python API here, with the SDK's default options; through Dagster and Airflow in their
failure-edge tests.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.daemon_helpers import TABLE, daemon_config, state_of
from tests.support.failure_edges import WarehouseTaken
from zerobus_orchestration.config import SdkStreamOptions
from zerobus_orchestration.emulator.advert import LOG_FILE
from zerobus_orchestration.emulator.handle import RemoteEmulator
from zerobus_orchestration.errors import EmulatorExitedError
from zerobus_orchestration.runtime.facade import ZerobusRuntime

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # a daemon SIGKILLed under the official SDK


def test_a_daemon_killed_mid_write_without_a_successor_fails_naming_it(warehouse: Path) -> None:
    config = daemon_config(warehouse).model_copy(update={"sdk": SdkStreamOptions()})  # the SDK's defaults
    rt = ZerobusRuntime(config)
    taken = WarehouseTaken(state_of(warehouse))
    try:
        assert isinstance(rt.emulator, RemoteEmulator)
        dead = rt.emulator.pid

        def batches() -> Iterator[pa.RecordBatch]:
            for i in range(2_000):
                if i == 20:
                    os.kill(dead, signal.SIGKILL)
                    taken.take_after(dead)  # another emulator holds the warehouse: no successor can start
                yield pa.record_batch({"id": pa.array(range(i * 100, (i + 1) * 100), pa.int64())})
                time.sleep(0.01)

        with pytest.raises(EmulatorExitedError) as caught:
            rt.write(TABLE, batches(), source="killed")
        failed_at = time.monotonic()
    finally:
        taken.release()
        rt.close(timeout=10)

    assert taken.taken_at is not None
    error = caught.value
    log = str(state_of(warehouse) / LOG_FILE)
    assert str(error).startswith(f"the emulator daemon exited (pid {dead}, "), str(error)
    assert f"its log: {log}" in str(error) and (error.pid, error.log) == (dead, log)
    assert "another emulator is already running" in str(error)  # why the successor did not start
    assert "refused the client credentials" not in str(error)
    assert not error.retriable
    assert failed_at - taken.taken_at < 15.0
