"""OpenLineage for the ingest operator through ``dag.test()`` and the OpenLineage provider's own extractor.

``apache-airflow-providers-openlineage`` is an optional dependency of the provider (its listener is the
only caller of ``get_openlineage_facets_on_complete``): without it this module is skipped, and the
lineage the operator records is still checked by ``test_ecosystem_airflow.py``.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG

from airflow_provider.operators.ingest import ZerobusIngestOperator

pytest.importorskip("airflow.providers.openlineage.extractors", reason="needs the OpenLineage provider")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]


def _extract_on_success(seen: dict[str, Any]) -> Any:
    """Run the OpenLineage provider's extractor the way its listener does when a try succeeds."""

    def extract(context: Any) -> None:
        from airflow.providers.openlineage.extractors.manager import ExtractorManager
        from airflow.utils.state import TaskInstanceState

        seen["lineage"] = ExtractorManager().extract_metadata(
            context["dag_run"], context["task"], TaskInstanceState.SUCCESS, context["ti"]
        )

    return extract


def test_ingest_lineage_names_the_files_and_the_databricks_table_with_its_schema(
    register_dag: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = "main.raw.ol_orders"
    data = pa.table(
        {
            "order_id": pa.array(range(40), pa.int64()),
            "amount": pa.array([Decimal(i) / 4 for i in range(40)], pa.decimal128(18, 2)),
            "placed_at": pa.array([1_700_000_000_000_000 + i for i in range(40)], pa.timestamp("us", "UTC")),
        }
    )
    pq.write_table(data, tmp_path / "orders.parquet")
    db = tmp_path / "source.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (order_id INTEGER)")
        conn.executemany("INSERT INTO orders VALUES (?)", [(i,) for i in range(5)])
    monkeypatch.setenv("AIRFLOW_CONN_OL_SQLITE", f'{{"conn_type": "sqlite", "host": "{db}"}}')
    seen: dict[str, Any] = {}
    sql_seen: dict[str, Any] = {}
    with DAG("ol_ingest", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        ZerobusIngestOperator(
            task_id="ingest",
            table=table,
            path=str(tmp_path / "orders.parquet"),
            descriptions={"amount": "order total"},
            on_success_callback=_extract_on_success(seen),
        )
        ZerobusIngestOperator(
            task_id="ingest_sql",
            table="main.raw.ol_sql_orders",
            sql="SELECT order_id FROM orders ORDER BY order_id",
            sql_conn_id="ol_sqlite",
            on_success_callback=_extract_on_success(sql_seen),
        )
    register_dag(dag)

    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"ingest": "success", "ingest_sql": "success"}
    # SQLite gives OpenLineage no database information, so the SQL's tables stay unnamed (as with
    # common-sql operators); the output table is still reported.
    sql_lineage = sql_seen["lineage"]
    assert sql_lineage.inputs == [] and "extractionError" not in sql_lineage.run_facets
    assert [(o.namespace, o.name) for o in sql_lineage.outputs] == [
        ("databricks://localhost", "main.raw.ol_sql_orders")
    ]
    lineage = seen["lineage"]
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", str(tmp_path / "orders.parquet"))]
    [output] = lineage.outputs
    # The Databricks provider's naming: namespace databricks://<host>, name catalog.schema.table.
    assert (output.namespace, output.name) == ("databricks://localhost", table)
    fields = [(f.name, f.type, f.description) for f in output.facets["schema"].fields]
    assert fields == [
        ("order_id", "BIGINT", None),
        ("amount", "DECIMAL(18,2)", "order total"),
        ("placed_at", "TIMESTAMP", None),
    ]
    assert output.outputFacets["outputStatistics"].rowCount == 40
    assert "extractionError" not in lineage.run_facets


def test_sql_inputs_are_the_tables_the_query_reads_when_the_database_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook that names its database for OpenLineage (as the Postgres or Databricks SQL hooks do)."""
    from airflow.providers.openlineage.sqlparser import DatabaseInfo
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    from airflow_provider.utils.lineage import WriteLineage
    from airflow_provider.utils.openlineage import sql_input_datasets

    class NamedSqliteHook(SqliteHook):
        def get_openlineage_database_info(self, connection: Any) -> Any:
            return DatabaseInfo(scheme="sqlite", authority="warehouse-db", database="shop")

    monkeypatch.setenv("AIRFLOW_CONN_OL_NAMED", f'{{"conn_type": "sqlite", "host": "{tmp_path / "x.db"}"}}')
    lineage = WriteLineage()
    inputs = sql_input_datasets(
        lambda: NamedSqliteHook(sqlite_conn_id="ol_named"),
        "SELECT o.id, c.name FROM sales.orders o JOIN sales.customers c ON o.cid = c.id",
        lineage,
    )
    assert sorted((d.namespace, d.name) for d in inputs) == [
        ("sqlite://warehouse-db", "shop.sales.customers"),
        ("sqlite://warehouse-db", "shop.sales.orders"),
    ]
    assert lineage.errors == []

    broken = sql_input_datasets(lambda: NamedSqliteHook(sqlite_conn_id="no_such_conn"), "SELECT 1", lineage)
    assert broken == [] and len(lineage.errors) == 1 and "no_such_conn" in lineage.errors[0]
