"""Declared types on the ingest operator's sources (issue 16 item 5), through the real runtime and emulator:

- a SQL column whose first rows are NULL, or a timestamp stored as text (SQLite), is fixable with
  ``schema=`` and every error says so;
- CSV inputs take ``schema=`` too, and every file is checked against it before anything is sent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.ingest import ZerobusIngestOperator

pytestmark = pytest.mark.integration

TABLE = "main.raw.sql_text_types"
QUERY = "SELECT id, placed_at, note FROM orders ORDER BY id"


def _context(run_id: str) -> Any:
    return {"run_id": run_id, "ti": SimpleNamespace(map_index=-1, run_id=run_id)}


@pytest.fixture
def hook() -> Iterator[ZerobusHook]:
    h = ZerobusHook()
    yield h
    h.release()


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, placed_at TEXT, note TEXT)")
        conn.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [(i, f"2026-01-0{i + 1}T10:00:00+00:00", None if i < 4 else f"n{i}") for i in range(6)],
        )
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_TEXT", json.dumps({"conn_type": "sqlite", "host": str(db)}))


def _ingest(task_id: str, schema: dict[str, str] | None, run_id: str) -> dict[str, Any]:
    with DAG(f"sql_text_{task_id}", schedule=None):
        op = ZerobusIngestOperator(
            task_id=task_id,
            table=TABLE,
            sql=QUERY,
            sql_conn_id="shop_text",
            fetch_rows=3,
            schema=schema,
        )
    result: dict[str, Any] = op.execute(_context(run_id))
    return result


def test_null_first_rows_and_text_timestamps_are_fixed_by_schema_and_errors_say_so(
    shop: None, hook: ZerobusHook
) -> None:
    # ``note`` is NULL in the whole first fetch: its type cannot be inferred.
    with pytest.raises(AirflowFailException) as info:
        _ingest("inferred", None, "manual__1")
    assert "note" in str(info.value) and "schema={'<column>': 'BIGINT'}" in str(info.value)

    declared = {"id": "BIGINT NOT NULL", "placed_at": "TIMESTAMP", "note": "STRING"}
    summary = _ingest("declared", declared, "manual__2")
    assert summary["rows_written"] == 6
    report = hook.get_conn().verify(TABLE, wait_s=15)
    assert report.verified and report.rows_scanned == 6
    state = hook.get_conn().catalog.describe(TABLE)
    assert state is not None and state.column("placed_at").delta_type == "TIMESTAMP"  # type: ignore[union-attr]
    rows = hook.get_conn().read_rows(TABLE).sort_by("id")
    assert rows.column("placed_at")[0].as_py() == datetime(2026, 1, 1, 10, tzinfo=UTC)

    # The table holds TIMESTAMP now; the same text without the declaration is refused, saying how to fix it.
    with pytest.raises(AirflowFailException) as info:
        _ingest("text_again", {"note": "STRING"}, "manual__3")
    assert "placed_at" in str(info.value) and "schema={'placed_at': 'TIMESTAMP'}" in str(info.value)


def test_csv_files_take_the_declared_schema_and_are_all_checked_before_anything_is_sent(
    tmp_path: Path, hook: ZerobusHook
) -> None:
    table = "main.raw.csv_declared"
    (tmp_path / "a.csv").write_text("id,placed_at,amount\n1,2026-01-01 10:00:00,1.50\n")
    (tmp_path / "b.csv").write_text("id,placed_at,amount\n2,2026-01-02 10:00:00,oops\n")
    declared = {"placed_at": "TIMESTAMP_NTZ", "amount": "DECIMAL(10,2)"}
    with DAG("csv_declared_bad", schedule=None):
        bad = ZerobusIngestOperator(task_id="bad", table=table, path=str(tmp_path / "*.csv"), schema=declared)
    with pytest.raises(AirflowFailException) as info:
        bad.execute(_context("manual__bad"))
    assert "b.csv" in str(info.value) and "oops" in str(info.value)
    assert hook.get_conn().catalog.describe(table) is None  # a.csv's row was not sent either

    (tmp_path / "b.csv").write_text("id,placed_at,amount\n2,2026-01-02 10:00:00,2.25\n")
    with DAG("csv_declared_good", schedule=None):
        good = ZerobusIngestOperator(
            task_id="good", table=table, path=str(tmp_path / "*.csv"), schema=declared
        )
    assert good.execute(_context("manual__good"))["rows_written"] == 2
    state = hook.get_conn().catalog.describe(table)
    assert state is not None
    types = {c.name: c.delta_type for c in state.columns}
    assert (types["placed_at"], types["amount"]) == ("TIMESTAMP_NTZ", "DECIMAL(10,2)")
