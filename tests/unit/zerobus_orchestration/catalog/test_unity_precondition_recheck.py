"""Unity backend against the fake: a drifted primary-raw table is refused, never set back.

The sink runs over the in-memory transport (the fake has no Zerobus endpoint); the table, its
properties and the DDL are the fake Unity Catalog's, driven by the real databricks-sdk client.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.preconditions import ICEBERG_READS, check_primary_raw, unmet
from zerobus_orchestration.catalog.unity import UnityCatalog
from zerobus_orchestration.config import PoolConfig, Role
from zerobus_orchestration.errors import PreconditionsUnmetError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.testing import FakeUnityCatalog
from zerobus_orchestration.transport.memory import MemoryTransport

TABLE = "main.raw.events"
FORMATS = "delta.universalFormat.enabledFormats"


def batch(*ids: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64())})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_sink(gate: CatalogGate, body: Callable[[ZerobusSink], None]) -> MemoryTransport:
    transport = MemoryTransport()
    pool = StreamPool(transport, TABLE, PoolConfig(min_streams=1), metrics=SinkMetrics(CollectorRegistry()))
    try:
        body(ZerobusSink(pool, source="s", gate=gate))
    finally:
        pool.close(30)
    return transport


def iceberg_reads_off(fake_uc: FakeUnityCatalog) -> None:
    fake_uc.execute_sql(f"ALTER TABLE {TABLE} SET TBLPROPERTIES ('{FORMATS}' = '')")


def test_a_flip_under_a_running_sink_is_refused_on_the_next_write_and_not_set_back(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    clock = Clock()
    gate = CatalogGate(unity, Role.PRIMARY_RAW, recheck_interval_s=60.0, clock=clock, source="events")
    refused: list[PreconditionsUnmetError] = []

    def long_lived(sink: ZerobusSink) -> None:
        sink.push(batch(1))  # creates the table with the primary-raw properties
        state = unity.describe(TABLE)
        assert state is not None and state.properties["twg.source"] == "events"
        iceberg_reads_off(fake_uc)
        sink.push(batch(2))  # the timer is not due yet
        clock.now += 60.0
        with pytest.raises(PreconditionsUnmetError) as info:
            sink.push(batch(3))
        refused.append(info.value)
        sink.flush(30)

    transport = run_sink(gate, long_lived)
    assert transport.durable_rows(TABLE) == 2
    assert refused[0].unmet == (ICEBERG_READS,)
    table = fake_uc.table(TABLE)
    assert table is not None
    version = table.version

    def next_write(sink: ZerobusSink) -> None:  # a new sink: what every runtime write makes
        with pytest.raises(PreconditionsUnmetError, match=r"table main\.raw\.events .*iceberg_reads"):
            sink.push(batch(4))

    assert run_sink(CatalogGate(unity, Role.PRIMARY_RAW), next_write).durable_rows(TABLE) == 0
    assert table.version == version  # no DDL: the property was not set back
    assert table.properties[FORMATS] == ""


def test_a_plain_table_made_by_someone_else_is_not_upgraded_behind_their_back(
    unity: UnityCatalog, fake_uc: FakeUnityCatalog
) -> None:
    fake_uc.execute_sql(f"CREATE TABLE {TABLE} (id BIGINT)")

    def write(sink: ZerobusSink) -> None:
        with pytest.raises(PreconditionsUnmetError) as info:
            sink.push(batch(1))
        assert set(info.value.unmet) == {"iceberg_reads", "column_mapping", "protocol"}

    assert run_sink(CatalogGate(unity, Role.PRIMARY_RAW), write).durable_rows(TABLE) == 0
    table = fake_uc.table(TABLE)
    assert table is not None and "delta.enableIcebergCompatV2" not in table.properties
    # The operator's explicit repair is what upgrades it.
    unity.reconcile(
        TABLE, DesiredTable.build(TABLE, pa.schema([("id", pa.int64())]), Role.PRIMARY_RAW, repair=True)
    )
    assert unmet(check_primary_raw(unity, TABLE)) == []
