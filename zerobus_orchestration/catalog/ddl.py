"""The one place SQL text is produced (Databricks SQL), from plan steps.

Every identifier is backtick-quoted with embedded backticks doubled (table parts, columns, STRUCT
field names); every user string (comments, property keys and values) is a single-quoted literal with
backslash escapes, the Databricks default. No user string is ever pasted into SQL unquoted.
Tests parse each statement with sqlglot's ``databricks`` dialect and compare identifiers and literals
with the originals, hostile names included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zerobus_orchestration.catalog.base import COPY_COLUMN, PositionsHeldTwice, RowsOfSources
from zerobus_orchestration.catalog.plan import (
    AddColumn,
    ColumnDef,
    CreateTable,
    ReconcilePlan,
    SetComment,
    SetProperty,
    WidenColumn,
    column_mapping_first,
)
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE
from zerobus_orchestration.tables import TableName
from zerobus_orchestration.type_map import delta_type, quote_identifier

_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
    """``value`` as a Databricks SQL string literal (backslash escapes; other controls as ``\\uXXXX``)."""
    out: list[str] = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def quote_table(table: str | TableName) -> str:
    """`` `catalog`.`schema`.`table` `` from a full name (``TableName.parse`` rules)."""
    name = TableName.parse(table) if isinstance(table, str) else table
    return ".".join(quote_identifier(p) for p in (name.catalog, name.schema, name.table))


def column_sql(column: ColumnDef) -> str:
    parts = [quote_identifier(column.name), delta_type(column.arrow_type, quote_fields=True)]
    if not column.nullable:
        parts.append("NOT NULL")
    if column.comment is not None:
        parts.append("COMMENT " + string_literal(column.comment))
    return " ".join(parts)


def _properties_sql(properties: Mapping[str, str]) -> str:
    return ", ".join(f"{string_literal(k)} = {string_literal(v)}" for k, v in sorted(properties.items()))


def create_schema_sql(table: str | TableName) -> str:
    """``CREATE SCHEMA IF NOT EXISTS `catalog`.`schema` `` for the schema holding ``table``."""
    name = TableName.parse(table) if isinstance(table, str) else table
    return f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(name.catalog)}.{quote_identifier(name.schema)}"


def create_table_sql(step: CreateTable) -> str:
    sql = (
        f"CREATE TABLE IF NOT EXISTS {quote_table(step.table)} "
        f"({', '.join(column_sql(c) for c in step.columns)}) USING DELTA"
    )
    if step.properties:
        sql += f" TBLPROPERTIES ({_properties_sql(step.properties)})"
    return sql


def add_columns_sql(table: str, columns: Sequence[ColumnDef]) -> str:
    return f"ALTER TABLE {quote_table(table)} ADD COLUMNS ({', '.join(column_sql(c) for c in columns)})"


def set_comment_sql(step: SetComment) -> str:
    return (
        f"ALTER TABLE {quote_table(step.table)} ALTER COLUMN {quote_identifier(step.column)} "
        f"COMMENT {string_literal(step.comment)}"
    )


def set_properties_sql(table: str, properties: Mapping[str, str]) -> str:
    return f"ALTER TABLE {quote_table(table)} SET TBLPROPERTIES ({_properties_sql(properties)})"


def widen_column_sql(step: WidenColumn) -> str:
    return (
        f"ALTER TABLE {quote_table(step.table)} ALTER COLUMN {quote_identifier(step.column)} "
        f"TYPE {delta_type(step.arrow_type, quote_fields=True)}"
    )


def delete_rows_sql(table: str | TableName, rows: RowsOfSources) -> str:
    """``DELETE FROM t WHERE `_twg_source` IN ('a', 'b')``: the superseded runs of a ``replace`` write."""
    if not rows.tags:
        raise ValueError(f"delete from {table}: no source tags given (the statement would delete nothing)")
    values = ", ".join(string_literal(tag) for tag in rows.tags)
    return f"DELETE FROM {quote_table(table)} WHERE {quote_identifier(SOURCE)} IN ({values})"


def positions_predicate_sql(positions: PositionsHeldTwice) -> str:
    """``(`_twg_source` = 't' AND `_twg_offset` >= a AND `_twg_offset` < b) OR ...``."""
    if not positions.spans:
        raise ValueError("no positions given (the statement would rewrite nothing)")
    source, offset = quote_identifier(SOURCE), quote_identifier(OFFSET)
    return " OR ".join(
        f"({source} = {string_literal(tag)} AND {offset} >= {span.start} AND {offset} < {span.end})"
        for tag, span in positions.spans
    )


def keep_one_copy_sql(table: str | TableName, positions: PositionsHeldTwice) -> str:
    """One ``INSERT INTO ... REPLACE WHERE`` (one commit): the rows at ``positions`` are replaced by the
    first-stamped copy of each position (Databricks SQL reference, INSERT: ``REPLACE WHERE``)."""
    target, where = quote_table(table), positions_predicate_sql(positions)
    copy, source, offset = quote_identifier(COPY_COLUMN), quote_identifier(SOURCE), quote_identifier(OFFSET)
    numbered = (
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {source}, {offset} ORDER BY {quote_identifier(EMIT_TS)}) "
        f"AS {copy} FROM {target} WHERE {where}"
    )
    kept = f"SELECT * EXCEPT ({copy}) FROM ({numbered}) WHERE {copy} = 1"
    return f"INSERT INTO {target} REPLACE WHERE {where} {kept}"


def describe_detail_sql(table: str | TableName) -> str:
    return f"DESCRIBE DETAIL {quote_table(table)}"


def latest_history_sql(table: str | TableName) -> str:
    """The newest row of the table's history (its current version)."""
    return f"DESCRIBE HISTORY {quote_table(table)} LIMIT 1"


def render_plan(plan: ReconcilePlan) -> list[str]:
    """Statements executing ``plan`` in order (raises ``PlanRefusedError`` on any ``Refuse``).

    Added columns go in one ``ADD COLUMNS`` and properties in one ``SET TBLPROPERTIES``, except that
    turning column mapping on runs in its own statement ahead of ``ADD COLUMNS`` when a column the
    plan adds needs it (``plan.column_mapping_first``); an empty plan renders no statement.
    """
    plan.raise_if_refused()
    statements: list[str] = []
    added = [s.column for s in plan.steps if isinstance(s, AddColumn)]
    props = {s.key: s.value for s in plan.steps if isinstance(s, SetProperty)}
    for step in plan.steps:
        if isinstance(step, CreateTable):
            statements.append(create_table_sql(step))
    mapping = column_mapping_first(plan.steps)
    if mapping is not None:
        # No 'delta.minReaderVersion'/'delta.minWriterVersion' beside it: Databricks upgrades the
        # protocol itself when column mapping is turned on (documented with error class
        # DELTA_UNSUPPORTED_COLUMN_MAPPING_PROTOCOL), and fixed legacy versions would not fit a table
        # already on table features (writer 7).
        statements.append(set_properties_sql(plan.table, {mapping.key: props.pop(mapping.key)}))
    if added:
        statements.append(add_columns_sql(plan.table, added))
    for step in plan.steps:
        if isinstance(step, WidenColumn):
            statements.append(widen_column_sql(step))
    for step in plan.steps:
        if isinstance(step, SetComment):
            statements.append(set_comment_sql(step))
    if props:
        statements.append(set_properties_sql(plan.table, props))
    return statements
