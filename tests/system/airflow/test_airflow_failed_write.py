"""``ZerobusIngestOperator`` on bad input through ``dag.test()`` (what ``airflow dags test`` runs: a SQLite
metadata DB, the embedded emulator through the official SDK), issue 24: one out-of-range DATE in row
150,000 of 200,000, from a Parquet file and from a SQL query, fails the task once (no retry: the same
input fails the same way) with 0 rows sent and no table created. The old operator sent the rows before
the bad batch (131,072 from the file, 140,000 from the query) and left them in the table.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider.operators.ingest import ZerobusIngestOperator
from tests.support.bad_input import BAD_ROW, ROWS, events_parquet
from zerobus_orchestration.tables import table_uri

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

START = datetime(2026, 1, 1)


def _failed_once(run: Any, logs: str, where: str) -> None:
    instances = run.get_task_instances()
    assert [(ti.task_id, str(ti.state), ti.try_number) for ti in instances] == [("ingest", "failed", 1)]
    # dag.test() prints the task's log on stdout: the refusal, and where the bad value is.
    assert "outside 0001-01-01 .. 9999-12-31" in logs
    assert f"Where: {where}, row {BAD_ROW:,} (rows counted from 1)" in logs
    assert "Nothing of this write was sent" in logs


def _no_table(warehouse: Path, table: str) -> None:
    assert not Path(table_uri(str(warehouse), table)).exists(), f"{table} must not exist, not even empty"


def test_a_bad_date_in_row_150000_of_a_parquet_file_fails_with_no_table(
    register_dag: Any, tmp_path: Path, warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = "main.raw.failed_file_events"
    path = events_parquet(tmp_path / "events.parquet")
    with DAG("failed_file", schedule=None, start_date=START) as dag:
        ZerobusIngestOperator(task_id="ingest", table=table, path=str(path), retries=2)
    register_dag(dag)

    run = dag.test()

    _failed_once(run, capsys.readouterr().out, str(path))
    _no_table(warehouse, table)


def test_a_bad_date_in_row_150000_of_a_sql_result_fails_with_no_table(
    register_dag: Any,
    tmp_path: Path,
    warehouse: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = "main.raw.failed_sql_events"
    db = tmp_path / "source.db"
    day0 = datetime(1970, 1, 1)
    rows = [(i, (day0 + timedelta(days=i)).date().isoformat()) for i in range(ROWS)]
    rows[BAD_ROW - 1] = (BAD_ROW - 1, "0000-06-01")  # before 0001-01-01: Delta cannot hold it
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE events (id INTEGER, day TEXT)")
        conn.executemany("INSERT INTO events VALUES (?, ?)", rows)
    monkeypatch.setenv("AIRFLOW_CONN_FAILED_SQLITE", f'{{"conn_type": "sqlite", "host": "{db}"}}')
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    with DAG("failed_sql", schedule=None, start_date=START) as dag:
        ZerobusIngestOperator(
            task_id="ingest",
            table=table,
            sql="SELECT id, day FROM events ORDER BY id",
            sql_conn_id="failed_sqlite",
            schema={"id": "BIGINT", "day": "DATE"},
            spool_dir=str(spool_dir),
            retries=2,
        )
    register_dag(dag)

    run = dag.test()

    _failed_once(run, capsys.readouterr().out, "the SQL result")
    _no_table(warehouse, table)
    assert list(spool_dir.iterdir()) == []  # the spooled result is gone with the task
