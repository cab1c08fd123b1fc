"""Unreconcilable type mismatches get their own loud counter, per column, and an ERROR log."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from zerobus_orchestration.catalog.guard import (
    INTEGER_OVERFLOW,
    NESTED_INTO_STRING,
    TZ_AWARE_INTO_NTZ,
    conform_batch,
)
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.metrics import SinkMetrics

T = "main.raw.events"
UNRECONCILABLE = "zerobus_type_unreconcilable_total"
TARGET = pa.schema(
    [
        pa.field("payload", pa.string()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("n", pa.int8()),
    ]
)


def unreconcilable(metrics: SinkMetrics, column: str, kind: str) -> float | None:
    return metrics.sample(UNRECONCILABLE, {"table": T, "column": column, "kind": kind})


def test_nested_into_string_and_tz_into_ntz_are_counted_per_column_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = SinkMetrics(CollectorRegistry())
    batch = pa.record_batch(
        {
            "payload": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
            "ts": pa.array([0], pa.timestamp("us", tz="UTC")),
            "n": pa.array([1], pa.int8()),
        }
    )
    with caplog.at_level(logging.ERROR), pytest.raises(WriteBoundaryError):
        conform_batch(T, batch, TARGET, metrics=metrics)
    assert unreconcilable(metrics, "payload", NESTED_INTO_STRING) == 1
    assert unreconcilable(metrics, "ts", TZ_AWARE_INTO_NTZ) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(T in m and "'payload'" in m and "to_json" in m for m in errors)
    assert any(T in m and "'ts'" in m for m in errors)
    with pytest.raises(WriteBoundaryError):
        conform_batch(T, batch, TARGET, metrics=metrics)
    assert unreconcilable(metrics, "payload", NESTED_INTO_STRING) == 2  # once per refused batch


def test_value_problems_are_not_counted_as_unreconcilable() -> None:
    metrics = SinkMetrics(CollectorRegistry())
    batch = pa.record_batch({"n": pa.array([1000], pa.int64())})  # overflows TINYINT: a value problem
    with pytest.raises(WriteBoundaryError):
        conform_batch(T, batch, TARGET, metrics=metrics)
    assert metrics.sample("zerobus_type_reconcile_total", {"table": T, "kind": INTEGER_OVERFLOW}) == 1
    assert unreconcilable(metrics, "n", INTEGER_OVERFLOW) is None
