"""Statement execution: Databricks SQL DDL parsed with sqlglot, applied to the metastore.

Supported (anything else FAILS loudly, so a renderer emitting something new is noticed):
``CREATE TABLE [IF NOT EXISTS] t (cols) [USING DELTA] [LOCATION 'uri'] [COMMENT '...'] [TBLPROPERTIES (...)]``
(``LOCATION`` makes an EXTERNAL table, as on Databricks),
``ALTER TABLE t ADD COLUMN[S] (...)``, ``ALTER TABLE t ALTER COLUMN c COMMENT '...'``,
``ALTER TABLE t ALTER COLUMN c [SET DATA] TYPE T``, ``ALTER TABLE t SET TBLPROPERTIES (...)``,
``COMMENT ON COLUMN t.c IS '...'``, ``COMMENT ON TABLE t IS '...'``, ``DROP TABLE [IF EXISTS] t``,
``CREATE SCHEMA [IF NOT EXISTS] c.s``, ``CREATE CATALOG [IF NOT EXISTS] c``,
``DESCRIBE DETAIL t`` and ``DESCRIBE HISTORY t`` (result sets), and ``DELETE FROM t [WHERE p]`` on the
table's real Delta data (the predicate shapes ``delete.py`` translates; result ``num_affected_rows``, as
Databricks returns) and the one ``INSERT INTO t REPLACE WHERE p SELECT ...`` of ``replace_where.py``.
One statement per request, as the Statement Execution API wants. As on Databricks, ``CREATE TABLE`` in a
missing schema of a configured catalog fails ``SCHEMA_NOT_FOUND``
(the schema is never created behind the caller's back).

String literals follow Databricks rules: backslash escapes. sqlglot falls back to an opaque ``Command``
for what it cannot parse (for example ``'it''s'``, which Databricks would silently read as ``its``);
such statements fail with ``PARSE_SYNTAX_ERROR``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from zerobus_orchestration.emulator.unity import types as uc_types
from zerobus_orchestration.emulator.unity.delete import (
    check_plain,
    datafusion_condition,
    datafusion_predicate,
)
from zerobus_orchestration.emulator.unity.metastore import Metastore
from zerobus_orchestration.emulator.unity.replace_where import keep_one_copy_target
from zerobus_orchestration.emulator.unity.state import FakeColumn, FakeTable, StatementFailure

DIALECT = "databricks"


@dataclass(frozen=True)
class ResultSet:
    columns: tuple[tuple[str, str], ...]  # (name, Databricks SQL type name)
    rows: tuple[tuple[Any, ...], ...] = field(default=())


_DESCRIBE_DETAIL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("format", "STRING"),
    ("id", "STRING"),
    ("name", "STRING"),
    ("description", "STRING"),
    ("location", "STRING"),
    ("createdAt", "TIMESTAMP"),
    ("lastModified", "TIMESTAMP"),
    ("partitionColumns", "ARRAY"),
    ("clusteringColumns", "ARRAY"),
    ("numFiles", "LONG"),
    ("sizeInBytes", "LONG"),
    ("properties", "MAP"),
    ("minReaderVersion", "INT"),
    ("minWriterVersion", "INT"),
    ("tableFeatures", "ARRAY"),
    ("statistics", "MAP"),
)


_DESCRIBE_HISTORY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("version", "LONG"),
    ("timestamp", "TIMESTAMP"),
    ("operation", "STRING"),
)

# What Databricks answers a DELETE with: one row, the number of rows it removed.
_DELETE_COLUMNS: tuple[tuple[str, str], ...] = (("num_affected_rows", "LONG"),)
# And an INSERT with the rows it affected and inserted.
_INSERT_COLUMNS: tuple[tuple[str, str], ...] = (("num_affected_rows", "LONG"), ("num_inserted_rows", "LONG"))


def _operation_of(actions: list[exp.Expression]) -> str:
    first = actions[0]
    if isinstance(first, exp.Schema | exp.ColumnDef):
        return "ADD COLUMNS"
    if isinstance(first, exp.AlterSet):
        return "SET TBLPROPERTIES"
    return "CHANGE COLUMN"


def _syntax_error(statement: str, detail: str) -> StatementFailure:
    return StatementFailure(
        "PARSE_SYNTAX_ERROR", f"Syntax error in {statement!r}: {detail}.", sqlstate="42601"
    )


@dataclass
class SqlEngine:
    metastore: Metastore

    def execute(
        self, statement: str, *, catalog: str | None = None, schema: str | None = None
    ) -> ResultSet | None:
        """Run one statement; raise ``StatementFailure`` like a FAILED statement would report."""
        text = statement.strip().rstrip(";").strip()
        catalog_ddl = _create_catalog_target(text)
        if catalog_ddl is not None:
            name, if_not_exists = catalog_ddl
            with self.metastore.lock:
                self.metastore.create_catalog(name, if_not_exists=if_not_exists)
            return None
        describe = self._describe_target(text)
        if describe is not None:
            what, target = describe
            with self.metastore.lock:
                table = self._resolve(target, catalog, schema)
                return self._describe_detail(table) if what == "DETAIL" else self._describe_history(table)
        try:
            parsed = sqlglot.parse(text, dialect=DIALECT, error_level=sqlglot.ErrorLevel.RAISE)
        except (ParseError, TokenError) as exc:
            raise _syntax_error(text, str(exc).splitlines()[0]) from None
        tree = parsed[0] if len(parsed) == 1 else None
        if not isinstance(tree, exp.Expression):
            raise _syntax_error(text, "exactly one statement per request")
        with self.metastore.lock:
            return self._dispatch(tree, text, catalog, schema)

    # -- dispatch ---------------------------------------------------------------------------------

    def _dispatch(
        self, tree: exp.Expression, text: str, catalog: str | None, schema: str | None
    ) -> ResultSet | None:
        if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() == "TABLE":
            self._create(tree, text, catalog, schema)
        elif isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() == "SCHEMA":
            self._create_schema(tree, text, catalog)
        elif isinstance(tree, exp.Alter) and str(tree.args.get("kind", "")).upper() == "TABLE":
            self._alter(tree, text, catalog, schema)
        elif isinstance(tree, exp.Comment):
            self._comment(tree, text, catalog, schema)
        elif isinstance(tree, exp.Drop) and str(tree.args.get("kind", "")).upper() == "TABLE":
            self._drop(tree, catalog, schema)
        elif isinstance(tree, exp.Delete):
            return self._delete(tree, catalog, schema)
        elif isinstance(tree, exp.Insert):
            return self._replace_where(tree, catalog, schema)
        elif isinstance(tree, exp.Command):
            raise _syntax_error(text, "the statement does not parse as Databricks SQL (check string escapes)")
        else:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"The local Unity Catalog does not execute {type(tree).__name__} statements.",
            )
        return None

    def _resolve(self, table: exp.Table, catalog: str | None, schema: str | None) -> FakeTable:
        cat, sch, name = self._parts(table, catalog, schema)
        return self.metastore.require(cat, sch, name)

    @staticmethod
    def _parts(table: exp.Table, catalog: str | None, schema: str | None) -> tuple[str, str, str]:
        cat = table.catalog or catalog
        sch = table.db or schema
        if not cat or not sch:
            raise StatementFailure(
                "REQUIRES_SINGLE_PART_NAMESPACE",
                f"Table {table.sql(dialect=DIALECT)} needs a three-part name (catalog.schema.table).",
            )
        return cat.lower(), sch.lower(), table.name.lower()

    # -- CREATE / DROP ----------------------------------------------------------------------------

    def _create(self, tree: exp.Create, text: str, catalog: str | None, schema: str | None) -> None:
        target = tree.this
        table_expr = target.this if isinstance(target, exp.Schema) else target
        if not isinstance(table_expr, exp.Table):
            raise _syntax_error(text, "CREATE TABLE needs a table name")
        if tree.args.get("replace"):
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT", "CREATE OR REPLACE is not supported by the local Unity Catalog."
            )
        cat, sch, name = self._parts(table_expr, catalog, schema)
        self.metastore.require_schema(cat, sch)  # before IF NOT EXISTS: Databricks checks the schema first
        if self.metastore.get(cat, sch, name) is not None:
            if tree.args.get("exists"):
                return
            raise StatementFailure(
                "TABLE_OR_VIEW_ALREADY_EXISTS",
                f"Cannot create table `{cat}`.`{sch}`.`{name}` because it already exists.",
                sqlstate="42P07",
                code="ALREADY_EXISTS",
            )
        column_defs = (
            [e for e in target.expressions if isinstance(e, exp.ColumnDef)]
            if isinstance(target, exp.Schema)
            else []
        )
        if not column_defs:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT", "CREATE TABLE without a column list is not supported."
            )
        table = FakeTable(cat, sch, name, storage_root=self.metastore.storage_root)
        seen: set[str] = set()
        for definition in column_defs:
            column = _column(definition)
            if column.name.lower() in seen:
                raise StatementFailure(
                    "COLUMN_ALREADY_EXISTS", f"The column `{column.name}` already exists.", sqlstate="42711"
                )
            seen.add(column.name.lower())
            table.columns.append(column)
        properties, comment, location = _create_properties(tree)
        table.comment = comment
        table.location = location
        table.apply_properties(properties, creating=True)
        table.check_column_names(table.columns)  # after the properties: they may turn column mapping on
        table.note_column_types()
        self.metastore.create(table)

    def _create_schema(self, tree: exp.Create, text: str, catalog: str | None) -> None:
        target = tree.this
        if not isinstance(target, exp.Table) or not target.db:
            raise _syntax_error(text, "CREATE SCHEMA needs a schema name")
        cat = target.catalog or catalog
        if not cat:
            raise StatementFailure(
                "REQUIRES_SINGLE_PART_NAMESPACE",
                f"Schema {target.db} needs a two-part name (catalog.schema).",
            )
        self.metastore.create_schema(
            cat.lower(), target.db.lower(), if_not_exists=bool(tree.args.get("exists"))
        )

    def _drop(self, tree: exp.Drop, catalog: str | None, schema: str | None) -> None:
        for table_expr in tree.args.get("tables") or [tree.this]:
            cat, sch, name = self._parts(table_expr, catalog, schema)
            table = self.metastore.get(cat, sch, name)
            if table is None:
                if tree.args.get("exists"):
                    continue
                self.metastore.require(cat, sch, name)
            else:
                self.metastore.drop(table)

    # -- DELETE -----------------------------------------------------------------------------------

    def _delete(self, tree: exp.Delete, catalog: str | None, schema: str | None) -> ResultSet:
        table = self._resolve(check_plain(tree), catalog, schema)
        predicate = datafusion_predicate(tree, [c.name for c in table.columns])
        deleted = self.metastore.delete_rows(table, predicate)
        return ResultSet(_DELETE_COLUMNS, ((deleted,),))

    def _replace_where(self, tree: exp.Insert, catalog: str | None, schema: str | None) -> ResultSet:
        target, where = keep_one_copy_target(tree)
        table = self._resolve(target, catalog, schema)
        predicate = datafusion_condition(where, [c.name for c in table.columns])
        inserted = self.metastore.keep_one_copy(table, predicate)
        return ResultSet(_INSERT_COLUMNS, ((inserted, inserted),))

    # -- ALTER / COMMENT --------------------------------------------------------------------------

    def _alter(self, tree: exp.Alter, text: str, catalog: str | None, schema: str | None) -> None:
        table = self._resolve(tree.this, catalog, schema)
        actions = list(tree.args.get("actions") or [])
        if not actions:
            raise _syntax_error(text, "ALTER TABLE without an action")
        # Validate every action against a scratch copy first: a failed statement changes nothing.
        scratch = table.copy()
        for action in actions:
            self._alter_action(scratch, action, text)
        self.metastore.change(table, scratch, _operation_of(actions))

    def _alter_action(self, table: FakeTable, action: exp.Expression, text: str) -> None:
        if isinstance(action, exp.Schema):
            for definition in action.expressions:
                table.add_column(_column(definition))
        elif isinstance(action, exp.ColumnDef):
            table.add_column(_column(action))
        elif isinstance(action, exp.AlterSet):
            table.apply_properties(_property_pairs(action), creating=False)
        elif isinstance(action, exp.AlterColumn):
            name = action.this.name
            if action.args.get("comment") is not None:
                table.require_column(name).comment = _string(action.args["comment"], text)
            elif isinstance(action.args.get("dtype"), exp.DataType):
                table.change_type(name, action.args["dtype"])
            else:
                raise StatementFailure(
                    "UNSUPPORTED_STATEMENT",
                    f"ALTER COLUMN form not supported by the local Unity Catalog: {text!r}",
                )
        else:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"ALTER TABLE action {type(action).__name__} not supported by the local Unity Catalog.",
            )

    def _comment(self, tree: exp.Comment, text: str, catalog: str | None, schema: str | None) -> None:
        kind = str(tree.args.get("kind", "")).upper()
        comment = _string(tree.expression, text)
        target = tree.this
        if kind == "COLUMN" and isinstance(target, exp.Column):
            table_expr = exp.Table(
                this=exp.to_identifier(target.table),
                db=exp.to_identifier(target.args["db"].name) if target.args.get("db") else None,
                catalog=exp.to_identifier(target.args["catalog"].name)
                if target.args.get("catalog")
                else None,
            )
            table = self._resolve(table_expr, catalog, schema)
            scratch = table.copy()
            scratch.require_column(target.name).comment = comment
        elif kind == "TABLE" and isinstance(target, exp.Table):
            table = self._resolve(target, catalog, schema)
            scratch = table.copy()
            scratch.comment = comment
        else:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT", f"COMMENT ON {kind} is not supported by the local Unity Catalog."
            )
        self.metastore.change(table, scratch, "CHANGE COLUMN" if kind == "COLUMN" else "SET TBLPROPERTIES")

    # -- DESCRIBE DETAIL --------------------------------------------------------------------------

    @staticmethod
    def _describe_target(text: str) -> tuple[str, exp.Table] | None:
        """sqlglot has no ``DESCRIBE DETAIL|HISTORY t [LIMIT n]``; recognise it by tokens, parse the name."""
        try:
            tokens = sqlglot.tokenize(text, dialect=DIALECT)
        except TokenError:
            return None
        if len(tokens) < 3 or tokens[0].text.upper() != "DESCRIBE":
            return None
        what = tokens[1].text.upper()
        if what not in ("DETAIL", "HISTORY"):
            return None
        end = next((t.start for t in tokens[3:] if t.text.upper() == "LIMIT"), len(text))
        name_sql = text[tokens[2].start : end]
        try:
            table = sqlglot.parse_one(name_sql, into=exp.Table, dialect=DIALECT)
        except (ParseError, TokenError) as exc:
            raise _syntax_error(text, str(exc).splitlines()[0]) from None
        if not isinstance(table, exp.Table):
            raise _syntax_error(text, f"DESCRIBE {what} needs a table name")
        return what, table

    @staticmethod
    def _describe_history(table: FakeTable) -> ResultSet:
        """Newest first, as Databricks returns it (``LIMIT`` is ignored: tests read the first row)."""
        rows = tuple((version, ts, operation) for version, ts, operation in reversed(table.history))
        return ResultSet(_DESCRIBE_HISTORY_COLUMNS, rows)

    @staticmethod
    def _describe_detail(table: FakeTable) -> ResultSet:
        row = table.describe_detail_row()
        return ResultSet(
            _DESCRIBE_DETAIL_COLUMNS, (tuple(row[name] for name, _ in _DESCRIBE_DETAIL_COLUMNS),)
        )


def _string(node: exp.Expression | None, text: str) -> str | None:
    if isinstance(node, exp.Null):
        return None
    if not isinstance(node, exp.Literal) or not node.is_string:
        raise _syntax_error(text, "a comment must be a string literal")
    return str(node.this)


def _column(definition: exp.Expression) -> FakeColumn:
    if not isinstance(definition, exp.ColumnDef):
        raise StatementFailure(
            "UNSUPPORTED_STATEMENT", f"Not a column definition: {definition.sql(dialect=DIALECT)}"
        )
    kind = definition.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise StatementFailure(
            "PARSE_SYNTAX_ERROR", f"Column `{definition.name}` has no type.", sqlstate="42601"
        )
    uc_types.type_text(kind)  # fails for types Delta cannot hold
    nullable = True
    comment: str | None = None
    for constraint in definition.args.get("constraints") or []:
        if isinstance(constraint.kind, exp.NotNullColumnConstraint):
            nullable = bool(constraint.kind.args.get("allow_null"))
        elif isinstance(constraint.kind, exp.CommentColumnConstraint):
            comment = str(constraint.kind.this.this)
        else:
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT",
                f"Column constraint {constraint.sql(dialect=DIALECT)} is not supported by the local Unity "
                "Catalog.",
            )
    return FakeColumn(definition.name, kind, nullable, comment)


def _literal_text(node: exp.Expression) -> str:
    if isinstance(node, exp.Literal | exp.Identifier | exp.Var):
        return str(node.this)
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    return str(node.sql(dialect=DIALECT))


def _property_pairs(node: exp.Expression) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for prop in node.find_all(exp.Property):
        if type(prop) is not exp.Property:
            continue
        key = prop.this
        key_text = _literal_text(key) if isinstance(key, exp.Expression) else str(key)
        pairs[key_text] = _literal_text(prop.args["value"])
    return pairs


def _create_properties(tree: exp.Create) -> tuple[dict[str, str], str | None, str | None]:
    """TBLPROPERTIES, the table comment and the LOCATION of a CREATE TABLE."""
    props_node = tree.args.get("properties")
    if props_node is None:
        return {}, None, None
    comment: str | None = None
    location: str | None = None
    for prop in props_node.expressions:
        if isinstance(prop, exp.SchemaCommentProperty):
            comment = str(prop.this.this)
        elif isinstance(prop, exp.LocationProperty):
            location = str(prop.this.this).rstrip("/")
        elif isinstance(prop, exp.FileFormatProperty) and prop.name.upper() != "DELTA":
            raise StatementFailure(
                "UNSUPPORTED_STATEMENT", f"Only USING DELTA tables are supported, not {prop.name}."
            )
    return _property_pairs(props_node), comment, location


def _create_catalog_target(text: str) -> tuple[str, bool] | None:
    """``CREATE CATALOG [IF NOT EXISTS] name`` (sqlglot has no such statement): (name, if not exists)."""
    try:
        tokens = sqlglot.tokenize(text, dialect=DIALECT)
    except TokenError:
        return None
    words = [t.text for t in tokens]
    if [w.upper() for w in words[:2]] != ["CREATE", "CATALOG"]:
        return None
    rest = words[2:]
    if_not_exists = [w.upper() for w in rest[:3]] == ["IF", "NOT", "EXISTS"]
    if if_not_exists:
        rest = rest[3:]
    if len(rest) != 1:
        raise _syntax_error(text, "CREATE CATALOG takes one catalog name (no options here)")
    return rest[0].lower(), if_not_exists
