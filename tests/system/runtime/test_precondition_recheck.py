"""A primary-raw property flipped under a running pipeline is refused on the next write, never set back.

Official SDK -> embedded emulator -> Delta, through ``ZerobusRuntime``. The first test is the one that
proves the write-path re-check exists: delete it (``CatalogGate.ensure``'s check of an existing table)
and the second write goes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.support.runtime_helpers import fast_config
from zerobus_orchestration.catalog.base import PROP_SOURCE
from zerobus_orchestration.catalog.preconditions import DELETION_VECTORS_DISABLED, ICEBERG_READS
from zerobus_orchestration.errors import PreconditionsUnmetError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.tables import table_uri

TABLE = "main.raw.orders"
COMPAT = "delta.enableIcebergCompatV2"
DV = "delta.enableDeletionVectors"


def orders(n: int, start: int = 0) -> pa.Table:
    return pa.table({"order_id": pa.array(range(start, start + n), pa.int64())})


def delta(rt: ZerobusRuntime) -> DeltaTable:
    return DeltaTable(table_uri(rt.config.warehouse, TABLE))


def test_a_property_flipped_between_two_writes_refuses_the_second_and_is_not_set_back(
    runtime: ZerobusRuntime,
) -> None:
    first = runtime.write(TABLE, orders(100), source="orders")
    assert first.rows_written == 100
    assert delta(runtime).metadata().configuration[PROP_SOURCE] == "orders"  # stamped at creation
    # Iceberg reads are turned off under the running pipeline (same long-lived runtime and pool).
    delta(runtime).alter.set_table_properties({COMPAT: "false"}, raise_if_not_exists=False)
    version = delta(runtime).version()
    with pytest.raises(PreconditionsUnmetError) as info:
        runtime.write(TABLE, orders(50, start=100), source="orders", partition="p2")
    assert info.value.unmet == (ICEBERG_READS,)
    assert f"table {TABLE} is not eligible as primary_raw" in str(info.value)
    assert "'delta.enableIcebergCompatV2' = 'true'" in str(info.value)  # the fix
    assert delta(runtime).metadata().configuration[COMPAT] == "false"  # not set back
    assert runtime.delta_version(TABLE) == version  # nothing reconciled, nothing sent
    assert runtime.covered(TABLE, source="orders", partition="p2") == ()
    assert delta(runtime).to_pyarrow_table().num_rows == 100


@pytest.fixture
def every_batch_runtime(tmp_path: Path) -> Iterator[ZerobusRuntime]:
    """A runtime whose long-lived sinks re-check the preconditions on every batch (interval 0)."""
    config = fast_config(tmp_path / "wh")
    config = config.model_copy(
        update={"catalog": config.catalog.model_copy(update={"precondition_recheck_s": 0.0})}
    )
    try:
        yield acquire_runtime(config)
    finally:
        close_all_runtimes()


def test_a_long_lived_sink_is_refused_once_the_recheck_is_due(every_batch_runtime: ZerobusRuntime) -> None:
    rt = every_batch_runtime
    sink = rt.sink(TABLE, source="kafka")
    sink.push(orders(10))
    sink.flush(60)
    delta(rt).alter.set_table_properties({DV: "true"}, raise_if_not_exists=False)
    with pytest.raises(PreconditionsUnmetError) as info:
        sink.push(orders(10, start=10))  # same schema: only the timer re-check can catch it
    assert info.value.unmet == (DELETION_VECTORS_DISABLED,)
    sink.flush(60)
    assert rt.covered(TABLE, source="kafka") == (OffsetRange(0, 10),)
    assert delta(rt).metadata().configuration[DV] == "true"
