"""``CatalogGate.ensure(first=...)``: a first batch the new table could not hold is refused before the
CREATE, and a batch that fits costs no extra catalog read (local backend: real deltalake and SQLite)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from zerobus_orchestration.catalog.base import TableLocation
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import WriteBoundaryError
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.sink.stamping import Stamper

T = "main.derived.days"


class CountingCatalog(LocalCatalog):
    locates = 0

    def locate(self, table: str) -> TableLocation | None:
        self.locates += 1
        return super().locate(table)


def stamped(days: pa.Array) -> pa.RecordBatch:
    batch = pa.RecordBatch.from_arrays([pa.array(range(len(days)), pa.int64()), days], names=["id", "day"])
    return Stamper("days").stamp(batch, OffsetRange(0, len(days)), dt.datetime.now(dt.UTC), None)


GOOD = pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)], pa.date32())
BAD = pa.array([0, -(2**31)], pa.int32()).view(pa.date32())  # the second day is before year 1


@pytest.fixture
def catalog(tmp_path: Path) -> CountingCatalog:
    return CountingCatalog(tmp_path / "wh")


def test_a_first_batch_that_does_not_fit_is_refused_before_the_table_is_created(
    catalog: CountingCatalog,
) -> None:
    gate = CatalogGate(catalog, Role.DERIVED)
    first = stamped(BAD)
    with pytest.raises(WriteBoundaryError) as failure:
        gate.ensure(T, first.schema, first)
    assert failure.value.column == "day" and T in str(failure.value)
    assert catalog.describe(T) is None
    assert catalog.locates == 1  # asked only once the batch did not fit


def test_a_first_batch_that_fits_costs_no_extra_catalog_read(catalog: CountingCatalog) -> None:
    gate = CatalogGate(catalog, Role.DERIVED)
    first = stamped(GOOD)
    target = gate.ensure(T, first.schema, first)
    assert catalog.locates == 0
    assert catalog.describe(T) is not None and gate.conform(T, first, target).num_rows == 2


def test_on_an_existing_table_the_batch_is_left_to_conform(catalog: CountingCatalog) -> None:
    gate = CatalogGate(catalog, Role.DERIVED)
    good = stamped(GOOD)
    gate.ensure(T, good.schema, good)
    version = catalog.latest_version(T)
    bad = stamped(BAD)
    fresh = CatalogGate(catalog, Role.DERIVED)  # another sink's gate: nothing remembered
    target = fresh.ensure(T, bad.schema, bad)  # the table exists: nothing to create, nothing refused yet
    assert catalog.locates == 1 and catalog.latest_version(T) == version
    with pytest.raises(WriteBoundaryError, match="'day'"):
        fresh.conform(T, bad, target)
