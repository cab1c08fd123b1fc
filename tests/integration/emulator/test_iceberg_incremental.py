"""The Iceberg mirror converts Delta appends incrementally, and plans the whole table only when it must.

Real deltalake writes and a real pyiceberg ``SqlCatalog``; ``DataScan.plan_files`` (reading every
manifest of the Iceberg table, a cost that grows with its file count) is counted, not replaced.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.table import DataScan

from tests.support.iceberg_helpers import raw_rows, write_delta
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.tables import table_uri

TABLE = "main.sales.orders"


@pytest.fixture
def lake(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def mirror(lake: str) -> Iterator[IcebergMirror]:
    m = IcebergMirror(lake, lag_s=0.0, poll_interval_s=None)
    m.start()
    yield m
    m.stop()


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ``plan_files`` call on an Iceberg table scan."""
    calls: list[int] = []
    real = DataScan.plan_files

    def counted(self: DataScan) -> Any:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(DataScan, "plan_files", counted)
    return calls


def _offsets(mirror: IcebergMirror) -> list[int]:
    scanned = mirror.load_iceberg_table(TABLE).scan().to_arrow()
    return sorted(scanned.column("_twg_offset").to_pylist())


def _data_files(mirror: IcebergMirror) -> set[str]:
    return {task.file.file_path for task in mirror.load_iceberg_table(TABLE).scan().plan_files()}


def _delta_files(lake: str) -> set[str]:
    dt = DeltaTable(table_uri(lake, TABLE))
    return {
        f"{dt.table_uri.rstrip('/')}/{p}" for p in pa.table(dt.get_add_actions()).column("path").to_pylist()
    }


def test_appends_are_converted_without_planning_the_iceberg_table(
    lake: str, mirror: IcebergMirror, plans: list[int]
) -> None:
    write_delta(lake, TABLE, raw_rows([0, 1]))
    mirror.sync_now(TABLE)  # the first conversion creates the table: nothing to plan either
    for start in (2, 4, 6):
        write_delta(lake, TABLE, raw_rows([start, start + 1]))
        version = mirror.sync_now(TABLE)
    assert version == 3
    assert plans == []  # every conversion after the first added the new files from the Delta log alone
    assert _offsets(mirror) == list(range(8))
    assert _data_files(mirror) == _delta_files(lake)


def test_an_overwrite_is_planned_and_removes_the_replaced_files(
    lake: str, mirror: IcebergMirror, plans: list[int]
) -> None:
    write_delta(lake, TABLE, raw_rows([0, 1]))
    write_delta(lake, TABLE, raw_rows([2]))
    mirror.sync_now(TABLE)
    write_delta(lake, TABLE, raw_rows([10, 11]), mode="overwrite")
    mirror.sync_now(TABLE)
    assert len(plans) == 1  # Delta removed files: the Iceberg files to delete come from a full plan
    assert _offsets(mirror) == [10, 11]
    assert _data_files(mirror) == _delta_files(lake)


def test_a_table_recreated_under_the_same_name_is_planned_not_trusted(
    lake: str, mirror: IcebergMirror, plans: list[int]
) -> None:
    write_delta(lake, TABLE, raw_rows([0]))
    write_delta(lake, TABLE, raw_rows([1]))
    assert mirror.sync_now(TABLE) == 1
    # Dropped and created again: its version 1 is not what the Iceberg snapshot was converted from.
    shutil.rmtree(Path(table_uri(lake, TABLE)) / "_delta_log")
    DeltaTable.create(table_uri(lake, TABLE), schema=raw_rows([0]).schema)
    write_delta(lake, TABLE, raw_rows([20]))
    write_delta(lake, TABLE, raw_rows([21]))
    assert mirror.sync_now(TABLE) == 2
    assert len(plans) == 1
    assert _offsets(mirror) == [20, 21]
    assert _data_files(mirror) == _delta_files(lake)
