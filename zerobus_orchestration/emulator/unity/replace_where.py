"""``INSERT INTO t REPLACE WHERE p SELECT ...`` of the local cloud, in the one shape the client sends.

Databricks runs ``INSERT INTO t REPLACE WHERE p <query>`` as one commit that deletes the rows matching
``p`` and inserts the query's rows (Databricks SQL reference, INSERT, "REPLACE WHERE"). The ``unity``
backend sends it for ``repair --dedupe`` only (``catalog.ddl.keep_one_copy_sql``): the query keeps, of the
rows matching ``p``, the first-stamped copy of each ``(_twg_source, _twg_offset)``. The local cloud runs
exactly that shape (compared identifier-quoted, so quoting does not matter); any other query is refused
with ``UNSUPPORTED_STATEMENT`` rather than run as something it is not.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from zerobus_orchestration.emulator.unity.delete import unsupported
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE

COPY_COLUMN = "_twg_copy"
_DIALECT = "databricks"


def keep_one_copy_target(tree: exp.Insert) -> tuple[exp.Table, exp.Expression]:
    """The target and the ``REPLACE WHERE`` predicate of a keep-one-copy statement; anything else is
    refused."""
    target, where = tree.this, tree.args.get("where")
    if not isinstance(target, exp.Table) or where is None or tree.args.get("overwrite"):
        raise unsupported("INSERT other than INSERT INTO t REPLACE WHERE p SELECT ...")
    table_sql, where_sql = target.sql(dialect=_DIALECT), where.sql(dialect=_DIALECT)
    numbered = (
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {SOURCE}, {OFFSET} ORDER BY {EMIT_TS}) AS {COPY_COLUMN} "
        f"FROM {table_sql} WHERE {where_sql}"
    )
    expected = (
        f"INSERT INTO {table_sql} REPLACE WHERE {where_sql} "
        f"SELECT * EXCEPT ({COPY_COLUMN}) FROM ({numbered}) WHERE {COPY_COLUMN} = 1"
    )
    shape = sqlglot.parse_one(expected, read=_DIALECT).sql(dialect=_DIALECT, identify=True)
    if tree.sql(dialect=_DIALECT, identify=True) != shape:
        raise unsupported(
            "INSERT INTO ... REPLACE WHERE with a query other than keeping the first-stamped copy of each "
            f"({SOURCE}, {OFFSET}) of the rows it replaces"
        )
    return target, where
