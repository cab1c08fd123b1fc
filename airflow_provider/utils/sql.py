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

from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from typing import Any

import pyarrow as pa

from zerobus_orchestration.errors import ConfigError


def _text_for_typed(pinned: pa.DataType | None, values: Sequence[Any]) -> bool:
    if pinned is None or pa.types.is_string(pinned) or pa.types.is_large_string(pinned):
        return False
    return any(isinstance(v, str) for v in values)


def _build_batch(
    names: Sequence[str], rows: Sequence[Sequence[Any]], known: dict[str, pa.DataType]
) -> pa.RecordBatch:
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    arrays: list[pa.Array] = []
    for name, values in columns.items():
        pinned = known.get(name)
        try:
            if _text_for_typed(pinned, values):
                # Text holding a typed value (SQLite keeps timestamps and decimals as TEXT): parsed by
                # Arrow's cast (ISO 8601, decimal notation), which refuses rather than guesses.
                array = pa.array(values, type=pa.string()).cast(pinned)
            else:
                array = pa.array(values, type=pinned) if pinned is not None else pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
            raise ConfigError(
                f"SQL column {name!r}: a value does not fit {pinned} ({exc}); cast it in the query or pass "
                f"schema={{{name!r}: '<arrow type>'}}"
            ) from None
        if pinned is None and not pa.types.is_null(array.type):
            known[name] = array.type
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


def iter_sql_batches(
    hook: Any,
    sql: str,
    *,
    parameters: Sequence[Any] | Mapping[str, Any] | None = None,
    fetch_rows: int = 10_000,
    schema: pa.Schema | None = None,
    cursor_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Run ``sql`` on ``hook.get_conn()`` and yield its rows in order. Add ORDER BY for resumable retries.

    ``cursor_kwargs`` go to ``conn.cursor(...)``, e.g. a server-side cursor (module docstring).
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
        while True:
            rows = first if first is not None else cursor.fetchmany(fetch_rows)
            first = None
            if not rows:
                return
            yield _build_batch(names, rows, known)
