"""The deferrable read-back sensor hands its trigger the ingest's record and never a secret.

``dag.test()`` runs the ingest, then the sensor, which defers; the trigger runs inline like a triggerer
runs it, rebuilt from ``serialize()`` kwargs, and verifies the ranges the ingest's XCom recorded.
Secrets reach the triggerer through the connection only: a secret in ``config_overrides`` would be
stored in plain text in the ``trigger`` table's kwargs, so deferring refuses it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor
from airflow_provider.triggers.readback import ZerobusReadbackTrigger
from airflow_provider.utils.readback import secret_override_paths
from tests.support.airflow_env import xcom
from zerobus_orchestration.errors import ConfigError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]

SECRET = "s3cr3t-never-stored"


def test_the_deferred_sensor_verifies_the_ingests_record_in_dag_test(
    register_dag: Any, tmp_path: Path
) -> None:
    pq.write_table(pa.table({"id": pa.array(range(70), pa.int64())}), tmp_path / "ids.parquet")
    with DAG("readback_record", schedule=None) as dag:
        ingest = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.record_ids", path=str(tmp_path / "ids.parquet")
        )
        sensor = ZerobusReadbackSensor(
            task_id="readback",
            table="main.raw.record_ids",
            ingest_task_id="ingest",  # deferrable by default: no deferrable=True needed
            poke_interval=0.1,
            max_poll_interval=0.3,
            timeout=60,
            config_overrides={"readback": {"poll_max_s": 0.2}},  # non-secret overrides still travel
        )
        ingest >> sensor
    register_dag(dag)

    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"ingest": "success", "readback": "success"}, states
    written = xcom(dag.dag_id, run.run_id, "ingest")
    verified = xcom(dag.dag_id, run.run_id, "readback")
    assert written["rows_written"] == 70
    assert verified["verified"] is True and verified["rows_scanned"] == 70
    assert verified["expected_from"] == "write_record" and verified["expected_rows"] == 70


def _context(run_id: str, xcoms: dict[tuple[str, int], Any]) -> Any:
    def xcom_pull(task_ids: str | None = None, *, map_indexes: int | None = None, **_: Any) -> Any:
        return xcoms.get((task_ids, map_indexes))

    return {"run_id": run_id, "ti": SimpleNamespace(map_index=-1, run_id=run_id, xcom_pull=xcom_pull)}


def test_a_secret_override_is_refused_instead_of_stored_in_the_trigger_kwargs() -> None:
    with DAG("readback_secret", schedule=None):
        sensor = ZerobusReadbackSensor(
            task_id="readback",
            table="main.raw.never_written",
            source="s",
            partition="p",
            deferrable=True,
            timeout=30,
            config_overrides={"readback": {"token": SECRET}, "client_secret": SECRET},
        )
    try:
        sensor.execute(_context("manual__x", {}))
    except TaskDeferred as deferred:  # what the code before the fix did: the secret went to the DB
        _, kwargs = deferred.trigger.serialize()
        pytest.fail(f"deferred with the secret in the trigger kwargs: {SECRET in json.dumps(kwargs)}")
    except AirflowFailException as exc:
        message = str(exc)
        assert "readback.token" in message and "client_secret" in message and "connection" in message
        assert SECRET not in message
    else:
        pytest.fail("a deferrable sensor with a secret override must not run")

    with pytest.raises(ConfigError, match=r"emulator\.client_secret") as info:
        ZerobusReadbackTrigger(
            table="t", end_time=time.time() + 5, config_overrides={"emulator": {"client_secret": SECRET}}
        )
    assert SECRET not in str(info.value)


def test_serialized_trigger_kwargs_are_primitives_without_secrets() -> None:
    trigger = ZerobusReadbackTrigger(
        table="main.raw.t",
        end_time=time.time() + 5,
        zerobus_conn_id="zerobus_default",
        source="d/ingest",
        partition="r/-1",
        ranges=[[0, 10], [20, 25]],
        config_overrides={"readback": {"poll_max_s": 0.5}},
    )
    classpath, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs, "JSON-safe primitives only"
    assert kwargs["ranges"] == [[0, 10], [20, 25]]
    assert secret_override_paths(kwargs["config_overrides"]) == []
    assert set(kwargs) == {
        "table",
        "end_time",
        "zerobus_conn_id",
        "source",
        "partition",
        "ranges",
        "replaces",
        "poll_interval",
        "max_poll_interval",
        "config_overrides",
    }
    assert ZerobusReadbackTrigger(**kwargs).serialize() == (classpath, kwargs)
