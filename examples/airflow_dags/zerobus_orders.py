"""Orders into a Delta table through Zerobus: reconcile -> check -> extract -> ingest -> read-back.

Runs against the ``zerobus_default`` connection. With no Host (or ``"embedded": true`` in its extra) the
tasks start the local emulator on the connection's ``warehouse`` folder, so the whole DAG runs on a
laptop; point the connection at a Zerobus endpoint and a workspace for Databricks (docs/guides/airflow.md).

    export AIRFLOW_CONN_ZEROBUS_DEFAULT='{"conn_type": "zerobus",
        "extra": {"embedded": true, "warehouse": "/tmp/zerobus-warehouse"}}'
    airflow dags test zerobus_orders
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_provider.operators.catalog import ZerobusPrimaryRawCheckOperator, ZerobusReconcileOperator
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor

TABLE = "main.raw.orders"
# The Arrow schema as plain strings: the DAG file stays cheap to parse (no pyarrow import here).
ORDERS_SCHEMA = {
    "order_id": "int64 not null",
    "customer": "string",
    "amount": "decimal(12, 2)",
    "ordered_at": "timestamp[us, tz=UTC]",
}
DESCRIPTIONS = {
    "order_id": "Order number assigned by the shop; unique per order.",
    "customer": "Customer handle.",
    "amount": "Order total in EUR.",
    "ordered_at": "When the customer placed the order (UTC).",
}

with DAG(
    dag_id="zerobus_orders",
    description="Land shop orders in a Delta table through Zerobus and verify them through Iceberg.",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["zerobus", "example"],
    params={
        "landing_dir": Param(
            os.path.join(tempfile.gettempdir(), "zerobus-orders-landing"),
            type="string",
            description="Where the extract step drops its Parquet file.",
        ),
        "rows": Param(1000, type="integer", minimum=1),
    },
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
) as dag:
    reconcile = ZerobusReconcileOperator(
        task_id="reconcile", table=TABLE, schema=ORDERS_SCHEMA, descriptions=DESCRIPTIONS
    )
    check = ZerobusPrimaryRawCheckOperator(task_id="check_primary_raw", table=TABLE)

    @task
    def extract(params: dict[str, object] | None = None, run_id: str | None = None) -> str:
        """Stand-in for a real extract: write this run's orders as one Parquet file, return its path."""
        from datetime import UTC
        from decimal import Decimal

        import pyarrow as pa
        import pyarrow.parquet as pq

        settings = params or {}
        landing_dir, rows = str(settings["landing_dir"]), int(str(settings["rows"]))
        folder = os.path.join(landing_dir, (run_id or "manual").replace(":", "_").replace("+", "_"))
        os.makedirs(folder, exist_ok=True)
        now = datetime.now(UTC)
        orders = pa.table(
            {
                "order_id": pa.array(range(rows), pa.int64()),
                "customer": [f"customer-{i % 37}" for i in range(rows)],
                "amount": pa.array(
                    [Decimal(f"{(i % 500) + 0.99:.2f}") for i in range(rows)], pa.decimal128(12, 2)
                ),
                "ordered_at": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
            }
        )
        path = os.path.join(folder, "orders.parquet")
        pq.write_table(orders, path)
        return path

    landed = extract()  # params and run_id come from the task context

    ingest = ZerobusIngestOperator(
        task_id="ingest",
        table=TABLE,
        path=landed,  # the upstream task's XCom: a path, never the data itself
        descriptions=DESCRIPTIONS,
        batch_rows=250,
    )

    readback = ZerobusReadbackSensor(
        task_id="readback",
        table=TABLE,
        ingest_task_id="ingest",  # verify exactly the rows this run's ingest delivered
        # Deferrable by default: waits in the triggerer (`airflow dags test` runs the trigger inline).
        poke_interval=0.5,
        max_poll_interval=5,
        timeout=300,
    )

    reconcile >> check >> ingest >> readback
