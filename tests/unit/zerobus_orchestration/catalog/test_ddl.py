"""DDL renderer: every statement parses with sqlglot's databricks dialect and names come back intact."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from zerobus_orchestration.catalog.base import DesiredTable, LiveColumn, ProtocolInfo, TableState
from zerobus_orchestration.catalog.ddl import (
    add_columns_sql,
    create_table_sql,
    describe_detail_sql,
    latest_history_sql,
    quote_table,
    render_plan,
    set_comment_sql,
    set_properties_sql,
    string_literal,
    widen_column_sql,
)
from zerobus_orchestration.catalog.plan import ColumnDef, CreateTable, SetComment, WidenColumn, plan
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import ConfigError, PlanRefusedError
from zerobus_orchestration.reserved import RESERVED_NAMES
from zerobus_orchestration.tables import TableName

HOSTILE = [
    "plain",
    "with`backtick",
    "``double``",
    "it's",
    'dq"x',
    "semi;colon; DROP TABLE x; --",
    "new\nline",
    "tab\there",
    "back\\slash",
    "日本語",
    "émoji 🎉",
    "select",
    "from",
    "sp ace",
    "a.b",
    "/* c */",
]


def parse(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read="databricks")
    assert tree is not None
    return tree


def table_parts(tree: exp.Expression) -> tuple[str, str, str]:
    table = tree.find(exp.Table)
    assert table is not None
    return table.catalog, table.db, table.name


def column_defs(tree: exp.Expression) -> list[exp.ColumnDef]:
    # Top-level column definitions only (nested STRUCT fields are ColumnDefs too).
    return [c for c in tree.find_all(exp.ColumnDef) if not isinstance(c.parent, exp.DataType)]


def comment_of(cdef: exp.ColumnDef) -> str | None:
    for constraint in cdef.constraints:
        if isinstance(constraint.kind, exp.CommentColumnConstraint):
            return str(constraint.kind.this.this)
    return None


def quoted_table(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_round_trip_through_every_statement(name: str) -> None:
    # Table names Zerobus cannot hold are refused by ``TableName`` (tests/unit/zerobus_orchestration/test_tables.py); column
    # names, comments and properties may hold anything and must stay one identifier / literal.
    if name not in ("plain", "select", "from"):
        with pytest.raises(ConfigError):
            TableName.parse(".".join(quoted_table(p) for p in ("cat", name, name)))
    table = "cat.sch.tbl"
    columns = (
        ColumnDef(name, "STRING", pa.string(), False, f"comment with {name}"),
        ColumnDef("s", "STRUCT", pa.struct([(name, pa.int32()), ("ok", pa.list_(pa.string()))]), True, None),
    )
    create = create_table_sql(CreateTable(table, columns, {name: name, "delta.x": "true"}))
    tree = parse(create)
    assert table_parts(tree) == ("cat", "sch", "tbl")
    defs = column_defs(tree)
    assert [d.name for d in defs] == [name, "s"]
    assert comment_of(defs[0]) == f"comment with {name}"
    nested = [c.name for c in defs[1].find_all(exp.ColumnDef) if c is not defs[1]]
    assert nested == [name, "ok"]
    props = {
        str(p.this.this): str(p.args["value"].this)
        for p in tree.find_all(exp.Property)
        if isinstance(p.this, exp.Literal)
    }
    assert props == {name: name, "delta.x": "true"}

    add = parse(add_columns_sql(table, columns[:1]))
    assert table_parts(add) == ("cat", "sch", "tbl")
    assert [d.name for d in column_defs(add)] == [name]

    comment = parse(set_comment_sql(SetComment(table, name, f"x{name}", None)))
    alter = comment.find(exp.AlterColumn)
    assert alter is not None and alter.this.name == name
    assert str(alter.args["comment"].this) == f"x{name}"

    widen = parse(widen_column_sql(WidenColumn(table, name, "INT", "BIGINT", pa.int64())))
    alter = widen.find(exp.AlterColumn)
    assert (
        alter is not None and alter.this.name == name and alter.args["dtype"].this == exp.DataType.Type.BIGINT
    )

    props_tree = parse(set_properties_sql(table, {name: f"v{name}"}))
    prop = props_tree.find(exp.Property)
    assert prop is not None and str(prop.this.this) == name and str(prop.args["value"].this) == f"v{name}"


@settings(max_examples=200, deadline=None)  # parsing is slow on a loaded machine, never wrong
@given(st.text(min_size=1, max_size=20))
def test_any_text_survives_as_identifier_and_literal(text: str) -> None:
    sql = set_comment_sql(SetComment("c.s.t", text, text, None))
    tree = parse(sql)
    assert table_parts(tree) == ("c", "s", "t")
    alter = tree.find(exp.AlterColumn)
    assert alter is not None and alter.this.name == text and str(alter.args["comment"].this) == text


def test_one_statement_only_even_with_injection_attempts() -> None:
    evil = "x'); DROP TABLE main.raw.events; --"
    sql = set_properties_sql("main.raw.events", {evil: evil})
    assert len(sqlglot.parse(sql, read="databricks")) == 1
    assert string_literal(evil) == "'x\\'); DROP TABLE main.raw.events; --'"
    assert quote_table("main.raw.events") == "`main`.`raw`.`events`"


def test_render_plan_for_create_and_evolution() -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("payload", pa.struct([("a b", pa.uint8())]))]
    )
    d = DesiredTable.build("main.raw.events", schema, Role.PRIMARY_RAW, descriptions={"id": "pk"})
    statements = render_plan(plan(None, d))
    assert len(statements) == 1
    tree = parse(statements[0])
    assert isinstance(tree, exp.Create) and tree.args.get("exists")
    defs = column_defs(tree)
    assert [d.name for d in defs] == ["id", "payload", *RESERVED_NAMES]
    assert "STRUCT<`a b`: SMALLINT>" in statements[0]

    live = TableState(
        "main.raw.events",
        (LiveColumn("id", "BIGINT", pa.int64(), False, None),),
        {},
        ProtocolInfo(1, 2),
        "tid",
        None,
        3,
        True,
    )
    evolve = render_plan(plan(live, d))
    kinds = [type(parse(s)).__name__ for s in evolve]
    assert kinds == ["Alter", "Alter", "Alter"]  # ADD COLUMNS, ALTER COLUMN COMMENT, SET TBLPROPERTIES
    added = [d.name for d in column_defs(parse(evolve[0]))]
    assert added == ["payload", *RESERVED_NAMES]


def test_render_plan_refuses_and_renders_nothing_for_refusals() -> None:
    live = TableState(
        "c.s.t",
        (LiveColumn("gone", "INT", pa.int32(), True, None),),
        {},
        ProtocolInfo(1, 2),
        "tid",
        None,
        0,
        True,
    )
    d = DesiredTable.build("c.s.t", pa.schema([("id", pa.int64())]), Role.DERIVED)
    with pytest.raises(PlanRefusedError, match="gone"):
        render_plan(plan(live, d))


def test_empty_plan_renders_no_statement() -> None:
    d = DesiredTable.build("c.s.t", pa.schema([("id", pa.int64())]), Role.DERIVED)
    create = plan(None, d).steps[0]
    assert isinstance(create, CreateTable)
    cols = tuple(
        LiveColumn(c.name, c.delta_type, c.arrow_type, c.nullable, c.comment) for c in create.columns
    )
    live = TableState("c.s.t", cols, dict(create.properties), ProtocolInfo(1, 2), "tid", None, 0, True)
    assert render_plan(plan(live, d)) == []


def test_describe_statements_quote_table_names() -> None:
    # sqlglot cannot parse DESCRIBE DETAIL/HISTORY, so compare the text. A hostile table name cannot
    # reach here any more: ``TableName`` refuses it (tests/unit/zerobus_orchestration/test_tables.py).
    table = TableName("Cat", "s", "select")
    assert describe_detail_sql(table) == "DESCRIBE DETAIL `cat`.`s`.`select`"
    assert latest_history_sql(table) == "DESCRIBE HISTORY `cat`.`s`.`select` LIMIT 1"
    with pytest.raises(ConfigError, match="ASCII letters, digits and underscores"):
        TableName("c`at", "s", "t; DROP TABLE x")


def test_turning_column_mapping_on_runs_before_adding_a_name_that_needs_it() -> None:
    live = TableState(
        "c.s.t",
        (LiveColumn("id", "BIGINT", pa.int64(), True, None),),
        {},
        ProtocolInfo(1, 2),
        "tid",
        None,
        0,
        True,
    )
    props = {"delta.columnMapping.mode": "name", "twg.owner": "a"}

    def wanted(extra: str) -> DesiredTable:
        schema = pa.schema([("id", pa.int64()), (extra, pa.string())])
        return DesiredTable.build("c.s.t", schema, Role.DERIVED, properties=props)

    hostile = plan(live, wanted("ship to"))
    assert [s.kind for s in hostile.steps][:2] == ["set_property", "add_column"]  # printed in run order
    first, add, *rest = render_plan(hostile)
    assert first == "ALTER TABLE `c`.`s`.`t` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    assert add.startswith("ALTER TABLE `c`.`s`.`t` ADD COLUMNS (`ship to` STRING")
    assert "columnMapping" not in rest[-1] and "'twg.owner' = 'a'" in rest[-1]
    # Plain added names need no head start: every property stays in one statement after the columns.
    plain = render_plan(plan(live, wanted("ship_to")))
    assert "ADD COLUMNS" in plain[0] and "'delta.columnMapping.mode' = 'name'" in plain[-1]
