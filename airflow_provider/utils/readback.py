"""One read-back attempt, judged the same way by the poking sensor and the deferred trigger.

- ``success``: Iceberg shows every delivered range, once (the report is verified).
- ``pending``: not yet: the table or namespace is not there yet, the Iceberg snapshot lags
  (``readback_once`` returned ``None``), covered rows are not all visible yet (Zerobus commits
  asynchronously), or a transient failure (network, timeout, service busy).
- ``error``: a permanent problem a wait will not fix: bad configuration, auth.
- ``timeout``: the deadline passed while still pending; it carries the last report (the covered ranges
  Iceberg never showed), so a lasting gap is reported with its detail.

"Nothing to verify" (no delivered coverage for the table/source/partition) is an ``error`` with
``reason`` ``nothing_to_verify``: waiting cannot create coverage, and only the sensor can tell an empty
ingest (its XCom says 0 rows: success) from a wrong ``ingest_task_id`` or key (failure).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from airflow_provider.utils.observability import redact
from zerobus_orchestration.errors import ErrorClass, ZerobusOrchestrationError


class Status(StrEnum):
    SUCCESS = "success"
    PENDING = "pending"
    ERROR = "error"
    TIMEOUT = "timeout"


# Exception class names that mean "the table is not there yet" (pyiceberg, without importing it).
_ABSENT_CLASSES = frozenset(
    {
        "NoSuchTableError",
        "NoSuchNamespaceError",
        "NoSuchIcebergTableError",
        "NoSuchViewError",
        "TableNotFound",
    }
)
_ABSENT_TEXT = re.compile(
    r"does not exist|not found|no such table|no such namespace|table_or_view_not_found", re.I
)
_TRANSIENT_CLASSES = frozenset(
    {
        "ServerError",
        "ServiceUnavailableError",
        "ConnectTimeout",
        "ReadTimeout",
        "ConnectionError",
        "CommitFailedException",
    }
)
_RETRYABLE = frozenset({ErrorClass.TRANSIENT, ErrorClass.POISON, ErrorClass.CONCURRENCY_REJECT})
# The runtime's "no delivered coverage" error, matched by name: this module is imported at DAG parse
# time and must not pull in the runtime (pyarrow, pyiceberg) to classify an exception.
_NOTHING_TO_VERIFY_CLASS = "NothingToVerifyError"
NOTHING_TO_VERIFY = "nothing_to_verify"

# The report keys a log line may show: counts and versions only, so nothing secret can reach the log
# whatever else a report carries.
_SUMMARY_KEYS = (
    "rows_scanned",
    "missing_rows",
    "duplicate_count",
    "rows_outside_coverage",
    "delta_version_expected",
    "iceberg_delta_version",
    "waited_s",
)


@dataclass(frozen=True)
class Attempt:
    status: Status
    message: str
    report: dict[str, Any] | None = field(default=None)
    reason: str | None = field(default=None)


def _report_dict(report: Any) -> dict[str, Any]:
    raw = report.as_dict() if hasattr(report, "as_dict") else dict(report)
    return redact(raw)  # type: ignore[no-any-return]


def judge_report(report: Any | None, table: str) -> Attempt:
    """The outcome of ``readback_once``'s return value.

    A report with covered rows missing is ``pending``, not an error: Zerobus commits acknowledged rows
    asynchronously, so they may still be on their way into a later snapshot. The caller's deadline
    turns a lasting gap into a timeout that carries this last report.
    """
    if report is None:
        return Attempt(Status.PENDING, f"{table}: Iceberg metadata has not caught up yet")
    data = _report_dict(report)
    if bool(getattr(report, "verified", data.get("verified"))):
        return Attempt(Status.SUCCESS, f"{table}: read-back verified", data)
    return Attempt(
        Status.PENDING,
        f"{table}: delivered rows not all visible through Iceberg yet ({report_summary(data)})",
        data,
    )


def is_not_yet(exc: BaseException) -> bool:
    """A missing table or a transient failure: keep waiting."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _ABSENT_CLASSES or names & _TRANSIENT_CLASSES:
        return True
    if isinstance(exc, ZerobusOrchestrationError):
        return exc.error_class in _RETRYABLE or bool(_ABSENT_TEXT.search(str(exc)))
    return isinstance(exc, TimeoutError | ConnectionError)


def judge_error(exc: BaseException, table: str) -> Attempt:
    if any(cls.__name__ == _NOTHING_TO_VERIFY_CLASS for cls in type(exc).__mro__):
        return Attempt(Status.ERROR, f"{table}: {exc}", reason=NOTHING_TO_VERIFY)
    status = Status.PENDING if is_not_yet(exc) else Status.ERROR
    return Attempt(status, f"{table}: {type(exc).__name__}: {exc}")


def report_summary(report: Mapping[str, Any] | None) -> str:
    """One log line of a read-back report: rows, missing ranges, duplicates, versions, wait."""
    if not report:
        return "no report"
    data = redact(report)
    parts = [f"verified={data.get('verified')}"]
    missing = data.get("missing_ranges")
    if isinstance(missing, list):
        parts.append(f"missing_ranges={len(missing)}")
    parts.extend(f"{key}={data[key]}" for key in _SUMMARY_KEYS if data.get(key) is not None)
    return " ".join(parts)
