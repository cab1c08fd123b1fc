"""Reloading a corrected day in Airflow 3, through the ``airflow`` command line as an operator would.

Airflow 3 runs one DAG run per logical date, so a corrected day is reloaded by clearing the ingest task:
the same DAG run, other input. ``airflow dags test`` loads the day, the input file is corrected,
``airflow tasks clear`` clears the day's task instances and ``airflow tasks test`` re-runs them in that
same DAG run: the ingest (``write_mode="replace"``, a derived table) writes the run's next revision,
which replaces the first, and the read-back sensor verifies exactly the corrected rows with no duplicate.
Before, the cleared ingest was refused (``ResumeMismatchError``: the input changed) and the day kept its
old rows. A last ``airflow dags test`` of the day (a new DAG run, the corrected input again) sends
nothing: already delivered. Every ingest's asset event names the day as its partition key (the task
lists the table's asset among its outlets) and the run in its ``extra``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.airflow_env import embedded_connection, xcom
from tests.support.local_cloud import clean_env
from zerobus_orchestration.tables import table_uri

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

BIN = Path(sys.executable).parent
DAG_ID = "zerobus_reload_day"
TABLE = "main.derived.day_orders"
DAY = "2026-11-01"
DAG_FILE = """
import os

from airflow.sdk import DAG, Asset

from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.utils.lineage import table_asset_uri
from airflow_provider.sensors.readback import ZerobusReadbackSensor

with DAG("zerobus_reload_day", schedule=None) as dag:
    ingest = ZerobusIngestOperator(
        task_id="ingest",
        table="main.derived.day_orders",
        path=os.environ["RELOAD_DAY_INPUT"],
        role="derived",
        write_mode="replace",
        outlets=[Asset(table_asset_uri("main.derived.day_orders"))],  # its event carries the partition key
    )
    readback = ZerobusReadbackSensor(
        task_id="readback", table="main.derived.day_orders", ingest_task_id="ingest", poke_interval=0.2, timeout=60
    )
    ingest >> readback
"""


def _orders(path: Path, ids: range) -> None:
    pq.write_table(pa.table({"order_id": pa.array(ids, pa.int64()), "amount": [i * 0.5 for i in ids]}), path)


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{(done.stdout + done.stderr)[-4000:]}"
    return done


def _day_run() -> tuple[str, dict[str, str]]:
    """The day's DAG run id and its task instances' states, from the metadata DB."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == DAG_ID).all()
        assert len(runs) == 1, [r.run_id for r in runs]  # one DAG run per logical date
        run = runs[0]
        return run.run_id, {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def _asset_events() -> list[tuple[str | None, dict[str, Any]]]:
    """(partition key, extra) of the table asset's events, oldest first, from the metadata DB."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from airflow_provider.utils.lineage import table_asset_uri

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == table_asset_uri(TABLE))
            .order_by(AssetEvent.id)
            .all()
        )
        return [(e.partition_key, dict(e.extra or {})) for e in events]


def _orders_in_table(warehouse: Path) -> dict[str, list[int]]:
    data = DeltaTable(table_uri(str(warehouse), TABLE)).to_pyarrow_table(columns=["_twg_source", "order_id"])
    out: dict[str, list[int]] = {}
    for tag, order in zip(data["_twg_source"].to_pylist(), data["order_id"].to_pylist(), strict=True):
        out.setdefault(tag, []).append(order)
    return {tag: sorted(ids) for tag, ids in out.items()}


def test_clearing_the_ingest_after_correcting_the_input_reloads_exactly_the_corrected_day(
    airflow_db: None, tmp_path: Path
) -> None:
    dags, warehouse, data = tmp_path / "dags", tmp_path / "warehouse", tmp_path / "orders.parquet"
    dags.mkdir()
    (dags / "reload_day.py").write_text(DAG_FILE)
    _orders(data, range(500))
    env = clean_env("AIRFLOW__CORE__DAGS_FOLDER") | {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_ZEROBUS_DEFAULT": embedded_connection(warehouse),
        "RELOAD_DAY_INPUT": str(data),
        "AIRFLOW_HOME": os.environ["AIRFLOW_HOME"],  # this session's metadata DB
    }

    _airflow(env, "dags", "test", DAG_ID, DAY)
    run_id, states = _day_run()
    assert states == {"ingest": "success", "readback": "success"}
    first = xcom(DAG_ID, run_id, "ingest")
    assert first["partition"] == f"{DAY}/-1@{run_id}"
    assert _orders_in_table(warehouse) == {f"zerobus_reload_day/ingest[{DAY}/-1@{run_id}]": list(range(500))}
    keyed = [(key, extra.get("partition")) for key, extra in _asset_events() if key is not None]
    assert keyed == [(DAY, first["partition"])], _asset_events()

    # The day's input is corrected (20 orders dropped, 10 added), then the day is cleared and re-run.
    _orders(data, range(20, 510))
    _airflow(env, "tasks", "clear", DAG_ID, "-s", DAY, "-e", DAY, "-y")
    assert _day_run()[1] == {"ingest": "None", "readback": "None"}, "the clear must have acted"
    _airflow(env, "tasks", "test", DAG_ID, "ingest", DAY)
    _airflow(env, "tasks", "test", DAG_ID, "readback", DAY)

    same_run, states = _day_run()
    assert same_run == run_id and states == {"ingest": "success", "readback": "success"}
    reloaded = xcom(DAG_ID, run_id, "ingest")
    revision = f"{DAY}/-1@{run_id}#2"
    assert reloaded["partition"] == revision and reloaded["rows_written"] == 490
    assert reloaded["superseded_sources"] == [f"zerobus_reload_day/ingest[{DAY}/-1@{run_id}]"]
    assert _orders_in_table(warehouse) == {f"zerobus_reload_day/ingest[{revision}]": list(range(20, 510))}
    keyed = [(key, extra.get("partition")) for key, extra in _asset_events() if key is not None]
    assert keyed[-1] == (DAY, revision), _asset_events()
    verified: dict[str, Any] = xcom(DAG_ID, run_id, "readback")
    assert (
        verified["verified"] is True and verified["duplicate_count"] == 0 and verified["rows_scanned"] == 490
    )

    # The day tested again, the corrected input unchanged: a new DAG run of the day that sends nothing.
    version = DeltaTable(table_uri(str(warehouse), TABLE)).version()
    _airflow(env, "dags", "test", DAG_ID, DAY)
    again_run, states = _day_run()
    assert again_run != run_id and states == {"ingest": "success", "readback": "success"}
    again = xcom(DAG_ID, again_run, "ingest")
    assert again["already_delivered"] is True and again["rows_written"] == 0
    assert (
        again["delivered_by"] == f"zerobus_reload_day/ingest[{revision}]" and again["partition"] == revision
    )
    assert DeltaTable(table_uri(str(warehouse), TABLE)).version() == version
