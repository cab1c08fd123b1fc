"""A Parquet file whose Arrow schema holds ``string_view`` / ``binary_view`` reads and filters through
pyiceberg as ``string`` / ``binary`` (pyiceberg alone fails to filter it and returns view types)."""

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, In
from pyiceberg.io import pyarrow as pyiceberg_arrow

from zerobus_orchestration.readback import iceberg_views
from zerobus_orchestration.readback.iceberg_views import plain_types

PLAIN = pa.schema([("_twg_source", pa.string()), ("_twg_offset", pa.int64()), ("payload", pa.binary())])
VIEWS = pa.schema(
    [("_twg_source", pa.string_view()), ("_twg_offset", pa.int64()), ("payload", pa.binary_view())]
)
ROWS = {"_twg_source": ["a", "b", "a", "a"], "_twg_offset": [0, 0, 1, 2], "payload": [b"x", b"y", None, b"z"]}


def _table_of_a_view_typed_file(tmp_path: Path) -> Any:
    """One file with view types in its ``ARROW:schema``, as ``deltalake``'s ``delete`` rewrites files."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=PLAIN)
    data = tmp_path / "part-0.parquet"
    pq.write_table(pa.table(ROWS, schema=VIEWS), data)
    assert pq.read_schema(data).field("_twg_source").type == pa.string_view()
    table.add_files([str(data)])
    return table


def test_pyiceberg_alone_cannot_filter_a_view_typed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The upstream defect the wrapper exists for. When this fails, pyarrow or pyiceberg handle view
    # types themselves: delete iceberg_views.py's wrapper and this test.
    import pyarrow.dataset

    monkeypatch.setattr(pyiceberg_arrow, "ds", pyarrow.dataset)
    table = _table_of_a_view_typed_file(tmp_path)
    with pytest.raises(pa.ArrowNotImplementedError, match="string_view"):
        table.scan(row_filter=EqualTo("_twg_source", "a")).to_arrow()
    assert table.scan().to_arrow().schema.field("_twg_source").type == pa.string_view()


def test_read_back_filters_and_returns_plain_types(tmp_path: Path) -> None:
    import zerobus_orchestration.readback.endpoint  # noqa: F401  (installs the wrapper on import)

    table = _table_of_a_view_typed_file(tmp_path)
    whole = table.scan().to_arrow()
    assert whole.schema == PLAIN
    assert whole.to_pydict() == ROWS
    filtered = table.scan(row_filter=In("_twg_source", ["a"]), selected_fields=("_twg_offset",)).to_arrow()
    assert filtered.column("_twg_offset").to_pylist() == [0, 1, 2]
    assert table.scan(row_filter=EqualTo("_twg_source", "b")).to_arrow().to_pydict() == {
        "_twg_source": ["b"],
        "_twg_offset": [0],
        "payload": [b"y"],
    }
    installed = pyiceberg_arrow.ds
    iceberg_views.read_views_as_plain()  # a second install does not wrap twice
    assert pyiceberg_arrow.ds is installed


def test_plain_types_casts_nested_views_and_leaves_plain_data_alone() -> None:
    nested = pa.struct([("tags", pa.list_(pa.string_view())), ("blob", pa.binary_view())])
    data = pa.table(
        {"s": pa.array(["x"], pa.string_view()), "n": pa.array([{"tags": ["t"], "blob": b"b"}], nested)}
    )
    plain = plain_types(data)
    assert plain.schema.field("s").type == pa.string()
    assert plain.schema.field("n").type == pa.struct([("tags", pa.list_(pa.string())), ("blob", pa.binary())])
    assert plain.to_pylist() == data.to_pylist()
    untouched = pa.table({"s": ["x"]})
    assert plain_types(untouched) is untouched
