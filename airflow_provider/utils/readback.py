"""The Airflow view of a read-back outcome; the verdict itself is the core's ``ReadbackStatus``.

Each attempt is one ``ZerobusHook.verify_once`` call returning a ``ReadbackOutcome``; whether it
is "not yet" or final is decided once in the core. This module only maps the outcome onto the
trigger event's lifecycle ``status`` and keeps what reaches a log or an XCom redacted:

- ``success``: ``VERIFIED``.
- ``error``: ``FAILED`` (a wait will not fix it), or ``NOTHING_TO_VERIFY`` with ``reason``
  ``nothing_to_verify``: waiting cannot create coverage, and only the sensor can tell an empty ingest
  (its XCom says 0 rows: success) from a wrong ``ingest_task_id`` or key (failure).
- ``timeout``: the deadline passed while still not terminal; it carries the last report (the covered
  ranges Iceberg never showed), so a lasting gap is reported with its detail.

Imported at DAG parse time: it must stay free of pyarrow and pyiceberg (``readback.status`` is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from typing import Any, get_args

from pydantic import BaseModel, SecretStr

from airflow_provider.utils.observability import redact
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus


class Status(StrEnum):
    """The trigger event's lifecycle status (what ``execute_complete`` receives)."""

    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"


NOTHING_TO_VERIFY = ReadbackStatus.NOTHING_TO_VERIFY.value

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


def event_status(outcome: ReadbackOutcome) -> Status | None:
    """The event status a terminal outcome ends the wait with; ``None`` to keep waiting."""
    if not outcome.is_terminal:
        return None
    return Status.SUCCESS if outcome.status.is_successful else Status.ERROR


def redacted(outcome: ReadbackOutcome) -> ReadbackOutcome:
    """``outcome`` with its report masked, fit for an XCom, a trigger event or a log line."""
    if outcome.report is None:
        return outcome
    return replace(outcome, report=redact(dict(outcome.report)))


def report_of(outcome: ReadbackOutcome | None) -> dict[str, Any] | None:
    if outcome is None or outcome.report is None:
        return None
    return dict(redacted(outcome).report or {})


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


def secret_override_paths(overrides: Mapping[str, Any], model: type[BaseModel] = ZerobusConfig) -> list[str]:
    """Dotted paths of ``overrides`` that set a secret setting (a ``SecretStr`` field of the config).

    Decided from the config's own field types, so a secret added to the config later is covered.
    Unknown keys are left to the config's validation, which refuses them with the right message.
    """
    found: list[str] = []
    for key, value in overrides.items():
        field = model.model_fields.get(str(key))
        if field is None:
            continue
        if _holds_secret(field.annotation):
            found.append(str(key))
            continue
        sub = _model_in(field.annotation)
        if sub is not None and isinstance(value, Mapping):
            found.extend(f"{key}.{path}" for path in secret_override_paths(value, sub))
    return found


def refuse_secret_overrides(overrides: Mapping[str, Any], *, conn_id: str, where: str) -> None:
    """Raise ``ConfigError`` when ``overrides`` would carry a secret into a trigger's stored kwargs.

    Trigger kwargs are written to the metadata database and shown to anyone who can read it; the
    triggerer rebuilds secrets from the connection instead.
    """
    paths = secret_override_paths(overrides)
    if paths:
        raise ConfigError(
            f"{where}: config_overrides set the secret setting(s) {paths}, which a deferred sensor would "
            f"store in the trigger's kwargs; put them in the connection {conn_id!r} instead (Password "
            "for client_secret, or its 'config' extra), which the triggerer reads itself"
        )


def _holds_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    return any(_holds_secret(arg) for arg in get_args(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
