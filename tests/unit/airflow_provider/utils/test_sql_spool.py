"""The SQL spool: a query result fetched once into private files on local disk, read again as often as
the write needs (check, then send), deleted on close and on a failed fetch; a SQL value that does not fit
its type names the table, the column and the row of the result."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider.utils.sql import iter_sql_batches
from airflow_provider.utils.sql_spool import WHERE, spool
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.files import Rereadable


class _Hook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def get_conn(self) -> Any:
        return sqlite3.connect(self.path)


def _db(tmp_path: Path, rows: list[tuple[Any, ...]]) -> _Hook:
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, note TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    return _Hook(path)


def test_a_result_is_spooled_once_and_read_again_in_order(tmp_path: Path) -> None:
    # The first fetch's notes are all NULL (type null), the later ones text: two segments, one per schema.
    hook = _db(tmp_path, [(i, None if i < 4 else f"n{i}") for i in range(10)])
    fetched = iter_sql_batches(hook, "SELECT id, note FROM t ORDER BY id", fetch_rows=4)
    spooled = spool(fetched, declared=None, spool_dir=str(tmp_path))
    assert isinstance(spooled, Rereadable)
    assert spooled.rows == 10 and len(spooled.segments) == 2
    assert stat.S_IMODE(spooled.folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(s.stat().st_mode) == 0o600 for s in spooled.segments)
    once = [v for b in spooled.batches() for v in b["id"].to_pylist()]
    assert once == list(range(10)) == [v for b in spooled.batches() for v in b["id"].to_pylist()]
    assert [(x.where, x.first_row) for x in spooled.located()] == [(WHERE, 0), (WHERE, 4), (WHERE, 8)]
    assert spooled.empty_schema() == pa.schema([("id", pa.int64()), ("note", pa.null())])
    spooled.close()
    assert not spooled.folder.exists()


def test_an_empty_result_has_the_declared_schema(tmp_path: Path) -> None:
    declared = pa.schema([("id", pa.int64()), ("note", pa.string())])
    spooled = spool(iter_sql_batches(_db(tmp_path, []), "SELECT id, note FROM t"), declared=declared)
    assert (spooled.rows, list(spooled.batches()), spooled.empty_schema()) == (0, [], declared)
    spooled.close()


def test_a_value_that_does_not_fit_names_table_column_and_row_and_leaves_no_spool(tmp_path: Path) -> None:
    hook = _db(tmp_path, [(i, str(i)) for i in range(25)] + [(25, "twelve")])
    fetched = iter_sql_batches(
        hook,
        "SELECT id, note FROM t ORDER BY id",
        fetch_rows=10,
        schema=pa.schema([("note", pa.int64())]),
        table="main.raw.t",
    )
    folder = tmp_path / "spool"
    folder.mkdir()
    with pytest.raises(ConfigError) as failure:
        spool(fetched, declared=None, spool_dir=str(folder))
    message = str(failure.value)
    assert message.startswith("table main.raw.t: SQL column 'note', row 26 of the result")
    assert "the value 'twelve' does not fit the declared type int64" in message
    assert list(folder.iterdir()) == []
