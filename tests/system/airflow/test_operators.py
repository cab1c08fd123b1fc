"""Operators, sensor and trigger against the embedded emulator through the real runtime (no mocks).

The session's ``zerobus_default`` connection is embedded (no Host) on a temporary warehouse with small
emulator lags; every test writes its own table. Operators run through ``execute(context)`` with a
minimal context; the end-to-end DAG test covers the same path inside ``dag.test()``.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred
from deltalake import DeltaTable

from airflow_provider.hooks.zerobus import ZerobusHook
from airflow_provider.operators.catalog import ZerobusPrimaryRawCheckOperator, ZerobusReconcileOperator
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor
from airflow_provider.triggers.readback import ZerobusReadbackTrigger
from zerobus_orchestration import files as files_module
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID, ZerobusRuntime, source_tag
from zerobus_orchestration.tables import table_uri

pytestmark = pytest.mark.integration

FirstEvent = Callable[[Any], dict[str, Any]]


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None)


def _context(run_id: str = "manual__try", map_index: int = -1) -> Any:
    return {"run_id": run_id, "ti": SimpleNamespace(map_index=map_index, run_id=run_id)}


def _orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": [f"c{i % 7}" for i in range(start, start + n)],
            "amount": [round(i * 1.25, 2) for i in range(start, start + n)],
        }
    )


def _verified(hook: ZerobusHook, table: str, source: str | None = None, partition: str | None = None) -> Any:
    """Wait out the emulated Iceberg lag with the blocking read-back, then return its report."""
    return hook.get_conn().verify(table, source=source, partition=partition, wait_s=15)


@pytest.fixture
def hook() -> Iterator[ZerobusHook]:
    h = ZerobusHook()
    yield h
    h.release()


def test_ingest_parquet_and_csv_files(
    tmp_path: Path, hook: ZerobusHook, capfd: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(_orders(0, 40), tmp_path / "part-1.parquet", row_group_size=16)
    pq.write_table(_orders(40, 10), tmp_path / "part-0.parquet")
    pacsv.write_csv(_orders(100, 25), tmp_path / "late.csv")
    with _dag("files"):
        parquet = ZerobusIngestOperator(
            task_id="parquet",
            table="main.raw.files_orders",
            path=str(tmp_path / "*.parquet"),
            batch_rows=8,
            descriptions={"order_id": "Order number from the shop."},
        )
        csv = ZerobusIngestOperator(
            task_id="csv", table="main.raw.files_orders", path=[str(tmp_path / "late.csv")]
        )

    first = parquet.execute(_context())
    second = csv.execute(_context())

    assert first["rows_written"] == 50 and first["rows_skipped"] == 0
    assert first["source"] == "files/parquet" and first["partition"] == "manual__try/-1"
    assert first["bytes_written"] > 0 and isinstance(first["delta_version"], int)
    assert 0 < first["payload_bytes"] < first["bytes_written"]  # the user's bytes, then as sent
    assert first["payload_mb_per_s"] < first["stamped_mb_per_s"]
    assert second["rows_written"] == 25
    json.dumps([first, second])  # XCom-safe
    logged = capfd.readouterr().out  # task loggers write through Airflow's structlog to stdout
    assert "parquet: zerobus metrics" in logged and "csv: zerobus health" in logged
    assert '"rows_written": 50' in logged and '"coalesce_ratio_p50"' in logged and '"rebuilds": 0' in logged

    report = _verified(hook, "main.raw.files_orders")
    assert report.verified and report.rows_scanned == 75 and report.duplicate_count == 0
    rows = hook.get_conn().read_rows(
        "main.raw.files_orders", source="files/parquet", partition="manual__try/-1"
    )
    assert rows["order_id"].to_pylist() == list(range(40, 50)) + list(range(0, 40))  # sorted glob order


def test_bad_input_fails_without_retry_naming_table_and_column(tmp_path: Path) -> None:
    pq.write_table(_orders(0, 3), tmp_path / "good.parquet")
    bad = pa.table({"order_id": ["not-a-number"], "customer": ["c"], "amount": [1.0]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with _dag("bad_input"):
        good = ZerobusIngestOperator(
            task_id="good", table="main.raw.typed_orders", path=str(tmp_path / "good.parquet")
        )
        wrong = ZerobusIngestOperator(
            task_id="wrong", table="main.raw.typed_orders", path=str(tmp_path / "bad.parquet")
        )
        nothing = ZerobusIngestOperator(
            task_id="nothing", table="main.raw.typed_orders", path=str(tmp_path / "none-*.csv")
        )
        optional = ZerobusIngestOperator(
            task_id="optional",
            table="main.raw.typed_orders",
            path=str(tmp_path / "none-*.csv"),
            allow_empty=True,
        )
        unreadable = ZerobusIngestOperator(
            task_id="unreadable", table="main.raw.typed_orders", path=str(tmp_path / "broken.parquet")
        )
    (tmp_path / "broken.parquet").write_bytes(b"this is not parquet")
    good.execute(_context())
    with pytest.raises(AirflowFailException, match=r"cannot read .*broken\.parquet"):
        unreadable.execute(_context())
    with pytest.raises(AirflowFailException) as info:
        wrong.execute(_context())
    assert "main.raw.typed_orders" in str(info.value) and "order_id" in str(info.value)
    with pytest.raises(AirflowFailException, match="no input file matches"):
        nothing.execute(_context())
    with pytest.raises(AirflowSkipException):
        optional.execute(_context())


def test_hook_test_connection_brings_the_runtime_up() -> None:
    ok, message = ZerobusHook().test_connection()
    assert ok and "embedded emulator" in message
    ok, message = ZerobusHook(zerobus_conn_id="no_such_connection").test_connection()
    assert not ok and "no_such_connection" in message


class _RecordingCursor(sqlite3.Cursor):
    """Stands for a driver's server-side cursor class: records that the operator asked for it."""

    opened = 0

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__(connection)
        type(self).opened += 1


def test_ingest_from_a_sql_query_through_a_dbapi_connection(
    tmp_path: Path, hook: ZerobusHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (order_id INTEGER, customer TEXT, amount REAL)")
        conn.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            _orders(0, 23).to_pylist() and [tuple(r.values()) for r in _orders(0, 23).to_pylist()],
        )
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_DB", json.dumps({"conn_type": "sqlite", "host": str(db)}))
    with _dag("sql"):
        op = ZerobusIngestOperator(
            task_id="from_sql",
            table="main.raw.sql_orders",
            sql="SELECT order_id, customer, amount FROM orders WHERE amount >= :low ORDER BY order_id",
            parameters={"low": 0},
            sql_conn_id="shop_db",
            fetch_rows=5,
            cursor_kwargs={"factory": _RecordingCursor},
            reconcile_first=True,
            schema={"order_id": "int64", "customer": "string", "amount": "double"},
        )
    summary = op.execute(_context())
    assert summary["rows_written"] == 23
    assert _RecordingCursor.opened == 1, "cursor_kwargs must reach conn.cursor(...)"
    report = _verified(hook, "main.raw.sql_orders", source="sql/from_sql", partition="manual__try/-1")
    assert report.verified and report.rows_scanned == 23

    with _dag("sql_bad"):
        not_sql = ZerobusIngestOperator(
            task_id="x", table="main.raw.sql_orders", sql="SELECT 1", sql_conn_id="zerobus_default"
        )
    with pytest.raises(AirflowFailException, match="not a common-sql DbApiHook"):
        not_sql.execute(_context())


def test_retried_ingest_resumes_from_coverage_without_duplicates(
    tmp_path: Path, hook: ZerobusHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    pq.write_table(_orders(0, 60), tmp_path / "orders.parquet")
    with _dag("retry"):
        op = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.retry_orders", path=str(tmp_path / "*.parquet"), batch_rows=10
        )

    real = files_module.FileInput.batches

    def flaky(self: files_module.FileInput) -> Iterator[pa.RecordBatch]:
        # The send's read (the whole-input check read the files fine before it, with ``located``).
        for index, batch in enumerate(real(self)):
            if index == 3:
                raise ConnectionResetError("network blip while reading the landing zone")
            yield batch

    monkeypatch.setattr(files_module.FileInput, "batches", flaky)
    with pytest.raises(ConnectionResetError, match="Delivered before the failure: 30 row"):
        op.execute(_context("manual__retry", map_index=2))  # try 1: 30 rows delivered, then a failure
    monkeypatch.setattr(files_module.FileInput, "batches", real)

    retried = op.execute(_context("manual__retry", map_index=2))  # try 2: same dag/task/run/map index
    assert retried["rows_skipped"] == 30
    assert retried["rows_written"] == 30
    again = op.execute(_context("manual__retry", map_index=2))  # a third try has nothing left to send
    assert again["rows_written"] == 0 and again["rows_skipped"] == 60

    report = _verified(hook, "main.raw.retry_orders", source="retry/ingest", partition="manual__retry/2")
    assert report.verified
    assert report.rows_scanned == 60 and report.duplicate_count == 0

    other_run = op.execute(_context("manual__next", map_index=2))  # a new run appends its own rows
    assert other_run["rows_written"] == 60 and other_run["rows_skipped"] == 0


def test_reconcile_applies_then_refuses_a_lossy_change(hook: ZerobusHook) -> None:
    table = "main.raw.reconcile_orders"
    with _dag("reconcile"):
        create = ZerobusReconcileOperator(
            task_id="create",
            table=table,
            schema={"order_id": "int64 not null", "customer": "string"},
            descriptions={"customer": "Customer handle."},
        )
        plan_only = ZerobusReconcileOperator(
            task_id="plan",
            table=table,
            schema={"order_id": "int64 not null", "customer": "string", "note": "string"},
            plan_only=True,
        )
        narrow = ZerobusReconcileOperator(
            task_id="narrow", table=table, schema={"order_id": "int64 not null", "customer": "int32"}
        )
    created = create.execute(_context())
    assert created["applied"] is True and created["version_after"] is not None
    assert any("create" in step for step in created["steps"])

    planned = plan_only.execute(_context())
    assert planned["applied"] is False and any(s["kind"] == "add_column" for s in planned["steps"])
    live = hook.get_conn().catalog.describe(table)
    assert live is not None
    version = live.version
    assert version == created["version_after"]  # plan_only applied nothing

    with pytest.raises(AirflowFailException) as info:
        narrow.execute(_context())
    message = str(info.value)
    assert "refused" in message and f"{table}.customer" in message
    state = hook.get_conn().catalog.describe(table)
    assert state is not None and state.version == version
    customer = state.column("customer")
    assert customer is not None and customer.delta_type.upper() == "STRING"


def test_primary_raw_check_lists_every_unmet_precondition(hook: ZerobusHook) -> None:
    with _dag("check"):
        missing = ZerobusPrimaryRawCheckOperator(task_id="missing", table="main.raw.never_created")
        derived_table = ZerobusReconcileOperator(
            task_id="derived", table="main.raw.derived_orders", schema={"order_id": "int64"}, role="derived"
        )
        derived = ZerobusPrimaryRawCheckOperator(task_id="derived_check", table="main.raw.derived_orders")
        raw_table = ZerobusReconcileOperator(
            task_id="raw", table="main.raw.raw_orders", schema={"order_id": "int64"}
        )
        raw = ZerobusPrimaryRawCheckOperator(task_id="raw_check", table="main.raw.raw_orders")

    with pytest.raises(
        AirflowFailException, match=r"registered: table main\.raw\.never_created does not exist"
    ):
        missing.execute(_context())

    derived_table.execute(_context())
    with pytest.raises(AirflowFailException) as info:
        derived.execute(_context())
    unmet = hook.get_conn().preconditions("main.raw.derived_orders")
    failing = [c for c in unmet if not c.ok]
    assert failing, "a derived table must miss some primary-raw precondition"
    assert f"{len(failing)} unmet precondition(s)" in str(info.value)
    for condition in failing:
        assert f"{condition.name}: {condition.detail}" in str(info.value)

    raw_table.execute(_context())
    passed = raw.execute(_context())
    assert all(c["ok"] for c in passed["conditions"])


def test_trigger_waits_out_the_iceberg_lag_then_succeeds(hook: ZerobusHook, first_event: FirstEvent) -> None:
    source, partition = "lag/ingest", "manual__lag/-1"
    hook.write("main.raw.lag_orders", _orders(0, 12), source=source, partition=partition)
    trigger = ZerobusReadbackTrigger(
        table="main.raw.lag_orders",
        end_time=time.time() + 30,
        source=source,
        partition=partition,
        poll_interval=0.1,
        max_poll_interval=0.3,
    )
    payload = first_event(trigger)
    assert payload["status"] == "success", payload
    assert payload["polls"] >= 2  # at least one "not yet" while Iceberg lagged
    assert payload["report"]["verified"] and payload["report"]["rows_scanned"] == 12
    json.dumps(payload)


def test_trigger_keeps_waiting_for_covered_rows_then_times_out_with_the_gap(
    hook: ZerobusHook, first_event: FirstEvent
) -> None:
    """Covered rows Iceberg does not show, and the Delta log shows in no version, may still be committing
    (Zerobus commits asynchronously): the trigger keeps polling, and at its deadline reports a timeout
    that carries the missing ranges, never a lost verdict."""
    table, source, partition = "main.raw.gap_orders", "gap/ingest", "manual__gap/-1"
    hook.write(table, _orders(0, 12), source=source, partition=partition)
    runtime = hook.get_conn()
    key = CoverageKey(DEFAULT_SINK_ID, source_tag(source, partition), partition)
    runtime.coverage(table).record(key, OffsetRange(12, 20))  # claimed, never committed
    trigger = ZerobusReadbackTrigger(
        table=table,
        end_time=time.time() + 2.5,  # Iceberg shows rows 0-12 after ~0.6 s: several polls see the gap
        source=source,
        partition=partition,
        poll_interval=0.1,
        max_poll_interval=0.3,
    )
    payload = first_event(trigger)
    assert payload["status"] == "timeout", payload
    assert payload["polls"] >= 2 and "last attempt" in payload["message"]
    assert "not all visible" in payload["message"] and "LOST" not in payload["message"]
    missing = payload["report"]["missing_ranges"]
    assert [(m["start"], m["end"]) for m in missing] == [(12, 20)]
    assert payload["report"]["lost_ranges"] == []
    json.dumps(payload)


def test_trigger_ends_at_once_with_rows_deleted_after_the_write(
    hook: ZerobusHook, first_event: FirstEvent
) -> None:
    """Rows deleted from the table after they were delivered are lost, not late: the trigger stops
    polling on the first snapshot that shows the delete and reports an error event carrying the lost
    ranges and the commit that removed them (the old trigger polled until its deadline)."""
    table, source, partition = "main.raw.deleted_orders", "gap/ingest", "manual__gap/-1"
    hook.write(table, _orders(0, 20), source=source, partition=partition)
    uri = table_uri(hook.get_conn().config.warehouse, table)
    DeltaTable(uri).delete("_twg_offset >= 12")
    deleted_at = DeltaTable(uri).version()
    trigger = ZerobusReadbackTrigger(
        table=table,
        end_time=time.time() + 120,
        source=source,
        partition=partition,
        poll_interval=0.1,
        max_poll_interval=0.3,
    )
    payload = first_event(trigger)
    assert payload["status"] == "error", payload
    assert payload["outcome"]["status"] == "lost" and "LOST" in payload["message"]
    assert f"deleted by Delta version {deleted_at} (DELETE)" in payload["message"]
    assert payload["waited_s"] < 60  # the first snapshot that shows the delete decides, not the deadline
    lost = payload["report"]["lost_ranges"]
    assert [(m["start"], m["end"], m["removed_at_version"]) for m in lost] == [(12, 20, deleted_at)]
    json.dumps(payload)


def test_trigger_without_coverage_reports_nothing_to_verify_at_once(first_event: FirstEvent) -> None:
    # Waiting cannot create coverage (a mistyped key, an empty ingest): no polling until the deadline.
    trigger = ZerobusReadbackTrigger(
        table="main.raw.not_there",
        end_time=time.time() + 30,
        source="d/ingset",
        partition="r1/-1",
        poll_interval=0.1,
    )
    payload = first_event(trigger)
    assert payload["status"] == "error" and payload["reason"] == "nothing_to_verify", payload
    assert payload["polls"] == 1
    assert "'d/ingset'" in payload["message"] and "'r1/-1'" in payload["message"]


def test_trigger_reports_a_permanent_error(monkeypatch: pytest.MonkeyPatch, first_event: FirstEvent) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ZB_BROKEN", json.dumps({"conn_type": "zerobus", "extra": {"embedded": "perhaps"}})
    )
    trigger = ZerobusReadbackTrigger(
        table="main.raw.t", end_time=time.time() + 30, zerobus_conn_id="zb_broken"
    )
    payload = first_event(trigger)
    assert payload["status"] == "error" and "embedded" in payload["message"] and payload["polls"] == 1


def test_deferrable_sensor_defers_with_primitives_then_completes(
    hook: ZerobusHook, first_event: FirstEvent
) -> None:
    with _dag("sensing"):
        sensor = ZerobusReadbackSensor(
            task_id="visible",
            table="main.raw.sensed_orders",
            ingest_task_id="ingest",
            deferrable=True,
            poke_interval=0.1,
            timeout=30,
        )
    written = hook.write(
        "main.raw.sensed_orders", _orders(0, 9), source="sensing/ingest", partition="manual__s/-1"
    )
    context = _xcom_context("manual__s", {("ingest", -1): written.as_dict()})  # the ingest's XCom
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, ZerobusReadbackTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert (trigger.source, trigger.partition) == ("sensing/ingest", "manual__s/-1")
    assert trigger.ranges == [[0, 9]], "the trigger verifies what the ingest's XCom says it delivered"
    assert before + 29 <= trigger.end_time <= time.time() + 30
    json.dumps(trigger.serialize()[1])

    result = sensor.execute_complete(context, first_event(trigger))
    assert result["verified"] is True and result["rows_scanned"] == 9


def test_the_sensor_defers_by_default_with_an_hour_to_wait(hook: ZerobusHook) -> None:
    """Deferrable unless told otherwise (the old default followed ``[operators] default_deferrable``,
    off, and poked in a worker slot for up to BaseSensorOperator's seven days)."""
    with _dag("by_default"):
        sensor = ZerobusReadbackSensor(
            task_id="visible", table="main.raw.default_orders", ingest_task_id="ingest"
        )
    assert sensor.deferrable is True and sensor.timeout == 3600 and sensor.poke_interval == 5
    # A record of rows in a table Iceberg does not show (yet): the sensor hands over to the trigger.
    claimed = {"table": "main.raw.default_orders", "source": "by_default/ingest", "partition": "manual__d/-1"}
    claimed |= {"offset_start": 0, "offset_end": 9, "rows_written": 9, "rows_skipped": 0}
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_xcom_context("manual__d", {("ingest", -1): claimed}))
    trigger = deferred.value.trigger
    assert isinstance(trigger, ZerobusReadbackTrigger) and trigger.poll_interval == 5
    assert before + 3599 <= trigger.end_time <= time.time() + 3600
    assert deferred.value.timeout is not None and deferred.value.timeout.total_seconds() == 3600


class _XComTI(SimpleNamespace):
    """The task instance of a direct ``execute`` call, with ``xcom_pull`` over the values given."""

    def xcom_pull(self, task_ids: str | None = None, *, map_indexes: int | None = None, **_: Any) -> Any:
        return self.xcoms.get((task_ids, map_indexes))


def _xcom_context(run_id: str, xcoms: dict[tuple[str, int], Any]) -> Any:
    return {"run_id": run_id, "ti": _XComTI(map_index=-1, run_id=run_id, xcoms=xcoms)}


def test_sensor_after_an_empty_ingest_succeeds_and_a_mistyped_ingest_fails(
    tmp_path: Path, first_event: FirstEvent
) -> None:
    pq.write_table(_orders(0, 0), tmp_path / "empty.parquet")
    with _dag("empty"):
        ingest = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.empty_orders", path=str(tmp_path / "empty.parquet")
        )
        poking = ZerobusReadbackSensor(
            task_id="poking", table="main.raw.empty_orders", ingest_task_id="ingest", deferrable=False
        )
        deferring = ZerobusReadbackSensor(
            task_id="deferring", table="main.raw.empty_orders", ingest_task_id="ingest", deferrable=True
        )
        typo = ZerobusReadbackSensor(
            task_id="typo", table="main.raw.empty_orders", ingest_task_id="ingset", deferrable=False
        )
    written = ingest.execute(_context("manual__e"))
    assert written["rows_written"] == 0
    context = _xcom_context("manual__e", {("ingest", -1): written})

    done = poking.poke(context)
    assert isinstance(done, PokeReturnValue) and done.is_done, "0 rows written: nothing to wait for"
    assert done.xcom_value["nothing_to_verify"] is True and done.xcom_value["rows_written"] == 0
    # Deferrable: decided by the first check in the worker, never deferred.
    assert deferring.execute(context)["nothing_to_verify"] is True

    with pytest.raises(AirflowFailException) as info:
        typo.poke(context)
    message = str(info.value)
    for part in ("main.raw.empty_orders", "'empty/ingset'", "'manual__e/-1'", "ingest_task_id"):
        assert part in message, message

    # A trigger that found no coverage hands the decision back to the sensor, which reads the XCom.
    trigger = ZerobusReadbackTrigger(
        table="main.raw.empty_orders",
        end_time=time.time() + 30,
        source="empty/ingest",
        partition="manual__e/-1",
    )
    event = first_event(trigger)
    assert deferring.execute_complete(context, event)["nothing_to_verify"] is True
    with pytest.raises(AirflowFailException, match="has no XCom"):
        deferring.execute_complete(_xcom_context("manual__e", {}), event)


def test_poking_sensor_returns_the_report_once_visible(hook: ZerobusHook) -> None:
    with _dag("poking"):
        sensor = ZerobusReadbackSensor(
            task_id="visible",
            table="main.raw.poked_orders",
            source="poking/ingest",
            partition="manual__p/-1",
            deferrable=False,
        )
    hook.write("main.raw.poked_orders", _orders(0, 5), source="poking/ingest", partition="manual__p/-1")
    deadline = time.time() + 15
    outcome: Any = False
    while time.time() < deadline and not outcome:
        outcome = sensor.poke(_context("manual__p"))
        time.sleep(0.1)
    assert outcome and outcome.is_done
    assert outcome.xcom_value["rows_scanned"] == 5


def test_a_process_that_used_the_runtime_exits_promptly(tmp_path: Path) -> None:
    """``airflow dags test`` / ``tasks test`` share the runtime process: it must not hang at exit."""
    import os
    import subprocess
    import sys

    script = (
        "import pyarrow as pa\n"
        "from airflow_provider.hooks.zerobus import ZerobusHook\n"
        "hook = ZerobusHook()\n"
        "hook.write('main.raw.exit_orders', pa.table({'id': [1, 2, 3]}), source='exit/test')\n"
        "hook.release()\n"
        "print('wrote')\n"
    )
    env = {
        **os.environ,
        "AIRFLOW_CONN_ZEROBUS_DEFAULT": json.dumps(
            {
                "conn_type": "zerobus",
                "extra": {
                    "embedded": True,
                    "warehouse": str(tmp_path / "wh"),
                    # the in-process emulator is what could hang the exit (a shared one is not a child)
                    "config": {"emulator": {"mode": "in_process"}},
                },
            }
        ),
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote" in done.stdout


def test_an_ingest_is_bounded_by_its_dag_runs_run_after(
    tmp_path: Path, hook: ZerobusHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator passes the DAG run's ``run_after`` (no try of the run began earlier) as ``not_before``:
    a resume then reads only the table's files of rows stamped since (the bound is proven in the runtime's
    tests). Without a DAG run in the context, nothing bounds it."""
    pq.write_table(_orders(0, 20), tmp_path / "orders.parquet")
    with _dag("bounded"):
        op = ZerobusIngestOperator(
            task_id="ingest", table="main.raw.bounded_orders", path=str(tmp_path / "*.parquet")
        )
    seen: list[object] = []
    real_write = ZerobusRuntime.write

    def spy(self: ZerobusRuntime, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("not_before"))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(ZerobusRuntime, "write", spy)
    run_after = dt.datetime(2026, 5, 1, 2, tzinfo=dt.UTC)
    context = {**_context("scheduled__bounded"), "dag_run": SimpleNamespace(run_after=run_after)}
    assert op.execute(context)["rows_written"] == 20
    op.execute(_context("manual__unbounded"))
    assert seen == [run_after, None]
