"""The local cloud runs ``INSERT INTO ... REPLACE WHERE`` only in the shape ``repair --dedupe`` sends."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from zerobus_orchestration.catalog.base import PositionsHeldTwice
from zerobus_orchestration.catalog.ddl import keep_one_copy_sql
from zerobus_orchestration.emulator.unity.delete import datafusion_condition
from zerobus_orchestration.emulator.unity.replace_where import keep_one_copy_target
from zerobus_orchestration.emulator.unity.state import StatementFailure
from zerobus_orchestration.ranges import OffsetRange

POSITIONS = PositionsHeldTwice((("web[d1]", OffsetRange(0, 200)), ("it's", OffsetRange(5, 6))))


def _insert(text: str) -> exp.Insert:
    tree = sqlglot.parse_one(text, read="databricks")
    assert isinstance(tree, exp.Insert)
    return tree


def test_the_clients_statement_is_accepted_and_its_predicate_translated() -> None:
    target, where = keep_one_copy_target(_insert(keep_one_copy_sql("main.raw.clicks", POSITIONS)))
    assert target.sql(dialect="databricks") == "`main`.`raw`.`clicks`"
    columns = ["id", "_twg_emit_ts", "_twg_source", "_twg_offset"]
    assert datafusion_condition(where, columns) == (
        '("_twg_source" = \'web[d1]\' AND "_twg_offset" >= 0 AND "_twg_offset" < 200) OR '
        '("_twg_source" = \'it\'\'s\' AND "_twg_offset" >= 5 AND "_twg_offset" < 6)'
    )


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO main.raw.clicks REPLACE WHERE _twg_offset < 5 SELECT * FROM main.raw.other",
        "INSERT INTO main.raw.clicks SELECT * FROM main.raw.clicks",
        "INSERT INTO main.raw.clicks REPLACE WHERE _twg_offset < 5 SELECT * EXCEPT (_twg_copy) FROM (SELECT *, "
        "ROW_NUMBER() OVER (PARTITION BY _twg_source, _twg_offset ORDER BY _twg_emit_ts) AS _twg_copy FROM "
        "main.raw.clicks WHERE _twg_offset < 6) WHERE _twg_copy = 1",  # replaces rows it did not read
    ],
)
def test_any_other_insert_is_refused(statement: str) -> None:
    with pytest.raises(StatementFailure) as failure:
        keep_one_copy_target(_insert(statement))
    assert failure.value.error_class == "UNSUPPORTED_STATEMENT"
