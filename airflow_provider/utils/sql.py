"""A SQL query through any common-sql ``DbApiHook`` -> Arrow record batches, ``fetch_rows`` at a time.

``DbApiHook.get_records`` materialises the whole result; a DB-API cursor with ``fetchmany`` keeps memory
at one batch *only if the driver's cursor streams*. The default cursors of psycopg2 (Postgres) and
MySQLdb / mysqlclient (MySQL) are client-side: ``execute`` already loads the whole result into the
worker's memory, and ``fetchmany`` only slices it. Ask for a server-side cursor through
``cursor_kwargs`` (passed to ``conn.cursor``): ``{"name": "zerobus_ingest"}`` for psycopg2 (a named
cursor), ``{"cursorclass": MySQLdb.cursors.SSCursor}`` for MySQLdb (or the MySQL connection extra
``"cursor": "sscursor"``). sqlite3 streams already.

Column types are inferred per batch from the Python values, then pinned: once a column was seen with a
concrete type, later batches (where it may be all NULL) are built with that type. Pass ``schema`` to
pin types up front: needed when the first rows of a column are all NULL, and for a timestamp or decimal
the database stores as text (SQLite), which is then parsed into the declared type.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing
from typing import Any

import pyarrow as pa

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.files import Located

WHERE = "the SQL result"


def _text_for_typed(pinned: pa.DataType | None, values: Sequence[Any]) -> bool:
    if pinned is None or pa.types.is_string(pinned) or pa.types.is_large_string(pinned):
        return False
    return any(isinstance(v, str) for v in values)


def _build_batch(
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    known: dict[str, pa.DataType],
    *,
    first_row: int = 0,
    table: str | None = None,
) -> pa.RecordBatch:
    """The fetched ``rows`` (the result's rows ``first_row + 1`` on) as one batch of the known types."""
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    arrays: list[pa.Array] = []
    for name, values in columns.items():
        pinned = known.get(name)
        try:
            array = _array(values, pinned)
        except _REFUSED as exc:
            row, value = _first_refused(values, pinned)
            at = f", row {first_row + row + 1:,} of the result (rows counted from 1)" if row >= 0 else ""
            shown = f" the value {value!r}" if row >= 0 else " a value"
            where = f"table {table}: " if table else ""
            kind = f"the declared type {pinned}" if pinned is not None else "the column's type"
            raise ConfigError(
                f"{where}SQL column {name!r}{at}:{shown} does not fit {kind} ({exc}), the type its earlier "
                f"rows or the schema gave it. Fix: cast it in the query, or pass schema={{{name!r}: "
                "'<type>'}} for a type that holds every value"
            ) from None
        if pinned is None and not pa.types.is_null(array.type):
            known[name] = array.type
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


_REFUSED = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)


def _array(values: Sequence[Any], pinned: pa.DataType | None) -> pa.Array:
    if _text_for_typed(pinned, values):
        # Text holding a typed value (SQLite keeps timestamps and decimals as TEXT): parsed by
        # Arrow's cast (ISO 8601, decimal notation), which refuses rather than guesses.
        return pa.array(values, type=pa.string()).cast(pinned)
    return pa.array(values, type=pinned) if pinned is not None else pa.array(values)


def _first_refused(values: Sequence[Any], pinned: pa.DataType | None) -> tuple[int, Any]:
    """(index, value) of the first value that does not fit alone, or (-1, None) (the mix of values
    is what does not fit: an inferred column holding two kinds of value)."""
    if pinned is not None:
        for index, value in enumerate(values):
            try:
                _array([value], pinned)
            except _REFUSED:
                return index, value
    return -1, None


def iter_sql_batches(
    hook: Any,
    sql: str,
    *,
    parameters: Sequence[Any] | Mapping[str, Any] | None = None,
    fetch_rows: int = 10_000,
    schema: pa.Schema | None = None,
    cursor_kwargs: Mapping[str, Any] | None = None,
    table: str | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """Run ``sql`` on ``hook.get_conn()`` and yield its rows in order. Add ORDER BY for resumable retries.

    ``cursor_kwargs`` go to ``conn.cursor(...)``, e.g. a server-side cursor (module docstring).
    ``table``: the table written, named in a refusal.
    """
    if fetch_rows < 1:
        raise ConfigError(f"fetch_rows must be at least 1 (got {fetch_rows})")
    known: dict[str, pa.DataType] = {f.name: f.type for f in schema} if schema is not None else {}
    with closing(hook.get_conn()) as conn, closing(conn.cursor(**(cursor_kwargs or {}))) as cursor:
        if parameters is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql, parameters)
        first: Sequence[Sequence[Any]] | None = None
        if cursor.description is None and cursor_kwargs:
            # A psycopg2 named (server-side) cursor describes its result only after the first fetch.
            first = cursor.fetchmany(fetch_rows)
        if cursor.description is None:
            raise ConfigError("the SQL statement returned no result set; give a SELECT query")
        names = [str(column[0]) for column in cursor.description]
        unknown = sorted(set(known) - set(names))
        if unknown:
            raise ConfigError(
                f"schema names columns {unknown} the query does not return (it returns {names})"
            )
        fetched = 0
        while True:
            rows = first if first is not None else cursor.fetchmany(fetch_rows)
            first = None
            if not rows:
                return
            yield _build_batch(names, rows, known, first_row=fetched, table=table)
            fetched += len(rows)


def iter_sql_located(hook: Any, sql: str, **kwargs: Any) -> Iterator[Located]:
    """``iter_sql_batches`` with where each batch sits in the result (for a refusal's message)."""
    row = 0
    with closing(iter_sql_batches(hook, sql, **kwargs)) as batches:  # its cursor closed on this thread
        for batch in batches:
            yield Located(batch, WHERE, row)
            row += batch.num_rows
