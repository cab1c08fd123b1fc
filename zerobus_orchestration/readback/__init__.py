"""Read-back: prove through Iceberg that every range coverage recorded as delivered is in the table.

Two ideas, two names: ``verify_coverage`` verifies coverage against the table (waiting for Iceberg
visibility first; ``judge_once`` is one judged, non-blocking attempt returning a ``ReadbackOutcome``),
and ``read_rows`` reads the raw rows of one source back. The verbs users call are
``ReadbackService.verify`` (waits) and ``verify_once`` (judges once), on the runtime too.

Modules, one job each: ``endpoint`` (the Iceberg REST catalog), ``visibility`` (waiting until Iceberg
reflects a Delta version), ``coverage_check`` (rows against coverage ranges, pure Arrow), ``verify``
(the verification and its report), ``rows`` (reading rows back), ``status`` (the typed verdict, light
enough for an Airflow DAG file), ``judge`` (one attempt mapped to a verdict), ``record`` (what a write
says it delivered: the ranges a verifier on another host checks), ``auth`` (a refreshing bearer header
for the Iceberg REST catalog).

Names are imported lazily so ``zerobus_orchestration.readback.status`` stays free of pyarrow and
pyiceberg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zerobus_orchestration.readback.coverage_check import (
        DEFAULT_SAMPLE_SIZE,
        CoverageCheck,
        MissingRange,
        RowRef,
        check_coverage,
    )
    from zerobus_orchestration.readback.endpoint import SYNC_ROUTE, IcebergEndpoint
    from zerobus_orchestration.readback.judge import judge_once, outcome_of_error
    from zerobus_orchestration.readback.rows import read_rows
    from zerobus_orchestration.readback.status import ReadbackOutcome, ReadbackStatus
    from zerobus_orchestration.readback.verify import ReadbackReport, verify_coverage
    from zerobus_orchestration.readback.visibility import (
        CallableProbe,
        SnapshotSummaryProbe,
        Visibility,
        VisibilityProbe,
        WaitPolicy,
        summary_delta_version,
        wait_for_delta_version,
    )

_HOME: dict[str, str] = {
    "DEFAULT_SAMPLE_SIZE": "coverage_check",
    "CoverageCheck": "coverage_check",
    "MissingRange": "coverage_check",
    "RowRef": "coverage_check",
    "check_coverage": "coverage_check",
    "SYNC_ROUTE": "endpoint",
    "IcebergEndpoint": "endpoint",
    "judge_once": "judge",
    "outcome_of_error": "judge",
    "read_rows": "rows",
    "ReadbackOutcome": "status",
    "ReadbackStatus": "status",
    "ReadbackReport": "verify",
    "verify_coverage": "verify",
    "CallableProbe": "visibility",
    "SnapshotSummaryProbe": "visibility",
    "Visibility": "visibility",
    "VisibilityProbe": "visibility",
    "WaitPolicy": "visibility",
    "summary_delta_version": "visibility",
    "wait_for_delta_version": "visibility",
}

__all__ = [
    "DEFAULT_SAMPLE_SIZE",
    "SYNC_ROUTE",
    "CallableProbe",
    "CoverageCheck",
    "IcebergEndpoint",
    "MissingRange",
    "ReadbackOutcome",
    "ReadbackReport",
    "ReadbackStatus",
    "RowRef",
    "SnapshotSummaryProbe",
    "Visibility",
    "VisibilityProbe",
    "WaitPolicy",
    "check_coverage",
    "judge_once",
    "outcome_of_error",
    "read_rows",
    "summary_delta_version",
    "verify_coverage",
    "wait_for_delta_version",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
