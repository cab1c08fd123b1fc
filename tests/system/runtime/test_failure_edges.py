"""Failure edges through the Python API: each ends in a named error within 15 s, classified for retries.

With the SDK's default options (``SdkStreamOptions()``): the 15 s are the user's, not a test setting.
The endpoint and credential edges are in test_runtime_reachability.py; the same edges through Dagster
and Airflow in tests/system/dagster/test_dagster_failure_edges.py and
tests/system/airflow/test_airflow_failure_edges.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.failure_edges import TableFailer
from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.errors import TableUnavailableError
from zerobus_orchestration.runtime.facade import ZerobusRuntime

pytestmark = pytest.mark.integration  # the official SDK against the emulator

TABLE = "main.raw.edge_events"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ZerobusRuntime]:
    config = ZerobusConfig(
        warehouse=str(tmp_path / "wh"),
        emulator=EmulatorConfig(mode="in_process", time_to_table_s=0.2, iceberg_lag_s=0.2),
    )
    rt = ZerobusRuntime(config)
    try:
        yield rt
    finally:
        rt.close(timeout=10)


def slow_batches(count: int, rows: int = 1_000, pause_s: float = 0.02) -> Iterator[pa.RecordBatch]:
    for i in range(count):
        yield pa.record_batch({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})
        time.sleep(pause_s)


def test_a_table_failed_mid_write_is_the_error_within_15_s(tmp_path: Path, runtime: ZerobusRuntime) -> None:
    """A NOT NULL column added behind the service's back fails the table in the emulator at its next
    commit. Before: 38-81 s of stream rebuilds, then "no healthy stream within 30.0s" or a retry-budget
    message, the cause only in WARNING lines. Now the write fails with the table's failure."""
    before = runtime.write(TABLE, pa.table({"id": pa.array([-1], pa.int64())}), source="before")
    failer = TableFailer(tmp_path / "wh", TABLE, after=before.delta_version)

    with pytest.raises(TableUnavailableError) as caught:
        runtime.write(TABLE, slow_batches(2_000), source="edge")
    failed_at = time.monotonic()
    failer.join()

    assert failer.altered_at is not None, "the table was never altered: the fault did not act"
    assert runtime.emulator is not None and TABLE in runtime.emulator.failed_tables()  # type: ignore[attr-defined]
    error = caught.value
    assert str(error).startswith(f"table {TABLE} is failed in the emulator ("), str(error)
    assert "MISSING_REQUIRED_COLUMN" in str(error) and "zerobus-orch emulator quarantine" in str(error)
    assert error.table == TABLE and not error.retriable
    assert failed_at - failer.altered_at < 15.0
