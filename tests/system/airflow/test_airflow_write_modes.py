"""``ZerobusIngestOperator(write_mode="replace")``: a new run for the same logical date replaces that day,
through the real runtime and the embedded emulator (the operator executed with a run's context)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.ingest import ZerobusIngestOperator

pytestmark = pytest.mark.integration

TABLE = "main.derived.day_orders"


def _context(run_id: str, ds: str | None, map_index: int = -1) -> Any:
    context: dict[str, Any] = {"run_id": run_id, "ti": SimpleNamespace(map_index=map_index, run_id=run_id)}
    if ds is not None:
        context["ds"] = ds
    return context


@pytest.fixture
def hook() -> Iterator[ZerobusHook]:
    h = ZerobusHook()
    yield h
    h.release()


def _operator(tmp_path: Path, dag_id: str, **kwargs: Any) -> ZerobusIngestOperator:
    pq.write_table(pa.table({"order_id": pa.array(range(50), pa.int64())}), tmp_path / "orders.parquet")
    with DAG(dag_id, schedule=None):
        return ZerobusIngestOperator(
            task_id="ingest", table=TABLE, path=str(tmp_path / "*.parquet"), role="derived", **kwargs
        )


def test_a_new_run_for_the_same_logical_date_replaces_that_day(tmp_path: Path, hook: ZerobusHook) -> None:
    op = _operator(tmp_path, "replace_day", write_mode="replace")
    first = op.execute(_context("scheduled__1", "2026-11-01"))
    other_day = op.execute(_context("scheduled__2", "2026-11-02"))
    # The day's input corrected, then a new run for the same logical date.
    pq.write_table(pa.table({"order_id": pa.array(range(100, 150), pa.int64())}), tmp_path / "orders.parquet")
    again = op.execute(_context("manual__rerun", "2026-11-01"))
    assert first["partition"] == "2026-11-01/-1@scheduled__1"
    assert (again["rows_written"], again["rows_skipped"]) == (50, 0)

    rt = hook.get_conn()
    report = rt.verify(TABLE, source="replace_day/ingest", wait_s=15)
    assert report.verified, report.to_json()
    tags = pc.value_counts(rt.read_rows(TABLE)["_twg_source"]).to_pylist()
    assert {t["values"]: t["counts"] for t in tags} == {
        f"replace_day/ingest[{again['partition']}]": 50,
        f"replace_day/ingest[{other_day['partition']}]": 50,
    }, "the day must hold 50 rows, not 100, and the other day must be untouched"


def test_replace_without_a_logical_date_or_key_fails_naming_the_fix(tmp_path: Path) -> None:
    op = _operator(tmp_path, "replace_no_date", write_mode="replace")
    with pytest.raises(AirflowFailException, match="pass replace_key="):
        op.execute(_context("manual__x", None))
