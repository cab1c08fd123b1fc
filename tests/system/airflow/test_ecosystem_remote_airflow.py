"""The ingest's asset and extra link on the production path: a remote ``zerobus`` connection (endpoint,
workspace URL, OAuth M2M, Unity Catalog) against ``zerobus-orch serve``, run with ``dag.test()``.

Embedded tables have no workspace, so only here does the asset carry a workspace host and the link
point at Catalog Explorer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG

from airflow_provider.operators.ingest import ZerobusIngestOperator
from tests.support.local_cloud import clean_env, serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

SECRET = "airflow-remote-test-secret"
TABLE = "main.raw.remote_orders"


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``zerobus-orch serve --json`` on its own warehouse; yields what it printed."""
    env = clean_env() | {"ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET}
    with serve(str(tmp_path / "cloud"), env) as info:
        yield info


def test_a_remote_ingest_links_catalog_explorer_and_emits_the_workspace_asset(
    register_dag: Any, tmp_path: Path, local_cloud: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", "/nonexistent/databrickscfg")  # no developer profile
    connection = {
        "conn_type": "zerobus",
        "host": local_cloud["endpoint"],
        "login": local_cloud["client_id"],
        "password": SECRET,
        "extra": {
            "workspace_url": local_cloud["workspace_url"],
            "warehouse_id": local_cloud["sql_warehouse_id"],
            "config": {"state_dir": str(tmp_path / "state"), "warehouse": str(tmp_path / "worker")},
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_ZB_REMOTE", json.dumps(connection))
    pq.write_table(pa.table({"order_id": pa.array(range(25), pa.int64())}), tmp_path / "orders.parquet")
    with DAG("eco_remote", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        ZerobusIngestOperator(
            task_id="ingest", table=TABLE, path=str(tmp_path / "orders.parquet"), zerobus_conn_id="zb_remote"
        )
    register_dag(dag)

    run = dag.test()

    assert {ti.task_id: str(ti.state) for ti in run.get_task_instances()} == {"ingest": "success"}
    workspace = str(local_cloud["workspace_url"]).rstrip("/")
    host = workspace.split("://", 1)[1]
    with create_session() as session:
        link = (
            session.query(XComModel)
            .filter_by(dag_id="eco_remote", run_id=run.run_id, key="_link_ZerobusTableLink")
            .one()
        )
        assert link.value == f"{workspace}/explore/data/main/raw/remote_orders"
        asset = session.query(AssetModel).filter_by(uri=f"databricks://{host}/main/raw/remote_orders").one()
        (event,) = session.query(AssetEvent).filter_by(asset_id=asset.id).all()
        assert event.extra["rows_written"] == 25 and event.source_run_id == run.run_id
