"""Airflow on many machines: the ingest and its read-back sensor as two processes that share only the
metadata DB, Zerobus and the lakehouse (issue 14, item 5).

One local cloud (``zerobus-orch serve --json``) stands in for Databricks. Each task runs as its own
``airflow tasks test`` process, like a try on a Celery or Kubernetes worker, with the production
``zerobus`` connection (Zerobus endpoint, OAuth M2M client, workspace URL, SQL warehouse id, so the
``unity`` catalog backend) and a state dir and warehouse of its own, both empty. The sensor learns what
to verify from the ingest's XCom, which reaches it through the metadata DB only; its host holds no
coverage of the write when it starts, so a verification that leaned on local files could not succeed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pendulum
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import tests.support.airflow_many_machines_dag as dag_source
from tests.support.airflow_env import xcom
from tests.support.local_cloud import clean_env, serve
from zerobus_orchestration.tables import table_uri

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,  # three hosts, each an Airflow process
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

BIN = Path(sys.executable).parent
SECRET = "airflow-many-machines-secret"
ROWS = 3_000
RUN_ID = "manual__many_machines"
LOGICAL_DATE = pendulum.datetime(2026, 1, 2, tz="UTC")


@pytest.fixture
def local_cloud(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``zerobus-orch serve --json`` on its own warehouse folder; yields what it printed."""
    # Iceberg lags the Delta commit by 30 s, so the sensor usually finds nothing yet and defers: the trigger
    # (inline in ``tasks test``, as on a triggerer) then verifies the record its kwargs carry. Under heavy
    # load it may verify on its first check instead; either way it must verify the ingest's record.
    env = clean_env() | {"ZEROBUS_EMULATOR__CLIENT_SECRET": SECRET, "ZEROBUS_EMULATOR__ICEBERG_LAG_S": "30"}
    with serve(str(tmp_path / "cloud"), env) as info:
        yield info


def _host(cloud: dict[str, Any], root: Path, dags: Path) -> dict[str, str]:
    """A worker: the production connection, its own empty warehouse and a state dir not yet created."""
    (root / "warehouse").mkdir(parents=True)
    connection = {
        "conn_type": "zerobus",
        "host": cloud["endpoint"],
        "login": cloud["client_id"],
        "password": SECRET,
        "extra": {
            "workspace_url": cloud["workspace_url"],
            "warehouse_id": cloud["sql_warehouse_id"],
            # The hook reads the connection only (never ZEROBUS_*), so the per-host dirs go here.
            "config": {
                "state_dir": str(root / "state"),
                "warehouse": str(root / "warehouse"),
                "readback": {"poll_initial_s": 0.1, "poll_max_s": 0.5, "wait_timeout_s": 30},
            },
        },
    }
    # clean_env keeps AIRFLOW_HOME, so every host uses this process's SQLite metadata DB.
    return clean_env() | {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        f"AIRFLOW_CONN_{dag_source.CONN_ID.upper()}": json.dumps(connection),
    }


def _tasks_test(env: dict[str, str], task_id: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(BIN / "airflow"),
        "tasks",
        "test",
        dag_source.DAG_ID,
        task_id,
        LOGICAL_DATE.isoformat(),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)


def _create_run(dags: Path, register_dag: Any) -> None:
    """Register the DAG and create its run up front: ``tasks test`` deletes a run it created itself, and
    with it the ingest's XCom, so both processes must find this one by its logical date."""
    from airflow.models.dagrun import get_or_create_dagrun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    spec = importlib.util.spec_from_file_location("zerobus_many_machines_dag", dags / "many_machines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    register_dag(module.dag, bundle="dags-folder")
    with create_session() as session:
        serialized = SerializedDagModel.get_dag(dag_source.DAG_ID, session=session)
        assert serialized is not None
        get_or_create_dagrun(
            dag=serialized,
            run_id=RUN_ID,
            logical_date=LOGICAL_DATE,
            data_interval=serialized.timetable.infer_manual_data_interval(run_after=LOGICAL_DATE),
            run_after=LOGICAL_DATE,
            conf=None,
            triggered_by=DagRunTriggeredByType.TEST,
            triggering_user_name=None,
            start_date=LOGICAL_DATE,
            session=session,
        )


def _task_instance(task_id: str) -> tuple[str, Any]:
    """The task instance's state and its XCom ``return_value``, read from the shared metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_source.DAG_ID, run_id=RUN_ID, task_id=task_id)
        state = str(ti.one().state)
    return state, xcom(dag_source.DAG_ID, RUN_ID, task_id, missing_ok=True)


def test_the_sensor_on_another_host_verifies_the_ingests_xcom_record(
    tmp_path: Path, local_cloud: dict[str, Any], register_dag: Any
) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(dag_source.__file__, dags / "many_machines.py")
    ids = pa.array(range(ROWS), pa.int64())
    pq.write_table(pa.table({"event_id": ids, "kind": ["k"] * ROWS}), dags / "events.parquet")
    _create_run(dags, register_dag)

    host_a = _host(local_cloud, tmp_path / "host_a", dags)
    ingested = _tasks_test(host_a, "ingest")
    assert ingested.returncode == 0, ingested.stderr[-3000:]
    state, written = _task_instance("ingest")
    assert state == "success", (ingested.stdout + ingested.stderr)[-4000:]
    # The run of the DAG run's logical date (and map index): "<ds>/-1@<run id>".
    source, partition = f"{dag_source.DAG_ID}/ingest", f"{written['logical_partition']}@{RUN_ID}"
    assert written["rows_written"] == ROWS and written["rows_skipped"] == 0
    assert written["logical_partition"].endswith("/-1")
    assert (written["source"], written["partition"]) == (source, partition)
    # The rows went through the local cloud into its warehouse, not into host A's.
    served = table_uri(str(local_cloud["warehouse"]), dag_source.TABLE)
    assert DeltaTable(served).to_pyarrow_dataset().count_rows() == ROWS
    assert list((tmp_path / "host_a" / "warehouse").iterdir()) == []

    host_c = _host(local_cloud, tmp_path / "host_c", dags)
    assert not (tmp_path / "host_c" / "state").exists()  # no coverage of the write on the sensor's host
    sensed = _tasks_test(host_c, "readback")
    log = sensed.stdout + sensed.stderr
    assert sensed.returncode == 0, log[-3000:]
    state, verified = _task_instance("readback")
    assert state == "success", log[-4000:]
    assert "read-back verified" in log, log[-4000:]
    # What it verified is the ingest's own record (its XCom), not a file on the sensor's host.
    assert verified["verified"] is True and verified["expected_from"] == "write_record", verified
    assert verified["expected_rows"] == ROWS and verified["rows_scanned"] == ROWS
    assert verified["missing_ranges"] == [] and verified["duplicate_count"] == 0
    assert list((tmp_path / "host_c" / "warehouse").iterdir()) == []
    assert not list((tmp_path / "host_c").rglob("coverage.sqlite"))  # read-only: it cached nothing either
