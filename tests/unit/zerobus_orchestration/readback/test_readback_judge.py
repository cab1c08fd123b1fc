"""One read-back attempt mapped to one status, in the core: the decisions the adapters used to make.

The table below is the Airflow adapter's former exception judgement, now made once for every caller,
with pyiceberg's real exception classes instead of look-alikes matched by name.
"""

from __future__ import annotations

import pytest
import requests
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, ServiceUnavailableError

from zerobus_orchestration.errors import (
    CatalogError,
    ConcurrencyRejectedError,
    ConfigError,
    NothingToVerifyError,
    ReadbackError,
    ReadbackTimeoutError,
    StreamPoisonedError,
    TransientError,
)
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.coverage_check import MissingRange
from zerobus_orchestration.readback.judge import outcome_of_error, outcome_of_report, status_of_error
from zerobus_orchestration.readback.status import ReadbackStatus
from zerobus_orchestration.readback.verify import ReadbackReport

S = ReadbackStatus


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (NoSuchTableError("main.raw.t"), S.NOT_VISIBLE_YET),
        (NoSuchNamespaceError("main.raw"), S.NOT_VISIBLE_YET),
        (ReadbackTimeoutError("lagging"), S.NOT_VISIBLE_YET),
        # Judged by type, never by message text: a catalog error is a fault whatever it says (a table
        # the catalog does not know is found by ``describe`` returning None, before the attempt).
        (CatalogError("table main.raw.t does not exist"), S.FAILED),
        (ConfigError("catalog 'mian' not found"), S.FAILED),
        (TransientError("unavailable"), S.UNAVAILABLE),
        (StreamPoisonedError("poisoned"), S.UNAVAILABLE),
        (ConcurrencyRejectedError("busy"), S.UNAVAILABLE),
        (ServiceUnavailableError("503"), S.UNAVAILABLE),
        (requests.exceptions.ConnectTimeout("connect"), S.UNAVAILABLE),
        (requests.exceptions.ReadTimeout("read"), S.UNAVAILABLE),
        (ConnectionError("reset"), S.UNAVAILABLE),
        (TimeoutError("slow"), S.UNAVAILABLE),
        (NothingToVerifyError("no delivered coverage"), S.NOTHING_TO_VERIFY),
        (ConfigError("bad warehouse"), S.FAILED),
        (ReadbackError("column(s) ['_twg_source'] are not in the Iceberg table"), S.FAILED),
        (PermissionError("denied"), S.FAILED),
        (ValueError("a bug"), S.FAILED),
    ],
)
def test_every_exception_maps_to_one_status(exc: BaseException, status: ReadbackStatus) -> None:
    assert status_of_error(exc) is status
    outcome = outcome_of_error(exc, "main.raw.t")
    assert outcome.status is status and outcome.table == "main.raw.t"
    assert outcome.message.startswith("main.raw.t: ")
    assert outcome.report is None


def test_a_failure_names_the_exception_type_and_text() -> None:
    outcome = outcome_of_error(ConfigError("zerobus.readback.iceberg_rest_uri is not set"), "main.raw.t")
    assert outcome.message == "main.raw.t: ConfigError: zerobus.readback.iceberg_rest_uri is not set"


def _report(missing: tuple[MissingRange, ...]) -> ReadbackReport:
    return ReadbackReport(
        table="main.raw.t",
        delta_version_expected=3,
        iceberg_delta_version=3,
        snapshot_id=1,
        waited_s=0.0,
        rows_scanned=10,
        missing_ranges=missing,
        duplicate_count=1,
        duplicate_sample=(),
        rows_outside_coverage=0,
        outside_sample=(),
        verified=not missing,
    )


def test_a_verified_report_is_verified_and_carries_the_report() -> None:
    outcome = outcome_of_report(_report(()))
    assert outcome.status is S.VERIFIED and outcome.report is not None
    assert outcome.report["rows_scanned"] == 10 and outcome.duplicate_count == 1


def test_covered_rows_missing_is_incomplete_not_failed() -> None:
    """Zerobus commits acknowledged rows asynchronously: missing rows may still be committing."""
    gap = MissingRange(CoverageKey("s", "a", "p"), OffsetRange(12, 20))
    outcome = outcome_of_report(_report((gap,)))
    assert outcome.status is S.INCOMPLETE and not outcome.is_terminal
    assert "not all visible" in outcome.message
    assert [(m["start"], m["end"]) for m in outcome.missing_ranges] == [(12, 20)]
    assert outcome.missing_rows == 8
