"""Table truth of tables other Delta writers shaped: files rewritten by ``deltalake``'s row-level
``delete`` (view types in their Arrow schema) and column-mapped tables (which deltalake's pyarrow
dataset reads as all NULL)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tests.support.iceberg_helpers import deleted_by_deltalake
from zerobus_orchestration.coverage import table_truth
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.tables import table_uri

TABLE = "main.raw.viewed"


def test_table_truth_of_a_table_deltalake_deleted_from(tmp_path: Path) -> None:
    deleted_by_deltalake(str(tmp_path), TABLE)
    reader = table_truth.TableReader(TABLE, table_uri(str(tmp_path), TABLE), {})
    assert table_truth.delivered_ranges(reader, source="orders") == (OffsetRange(0, 3), OffsetRange(4, 10))
    assert table_truth.source_tag_counts(reader, prefix="ord") == {"orders": 9}


def test_table_truth_of_a_column_mapped_table(tmp_path: Path) -> None:
    """deltalake's pyarrow dataset reads a column-mapped table's columns as all NULL: the truth would
    claim nothing was delivered (and a resume would send it all again). DataFusion answers instead,
    with view types it casts back."""
    uri = str(tmp_path / "mapped")
    schema = pa.schema([("_twg_source", pa.string()), ("_twg_offset", pa.int64())])
    mapping = {
        "delta.columnMapping.mode": "name",
        "delta.minReaderVersion": "2",
        "delta.minWriterVersion": "5",
    }
    DeltaTable.create(uri, schema=schema, configuration=mapping)
    rows = {"_twg_source": ["orders"] * 4 + ["other"], "_twg_offset": [0, 1, 2, 5, 0]}
    write_deltalake(uri, pa.table(rows, schema=schema), mode="append")
    assert DeltaTable(uri).to_pyarrow_dataset().to_table().column("_twg_offset").null_count == 5  # the trap

    reader = table_truth.TableReader(TABLE, uri, {})
    assert table_truth.delivered_ranges(reader, source="orders") == (OffsetRange(0, 3), OffsetRange(5, 6))
    assert table_truth.source_tag_counts(reader, prefix="o") == {"orders": 4, "other": 1}
