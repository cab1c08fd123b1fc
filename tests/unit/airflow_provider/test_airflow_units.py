"""DB-free, runtime-free pieces: operator construction, template fields, trigger serde, judgements."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk._shared.module_loading import import_string
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout
from pydantic import SecretStr

from airflow_provider.operators.base import coverage_keys
from airflow_provider.operators.catalog import ZerobusPrimaryRawCheckOperator, ZerobusReconcileOperator
from airflow_provider.operators.ingest import ZerobusIngestOperator
from airflow_provider.sensors.readback import ZerobusReadbackSensor
from airflow_provider.triggers.readback import ZerobusReadbackTrigger
from airflow_provider.utils.observability import MASK, metric_summary, redact
from airflow_provider.utils.readback import Status, event_status, report_of
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus


def _dag() -> DAG:
    return DAG("units", schedule=None)


def test_operators_do_no_io_in_init_and_template_every_knob() -> None:
    with _dag():
        ingest = ZerobusIngestOperator(task_id="ingest", table="main.raw.t", path="/nope/*.parquet")
        sql = ZerobusIngestOperator(task_id="sql", table="t", sql="SELECT 1", sql_conn_id="db")
        reconcile = ZerobusReconcileOperator(task_id="reconcile", table="t", schema={"id": "int64"})
        check = ZerobusPrimaryRawCheckOperator(task_id="check", table="t")
        sensor = ZerobusReadbackSensor(task_id="sensor", table="t", ingest_task_id="ingest")
    for op in (ingest, sql, reconcile, check, sensor):
        assert "hook" not in op.__dict__  # cached_property not touched: no connection read, no runtime
        assert {"table", "zerobus_conn_id", "config_overrides"} <= set(op.template_fields)
    assert {"path", "file_format", "sql", "sql_conn_id", "parameters", "descriptions", "role"} <= set(
        ingest.template_fields
    )
    assert {"ingest_task_id", "ingest_map_index", "source", "partition"} <= set(sensor.template_fields)
    assert "schema" in ingest.template_fields and "schema" in reconcile.template_fields
    assert ".sql" in ingest.template_ext


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one source"),
        ({"path": "a.csv", "sql": "SELECT 1", "sql_conn_id": "db"}, "exactly one source"),
        ({"sql": "SELECT 1"}, "needs sql_conn_id"),
    ],
)
def test_ingest_rejects_ambiguous_sources_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with _dag(), pytest.raises(ValueError, match=message):
        ZerobusIngestOperator(task_id="bad", table="t", **kwargs)


def test_sensor_is_deferrable_by_default_with_an_hour_timeout() -> None:
    """Read-back waits seconds to minutes for Iceberg: deferring is the default (the old default followed
    ``[operators] default_deferrable``, off out of the box, and poked in a worker slot for 7 days)."""
    with _dag():
        sensor = ZerobusReadbackSensor(task_id="s", table="t")
        poking = ZerobusReadbackSensor(task_id="p", table="t", deferrable=False, timeout=60, poke_interval=1)
    assert (sensor.deferrable, sensor.timeout, sensor.poke_interval) == (True, 3600, 5)
    assert (poking.deferrable, poking.timeout, poking.poke_interval) == (False, 60, 1)


def test_coverage_keys_are_stable_per_task_instance() -> None:
    assert coverage_keys("d", "t", "manual__1", None) == ("d/t", "manual__1/-1")
    assert coverage_keys("d", "t", "manual__1", 3) == ("d/t", "manual__1/3")


def test_trigger_serializes_to_primitives_and_round_trips() -> None:
    trigger = ZerobusReadbackTrigger(
        table="main.raw.orders",
        end_time=1_900_000_000.5,
        zerobus_conn_id="zb",
        source="dag/ingest",
        partition="run/-1",
        poll_interval=0.5,
        max_poll_interval=4,
        config_overrides={"readback": {"poll_max_s": 1.0}},
    )
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # primitives only
    rebuilt = import_string(classpath)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs["end_time"] == 1_900_000_000.5


def test_trigger_with_a_past_deadline_yields_timeout_without_polling(first_event: Any) -> None:
    trigger = ZerobusReadbackTrigger(table="t", end_time=time.time() - 1, zerobus_conn_id="does_not_exist")
    payload = first_event(trigger)
    assert payload["status"] == "timeout"
    assert payload["polls"] == 0


def test_sensor_execute_complete_branches_on_status() -> None:
    with _dag():
        sensor = ZerobusReadbackSensor(task_id="s", table="t")
    ok = sensor.execute_complete({}, {"status": "success", "report": {"verified": True, "rows_scanned": 3}})  # type: ignore[arg-type]
    assert ok == {"table": "t", "verified": True, "rows_scanned": 3}
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, {"status": "timeout", "message": "late"})  # type: ignore[arg-type]
    with pytest.raises(AirflowFailException, match="boom"):
        sensor.execute_complete({}, {"status": "error", "message": "boom"})  # type: ignore[arg-type]


def test_sensor_execute_complete_logs_the_report_summary_without_secrets(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with _dag():
        sensor = ZerobusReadbackSensor(task_id="s", table="main.raw.t")
    report = {
        "verified": False,
        "rows_scanned": 120,
        "missing_ranges": [{"source": "d/i", "partition": "r/-1", "start": 120, "end": 150}],
        "missing_rows": 30,
        "duplicate_count": 4,
        "rows_outside_coverage": 0,
        "iceberg_delta_version": 7,
        "token": "SUPERSECRET-token",
        "note": {"client_secret": "SUPERSECRET-nested"},
    }
    event = {"status": "error", "message": "mismatch", "polls": 3, "waited_s": 2.5, "report": report}
    capfd.readouterr()
    with pytest.raises(AirflowFailException):
        sensor.execute_complete({}, event)  # type: ignore[arg-type]
    logged = capfd.readouterr().out  # task loggers write through Airflow's structlog to stdout
    assert "after 3 poll(s) and 2.5s" in logged
    for part in ("rows_scanned=120", "missing_ranges=1", "missing_rows=30", "duplicate_count=4"):
        assert part in logged, logged
    assert "iceberg_delta_version=7" in logged
    assert "SUPERSECRET" not in logged


@pytest.mark.parametrize(
    ("status", "event"),
    [
        (ReadbackStatus.NOT_VISIBLE_YET, None),
        (ReadbackStatus.VERIFIED, Status.SUCCESS),
        (ReadbackStatus.INCOMPLETE, None),  # rows may still be committing: the deadline judges
        (ReadbackStatus.UNAVAILABLE, None),
        (ReadbackStatus.FAILED, Status.ERROR),
        (ReadbackStatus.NOTHING_TO_VERIFY, Status.ERROR),
    ],
)
def test_readback_judgement(status: ReadbackStatus, event: Status | None) -> None:
    """The adapter maps the core's verdict onto the trigger event; it does not judge exceptions itself."""
    outcome = ReadbackOutcome(
        status, "t", "t: m", {"verified": status.is_successful, "token": SecretStr("x")}
    )
    assert event_status(outcome) is event
    report = report_of(outcome)
    assert report is not None and report["token"] == MASK


def test_redaction_and_metric_summary() -> None:
    pool = {
        "table": "t",
        "rows_delivered": 10,
        "rebuilds": 1,
        "concurrency_rejects": 2,
        "pending": 0,
        "coalesce_ratio_p50": 3,
        "delivery_latency_p99_s": 0.5,
        "streams": [{"oauth_token": "abc"}],
    }
    health = {
        "healthy": True,
        "pools": [pool, {**pool, "rebuilds": 0, "coalesce_ratio_p50": 2, "delivery_latency_p99_s": 0.7}],
        "client_secret": SecretStr("shh"),
        "note": SecretStr("also hidden"),
    }
    cleaned = redact(health)
    assert "abc" not in json.dumps(cleaned) and "shh" not in json.dumps(cleaned)
    assert cleaned["note"] == MASK
    summary = metric_summary(health, {"rows_written": 20, "bytes_written": 640, "delta_version": None})
    assert summary == {
        "pools": 2,
        "healthy": True,
        "rows_delivered": 20,
        "pending": 0,
        "rebuilds": 1,
        "concurrency_rejects": 4,
        "coalesce_ratio_p50": 2,
        "delivery_latency_p99_s": 0.7,
        "rows_written": 20,
        "bytes_written": 640,
    }
