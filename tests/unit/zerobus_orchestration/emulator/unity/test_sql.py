"""The local Unity Catalog's SQL engine refuses a table in a missing schema, as Databricks does."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerobus_orchestration.emulator.unity.local_cloud import local_workspace
from zerobus_orchestration.emulator.unity.metastore import Metastore
from zerobus_orchestration.emulator.unity.sql import SqlEngine
from zerobus_orchestration.emulator.unity.state import StatementFailure


def engine() -> SqlEngine:
    return SqlEngine(Metastore(catalogs={"main"}))


def test_create_table_in_a_missing_schema_fails_schema_not_found_and_creates_nothing() -> None:
    sql = engine()
    for statement in (
        "CREATE TABLE main.s.t (id BIGINT)",
        "CREATE TABLE IF NOT EXISTS `main`.`s`.`t` (id INT)",
    ):
        with pytest.raises(StatementFailure) as info:
            sql.execute(statement)
        assert info.value.error_class == "SCHEMA_NOT_FOUND" and info.value.service_code == "NOT_FOUND"
        assert str(info.value).startswith("[SCHEMA_NOT_FOUND] The schema `main`.`s` cannot be found.")
    assert sql.metastore.schema_names("main") == [] and sql.metastore.get("main", "s", "t") is None


def test_create_schema_then_the_table_is_created() -> None:
    sql = engine()
    sql.execute("CREATE SCHEMA IF NOT EXISTS `main`.`s`")
    sql.execute("CREATE SCHEMA IF NOT EXISTS main.s")  # idempotent
    with pytest.raises(StatementFailure, match=r"^\[SCHEMA_ALREADY_EXISTS\]"):
        sql.execute("CREATE SCHEMA main.s")
    sql.execute("CREATE TABLE main.s.t (id BIGINT)")
    assert sql.metastore.get("main", "s", "t") is not None


def test_an_unknown_catalog_is_refused_before_the_schema() -> None:
    sql = engine()
    for statement in ("CREATE SCHEMA IF NOT EXISTS nowhere.s", "CREATE TABLE nowhere.s.t (id BIGINT)"):
        with pytest.raises(StatementFailure, match=r"^\[NO_SUCH_CATALOG_EXCEPTION\] Catalog 'nowhere'"):
            sql.execute(statement)


def test_a_schema_holding_a_table_on_disk_exists_for_the_local_cloud(tmp_path: Path) -> None:
    ws = local_workspace(str(tmp_path / "wh"), tmp_path / "state.json")
    ws.execute_sql("CREATE SCHEMA main.raw")
    ws.execute_sql("CREATE TABLE main.raw.t (id BIGINT)")
    again = local_workspace(str(tmp_path / "wh"), tmp_path / "state.json")  # the schema survives a restart
    again.execute_sql("CREATE TABLE main.raw.u (id BIGINT)")
    with pytest.raises(StatementFailure, match=r"^\[SCHEMA_NOT_FOUND\] The schema `main`.`other`"):
        again.execute_sql("CREATE TABLE main.other.t (id BIGINT)")


def test_the_standalone_fake_accepting_any_catalog_accepts_any_schema() -> None:
    sql = SqlEngine(Metastore())
    sql.execute("CREATE TABLE dev.fresh.t (id BIGINT)")
    assert sql.metastore.schema_names("dev") == ["fresh"]
