"""The DAG of the Airflow many-machines test: an ingest, then the deferrable read-back sensor.

Copied by the test into a DAGs folder of its own, with ``events.parquet`` beside it, and run one task per
``airflow tasks test`` process. Every setting of the production path reaches the tasks through the
``zerobus_mh`` connection, which each process defines for itself (its own state dir and warehouse).
"""

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor

DAG_ID = "zerobus_many_machines"
TABLE = "main.mh.airflow_events"
CONN_ID = "zerobus_mh"
START = datetime(2026, 1, 1)

with DAG(DAG_ID, schedule=None, start_date=START, catchup=False) as dag:
    ingest = ZerobusIngestOperator(
        task_id="ingest",
        table=TABLE,
        path=str(Path(__file__).with_name("events.parquet")),
        zerobus_conn_id=CONN_ID,
    )
    readback = ZerobusReadbackSensor(
        task_id="readback",
        table=TABLE,
        ingest_task_id="ingest",
        zerobus_conn_id=CONN_ID,
        deferrable=True,
        poke_interval=0.2,
        max_poll_interval=1.0,
        timeout=60,
    )
    ingest >> readback
