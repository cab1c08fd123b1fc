"""A write the boundary refuses for an unreconcilable type shows on the runtime's own metrics."""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.runtime.facade import ZerobusRuntime

TABLE = "main.raw.events"


def test_nested_into_a_string_column_is_counted_with_its_column(runtime: ZerobusRuntime) -> None:
    runtime.write(TABLE, pa.table({"id": [1], "payload": ["{}"]}), source="events")
    nested = pa.table({"id": [2], "payload": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))})
    with pytest.raises(WriteBoundaryError, match="to_json"):
        runtime.write(TABLE, nested, source="events", partition="p2")
    labels = {"table": TABLE, "column": "payload", "kind": "nested_into_string"}
    assert runtime.metrics.sample("zerobus_type_unreconcilable_total", labels) == 1
