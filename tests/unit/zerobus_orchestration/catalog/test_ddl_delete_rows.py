"""``delete_rows_sql``: the DELETE a Unity ``replace`` runs parses, with hostile tags kept intact."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from zerobus_orchestration.catalog.base import RowsOfSources
from zerobus_orchestration.catalog.ddl import delete_rows_sql


def test_delete_names_the_table_column_and_every_tag_as_literals() -> None:
    tags = ("a[d1@r1]", "a[it's@r2]", "a[back\\slash@r3]")
    sql = delete_rows_sql("main.my_schema.t", RowsOfSources(tags))
    tree = sqlglot.parse_one(sql, read="databricks")
    assert isinstance(tree, exp.Delete)
    assert [p.name for p in tree.find(exp.Table).parts] == ["main", "my_schema", "t"]
    where = tree.find(exp.In)
    assert where is not None and where.this.name == "_twg_source"
    assert [lit.this for lit in where.expressions] == list(tags)


def test_delete_without_tags_is_refused() -> None:
    with pytest.raises(ValueError, match="no source tags"):
        delete_rows_sql("main.s.t", RowsOfSources(()))
