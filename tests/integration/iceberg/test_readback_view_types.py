"""A table another Delta writer touched reads back: ``deltalake``'s row-level ``delete`` rewrites the
files it touches with ``string_view`` / ``binary_view`` columns, which read-back's Iceberg scan, the
rows it returns and the table's own truth must read and compare like ``string`` / ``binary``."""

from __future__ import annotations

import pyarrow as pa

from tests.support.iceberg_helpers import deleted_by_deltalake
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.readback import (
    IcebergEndpoint,
    MissingRange,
    WaitPolicy,
    read_rows,
    verify_coverage,
)

TABLE = "main.raw.viewed"
KEY = CoverageKey(sink="sink-1", source="orders", partition="")
BRIEF = WaitPolicy(timeout_s=1.0, initial_s=0.02, max_s=0.2)


def test_read_back_of_a_table_deltalake_deleted_from(
    warehouse: str, mirror: IcebergMirror, endpoint: IcebergEndpoint
) -> None:
    version = deleted_by_deltalake(warehouse, TABLE)
    mirror.sync_now(TABLE)

    report = verify_coverage(
        endpoint, TABLE, {KEY: [OffsetRange(0, 10)]}, delta_version=version, policy=BRIEF
    )
    assert report.missing_ranges == (MissingRange(KEY, OffsetRange(3, 4)),)
    assert report.rows_scanned == 9 and report.duplicate_count == 0

    rows = read_rows(TABLE, source="orders", endpoint=endpoint)
    assert rows.schema.field("_twg_source").type == pa.string()
    assert rows.schema.field("blob").type == pa.binary()
    assert rows.column("_twg_offset").to_pylist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert rows.column("blob").to_pylist() == [b"b%d" % o for o in (0, 1, 2, 4, 5, 6, 7, 8, 9)]
