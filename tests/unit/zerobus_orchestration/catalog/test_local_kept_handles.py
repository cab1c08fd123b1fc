"""``LocalCatalog.describe`` keeps one Delta handle per table and brings it up to date (delta_handles):
every change made elsewhere is still seen, and a table dropped and created again is not confused with
the old one. Real delta-rs. Changes made by another process:
tests/system/catalog/test_local_catalog_processes.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog import delta_handles
from zerobus_orchestration.catalog.local import LocalCatalog

T = "main.raw.kept"


@pytest.fixture
def catalog(tmp_path: Path) -> LocalCatalog:
    catalog = LocalCatalog(tmp_path / "wh")
    write_deltalake(catalog.location(T), _rows(1))  # made outside the catalog: described all the same
    return catalog


def _rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "name": pa.array(["x"] * n)})


def test_the_table_is_opened_once_and_brought_up_to_date_after(
    catalog: LocalCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    class Counting(DeltaTable):
        def __init__(self, table_uri: str, *args: object, **kwargs: object) -> None:
            opened.append(table_uri)
            super().__init__(table_uri, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(deltalake, "DeltaTable", Counting)
    first = catalog.describe(T)
    location = catalog.location(T)
    write_deltalake(location, _rows(3), mode="append")
    second = catalog.describe(T)
    assert first is not None and second is not None and first.version is not None
    assert second.version == first.version + 1  # the append is seen...
    assert opened.count(location) <= 1  # ...without re-opening the table (at most the first describe)


def test_a_table_dropped_and_created_again_is_read_as_the_new_table(catalog: LocalCatalog) -> None:
    location = catalog.location(T)
    for _ in range(3):
        write_deltalake(location, _rows(2), mode="append")
    old = catalog.describe(T)
    assert old is not None and old.version == 3  # the fixture's commit and three appends
    shutil.rmtree(location)
    assert catalog.describe(T) is None  # gone: no stale handle answers for it
    other = pa.schema([pa.field("code", pa.string())])
    write_deltalake(location, pa.table({"code": ["a"]}, schema=other))
    new = catalog.describe(T)
    assert new is not None
    assert new.version == 0  # a kept handle would stay at version 3 (no commit 4 in the new log)
    assert [c.name for c in new.columns] == ["code"]
    assert new.properties == DeltaTable(location).metadata().configuration


def test_only_local_tables_without_storage_options_are_kept(tmp_path: Path) -> None:
    calls: list[str] = []

    def open_table() -> DeltaTable:
        calls.append("open")
        return DeltaTable(location)

    location = str(tmp_path / "t")
    write_deltalake(location, _rows(1))
    for _ in range(2):
        with delta_handles.latest(location, open_table, lambda: True, cacheable=False) as dt:
            assert dt is not None and dt.version() == 0
    assert calls == ["open", "open"]
