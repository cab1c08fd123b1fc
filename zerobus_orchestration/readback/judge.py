"""One read-back attempt, judged once for every caller (CLI, Airflow sensor and trigger, Dagster sensor).

``judge_once`` runs a single non-blocking verification and maps its result, or any exception,
to a ``ReadbackOutcome``; ``outcome_of_error`` is the same mapping for exceptions raised before the
attempt (resolving configuration, coverage, the Delta version). Adapters branch on the status only.
Errors are judged by their type and ``retriable`` flag, never by message text: a table the catalog does
not know is found by ``describe`` before the attempt.

The mapping keeps the decisions the adapters made before it moved here:

- a missing Iceberg table or namespace, or a visibility deadline: ``NOT_VISIBLE_YET``;
- network failures, timeouts and package errors that are ``retriable`` (transient, poisoned stream,
  concurrency rejected): ``UNAVAILABLE``;
- no delivered coverage: ``NOTHING_TO_VERIFY``;
- a scan that ran: ``VERIFIED``, ``LOST`` (missing, and the Delta log shows them held at the version the
  snapshot reflects or removed after delivery: ``readback/lost.py``), ``INCOMPLETE`` (missing, not
  committed yet) or ``DUPLICATED`` (all there, some twice);
- everything else (configuration, credentials, reserved columns absent, bugs): ``FAILED``, at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import requests.exceptions
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchIcebergTableError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    ServerError,
    ServiceUnavailableError,
)

from zerobus_orchestration.errors import (
    NothingToVerifyError,
    ReadbackTimeoutError,
    ZerobusOrchestrationError,
)
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback.coverage_check import DEFAULT_SAMPLE_SIZE
from zerobus_orchestration.readback.endpoint import IcebergEndpoint
from zerobus_orchestration.readback.lost import MissingExplainer, lost_message
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
from zerobus_orchestration.readback.verify import ReadbackReport, verify_coverage
from zerobus_orchestration.readback.visibility import DEFAULT_WAIT, VisibilityProbe, WaitPolicy

_ABSENT = (NoSuchTableError, NoSuchNamespaceError, NoSuchIcebergTableError, NoSuchViewError)
_UNAVAILABLE = (
    ServerError,
    ServiceUnavailableError,
    CommitFailedException,
    requests.exceptions.ConnectionError,  # ConnectTimeout too; pyiceberg's REST client is requests
    requests.exceptions.ReadTimeout,
    TimeoutError,
    ConnectionError,
)
# One attempt: the visibility wait gives up at once instead of polling (a sensor tick, a trigger poll).
_ONE_ATTEMPT_S = 0.001


def status_of_error(exc: BaseException) -> ReadbackStatus:
    """The verdict an exception raised by a read-back attempt stands for."""
    if isinstance(exc, NothingToVerifyError):
        return ReadbackStatus.NOTHING_TO_VERIFY
    if isinstance(exc, (ReadbackTimeoutError, *_ABSENT)):
        return ReadbackStatus.NOT_VISIBLE_YET
    if isinstance(exc, _UNAVAILABLE):
        return ReadbackStatus.UNAVAILABLE
    if isinstance(exc, ZerobusOrchestrationError) and exc.retriable:
        return ReadbackStatus.UNAVAILABLE  # transient, poisoned stream, concurrency reject: may pass later
    return ReadbackStatus.FAILED


def outcome_of_error(exc: BaseException, table: str) -> ReadbackOutcome:
    status = status_of_error(exc)
    if isinstance(exc, NothingToVerifyError):
        return ReadbackOutcome(status, table, f"{table}: {exc}")
    if isinstance(exc, ReadbackTimeoutError):
        return ReadbackOutcome(status, table, f"{table}: Iceberg metadata has not caught up yet")
    return ReadbackOutcome(status, table, f"{table}: {type(exc).__name__}: {exc}")


def outcome_of_report(report: ReadbackReport) -> ReadbackOutcome:
    """A scan that ran: verified; delivered rows lost (the Delta log shows them held at the snapshot's
    version, or removed after delivery); missing and not committed yet (``INCOMPLETE``); or all there but
    some twice (``DUPLICATED``)."""
    data = report.as_dict()
    table = report.table
    if report.verified:
        return ReadbackOutcome(ReadbackStatus.VERIFIED, table, f"{table}: read-back verified", data)
    if report.lost_ranges:
        message = lost_message(table, report.lost_ranges, report.iceberg_delta_version)
        return ReadbackOutcome(ReadbackStatus.LOST, table, message, data)
    if report.missing_ranges:
        return ReadbackOutcome(
            ReadbackStatus.INCOMPLETE,
            table,
            f"{table}: delivered rows not all visible through Iceberg yet "
            f"({len(report.missing_ranges)} missing range(s), {data['missing_rows']} row(s))",
            data,
        )
    if report.duplicate_count:
        sample = ", ".join(f"{r.source}@{r.offset} x{r.count}" for r in report.duplicate_sample[:3])
        # A tag is ``source[partition]`` (``write_modes.source_tag``); a source never holds ``[``.
        sources = sorted({r.source.split("[", 1)[0] for r in report.duplicate_sample})
        return ReadbackOutcome(
            ReadbackStatus.DUPLICATED,
            table,
            f"{table}: every delivered row is there, but {report.duplicate_count} row(s) more than once "
            f"(at-least-once re-sends; e.g. {sample}); remove the extra copies with "
            f"zerobus-orch repair --dedupe --table {table}"
            + (f" --source {sources[0]!r}" if len(sources) == 1 else ""),
            data,
        )
    return ReadbackOutcome(ReadbackStatus.INCOMPLETE, table, f"{table}: read-back not verified", data)


def judge_once(
    endpoint: IcebergEndpoint,
    table: str,
    coverage: Mapping[CoverageKey, Sequence[OffsetRange]],
    *,
    delta_version: int,
    probe: VisibilityProbe | None = None,
    policy: WaitPolicy = DEFAULT_WAIT,
    partition_column: str | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    explain_missing: MissingExplainer | None = None,
    emitted_since: dt.datetime | None = None,
) -> ReadbackOutcome:
    """One non-blocking attempt at ``verify_coverage``, judged; never raises for a read-back failure.

    ``policy`` supplies the backoff ceiling only: the attempt does not wait for visibility.
    """
    if not coverage:
        return ReadbackOutcome(
            ReadbackStatus.NOTHING_TO_VERIFY,
            table,
            f"read-back of {table}: no delivered coverage, so there is nothing to verify",
        )
    once = WaitPolicy(timeout_s=_ONE_ATTEMPT_S, initial_s=_ONE_ATTEMPT_S, max_s=policy.max_s)
    try:
        report = verify_coverage(
            endpoint,
            table,
            coverage,
            delta_version=delta_version,
            probe=probe,
            force=False,
            policy=once,
            partition_column=partition_column,
            sample_size=sample_size,
            explain_missing=explain_missing,
            emitted_since=emitted_since,
        )
    except Exception as exc:  # judged, not swallowed: the outcome carries the type and the message
        return outcome_of_error(exc, table)
    return outcome_of_report(report)
