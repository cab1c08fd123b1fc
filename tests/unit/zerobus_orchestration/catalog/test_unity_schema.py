"""The ``unity`` backend creates a table's schema before the table, as Databricks requires.

The fake's metastore is given a fixed catalog list, which makes it answer ``SCHEMA_NOT_FOUND`` for a
table in a missing schema like Databricks does (the statements go through the real databricks-sdk).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.catalog.base import DesiredTable
from zerobus_orchestration.catalog.ddl import create_schema_sql
from zerobus_orchestration.catalog.unity import UnityCatalog
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import StatementFailedError
from zerobus_orchestration.testing import FakeUnityCatalog

TABLE = "main.raw.events"


def desired(*extra: pa.Field) -> DesiredTable:
    return DesiredTable.build(TABLE, pa.schema([pa.field("id", pa.int64()), *extra]), Role.PRIMARY_RAW)


@pytest.fixture
def strict_uc(fake_uc: FakeUnityCatalog) -> FakeUnityCatalog:
    fake_uc.metastore.catalogs = {"main"}  # known catalogs only: a missing schema is refused
    return fake_uc


def test_a_new_table_in_a_missing_schema_gets_the_schema_first(
    unity: UnityCatalog, strict_uc: FakeUnityCatalog
) -> None:
    assert strict_uc.metastore.schema_names("main") == []
    outcome = unity.reconcile(TABLE, desired())
    assert outcome.applied and outcome.plan.creates and outcome.state.version == 0
    assert strict_uc.metastore.schema_names("main") == ["raw"]
    # An existing schema is fine too (IF NOT EXISTS): a second table in it is created.
    other = DesiredTable.build("main.raw.other", pa.schema([("x", pa.int32())]), Role.DERIVED)
    assert unity.reconcile("main.raw.other", other).applied


def test_a_refused_schema_names_the_schema_the_table_and_the_fix(
    unity: UnityCatalog, strict_uc: FakeUnityCatalog
) -> None:
    strict_uc.fail_next_statement(
        "INSUFFICIENT_PERMISSIONS",
        "Insufficient privileges: User does not have CREATE SCHEMA on Catalog 'main'.",
        code="BAD_REQUEST",
        matching="CREATE SCHEMA",
    )
    with pytest.raises(StatementFailedError) as info:
        unity.reconcile(TABLE, desired())
    err = info.value
    text = str(err)
    assert err.sql_error_class == "INSUFFICIENT_PERMISSIONS"
    assert err.statement == "CREATE SCHEMA IF NOT EXISTS `main`.`raw`"
    assert "cannot create schema main.raw for table main.raw.events" in text
    assert "User does not have CREATE SCHEMA" in text
    assert "fix: have an admin create the schema (CREATE SCHEMA main.raw)" in text
    assert "grant this principal CREATE SCHEMA (and USE CATALOG) on catalog main" in text
    assert unity.describe(TABLE) is None  # nothing half-made: no table was attempted
    assert strict_uc.metastore.schema_names("main") == []


def test_a_reconcile_of_an_existing_table_runs_no_create_schema(
    unity: UnityCatalog, strict_uc: FakeUnityCatalog
) -> None:
    unity.reconcile(TABLE, desired())
    # A principal without CREATE SCHEMA can still evolve the table: the armed fault is never reached.
    strict_uc.fail_next_statement("INSUFFICIENT_PERMISSIONS", "no CREATE SCHEMA", matching="CREATE SCHEMA")
    assert not unity.reconcile(TABLE, desired()).applied
    assert unity.reconcile(TABLE, desired(pa.field("kind", pa.string()))).applied
    with pytest.raises(StatementFailedError, match="INSUFFICIENT_PERMISSIONS"):  # the fault was armed
        unity.execute([create_schema_sql(TABLE)])
