"""``read_files`` and ``DatasetInput``: re-readable inputs, the same rows in the same order on every read,
each batch located (file, first row there) for a refusal's message, and the schema an empty input has."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from zerobus_orchestration.files import DatasetInput, Rereadable, read_files


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def test_files_are_read_again_in_the_same_order_with_each_batch_located(tmp_path: Path) -> None:
    pq.write_table(_ids(0, 25), tmp_path / "a.parquet", row_group_size=10)
    pq.write_table(_ids(25, 7), tmp_path / "b.parquet")
    files = read_files(str(tmp_path / "*.parquet"), batch_rows=10)
    assert isinstance(files, Rereadable)
    first = [b["id"].to_pylist() for b in files.batches()]
    assert [b["id"].to_pylist() for b in files.batches()] == first  # a second read, the same rows
    assert [v for ids in first for v in ids] == list(range(32))
    where = [(Path(x.where).name, x.first_row, x.batch.num_rows) for x in files.located()]
    assert where == [("a.parquet", 0, 10), ("a.parquet", 10, 10), ("a.parquet", 20, 5), ("b.parquet", 0, 7)]


def test_the_empty_schema_is_the_first_files_with_the_declared_types(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("at", pa.string())])
    pq.write_table(schema.empty_table(), tmp_path / "empty.parquet")
    files = read_files(str(tmp_path / "empty.parquet"), schema={"at": "TIMESTAMP"})
    assert list(files.batches()) == []
    assert files.empty_schema() == pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])


def test_a_dataset_is_scanned_in_fragment_order_each_batch_located(tmp_path: Path) -> None:
    pq.write_table(_ids(0, 30), tmp_path / "part-0.parquet", row_group_size=10)
    pq.write_table(_ids(30, 12), tmp_path / "part-1.parquet")
    data = DatasetInput(ds.dataset(str(tmp_path), format="parquet"), batch_rows=10)
    rows = [v for b in data.batches() for v in b["id"].to_pylist()]
    assert rows == list(range(42)) and [v for b in data.batches() for v in b["id"].to_pylist()] == rows
    located = [(Path(x.where).name, x.first_row) for x in data.located()]
    assert located[0] == ("part-0.parquet", 0) and located[-1][0] == "part-1.parquet"
    assert data.empty_schema() == pa.schema([("id", pa.int64())])
