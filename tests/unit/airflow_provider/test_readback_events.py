"""The trigger event carries the core's typed outcome, and the sensor decides from its status."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException
from pydantic import SecretStr

from airflow_provider.sensors.readback import ZerobusReadbackSensor
from airflow_provider.triggers.readback import ZerobusReadbackTrigger
from airflow_provider.utils.observability import MASK
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus


def _sensor(**kwargs: Any) -> ZerobusReadbackSensor:
    with DAG("events", schedule=None):
        return ZerobusReadbackSensor(task_id="s", table="main.raw.t", **kwargs)


def _event(outcome: ReadbackOutcome) -> dict[str, Any]:
    # Only the typed outcome: the sensor must not need the trigger's own status/reason keys.
    return {"outcome": json.loads(json.dumps(outcome.to_json())), "polls": 1, "waited_s": 0.1}


def test_a_failed_outcome_fails_the_task_with_its_message() -> None:
    outcome = ReadbackOutcome(ReadbackStatus.FAILED, "main.raw.t", "main.raw.t: ConfigError: bad warehouse")
    with pytest.raises(AirflowFailException, match="ConfigError: bad warehouse"):
        _sensor().execute_complete({}, _event(outcome))  # type: ignore[arg-type]


def test_a_verified_outcome_returns_its_report() -> None:
    outcome = ReadbackOutcome(
        ReadbackStatus.VERIFIED,
        "main.raw.t",
        "main.raw.t: read-back verified",
        {"verified": True, "rows_scanned": 4},
    )
    result = _sensor().execute_complete({}, _event(outcome))  # type: ignore[arg-type]
    assert result == {"table": "main.raw.t", "verified": True, "rows_scanned": 4}


def test_nothing_to_verify_is_the_sensors_call() -> None:
    outcome = ReadbackOutcome(ReadbackStatus.NOTHING_TO_VERIFY, "main.raw.t", "main.raw.t: no coverage")
    with pytest.raises(AirflowFailException, match=r"Nothing was delivered to main\.raw\.t"):
        _sensor(source="d/i", partition="r/-1").execute_complete({}, _event(outcome))  # type: ignore[arg-type]


def test_the_trigger_event_carries_the_outcome_with_the_report_redacted(
    monkeypatch: pytest.MonkeyPatch, first_event: Any
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ZB_BROKEN_EVT", json.dumps({"conn_type": "zerobus", "extra": {"embedded": "perhaps"}})
    )
    trigger = ZerobusReadbackTrigger(
        table="main.raw.t", end_time=time.time() + 30, zerobus_conn_id="zb_broken_evt"
    )
    payload = first_event(trigger)
    outcome = ReadbackOutcome.from_json(payload["outcome"])
    assert outcome.status is ReadbackStatus.FAILED and "embedded" in outcome.message
    assert payload["status"] == "error" and payload["message"] == outcome.message


def test_a_report_in_the_outcome_is_redacted_before_it_leaves_the_trigger() -> None:
    from airflow_provider.utils.readback import redacted

    outcome = ReadbackOutcome(
        ReadbackStatus.INCOMPLETE, "t", "m", {"token": SecretStr("x"), "missing_rows": 2}
    )
    wire = redacted(outcome).to_json()
    assert wire["report"] == {"token": MASK, "missing_rows": 2}
    json.dumps(wire)
