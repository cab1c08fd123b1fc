"""``CatalogGate.ensure`` skips a reconcile that would find nothing to do (issue 15 item 2, per-write cost).

Every write builds a sink, so ``ensure`` runs once per write: it re-reads the table (preconditions),
then reconciled it, which re-read it twice more. When the re-read equals the state a reconcile of the
same desired table already found nothing to do against, the reconcile is skipped. Real delta-rs tables.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.catalog.base import DesiredTable, ReconcileOutcome
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.errors import PreconditionsUnmetError
from zerobus_orchestration.reserved import RESERVED_FIELDS

T = "main.raw.quiet_events"
SCHEMA = pa.schema([pa.field("id", pa.int64()), *RESERVED_FIELDS])
WIDER = pa.schema([pa.field("id", pa.int64()), pa.field("note", pa.string()), *RESERVED_FIELDS])


class CountingCatalog(LocalCatalog):
    """The local backend, counting reconciles."""

    reconciles = 0

    def reconcile(self, table: str, desired: DesiredTable) -> ReconcileOutcome:
        self.reconciles += 1
        return super().reconcile(table, desired)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


def write(warehouse: Path) -> tuple[CountingCatalog, CatalogGate]:
    """What each ``ZerobusRuntime.write`` does: a new catalog handle and gate."""
    catalog = CountingCatalog(warehouse)
    return catalog, CatalogGate(catalog)


def test_an_unchanged_table_is_not_reconciled_again_by_the_next_write(warehouse: Path) -> None:
    first, gate = write(warehouse)
    target = gate.ensure(T, SCHEMA)  # creates
    gate.ensure(T, SCHEMA)  # nothing to do: remembered
    assert first.reconciles == 2
    second, gate2 = write(warehouse)
    assert gate2.ensure(T, SCHEMA) == target
    assert second.reconciles == 0
    assert gate2.last_outcome is not None and gate2.last_outcome.plan.empty
    assert not gate2.last_outcome.applied


def test_a_changed_table_or_desired_schema_is_reconciled_as_always(warehouse: Path) -> None:
    _, gate = write(warehouse)
    gate.ensure(T, SCHEMA)
    gate.ensure(T, SCHEMA)
    catalog, gate2 = write(warehouse)
    wider = gate2.ensure(T, WIDER)  # another desired table: reconciled, adds the column
    assert catalog.reconciles == 1 and "note" in wider.names
    catalog3, gate3 = write(warehouse)
    target = gate3.ensure(T, SCHEMA)  # the table changed since the remembered quiet reconcile
    assert catalog3.reconciles == 1
    assert "note" in target.names  # the live table's schema, not the remembered one


def test_drifted_preconditions_are_still_refused_on_a_remembered_table(warehouse: Path) -> None:
    _, gate = write(warehouse)
    gate.ensure(T, SCHEMA)
    gate.ensure(T, SCHEMA)
    location = LocalCatalog(warehouse).location(T)
    DeltaTable(location).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    catalog, gate2 = write(warehouse)
    with pytest.raises(PreconditionsUnmetError) as info:
        gate2.ensure(T, SCHEMA)
    assert T in str(info.value)
    assert catalog.reconciles == 0  # refused before any DDL, as before
