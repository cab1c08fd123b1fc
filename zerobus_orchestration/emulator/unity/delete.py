"""``DELETE FROM t [WHERE p]`` of the local cloud: the predicate as DataFusion SQL for delta-rs.

The Databricks predicate (parsed by sqlglot, string escapes already decoded) is translated node by node
into the SQL delta-rs' ``DeltaTable.delete`` evaluates with DataFusion: identifiers double-quoted with
``"`` doubled, string literals single-quoted with ``'`` doubled. Columns resolve case-insensitively to
the table's own names, as on Databricks; an unknown column fails ``UNRESOLVED_COLUMN``.

Translated: column references, string / numeric / boolean / NULL literals, ``IN (...)``, ``=``,
``<>``/``!=``, ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT`` and
parentheses. Anything else (functions, subqueries, ``USING``, adjacent literals such as ``'it''s'``,
which Databricks reads as ``'its'``) fails ``UNSUPPORTED_STATEMENT``: a DELETE is never run with a
predicate the local cloud might read differently from Databricks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot import exp

from zerobus_orchestration.emulator.unity.state import StatementFailure

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_BINARY: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.And: "AND",
    exp.Or: "OR",
}
# sqlglot's ``Delete`` arguments that are off in a plain ``DELETE FROM t [WHERE p]``.
_PLAIN = frozenset({"this", "where", "using", "cluster"})


def unsupported(detail: str) -> StatementFailure:
    return StatementFailure("UNSUPPORTED_STATEMENT", f"The local Unity Catalog does not execute {detail}.")


def check_plain(tree: exp.Delete) -> exp.Table:
    """The target of a plain ``DELETE FROM t [WHERE p]``; any other clause is refused."""
    extra = sorted(k for k, v in tree.args.items() if k not in _PLAIN and v)
    if extra or tree.args.get("using") or tree.args.get("cluster"):
        raise unsupported(f"DELETE with {', '.join(extra) or 'USING'} (only DELETE FROM t [WHERE p])")
    target = tree.this
    if not isinstance(target, exp.Table):
        raise unsupported("DELETE from anything but a table")
    return target


def datafusion_predicate(tree: exp.Delete, columns: Sequence[str]) -> str | None:
    """The WHERE of ``tree`` in DataFusion SQL over ``columns`` (``None``: no WHERE, every row)."""
    where = tree.args.get("where")
    if where is None:
        return None
    return _translate(where.this, {c.lower(): c for c in columns})


def datafusion_condition(node: exp.Expression, columns: Sequence[str]) -> str:
    """One predicate (a ``REPLACE WHERE``'s) in DataFusion SQL over ``columns``, by the same rules."""
    return _translate(node, {c.lower(): c for c in columns})


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _translate(node: exp.Expression, columns: dict[str, str]) -> str:
    if isinstance(node, exp.Paren):
        return f"({_translate(node.this, columns)})"
    if isinstance(node, exp.Column):
        return _column(node, columns)
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Boolean):
        return "TRUE" if node.this else "FALSE"
    if isinstance(node, exp.Null):
        return "NULL"
    if isinstance(node, exp.Not):
        return f"NOT ({_translate(node.this, columns)})"
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise unsupported("IN over a subquery in a DELETE predicate")
        values = ", ".join(_translate(v, columns) for v in node.expressions)
        if not values:
            raise unsupported("an empty IN () list")
        return f"{_translate(node.this, columns)} IN ({values})"
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return f"{_translate(node.this, columns)} IS NULL"
    operator = _BINARY.get(type(node))
    if operator is not None and isinstance(node, exp.Binary):
        return f"{_translate(node.this, columns)} {operator} {_translate(node.expression, columns)}"
    raise unsupported(f"{type(node).__name__} in a DELETE predicate ({node.sql(dialect='databricks')!r})")


def _column(node: exp.Column, columns: dict[str, str]) -> str:
    if node.table:
        raise unsupported(f"a qualified column in a DELETE predicate ({node.sql(dialect='databricks')!r})")
    name = node.name
    real = columns.get(name.lower())
    if real is None:
        raise StatementFailure(
            "UNRESOLVED_COLUMN.WITH_SUGGESTION",
            f"A column, variable, or function parameter with name `{name}` cannot be resolved. Did you "
            f"mean one of the following? [{', '.join(f'`{c}`' for c in columns.values())}].",
            sqlstate="42703",
        )
    return _quote(real)


def _literal(node: exp.Literal) -> str:
    if node.is_string:
        return _string(str(node.this))
    text = str(node.this)
    if not _NUMBER.fullmatch(text):
        raise unsupported(f"the literal {text!r} in a DELETE predicate")
    return text
