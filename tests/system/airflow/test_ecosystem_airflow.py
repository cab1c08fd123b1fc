"""Issue 16 item 11 through ``dag.test()``: the table's asset triggers a downstream DAG, the extra link,
``hook_params`` / ``sql_hook_params``, and the lineage an ingest records (SQLite metadata DB, embedded
emulator through the official SDK; nothing mocked).

The OpenLineage facets themselves need ``apache-airflow-providers-openlineage``; their test is
``test_openlineage_airflow.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG, Asset
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.utils.lineage import DatasetName, table_asset_uri

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

START = datetime(2026, 1, 1)


def _orders(n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(n), pa.int64()),
            "amount": pa.array([i * 1.5 for i in range(n)], pa.float64()),
        }
    )


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _recorder(seen: dict[str, Any]) -> Callable[[Any], None]:
    """An ``on_success_callback`` keeping the executed operator (the task runner's copy of it)."""

    def record(context: Any) -> None:
        seen["task"] = context["task"]

    return record


def _xcom(dag_id: str, run_id: str, task_id: str, key: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id, key=key).one()
        return row.value


def test_a_dag_scheduled_on_the_table_asset_is_queued_by_an_ingest(register_dag: Any, tmp_path: Path) -> None:
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.models.dag import DagModel
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.utils.session import create_session

    table = "main.raw.eco_asset_orders"
    uri = table_asset_uri(table)
    assert uri == "databricks://localhost/main/raw/eco_asset_orders"
    pq.write_table(_orders(30), tmp_path / "orders.parquet")
    with DAG("eco_asset_consumer", schedule=[Asset(uri)], start_date=START) as consumer:
        EmptyOperator(task_id="aggregate")
    with DAG("eco_asset_producer", schedule=None, start_date=START) as producer:
        ZerobusIngestOperator(task_id="ingest", table=table, path=str(tmp_path / "orders.parquet"))
    register_dag(consumer)
    register_dag(producer)
    with create_session() as session:  # new DAGs start paused; a paused DAG is never queued
        session.query(DagModel).filter_by(dag_id="eco_asset_consumer").update({"is_paused": False})

    run = producer.test()

    assert _states(run) == {"ingest": "success"}
    with create_session() as session:
        asset = session.query(AssetModel).filter_by(uri=uri).one()
        events = session.query(AssetEvent).filter_by(asset_id=asset.id).all()
        queued = session.query(AssetDagRunQueue).filter_by(asset_id=asset.id).all()
        assert [(e.source_dag_id, e.source_task_id, e.source_run_id) for e in events] == [
            ("eco_asset_producer", "ingest", run.run_id)
        ]
        extra = events[0].extra
        assert extra["table"] == table and extra["rows_written"] == 30
        assert extra["source"] == "eco_asset_producer/ingest"
        assert [q.target_dag_id for q in queued] == ["eco_asset_consumer"]
        # The scheduler's own evaluation: the consumer is due for an asset-triggered run.
        _, triggered = DagModel.dags_needing_dagruns(session)
        assert "eco_asset_consumer" in triggered


def test_the_extra_link_is_stored_for_the_ui_and_empty_when_embedded(
    register_dag: Any, tmp_path: Path
) -> None:
    pq.write_table(_orders(5), tmp_path / "orders.parquet")
    with DAG("eco_link", schedule=None, start_date=START) as dag:
        op = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.eco_link_orders", path=str(tmp_path / "orders.parquet")
        )
    register_dag(dag)

    run = dag.test()

    assert _states(run) == {"ingest": "success"}
    assert [link.name for link in op.operator_extra_links] == ["Databricks table"]
    # Airflow 3 resolves the link in the worker when the try ends and the UI reads this XCom; an
    # embedded table has no workspace page, so the button is disabled (empty link).
    assert _xcom("eco_link", run.run_id, "ingest", "_link_ZerobusTableLink") == ""


def test_hook_params_reach_both_hooks_in_a_dag_run(
    register_dag: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    db = tmp_path / "source.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (order_id INTEGER, amount REAL)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 0.5) for i in range(12)])
    monkeypatch.setenv("AIRFLOW_CONN_ECO_SQLITE", f'{{"conn_type": "sqlite", "host": "{db}"}}')
    built: list[dict[str, Any]] = []
    original_init = SqliteHook.__init__

    def spy_init(self: SqliteHook, *args: Any, **kwargs: Any) -> None:
        built.append(dict(kwargs))
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(SqliteHook, "__init__", spy_init)
    seen: dict[str, Any] = {}
    with DAG("eco_hook_params", schedule=None, start_date=START) as dag:
        ZerobusIngestOperator(
            task_id="ingest",
            table="main.raw.eco_hook_params",
            sql="SELECT order_id, amount FROM orders ORDER BY order_id",
            sql_conn_id="eco_sqlite",
            sql_hook_params={"log_sql": False},
            hook_params={"logger_name": "eco_orders"},
            on_success_callback=_recorder(seen),
        )
    register_dag(dag)

    run = dag.test()

    assert _states(run) == {"ingest": "success"}
    assert {"sqlite_conn_id": "eco_sqlite", "log_sql": False} in built
    task = seen["task"]
    assert task.hook.log.name.endswith(".eco_orders")
    assert task.lineage.rows_written == 12
    assert _xcom("eco_hook_params", run.run_id, "ingest", "return_value")["rows_written"] == 12


def test_hook_params_that_the_operator_sets_itself_fail_the_task_clearly(
    register_dag: Any, tmp_path: Path
) -> None:
    pq.write_table(_orders(3), tmp_path / "orders.parquet")
    with DAG("eco_hook_clash", schedule=None, start_date=START) as dag:
        op = ZerobusIngestOperator(
            task_id="ingest",
            table="main.raw.eco_hook_clash",
            path=str(tmp_path / "orders.parquet"),
            hook_params={"zerobus_conn_id": "other"},
            retries=3,
        )
    register_dag(dag)

    run = dag.test()

    # A no-retry failure (one try of four): the same arguments fail the same way on every try.
    assert _states(run) == {"ingest": "failed"}
    assert [ti.try_number for ti in run.get_task_instances()] == [1]
    with pytest.raises(
        AirflowFailException, match=r"hook_params sets zerobus_conn_id.*give zerobus_conn_id="
    ):
        _ = op.hook


def test_an_ingest_records_its_files_table_and_written_schema(register_dag: Any, tmp_path: Path) -> None:
    table = "main.raw.eco_lineage_orders"
    pq.write_table(_orders(20), tmp_path / "a.parquet")
    pq.write_table(_orders(7), tmp_path / "b.parquet")
    seen: dict[str, Any] = {}
    with DAG("eco_lineage", schedule=None, start_date=START) as dag:
        ZerobusIngestOperator(
            task_id="ingest",
            table=table,
            path=str(tmp_path / "*.parquet"),
            descriptions={"order_id": "the order"},
            on_success_callback=_recorder(seen),
        )
    register_dag(dag)

    run = dag.test()

    assert _states(run) == {"ingest": "success"}
    lineage = seen["task"].lineage
    assert lineage.output.namespace == "databricks://localhost"
    assert lineage.output.dataset_name == table
    assert lineage.inputs == [
        DatasetName("file", str(tmp_path / "a.parquet")),
        DatasetName("file", str(tmp_path / "b.parquet")),
    ]
    assert lineage.schema.names == ["order_id", "amount"]
    assert (lineage.rows_written, lineage.descriptions) == (27, {"order_id": "the order"})
    assert lineage.errors == []
