"""Primary-raw preconditions are re-checked on every write and on a timer, never repaired silently.

Local backend (real delta-rs tables) behind the catalog gate and a sink over the in-memory transport;
the same through the official SDK and the emulator is in tests/system/runtime/test_precondition_recheck.py,
and against the Unity Catalog fake in tests/unit/zerobus_orchestration/catalog/test_unity_precondition_recheck.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from prometheus_client import CollectorRegistry

from zerobus_orchestration.catalog.base import PROP_SOURCE, DesiredTable, TableState, TableTags
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.plan import SetProperty
from zerobus_orchestration.catalog.preconditions import (
    DELETION_VECTORS_DISABLED,
    ICEBERG_READS,
    check_primary_raw,
    unmet,
)
from zerobus_orchestration.config import PoolConfig, Role
from zerobus_orchestration.errors import PreconditionsUnmetError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import MemoryTransport

T = "main.raw.events"
SCHEMA = pa.schema([pa.field("id", pa.int64())])
DV = "delta.enableDeletionVectors"
COMPAT = "delta.enableIcebergCompatV2"


class CountingCatalog(LocalCatalog):
    """The local backend, counting how often the table is read (``describe``)."""

    describes = 0

    def describe(self, table: str) -> TableState | None:
        self.describes += 1
        return super().describe(table)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def catalog(tmp_path: Path) -> CountingCatalog:
    cat = CountingCatalog(tmp_path / "wh")
    cat.reconcile(T, DesiredTable.build(T, SCHEMA, Role.PRIMARY_RAW))
    return cat


def flip(catalog: LocalCatalog, **props: str) -> None:
    """Someone changes table properties under the running pipeline (SQL, UI, another tool)."""
    DeltaTable(catalog.location(T)).alter.set_table_properties(props, raise_if_not_exists=False)


def live(catalog: LocalCatalog) -> TableState:
    state = catalog.describe(T)
    assert state is not None
    return state


def batch(*ids: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64())})


def test_reconcile_never_sets_a_drifted_primary_raw_property_back(catalog: CountingCatalog) -> None:
    flip(catalog, **{DV: "true"})
    before = live(catalog).version
    desired = DesiredTable.build(T, SCHEMA, Role.PRIMARY_RAW)
    assert catalog.plan(T, desired).empty  # on main this planned SET TBLPROPERTIES (DV = false)
    outcome = catalog.reconcile(T, desired)
    assert not outcome.applied and live(catalog).version == before
    assert live(catalog).properties[DV] == "true"
    assert [c.name for c in unmet(check_primary_raw(catalog, T))] == [DELETION_VECTORS_DISABLED]


def test_an_explicit_repair_sets_the_properties_back(catalog: CountingCatalog) -> None:
    flip(catalog, **{COMPAT: "false"})
    outcome = catalog.reconcile(T, DesiredTable.build(T, SCHEMA, Role.PRIMARY_RAW, repair=True))
    assert [(s.key, s.value) for s in outcome.plan.steps if isinstance(s, SetProperty)] == [(COMPAT, "true")]
    assert unmet(check_primary_raw(catalog, T)) == []


def test_a_write_to_a_drifted_table_is_refused_before_any_ddl_naming_table_conditions_and_fix(
    catalog: CountingCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    flip(catalog, **{COMPAT: "false", DV: "true"})
    before = live(catalog).version
    gate = CatalogGate(catalog, Role.PRIMARY_RAW)
    wider = SCHEMA.append(pa.field("extra", pa.string()))
    with caplog.at_level(logging.ERROR), pytest.raises(PreconditionsUnmetError) as info:
        gate.ensure(T, wider)
    assert info.value.unmet == (ICEBERG_READS, DELETION_VECTORS_DISABLED)
    text = str(info.value)
    assert f"table {T} is not eligible as primary_raw" in text
    assert "not set back automatically" in text and "--apply --repair" in text
    assert (
        "ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false', "
        "'delta.enableIcebergCompatV2' = 'true', 'delta.universalFormat.enabledFormats' = 'iceberg')"
    ) in text
    assert any(r.levelno == logging.ERROR and T in r.getMessage() for r in caplog.records)
    state = live(catalog)
    assert state.version == before and state.column("extra") is None  # no DDL ran
    assert (state.properties[COMPAT], state.properties[DV]) == ("false", "true")  # nothing set back


def test_a_long_lived_sink_rechecks_on_a_timer_without_reading_the_catalog_in_between(
    catalog: CountingCatalog,
) -> None:
    clock = Clock()
    gate = CatalogGate(catalog, Role.PRIMARY_RAW, recheck_interval_s=60.0, clock=clock)
    transport = MemoryTransport()
    metrics = SinkMetrics(CollectorRegistry())
    pool = StreamPool(transport, T, PoolConfig(min_streams=1), metrics=metrics)
    try:
        sink = ZerobusSink(pool, source="s", gate=gate)
        sink.push(batch(1))  # first batch: ensure checks the preconditions
        reads = catalog.describes
        flip(catalog, **{DV: "true"})
        clock.now += 59.0
        sink.push(batch(2))  # not due yet: the push path compared a clock and read nothing
        assert catalog.describes == reads
        clock.now += 2.0
        with pytest.raises(PreconditionsUnmetError, match=r"main\.raw\.events.*deletion_vectors_disabled"):
            sink.push(batch(3))
        assert catalog.describes == reads + 1
        with pytest.raises(PreconditionsUnmetError):  # still refused: the re-check stays due
            sink.push(batch(4))
        sink.flush(30)
        assert transport.durable_rows(T) == 2  # batches 3 and 4 were never sent
        assert live(catalog).properties[DV] == "true"  # and the property was not set back
    finally:
        pool.close(30)


def test_twg_source_is_stamped_when_a_write_creates_the_table_and_never_flipped(tmp_path: Path) -> None:
    catalog = LocalCatalog(tmp_path / "wh")
    CatalogGate(catalog, Role.DERIVED, source="orders").ensure(T, SCHEMA)
    assert live(catalog).properties[PROP_SOURCE] == "orders"
    version = live(catalog).version
    other = CatalogGate(catalog, Role.DERIVED, source="returns")
    other.ensure(T, SCHEMA)
    assert live(catalog).properties[PROP_SOURCE] == "orders" and live(catalog).version == version
    # An explicit tag is a managed property instead (the caller asked for it).
    tagged = CatalogGate(catalog, Role.DERIVED, source="x", tags=TableTags(source="returns"))
    tagged.ensure(T, SCHEMA)
    assert live(catalog).properties[PROP_SOURCE] == "returns"


def test_cli_plan_apply_refuses_a_drifted_table_and_repairs_it_only_with_repair(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from zerobus_orchestration.cli.main import app

    wh = str(tmp_path / "wh")
    schema_file = tmp_path / "s.parquet"
    pq.write_table(SCHEMA.empty_table(), schema_file)
    plan = [
        "plan",
        "--table",
        T,
        "--role",
        "primary_raw",
        "--schema-from",
        str(schema_file),
        "--warehouse",
        wh,
    ]
    runner = CliRunner()
    assert runner.invoke(app, [*plan, "--apply"]).exit_code == 0
    catalog = LocalCatalog(wh)
    flip(catalog, **{COMPAT: "false"})
    refused = runner.invoke(app, [*plan, "--apply"])
    assert refused.exit_code == 1
    assert f"table {T} is not eligible as primary_raw" in refused.output and "--repair" in refused.output
    assert live(catalog).properties[COMPAT] == "false"  # plain --apply set nothing back
    repaired = runner.invoke(app, [*plan, "--apply", "--repair"])
    assert repaired.exit_code == 0, repaired.output
    assert live(catalog).properties[COMPAT] == "true" and unmet(check_primary_raw(catalog, T)) == []
