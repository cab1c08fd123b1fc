"""Delivered positions read from a raw table on an s3:// warehouse (a real moto server)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import Role, ZerobusConfig
from zerobus_orchestration.coverage.table_truth import delivered_ranges, reader_for
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.testing.moto_s3 import S3Lab

pytestmark = pytest.mark.integration


def stamped(tag: str, offsets: list[int], schema: pa.Schema) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {
            "order_id": pa.array(offsets, pa.int64()),
            EMIT_TS: pa.array([0] * n, pa.int64()).cast(schema.field(EMIT_TS).type),
            SOURCE: pa.array([tag] * n, pa.string()),
            OFFSET: pa.array(offsets, pa.int64()),
        },
        schema=schema,
    )


def test_truth_on_an_s3_warehouse_with_the_configured_storage_options(
    moto_lab: S3Lab, unique_table: str, tmp_path: Path
) -> None:
    """The local backend vends nothing for s3://: the writer's own storage options read the table."""
    warehouse = f"s3://{moto_lab.bucket}/truth"
    options = moto_lab.admin_options()
    config = ZerobusConfig(warehouse=warehouse, storage_options=options)  # type: ignore[arg-type]
    catalog = LocalCatalog(warehouse, storage_options=options, registry_path=tmp_path / "registry.sqlite")
    assert reader_for(catalog, config, unique_table) is None

    outcome = catalog.reconcile(
        unique_table,
        DesiredTable.build(unique_table, pa.schema([("order_id", pa.int64())]), Role.PRIMARY_RAW),
    )
    schema = outcome.state.arrow_schema()
    location = catalog.location(unique_table)
    write_deltalake(location, stamped("s", [0, 1, 2, 7], schema), mode="append", storage_options=options)
    write_deltalake(location, stamped("s[p]", [3], schema), mode="append", storage_options=options)

    found = reader_for(catalog, config, unique_table)
    assert found is not None and found.uri == location
    assert delivered_ranges(found, source="s") == (OffsetRange(0, 3), OffsetRange(7, 8))
    assert delivered_ranges(found, source="s", partition="p") == (OffsetRange(3, 4),)
