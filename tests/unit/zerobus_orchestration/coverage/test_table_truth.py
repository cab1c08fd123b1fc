"""Delivered positions read from the raw table's own Delta log (real Delta tables on a tmp dir)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.coverage.table_truth import (
    TableReader,
    TableTruthError,
    _rows_via_datafusion,
    delivered_offsets,
    delivered_ranges,
    delivered_rows,
    offsets_to_ranges,
    reader_for,
    table_version,
)
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE


def rows(tag: str, offsets: list[int]) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(offsets, pa.int64()),
            SOURCE: pa.array([tag] * len(offsets), pa.string()),
            OFFSET: pa.array(offsets, pa.int64()),
        }
    )


def reader(path: Path) -> TableReader:
    return TableReader("main.raw.t", str(path), {})


def test_ranges_of_one_source_and_partition_merged_across_commits(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), rows("orders", [0, 1, 2, 3]))
    write_deltalake(str(table), rows("orders", [4, 5, 9, 10, 3]), mode="append")  # 3 again: a duplicate
    write_deltalake(str(table), rows("orders[p1]", [6, 7, 8]), mode="append")  # another partition
    write_deltalake(str(table), rows("orders2", [6, 7, 8]), mode="append")  # another source
    assert delivered_ranges(reader(table), source="orders") == (OffsetRange(0, 6), OffsetRange(9, 11))
    assert delivered_ranges(reader(table), source="orders", partition="p1") == (OffsetRange(6, 9),)
    assert delivered_ranges(reader(table), source="nobody") == ()
    assert len(delivered_offsets(reader(table), source="orders")) == 9  # duplicates kept for counting


def test_files_of_other_sources_are_pruned_before_reading(tmp_path: Path) -> None:
    """Only files whose statistics admit the tag are opened: the other source's file is gone and unread."""
    table = tmp_path / "t"
    write_deltalake(str(table), rows("a", [0, 1, 2]))
    write_deltalake(str(table), rows("b", [0, 1]), mode="append")
    (b_file,) = DeltaTable(str(table)).file_uris(file_pruning_predicate=[(SOURCE, "=", "b")])
    Path(b_file).unlink()
    assert delivered_ranges(reader(table), source="a") == (OffsetRange(0, 3),)
    with pytest.raises(TableTruthError, match=r"main\.raw\.t"):  # the pruning above is what spared "a"
        delivered_ranges(reader(table), source="b")


def test_a_table_written_without_statistics_still_filters_rows(tmp_path: Path) -> None:
    table = tmp_path / "t"
    no_stats = {"delta.dataSkippingNumIndexedCols": "0"}
    write_deltalake(str(table), rows("a", [0, 1, 5]), configuration=no_stats)
    write_deltalake(str(table), rows("b", [2, 3]), mode="append")
    assert delivered_ranges(reader(table), source="a") == (OffsetRange(0, 2), OffsetRange(5, 6))


def test_the_datafusion_path_reads_the_same_offsets(tmp_path: Path) -> None:
    """The reader for tables pyarrow datasets refuse (column mapping, deletion vectors), quoting included."""
    table = tmp_path / "t"
    write_deltalake(str(table), rows("it's", [3, 4]))
    write_deltalake(str(table), rows("other", [0]), mode="append")
    offsets = _rows_via_datafusion(DeltaTable(str(table)), "it's", [OFFSET], None).column(OFFSET)
    assert sorted(offsets.to_pylist()) == [3, 4]
    assert _rows_via_datafusion(DeltaTable(str(table)), "nobody", [OFFSET], None).num_rows == 0


def test_offsets_to_ranges() -> None:
    assert offsets_to_ranges(pa.array([], pa.int64())) == ()
    assert offsets_to_ranges(pa.array([5, 1, 2, 2, 0, 7, 6], pa.int64())) == (
        OffsetRange(0, 3),
        OffsetRange(5, 8),
    )


def test_reader_for_a_local_catalog(tmp_path: Path) -> None:
    config = ZerobusConfig(warehouse=str(tmp_path / "wh"))
    catalog = LocalCatalog(str(tmp_path / "wh"), registry_path=tmp_path / "registry.sqlite")
    assert reader_for(catalog, config, "main.raw.t") is None  # no table yet
    location = catalog.location("main.raw.t")
    write_deltalake(location, rows("a", [0]))  # written by another host: unknown to this registry
    found = reader_for(catalog, config, "main.raw.t")
    assert found is not None and found.uri == location and found.table == "main.raw.t"
    assert delivered_ranges(found, source="a") == (OffsetRange(0, 1),)
    assert table_version(found) == 0


def test_reader_keeps_storage_options_secret() -> None:
    from pydantic import SecretStr

    found = TableReader("main.raw.t", "s3://b/t", {"AWS_SECRET_ACCESS_KEY": SecretStr("hunter2")})
    assert "hunter2" not in repr(found)


def stamped(tag: str, offsets: list[int], at: dt.datetime) -> pa.Table:
    """Rows as the sink writes them: the three reserved columns, stamped at ``at``."""
    return rows(tag, offsets).append_column(
        EMIT_TS, pa.array([at] * len(offsets), pa.timestamp("us", tz="UTC"))
    )


def test_files_of_rows_stamped_before_the_bound_are_not_read_however_sources_mix(tmp_path: Path) -> None:
    """Files that mix sources (writers at once) span every tag: only ``_twg_emit_ts`` tells them apart.
    The old file is removed after the log: a read that opened it would fail."""
    table = tmp_path / "t"
    old, new = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    write_deltalake(str(table), pa.concat_tables([stamped("a[1]", [0, 1], old), stamped("z[1]", [0], old)]))
    write_deltalake(
        str(table),
        pa.concat_tables(
            [stamped("a[1]", [2, 3], new), stamped("m[2]", [0, 1], new), stamped("z[1]", [1], new)]
        ),
        mode="append",
    )
    found = delivered_rows(reader(table), source="m", partition="2")
    assert sorted(found.offsets.to_pylist()) == [0, 1] and found.first_emitted == new
    assert delivered_rows(reader(table), source="a", partition="1").first_emitted == old

    (old_file,) = DeltaTable(str(table)).file_uris(file_pruning_predicate=[(EMIT_TS, "<", new)])
    Path(old_file).unlink()
    since = new - dt.timedelta(days=1)
    assert delivered_ranges(reader(table), source="m", partition="2", emitted_since=since) == (
        OffsetRange(0, 2),
    )
    with pytest.raises(TableTruthError):  # without the bound, the mixed old file is opened
        delivered_ranges(reader(table), source="m", partition="2")
    # The DataFusion path (column-mapped tables): the same bound, the same answer.
    via = _rows_via_datafusion(DeltaTable(str(table)), "m[2]", [OFFSET, EMIT_TS], since)
    assert sorted(via.column(OFFSET).to_pylist()) == [0, 1]


def test_a_table_without_the_stamp_column_is_read_without_the_bound(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), rows("a", [0, 1]))
    found = delivered_rows(reader(table), source="a", emitted_since=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    assert sorted(found.offsets.to_pylist()) == [0, 1] and found.first_emitted is None
