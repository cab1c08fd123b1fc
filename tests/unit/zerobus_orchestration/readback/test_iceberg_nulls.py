"""A NULL ``ARRAY<STRUCT>`` or ``MAP<K, STRUCT>`` read back through pyiceberg stays NULL (pyiceberg alone
returns an empty one)."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import ArrowProjectionVisitor

from zerobus_orchestration.readback import iceberg_nulls

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("visits", pa.list_(pa.struct([("day", pa.date32()), ("pages", pa.int32())]))),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("by_page", pa.map_(pa.string(), pa.struct([("hits", pa.int64())]))),
    ]
)
ROWS = [
    {"id": 1, "visits": [{"day": None, "pages": 3}], "tags": ["a"], "by_page": [("a", {"hits": 1})]},
    {"id": 2, "visits": None, "tags": None, "by_page": None},
    {"id": 3, "visits": [], "tags": [], "by_page": []},
    {
        "id": 4,
        "visits": [{"day": None, "pages": 5}, {"day": None, "pages": 6}],
        "tags": None,
        "by_page": [("b", None)],
    },
]


def _table_of_a_file_written_like_delta_writes_it(tmp_path: Path) -> object:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=SCHEMA)
    data = tmp_path / "part-0.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS, schema=SCHEMA), data)  # the file holds the NULL
    assert pq.read_table(data).column("visits").null_count == 1
    table.add_files([str(data)])
    return table


def test_pyiceberg_alone_still_reads_a_null_array_of_structs_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The upstream defect the wrapper exists for. When this fails, pyiceberg keeps the NULL itself:
    # delete iceberg_nulls.py and this file.
    for name in ("list", "map"):
        visit = getattr(ArrowProjectionVisitor, name)
        monkeypatch.setattr(ArrowProjectionVisitor, name, getattr(visit, "__wrapped__", visit))
    table = _table_of_a_file_written_like_delta_writes_it(tmp_path)
    read = table.scan().to_arrow()  # type: ignore[attr-defined]
    assert read.column("visits").to_pylist()[1] == [] and read.column("by_page").to_pylist()[1] == []


def test_read_back_keeps_null_and_empty_arrays_apart(tmp_path: Path) -> None:
    import zerobus_orchestration.readback.endpoint  # noqa: F401  (installs the wrapper on import)

    table = _table_of_a_file_written_like_delta_writes_it(tmp_path)
    assert table.scan().to_arrow().to_pylist() == ROWS  # type: ignore[attr-defined]
    filtered = table.scan(row_filter="id >= 2").to_arrow()  # type: ignore[attr-defined]
    assert filtered.to_pylist() == ROWS[1:]
    iceberg_nulls.keep_list_nulls()  # a second install does not wrap twice
    assert not hasattr(ArrowProjectionVisitor.list.__wrapped__, "__wrapped__")  # type: ignore[attr-defined]
    assert not hasattr(ArrowProjectionVisitor.map.__wrapped__, "__wrapped__")  # type: ignore[attr-defined]
