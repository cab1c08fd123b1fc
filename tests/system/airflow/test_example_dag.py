"""The example DAG end to end with ``dag.test()``: SQLite metadata DB, embedded emulator, inline trigger.

``dag.test()`` logs task failures instead of raising them, so the test asserts every task instance's
state, then reads the table back through Iceberg to check what the run delivered.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.hooks.zerobus import ZerobusHook
from tests.support.airflow_env import xcom

pytestmark = [
    pytest.mark.integration,
    # dag.test() builds Airflow's in-process Execution API client on starlette's TestClient.
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "airflow_dags" / "zerobus_orders.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("zerobus_orders_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_dag_runs_end_to_end(register_dag: Any, tmp_path: Path) -> None:
    module = _load_example()
    dag = module.dag
    # The wiring the README describes: reconcile -> check_primary_raw -> ingest -> readback, extract -> ingest.
    upstream = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert upstream == {
        "reconcile": set(),
        "check_primary_raw": {"reconcile"},
        "extract": set(),
        "ingest": {"check_primary_raw", "extract"},
        "readback": {"ingest"},
    }
    register_dag(dag)

    run = dag.test(run_conf={"landing_dir": str(tmp_path / "landing"), "rows": 300})

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == dict.fromkeys(
        ["reconcile", "check_primary_raw", "extract", "ingest", "readback"], "success"
    )
    assert str(run.state) == "success"

    ingest = xcom(dag.dag_id, run.run_id, "ingest")
    assert ingest["rows_written"] == 300 and ingest["table"] == module.TABLE
    # A run of the DAG run's logical date: "<ds>/-1@<run id>".
    assert (
        ingest["source"] == "zerobus_orders/ingest"
        and ingest["partition"] == f"{ingest['logical_partition']}@{run.run_id}"
    )
    readback = xcom(dag.dag_id, run.run_id, "readback")
    assert readback["verified"] is True and readback["duplicate_count"] == 0
    check = xcom(dag.dag_id, run.run_id, "check_primary_raw")
    assert all(condition["ok"] for condition in check["conditions"])
    assert not any("secret" in json.dumps(v).lower() for v in (ingest, readback, check))

    hook = ZerobusHook()
    try:
        rows = hook.get_conn().read_rows(
            module.TABLE, source="zerobus_orders/ingest", partition=ingest["partition"]
        )
        assert rows.num_rows == 300
        assert rows["order_id"].to_pylist() == list(range(300))
    finally:
        hook.release()


def test_readback_after_an_empty_ingest_succeeds_in_a_dag_run(register_dag: Any, tmp_path: Path) -> None:
    """The sensor reads the ingest's real XCom (rows_written == 0) instead of poking until its timeout."""
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq
    from airflow.sdk import DAG

    from airflow_provider.operators.ingest import ZerobusIngestOperator
    from airflow_provider.sensors.readback import ZerobusReadbackSensor

    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), tmp_path / "empty.parquet")
    with DAG("zerobus_empty_readback", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        ingest = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.empty_dag", path=str(tmp_path / "empty.parquet")
        )
        readback = ZerobusReadbackSensor(
            task_id="readback",
            table="main.raw.empty_dag",
            ingest_task_id="ingest",
            deferrable=False,
            poke_interval=0.2,
            timeout=20,
        )
        ingest >> readback
    register_dag(dag)

    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"ingest": "success", "readback": "success"}
    assert xcom(dag.dag_id, run.run_id, "ingest")["rows_written"] == 0
    readback_xcom = xcom(dag.dag_id, run.run_id, "readback")
    assert readback_xcom["nothing_to_verify"] is True and readback_xcom["rows_written"] == 0
