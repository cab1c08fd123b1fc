"""``delete_rows`` on both backends: local through delta-rs on a real Delta table, Unity as one DELETE
statement, each re-run when its commit lost to a concurrent writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from zerobus_orchestration.catalog.base import RowsOfSources
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.unity import UnityCatalog
from zerobus_orchestration.errors import CatalogError, StatementFailedError

TABLE = "main.derived.daily"
TAGS = ["s[d1@r1]", "s[it's@r2]", "s[d1@r3]"]


def _local_table(tmp_path: Path) -> LocalCatalog:
    catalog = LocalCatalog(tmp_path / "wh")
    rows = pa.table({"_twg_source": [t for t in TAGS for _ in range(3)], "n": pa.array(range(9), pa.int64())})
    write_deltalake(catalog.location(TABLE), rows)
    return catalog


def _sources(catalog: LocalCatalog) -> list[str]:
    return sorted(DeltaTable(catalog.location(TABLE)).to_pyarrow_table()["_twg_source"].to_pylist())


def test_local_deletes_exactly_the_named_sources(tmp_path: Path) -> None:
    catalog = _local_table(tmp_path)
    catalog.delete_rows(TABLE, RowsOfSources(("s[d1@r1]", "s[it's@r2]")))
    assert _sources(catalog) == ["s[d1@r3]"] * 3


def test_local_retries_a_delete_that_lost_a_commit_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _local_table(tmp_path)
    real, calls = DeltaTable.delete, []

    def conflicting(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise CommitFailedError("concurrent append")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "delete", conflicting)
    catalog.delete_rows(TABLE, RowsOfSources(("s[d1@r1]",)))
    assert len(calls) == 2, "the fault must have acted and the delete re-run"
    assert "s[d1@r1]" not in _sources(catalog)


def test_local_gives_up_naming_the_table_after_repeated_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _local_table(tmp_path)

    def always(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
        raise CommitFailedError("concurrent append")

    monkeypatch.setattr(DeltaTable, "delete", always)
    with pytest.raises(CatalogError, match=rf"table {TABLE}: deleting superseded rows lost"):
        catalog.delete_rows(TABLE, RowsOfSources(("s[d1@r1]",)))
    assert _sources(catalog).count("s[d1@r1]") == 3


def _race() -> StatementFailedError:
    return StatementFailedError(
        "lost",
        statement="DELETE",
        state="FAILED",
        error_code=None,
        sql_error_class="DELTA_CONCURRENT_APPEND",
        error_message="concurrent append",
    )


def test_unity_runs_one_delete_and_reruns_it_after_a_race() -> None:
    catalog = UnityCatalog.__new__(UnityCatalog)  # no workspace: only ``execute`` is exercised
    sent: list[list[str]] = []

    def execute(statements: list[str]) -> None:
        sent.append(list(statements))
        if len(sent) == 1:
            raise _race()

    catalog.execute = execute  # type: ignore[method-assign]
    catalog.delete_rows(TABLE, RowsOfSources(("s[d1@r1]",)))
    expected = "DELETE FROM `main`.`derived`.`daily` WHERE `_twg_source` IN ('s[d1@r1]')"
    assert sent == [[expected], [expected]]
