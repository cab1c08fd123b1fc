"""The read-back sensor decides from the core's ``ReadbackStatus`` only: one row per status.

The runtime is a stand-in returning a given outcome (the statuses themselves are produced from real
scans in the Iceberg tests); the Dagster instance and its materialisation records are real.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from dagster_defs.metadata import KEY_PARTITION, KEY_SOURCE, KEY_TABLE
from dagster_defs.sensors import ReadbackCursor, ReadbackSensorSettings, WriteTarget, evaluate_tick
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus

KEY = dg.AssetKey(["raw", "clicks"])
TABLE = "main.raw.clicks"
REPORT = {
    "table": TABLE,
    "verified": True,
    "rows_scanned": 3,
    "missing_ranges": [],
    "missing_rows": 0,
    "duplicate_count": 0,
}
GAP = {
    **REPORT,
    "verified": False,
    "missing_ranges": [{"sink": "s", "source": "a", "partition": "p", "start": 1, "end": 3}],
    "missing_rows": 2,
}


class _Runtime:
    """Stands in for the sensor's read-only attempt (``dagster_defs.sensors._attempt``)."""

    def __init__(self, outcome: ReadbackOutcome) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, str | None, str | None]] = []

    def __call__(self, target: WriteTarget) -> ReadbackOutcome:
        self.calls.append((target.table, target.source, target.partition))
        return self.outcome


def _instance(rows: int) -> tuple[dg.DagsterInstance, int]:
    instance = dg.DagsterInstance.ephemeral()
    metadata = {
        KEY_TABLE: TABLE,
        KEY_SOURCE: "raw/clicks",
        KEY_PARTITION: "run-1",
        "zerobus/rows_written": rows,
    }
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=KEY, metadata=metadata))
    record = instance.fetch_materializations(KEY, limit=1).records[0]
    return instance, record.storage_id


def _tick(outcome: ReadbackOutcome, *, max_lag_s: float, rows: int = 3) -> tuple[Any, ReadbackCursor, int]:
    instance, storage_id = _instance(rows)
    runtime = _Runtime(outcome)
    settings = ReadbackSensorSettings((KEY,), "zerobus", max_lag_s, "iceberg_readback", True, 25)
    cursor = ReadbackCursor()
    tick = evaluate_tick(instance, runtime, settings, cursor)
    assert runtime.calls == [(TABLE, "raw/clicks", "run-1")]
    return tick, cursor, storage_id


@pytest.mark.parametrize("max_lag_s", [600.0, 0.0])
@pytest.mark.parametrize(
    ("status", "report", "moves"),
    [
        (ReadbackStatus.VERIFIED, REPORT, True),
        (ReadbackStatus.NOTHING_TO_VERIFY, None, True),
        (ReadbackStatus.NOT_VISIBLE_YET, None, False),
        (ReadbackStatus.UNAVAILABLE, None, False),
        (ReadbackStatus.FAILED, None, False),
    ],
)
def test_the_cursor_moves_only_past_a_judged_write(
    status: ReadbackStatus, report: dict[str, Any] | None, moves: bool, max_lag_s: float
) -> None:
    tick, cursor, storage_id = _tick(
        ReadbackOutcome(status, TABLE, f"{TABLE}: m", report), max_lag_s=max_lag_s
    )
    assert (cursor.of("raw/clicks").verified == storage_id) is moves
    assert bool(tick.events) is moves and bool(tick.waiting) is not moves
    # Recovery is for rows Iceberg does not show after max_lag_s, never for a failed read.
    wants_recovery = status is ReadbackStatus.NOT_VISIBLE_YET and max_lag_s == 0.0
    assert len(tick.run_requests) == (1 if wants_recovery else 0)


def test_a_failed_read_back_says_a_fix_is_needed_and_retries() -> None:
    outcome = ReadbackOutcome(ReadbackStatus.FAILED, TABLE, f"{TABLE}: ConfigError: bad warehouse")
    tick, _, _ = _tick(outcome, max_lag_s=0.0)
    (waiting,) = tick.waiting
    assert "ConfigError: bad warehouse" in waiting and "fix needed" in waiting and "retrying" in waiting


def test_an_unavailable_catalog_retries_without_asking_for_a_fix() -> None:
    outcome = ReadbackOutcome(ReadbackStatus.UNAVAILABLE, TABLE, f"{TABLE}: ConnectionError: reset")
    tick, _, _ = _tick(outcome, max_lag_s=0.0)
    (waiting,) = tick.waiting
    assert "ConnectionError: reset" in waiting and "fix needed" not in waiting


def test_incomplete_waits_until_max_lag_then_reports_the_gap() -> None:
    incomplete = ReadbackOutcome(ReadbackStatus.INCOMPLETE, TABLE, f"{TABLE}: gap", GAP)
    tick, cursor, _ = _tick(incomplete, max_lag_s=600.0)
    assert not tick.events and cursor.of("raw/clicks").verified == -1
    assert "2 delivered row(s)" in tick.waiting[0]

    tick, cursor, storage_id = _tick(incomplete, max_lag_s=0.0)
    assert cursor.of("raw/clicks").verified == storage_id and not tick.run_requests
    observation, check = tick.events
    assert isinstance(check, dg.AssetCheckEvaluation) and not check.passed
    assert observation.metadata["readback/missing_rows"].value == 2


def test_nothing_to_verify_passes_an_empty_write_and_fails_one_with_rows() -> None:
    nothing = ReadbackOutcome(ReadbackStatus.NOTHING_TO_VERIFY, TABLE, f"{TABLE}: no coverage")
    tick, _, _ = _tick(nothing, max_lag_s=600.0, rows=0)
    assert [e.passed for e in tick.events if isinstance(e, dg.AssetCheckEvaluation)] == [True]
    tick, _, _ = _tick(nothing, max_lag_s=600.0, rows=5)
    assert [e.passed for e in tick.events if isinstance(e, dg.AssetCheckEvaluation)] == [False]
