"""One judged read-back attempt against the real mirror and REST facade: every status from a real scan.

``judge_once`` is what the Airflow sensor and trigger and the Dagster sensor call on each
poll; it must never wait and never raise for a read-back failure.
"""

from __future__ import annotations

import pyarrow as pa

from tests.support.iceberg_helpers import raw_rows, write_delta
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback import IcebergEndpoint, ReadbackStatus, judge_once

TABLE = "main.raw.events"
KEY = CoverageKey(sink="sink-1", source="orders", partition="")


def test_not_visible_then_verified(warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint) -> None:
    version = write_delta(warehouse, TABLE, raw_rows(list(range(10))))
    coverage = {KEY: [OffsetRange(0, 10)]}
    lagging = judge_once(endpoint, TABLE, coverage, delta_version=version)
    assert lagging.status is ReadbackStatus.NOT_VISIBLE_YET and not lagging.is_terminal
    assert lagging.report is None

    mirror.sync_now(TABLE)
    visible = judge_once(endpoint, TABLE, coverage, delta_version=version)
    assert visible.status is ReadbackStatus.VERIFIED and visible.is_terminal
    assert visible.report is not None and visible.report["rows_scanned"] == 10


def test_covered_rows_missing_is_incomplete_with_the_gap(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, raw_rows(list(range(5))))
    mirror.sync_now(TABLE)
    outcome = judge_once(endpoint, TABLE, {KEY: [OffsetRange(0, 8)]}, delta_version=version)
    assert outcome.status is ReadbackStatus.INCOMPLETE and not outcome.is_terminal
    assert [(m["start"], m["end"]) for m in outcome.missing_ranges] == [(5, 8)]
    assert outcome.missing_rows == 3


def test_no_coverage_is_nothing_to_verify(endpoint: IcebergEndpoint) -> None:
    outcome = judge_once(endpoint, TABLE, {}, delta_version=0)
    assert outcome.status is ReadbackStatus.NOTHING_TO_VERIFY and outcome.is_terminal


def test_a_table_not_written_by_the_sink_fails_at_once(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = write_delta(warehouse, TABLE, pa.table({"value": [1.0]}))
    mirror.sync_now(TABLE)
    outcome = judge_once(endpoint, TABLE, {KEY: [OffsetRange(0, 1)]}, delta_version=version)
    assert outcome.status is ReadbackStatus.FAILED and outcome.is_terminal
    assert "ReadbackError" in outcome.message and "_twg_source" in outcome.message


def test_an_unreachable_catalog_is_unavailable_not_failed(warehouse: str) -> None:
    dead = IcebergEndpoint(uri="http://127.0.0.1:9/api/2.1/unity-catalog/iceberg-rest")  # discard port
    version = write_delta(warehouse, TABLE, raw_rows([0]))
    outcome = judge_once(dead, TABLE, {KEY: [OffsetRange(0, 1)]}, delta_version=version)
    assert outcome.status is ReadbackStatus.UNAVAILABLE and not outcome.is_terminal
