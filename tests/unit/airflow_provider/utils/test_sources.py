"""Ingest sources: files and globs, SQL cursors, schema specs -- ordered, bounded batches, loud errors."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from airflow_provider.utils.sql import iter_sql_batches, iter_sql_located
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.files import FileFormat, FileInput, resolve_files
from zerobus_orchestration.schema_text import arrow_schema_of_text


def _orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {"order_id": pa.array(range(start, start + n), pa.int64()), "amount": [i * 1.5 for i in range(n)]}
    )


def _write_all_formats(tmp_path: Path) -> None:
    pq.write_table(_orders(0, 25), tmp_path / "b.parquet", row_group_size=10)
    pq.write_table(_orders(25, 5), tmp_path / "a.parquet")
    with ipc.new_file(tmp_path / "c.arrow", _orders(0, 1).schema) as writer:
        writer.write_table(_orders(100, 12))
    with ipc.new_stream(tmp_path / "d.arrows", _orders(0, 1).schema) as writer:
        writer.write_table(_orders(200, 3))
    pacsv.write_csv(_orders(300, 7), tmp_path / "e.csv")


def test_globs_are_sorted_and_batches_bounded(tmp_path: Path) -> None:
    _write_all_formats(tmp_path)
    files = resolve_files(str(tmp_path / "*.parquet"))
    assert files.format is FileFormat.PARQUET
    assert [Path(p).name for p in files.paths] == ["a.parquet", "b.parquet"]
    batches = list(FileInput(files, batch_rows=4).batches())
    assert max(b.num_rows for b in batches) <= 4
    ids = pa.Table.from_batches(batches)["order_id"].to_pylist()
    assert ids == list(range(25, 30)) + list(range(0, 25))  # a.parquet first, each file in row order


@pytest.mark.parametrize(
    ("name", "fmt", "expected"),
    [
        ("c.arrow", FileFormat.ARROW, range(100, 112)),
        ("d.arrows", FileFormat.ARROW, range(200, 203)),
        ("e.csv", FileFormat.CSV, range(300, 307)),
    ],
)
def test_arrow_ipc_file_and_stream_and_csv(
    tmp_path: Path, name: str, fmt: FileFormat, expected: range
) -> None:
    _write_all_formats(tmp_path)
    files = resolve_files([str(tmp_path / name)])
    assert files.format is fmt
    table = pa.Table.from_batches(list(FileInput(files, batch_rows=5).batches()))
    assert table["order_id"].to_pylist() == list(expected)


def test_format_errors_name_the_fix(tmp_path: Path) -> None:
    _write_all_formats(tmp_path)
    with pytest.raises(ConfigError, match="mix formats"):
        resolve_files([str(tmp_path / "a.parquet"), str(tmp_path / "e.csv")])
    with pytest.raises(ConfigError, match="set file_format"):
        resolve_files(str(tmp_path / "data.bin"))
    with pytest.raises(ConfigError, match="unknown file format"):
        resolve_files(str(tmp_path / "a.parquet"), "xlsx")
    assert resolve_files(str(tmp_path / "nothing-*.csv")).paths == ()
    with pytest.raises(ConfigError, match=r"missing\.parquet"):
        list(FileInput(resolve_files(str(tmp_path / "missing.parquet")), batch_rows=10).batches())


FETCH_SIZES: list[int] = []


class _CountingCursor(sqlite3.Cursor):
    def fetchmany(self, size: int | None = 1) -> list[Any]:
        FETCH_SIZES.append(int(size or 1))
        return super().fetchmany(size)


class _CountingConnection(sqlite3.Connection):
    def cursor(self, factory: Any = _CountingCursor) -> Any:
        return super().cursor(factory)


class _SqliteHook:
    """The only part of a DbApiHook the SQL source uses: ``get_conn()``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get_conn(self) -> Any:
        return sqlite3.connect(self.path, factory=_CountingConnection)


def test_sql_rows_stream_with_fetchmany_and_pin_types(tmp_path: Path) -> None:
    db = tmp_path / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, note TEXT, score REAL)")
        rows = [(i, None if i < 3 else f"n{i}", None if i < 5 else i / 2) for i in range(10)]
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    hook = _SqliteHook(db)
    FETCH_SIZES.clear()
    batches = list(iter_sql_batches(hook, "SELECT id, note, score FROM t ORDER BY id", fetch_rows=3))
    assert [b.num_rows for b in batches] == [3, 3, 3, 1]
    assert set(FETCH_SIZES) == {3}  # never fetchall
    assert batches[1].schema.field("note").type == pa.string()
    assert batches[2].schema.field("score").type == pa.float64()
    pinned = list(
        iter_sql_batches(
            hook,
            "SELECT id, note FROM t ORDER BY id",
            fetch_rows=3,
            schema=pa.schema([("note", pa.string())]),
        )
    )
    assert all(b.schema.field("note").type == pa.string() for b in pinned)


class _ServerSideCursor(sqlite3.Cursor):
    """Behaves like a psycopg2 named cursor: no ``description`` until the first fetch."""

    fetched = False

    @property
    def description(self) -> Any:
        return super().description if self.fetched else None

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        self.fetched = True
        FETCH_SIZES.append(int(size or 1))
        return super().fetchmany(size)


def test_sql_cursor_kwargs_reach_the_driver_and_a_late_description_is_read(tmp_path: Path) -> None:
    db = tmp_path / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(7)])
    FETCH_SIZES.clear()
    batches = list(
        iter_sql_batches(
            _SqliteHook(db),
            "SELECT id FROM t ORDER BY id",
            fetch_rows=3,
            cursor_kwargs={"factory": _ServerSideCursor},
        )
    )
    assert [b.num_rows for b in batches] == [3, 3, 1]
    assert [v for b in batches for v in b.column("id").to_pylist()] == list(range(7))
    assert set(FETCH_SIZES) == {3}


def test_sql_errors_are_named(tmp_path: Path) -> None:
    db = tmp_path / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b")])
    hook = _SqliteHook(db)
    with pytest.raises(ConfigError, match="SQL column 'v'"):
        list(iter_sql_batches(hook, "SELECT id, v FROM t", schema=pa.schema([("v", pa.int64())])))
    with pytest.raises(ConfigError, match=r"\['missing'\]"):
        list(iter_sql_batches(hook, "SELECT id FROM t", schema=pa.schema([("missing", pa.int64())])))
    with pytest.raises(ConfigError, match="no result set"):
        list(iter_sql_batches(hook, "UPDATE t SET v = 'c'"))


def test_schema_mapping_spec() -> None:
    schema = arrow_schema_of_text(
        {"id": "int64 not null", "ts": "timestamp[us, tz=UTC]", "price": "decimal(10, 2)", "day": "date32"}
    )
    assert schema.field("id").type == pa.int64() and not schema.field("id").nullable
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("price").type == pa.decimal128(10, 2)
    assert schema.field("day").nullable
    with pytest.raises(ConfigError, match="column 'x': unknown Arrow type 'int65'"):
        arrow_schema_of_text({"x": "int65"})


def test_a_sql_value_that_does_not_fit_names_table_column_and_row(tmp_path: Path) -> None:
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, note TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, str(i)) for i in range(25)] + [(25, "twelve")])
    hook = _SqliteHook(path)
    batches = iter_sql_located(
        hook,
        "SELECT id, note FROM t ORDER BY id",
        fetch_rows=10,
        schema=pa.schema([("note", pa.int64())]),
        table="main.raw.t",
    )
    assert [(x.where, x.first_row) for x in itertools.islice(batches, 2)] == [
        ("the SQL result", 0),
        ("the SQL result", 10),
    ]
    with pytest.raises(ConfigError) as failure:
        next(batches)
    message = str(failure.value)
    assert message.startswith("table main.raw.t: SQL column 'note', row 26 of the result")
    assert "the value 'twelve' does not fit the declared type int64" in message
