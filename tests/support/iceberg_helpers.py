"""Helpers shared by the Iceberg tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.tables import table_uri

LAG_S = 0.3  # the shared mirror fixture's emulated conversion lag


def write_delta(warehouse: str, full_name: str, data: pa.Table, **kwargs: Any) -> int:
    """Append (or ``mode=...``) ``data`` to the warehouse's Delta table; returns the new version."""
    uri = table_uri(warehouse, full_name)
    kwargs.setdefault("mode", "append")
    write_deltalake(uri, data, **kwargs)
    version: int = DeltaTable(uri).version()
    return version


def wait_until(predicate: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition") -> float:
    """Poll ``predicate`` with a short backoff; returns the seconds it took. Fails at the timeout."""
    start = time.monotonic()
    delay = 0.01
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return time.monotonic() - start


NESTED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), metadata={"comment": "Order id."}),
        pa.field("tags", pa.list_(pa.string()), metadata={"comment": "Free-form tags."}),
        pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        pa.field(
            "address",
            pa.struct([pa.field("city", pa.string(), metadata={"comment": "City name."})]),
        ),
        pa.field("_twg_emit_ts", pa.timestamp("us", tz="UTC")),
        pa.field("_twg_source", pa.string()),
        pa.field("_twg_offset", pa.int64()),
    ]
)


def nested_rows(offsets: list[int], source: str = "orders") -> pa.Table:
    """Rows with a list, a map, a struct and the reserved columns; ``id`` equals the offset."""
    return pa.table(
        {
            "id": offsets,
            "tags": [[f"t{o}", "x"] if o % 2 else [] for o in offsets],
            "attrs": [[("k", o), ("j", -o)] for o in offsets],
            "address": [{"city": f"city-{o}"} for o in offsets],
            "_twg_emit_ts": [1_700_000_000_000_000 + o for o in offsets],
            "_twg_source": [source] * len(offsets),
            "_twg_offset": offsets,
        },
        schema=NESTED_SCHEMA,
    )


def raw_rows(offsets: list[int], source: str = "orders", region: str = "eu") -> pa.Table:
    """Minimal raw rows: payload, a partition-key column and the reserved columns."""
    return pa.table(
        {
            "value": [float(o) for o in offsets],
            "region": [region] * len(offsets),
            "_twg_emit_ts": pa.array([1_700_000_000_000_000] * len(offsets), pa.timestamp("us", tz="UTC")),
            "_twg_source": [source] * len(offsets),
            "_twg_offset": pa.array(offsets, pa.int64()),
        }
    )


def deleted_by_deltalake(warehouse: str, table: str) -> int:
    """Ten rows of ``orders`` and a blob column; ``deltalake`` deletes offset 3 (a row-level
    delete), which rewrites the file with view types in its Arrow schema. Returns the Delta version."""
    rows = raw_rows(list(range(10))).append_column("blob", pa.array([b"b%d" % o for o in range(10)]))
    write_delta(warehouse, table, rows)
    uri = table_uri(warehouse, table)
    DeltaTable(uri).delete("_twg_offset = 3")
    delta = DeltaTable(uri)
    rewritten = [pq.read_schema(path) for path in delta.file_uris()]
    # The precondition this test is about: the rewritten file stores view types in its Arrow schema.
    assert any(schema.field("_twg_source").type == pa.string_view() for schema in rewritten), rewritten
    return int(delta.version())
