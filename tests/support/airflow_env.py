"""Airflow provider tests: a throwaway AIRFLOW_HOME, env-var connections, one embedded emulator.

A plugin listed in tests/conftest.py, so it is loaded before any test module (unit or system).

Airflow reads its configuration when first imported, so the environment is set at module import,
before any test module imports airflow. Connections come from ``AIRFLOW_CONN_<ID>`` JSON variables:
outside a task the SDK resolves them from the environment, no metadata DB needed. Only the end-to-end
tests request ``airflow_db`` (SQLite in the temporary home).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if "airflow" in sys.modules and not os.environ.get("AIRFLOW_HOME", "").startswith(tempfile.gettempdir()):
    raise RuntimeError("airflow was imported before tests/support/airflow_env.py could isolate AIRFLOW_HOME")

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="zb-airflow-home-"))
WAREHOUSE = AIRFLOW_HOME / "warehouse"
(AIRFLOW_HOME / "dags").mkdir()
os.environ.update(
    AIRFLOW_HOME=str(AIRFLOW_HOME),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__CORE__DAGS_FOLDER=str(AIRFLOW_HOME / "dags"),
    AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
)

# Small emulator lags keep the read-back tests to a couple of seconds while still exercising the wait.
# The mode is explicit: these tests run tasks inside the test process, so the emulator lives there too
# (the provider's default, one shared emulator process per warehouse, is covered in tests/system/emulator_daemon).
EMULATOR_SETTINGS: dict[str, Any] = {
    "emulator": {"mode": "in_process", "time_to_table_s": 0.1, "iceberg_lag_s": 0.5},
    "readback": {"poll_initial_s": 0.05, "poll_max_s": 0.2, "wait_timeout_s": 20},
}


def embedded_connection(warehouse: Path, **extra: Any) -> str:
    """``AIRFLOW_CONN_*`` JSON for an embedded connection: no Host, the emulator on ``warehouse``."""
    return json.dumps(
        {
            "conn_type": "zerobus",
            "extra": {"embedded": True, "warehouse": str(warehouse), "config": EMULATOR_SETTINGS, **extra},
        }
    )


os.environ["AIRFLOW_CONN_ZEROBUS_DEFAULT"] = embedded_connection(WAREHOUSE)


def _first_event(trigger: Any) -> dict[str, Any]:
    async def _first() -> dict[str, Any]:
        event = await anext(trigger.run())
        return dict(event.payload)

    return asyncio.run(_first())


@pytest.fixture(scope="session")
def first_event() -> Callable[[Any], dict[str, Any]]:
    """Drive a trigger like ``dag.test()`` does: run it to its first (and only) event's payload."""
    return _first_event


@pytest.fixture(scope="session", autouse=True)
def _close_runtimes_and_home() -> Iterator[None]:
    yield
    if "zerobus_orchestration.runtime.registry" in sys.modules:
        from zerobus_orchestration.runtime.registry import close_all_runtimes

        close_all_runtimes()
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A migrated SQLite metadata DB in the temporary home (only the ``dag.test()`` tests need it)."""
    from airflow.utils import db

    db.initdb()


@pytest.fixture(scope="session")
def register_dag(airflow_db: None) -> Any:
    """Serialize an in-test DAG so ``dag.test()`` can create a run (Airflow 3.3 internal API names)."""
    return _register_dag


def xcom(dag_id: str, run_id: str, task_id: str, *, missing_ok: bool = False) -> Any:
    """A task instance's XCom ``return_value`` as the metadata DB holds it (JSON text decoded).

    A task that pushed nothing raises (``NoResultFound``) unless ``missing_ok``, which returns None instead:
    for a run read whole, where a failed or skipped task has no return value.
    """
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(XComModel).filter_by(
            dag_id=dag_id, run_id=run_id, task_id=task_id, key="return_value"
        )
        row = query.one_or_none() if missing_ok else query.one()
        value = None if row is None else row.value
    return json.loads(value) if isinstance(value, str) else value


def _register_dag(dag: Any, bundle: str = "testing") -> None:
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.serialization.definitions.dag import SerializedDAG
    from airflow.serialization.serialized_objects import DagSerialization, LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        session.merge(DagBundleModel(name=bundle))
        session.flush()
        SerializedDAG.bulk_write_to_db(bundle, None, [dag], session=session)
        SerializedDagModel.write_dag(
            LazyDeserializedDAG(data=DagSerialization.to_dict(dag)), bundle, session=session
        )
