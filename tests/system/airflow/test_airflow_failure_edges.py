"""Failure edges through Airflow (``dag.test()``, the operator's real task runner): each ends in a named
error within 15 s, and only what a retry can fix is retried (``retries=1`` on every task here).

The same edges through the Python API: tests/system/runtime/test_runtime_reachability.py and
tests/system/runtime/test_failure_edges.py; through Dagster: tests/system/dagster/test_dagster_failure_edges.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG

from airflow_provider.operators.ingest import ZerobusIngestOperator
from tests.support.daemon_helpers import kill_daemons
from tests.support.failure_edges import WRONG_SECRET, DaemonKiller, TableFailer, silent_endpoint
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration  # the official SDK against the emulator, through the operator

START = datetime(2026, 1, 1)
RETRY = {"retries": 1, "retry_delay": timedelta(seconds=1)}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(str(tmp_path / "cloud"), EmulatorConfig(), iceberg=False) as emu:
        yield emu


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    path = tmp_path / "orders.parquet"
    pq.write_table(pa.table({"order_id": pa.array(range(10), pa.int64())}), path)
    return path


def remote_connection(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    host: str,
    workspace_url: str,
    login: str,
    password: str,
) -> str:
    conn_id = "zb_edge"
    conn = {
        "conn_type": "zerobus",
        "host": host,
        "login": login,
        "password": password,
        "extra": {
            "workspace_url": workspace_url,
            "config": {"state_dir": str(tmp_path / "state"), "warehouse": str(tmp_path / "worker")},
        },
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


Failure = tuple[BaseException, float, float]  # what a try failed with, seconds it ran, when (time.time())


class Tries:
    """Callbacks recording each try: ``on_execute_callback`` when the operator's ``execute`` starts,
    ``on_failure_callback`` / ``on_retry_callback`` what it failed with (the task runner's overhead
    before ``execute``, seconds in ``dag.test()``, is not the operator's)."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.failed: list[Failure] = []

    def on_execute(self, context: Any) -> None:
        self.started.append(time.time())

    def on_failure(self, context: Any) -> None:
        now = time.time()
        self.failed.append((context["exception"], now - self.started[-1], now))


def run_ingest(
    register_dag: Any, dag_id: str, conn_id: str, path: Path, table: str = "main.raw.edge_orders"
) -> tuple[Any, list[Failure]]:
    """``dag.test()`` of one ingest task with ``retries=1``: the run, and each failed try."""
    tries = Tries()
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        ZerobusIngestOperator(
            task_id="ingest",
            table=table,
            path=str(path),
            zerobus_conn_id=conn_id,
            on_execute_callback=tries.on_execute,
            on_failure_callback=tries.on_failure,
            on_retry_callback=tries.on_failure,
            **RETRY,
        )
    register_dag(dag)
    return dag.test(), tries.failed


def test_a_wrong_client_secret_fails_the_task_once_naming_the_client_id(
    register_dag: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emulator: Emulator, orders: Path
) -> None:
    """HTTP 401 ``invalid_client``: before, a retriable ``EndpointUnreachableError``, so Airflow retried a
    secret that cannot start working; now ``AirflowFailException`` on the first try."""
    conn_id = remote_connection(
        monkeypatch,
        tmp_path,
        host=emulator.endpoint,
        workspace_url=emulator.workspace_url,
        login=emulator.client_id,
        password=WRONG_SECRET,
    )

    run, seen = run_ingest(register_dag, "edge_secret", conn_id, orders)

    (ti,) = run.get_task_instances()
    assert str(ti.state) == "failed" and ti.try_number == 1  # not retried, though retries=1
    ((error, ran, _),) = seen
    assert type(error).__name__ == "AirflowFailException"
    assert f"for client ID {emulator.client_id!r} refused: HTTP 401 (invalid_client" in str(error)
    assert WRONG_SECRET not in str(error)
    assert ran < 15.0


def test_an_endpoint_that_never_answers_fails_each_try_within_15_s_naming_url_and_setting(
    register_dag: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emulator: Emulator, orders: Path
) -> None:
    """Accepts TCP, never answers: before, 61 s inside the write and "no healthy stream within 30.0s".
    Now each try fails at start after ``connect_timeout_s`` (10 s by default), naming the URL and the
    setting, and is retried (the endpoint may answer later)."""
    with silent_endpoint() as endpoint:
        conn_id = remote_connection(
            monkeypatch,
            tmp_path,
            host=endpoint,
            workspace_url=emulator.workspace_url,
            login=emulator.client_id,
            password=emulator.client_secret,
        )
        run, seen = run_ingest(register_dag, "edge_silent", conn_id, orders)

    (ti,) = run.get_task_instances()
    assert str(ti.state) == "failed" and ti.try_number == 2  # retried once: an outage may pass
    assert len(seen) == 2
    for error, ran, _ in seen:
        assert type(error).__name__ == "EndpointUnreachableError"
        assert (
            f"Zerobus endpoint {endpoint} (zerobus.endpoint (ZEROBUS_ENDPOINT)) accepted a connection but did "
            "not answer a gRPC request within 10 s"
        ) in str(error)
        assert ran < 15.0


def test_a_table_failed_mid_write_fails_the_task_once_with_the_table_s_failure(
    register_dag: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The emulator fails the table mid-write (a NOT NULL column added behind its back, once the first
    rows are committed; the emulator's streams are throttled so the write is still going): the task
    fails within 15 s with the table's failure, not retried. Before: 38-81 s, then a pool or
    retry-budget message, and a retry."""
    path = tmp_path / "many.parquet"
    rows = pa.table({"order_id": pa.array(range(2_000_000), pa.int64())})
    pq.write_table(rows, path, row_group_size=10_000)  # read and sent batch by batch
    settings = {"emulator": {"mode": "in_process", "time_to_table_s": 0.1, "per_stream_mb_s": 4.0}}
    conn = {
        "conn_type": "zerobus",
        "extra": {"embedded": True, "warehouse": str(tmp_path / "wh"), "config": settings},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ZB_FAILING", json.dumps(conn))
    table = "main.raw.edge_failing"
    failer = TableFailer(tmp_path / "wh", table)

    run, seen = run_ingest(register_dag, "edge_table", "zb_failing", path, table=table)
    failer.join()

    assert failer.altered_wall is not None, "the table was never altered: the fault did not act"
    (ti,) = run.get_task_instances()
    assert str(ti.state) == "failed" and ti.try_number == 1  # not retried, though retries=1
    ((error, _, failed_at),) = seen
    assert type(error).__name__ == "AirflowFailException"
    assert str(error).startswith(f"ingest: table {table} is failed in the emulator ("), str(error)
    assert failed_at - failer.altered_wall < 15.0


@pytest.mark.slow  # the shared emulator daemon SIGKILLed mid-write
def test_a_daemon_killed_mid_write_without_a_successor_fails_the_task_once_naming_it(
    register_dag: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The provider's default emulator, a shared daemon: SIGKILLed mid-write while another emulator holds
    the warehouse, so no successor starts. The task fails within 15 s saying the daemon exited, with its
    pid and log, not retried. Before: "the token endpoint refused the client credentials", or a pool
    timeout."""
    path = tmp_path / "many.parquet"
    pq.write_table(
        pa.table({"order_id": pa.array(range(2_000_000), pa.int64())}), path, row_group_size=10_000
    )
    warehouse = tmp_path / "wh"
    settings = {"emulator": {"mode": "daemon", "time_to_table_s": 0.1, "per_stream_mb_s": 4.0}}
    conn = {
        "conn_type": "zerobus",
        "extra": {"embedded": True, "warehouse": str(warehouse), "config": settings},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ZB_DAEMON", json.dumps(conn))
    table = "main.raw.edge_daemon"
    killer = DaemonKiller(warehouse, table)
    try:
        run, seen = run_ingest(register_dag, "edge_daemon", "zb_daemon", path, table=table)
    finally:
        killer.release()
        kill_daemons(warehouse)

    assert killer.killed is not None and killer.taken_wall is not None, "the fault did not act"
    (ti,) = run.get_task_instances()
    assert str(ti.state) == "failed" and ti.try_number == 1  # not retried, though retries=1
    ((error, _, failed_at),) = seen
    assert type(error).__name__ == "AirflowFailException"
    assert str(error).startswith(f"ingest: the emulator daemon exited (pid {killer.killed}, "), str(error)
    assert f"its log: {warehouse / '_zerobus' / 'emulator.log'}" in str(error)
    assert failed_at - killer.taken_wall < 15.0
