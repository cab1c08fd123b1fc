"""The local cloud's ``DELETE FROM``: run on the table's real Delta data (delta-rs), answered with
``num_affected_rows`` as Databricks does, re-run when its commit loses to an append, and refused, never
ignored, when its predicate is not one the local cloud translates faithfully."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from zerobus_orchestration.catalog.base import RowsOfSources
from zerobus_orchestration.catalog.ddl import delete_rows_sql
from zerobus_orchestration.emulator.unity.local_cloud import STATE_FILE_NAME, local_workspace
from zerobus_orchestration.emulator.unity.metastore import Metastore
from zerobus_orchestration.emulator.unity.sql import SqlEngine
from zerobus_orchestration.emulator.unity.state import StatementFailure
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace
from zerobus_orchestration.tables import table_uri

TABLE = "main.derived.daily"
# Hostile tags: a quote, a backslash, a newline, a control character, a backtick.
TAGS = ["s[d1@r1]", "s[it's@r2]", "s[a\\b@r3]", "s[x\ny\x01@r4]", "s[`q`@r5]", "s[d2@r6]"]


def _cloud(tmp_path: Path) -> tuple[UnityWorkspace, str]:
    warehouse = tmp_path / "wh"
    ws = local_workspace(str(warehouse), warehouse / "_zerobus" / STATE_FILE_NAME)
    ws.execute_sql("CREATE SCHEMA IF NOT EXISTS main.derived")
    ws.execute_sql(f"CREATE TABLE {TABLE} (_twg_source STRING, n BIGINT)")
    uri = table_uri(str(warehouse), TABLE)
    rows = pa.table(
        {"_twg_source": [t for t in TAGS for _ in range(3)], "n": pa.array(range(3 * len(TAGS)), pa.int64())}
    )
    write_deltalake(uri, rows, mode="append")  # as the emulator's ingest commits
    return ws, uri


def _sources(uri: str) -> list[str]:
    return sorted(DeltaTable(uri).to_pyarrow_table()["_twg_source"].to_pylist())


def test_the_rendered_delete_removes_exactly_the_named_runs_and_counts_them(tmp_path: Path) -> None:
    ws, uri = _cloud(tmp_path)
    doomed = tuple(TAGS[:5])
    result = ws.execute_sql(delete_rows_sql(TABLE, RowsOfSources(doomed)))
    assert result is not None and result.columns == (("num_affected_rows", "LONG"),)
    assert result.rows == ((15,),)
    assert _sources(uri) == ["s[d2@r6]"] * 3
    table = ws.table(TABLE)
    assert table is not None and table.history[-1][2] == "DELETE"  # a Delta version of its own


def test_names_resolve_case_insensitively_and_the_result_crosses_the_statement_api(tmp_path: Path) -> None:
    ws, uri = _cloud(tmp_path)
    response = ws.submit_statement(
        {
            "statement": "DELETE FROM MAIN.Derived.`DAILY` WHERE `_TWG_SOURCE` = 's[d1@r1]' OR n >= 17",
            "warehouse_id": ws.warehouse_id,
        }
    )
    assert response["status"] == {"state": "SUCCEEDED"}
    assert response["manifest"]["schema"]["columns"][0]["name"] == "num_affected_rows"
    assert response["result"]["data_array"] == [["4"]]
    assert _sources(uri).count("s[d1@r1]") == 0 and len(_sources(uri)) == 3 * len(TAGS) - 4


def test_without_where_every_row_goes(tmp_path: Path) -> None:
    ws, uri = _cloud(tmp_path)
    result = ws.execute_sql(f"DELETE FROM {TABLE}")
    assert result is not None and result.rows == ((3 * len(TAGS),),)
    assert _sources(uri) == []


@pytest.mark.parametrize(
    ("predicate", "error_class"),
    [
        ("_twg_source IN ('s[it''s@r2]')", "UNSUPPORTED_STATEMENT"),  # Databricks reads 'its'
        ("upper(_twg_source) = 'X'", "UNSUPPORTED_STATEMENT"),
        ("_twg_source IN (SELECT 'x')", "UNSUPPORTED_STATEMENT"),
        ("_twg_source LIKE 's%'", "UNSUPPORTED_STATEMENT"),
        ("daily._twg_source = 'x'", "UNSUPPORTED_STATEMENT"),
        ("nope = 'x'", "UNRESOLVED_COLUMN.WITH_SUGGESTION"),
    ],
)
def test_a_predicate_it_does_not_translate_is_refused_and_deletes_nothing(
    tmp_path: Path, predicate: str, error_class: str
) -> None:
    ws, uri = _cloud(tmp_path)
    with pytest.raises(StatementFailure) as info:
        ws.execute_sql(f"DELETE FROM {TABLE} WHERE {predicate}")
    assert info.value.error_class == error_class
    assert len(_sources(uri)) == 3 * len(TAGS)


def test_a_missing_table_fails_table_or_view_not_found(tmp_path: Path) -> None:
    ws, _ = _cloud(tmp_path)
    with pytest.raises(StatementFailure, match=r"^\[TABLE_OR_VIEW_NOT_FOUND\]"):
        ws.execute_sql("DELETE FROM main.derived.nothing WHERE _twg_source = 'x'")


def test_the_in_memory_fake_refuses_a_delete_instead_of_pretending() -> None:
    sql = SqlEngine(Metastore())
    sql.execute("CREATE TABLE main.s.t (_twg_source STRING)")
    with pytest.raises(StatementFailure, match=r"^\[UNSUPPORTED_STATEMENT\] The in-memory Unity Catalog"):
        sql.execute("DELETE FROM main.s.t WHERE _twg_source = 'x'")


def test_a_commit_lost_to_an_append_is_re_run_and_repeated_losses_fail_as_databricks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, uri = _cloud(tmp_path)
    real, calls = DeltaTable.delete, []

    def conflicting(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            write_deltalake(
                uri, pa.table({"_twg_source": ["s[d1@r1]"], "n": pa.array([99], pa.int64())}), mode="append"
            )
            raise CommitFailedError("a concurrent append won")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "delete", conflicting)
    result = ws.execute_sql(delete_rows_sql(TABLE, RowsOfSources(("s[d1@r1]",))))
    assert len(calls) == 2, "the fault must have acted and the delete re-run"
    assert result is not None and result.rows == ((4,),)  # the re-read saw the appended row too
    assert "s[d1@r1]" not in _sources(uri)

    def always(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
        raise CommitFailedError("a concurrent append won")

    monkeypatch.setattr(DeltaTable, "delete", always)
    with pytest.raises(StatementFailure) as info:
        ws.execute_sql(delete_rows_sql(TABLE, RowsOfSources(("s[d2@r6]",))))
    assert info.value.error_class == "DELTA_CONCURRENT_APPEND"
    assert _sources(uri).count("s[d2@r6]") == 3
