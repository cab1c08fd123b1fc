"""Why delivered positions are missing, told from a real Delta table's log (deltalake writes, deletes,
updates and restores on a tmp dir)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.coverage import absence
from zerobus_orchestration.coverage.absence import Absence, Cause, explain
from zerobus_orchestration.coverage.table_truth import TableReader, row_removals
from zerobus_orchestration.ranges import OffsetRange as R
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, SOURCE

TAG, OTHER = "events[2026-11-01]", "events[2026-11-02]"
STAMP = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)  # before every commit of a test


def _rows(tag: str, offsets: range) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {
            "id": pa.array(list(offsets), pa.int64()),
            SOURCE: pa.array([tag] * n, pa.string()),
            OFFSET: pa.array(list(offsets), pa.int64()),
            EMIT_TS: pa.array([STAMP] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def _append(uri: str, tag: str, offsets: range) -> int:
    write_deltalake(uri, _rows(tag, offsets), mode="append")
    return DeltaTable(uri).version()


def _reader(uri: str) -> TableReader:
    return TableReader("main.raw.events", uri, {})


def test_rows_deleted_at_or_below_the_snapshot_s_version_are_named_with_the_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 100))
    _append(uri, TAG, range(100, 200))
    _append(uri, OTHER, range(0, 50))
    DeltaTable(uri).delete(f"{OFFSET} >= 100 AND {OFFSET} < 150 AND {SOURCE} = '{TAG}'")
    deleted = DeltaTable(uri).version()
    later = _append(uri, OTHER, range(50, 60))  # the snapshot may reflect a version past the delete

    found = explain(_reader(uri), {TAG: [R(100, 150), R(200, 210)]}, reflects=later)

    assert found == (
        Absence(TAG, R(100, 150), Cause.DELETED, removed_at=deleted, operation="DELETE"),
        Absence(TAG, R(200, 210), Cause.NOT_COMMITTED),  # never in any version: late, not lost
    )
    assert found[0].lost and not found[1].lost


def test_rows_held_at_the_snapshot_s_version_are_lost_by_the_iceberg_side(tmp_path: Path) -> None:
    """Delta holds them at the version the snapshot reflects: the snapshot lacks rows it claims."""
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 100))
    reflects = _append(uri, TAG, range(100, 200))
    assert explain(_reader(uri), {TAG: [R(10, 20)]}, reflects=reflects) == (
        Absence(TAG, R(10, 20), Cause.IN_DELTA),
    )


def test_a_removal_after_a_lower_bound_version_is_named(tmp_path: Path) -> None:
    """A production probe reports a version the snapshot reflects at least: rows held there and taken by
    a delete after it are deleted by that delete, not lost by Iceberg."""
    uri = str(tmp_path / "t")
    probed = _append(uri, TAG, range(0, 100))
    DeltaTable(uri).delete(f"{OFFSET} < 10")
    deleted = DeltaTable(uri).version()
    assert explain(_reader(uri), {TAG: [R(0, 10)]}, reflects=probed) == (
        Absence(TAG, R(0, 10), Cause.DELETED, removed_at=deleted, operation="DELETE"),
    )


def test_update_and_restore_remove_positions_too(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 100))
    first = DeltaTable(uri).version()
    _append(uri, TAG, range(100, 200))
    DeltaTable(uri).update(predicate=f"{OFFSET} < 5", updates={OFFSET: f"{OFFSET} + 1000"})
    updated = DeltaTable(uri).version()
    DeltaTable(uri).restore(first)  # back to the first 100 rows: 100..199 are gone again
    restored = DeltaTable(uri).version()

    found = explain(_reader(uri), {TAG: [R(0, 5), R(100, 200)]}, reflects=restored)

    # The restore brought 0..4 back (it restored version `first`): they are there, held by Delta.
    assert found == (
        Absence(TAG, R(0, 5), Cause.IN_DELTA),
        Absence(TAG, R(100, 200), Cause.DELETED, removed_at=restored, operation="RESTORE"),
    )
    at_update = explain(_reader(uri), {TAG: [R(0, 5)]}, reflects=updated)
    assert at_update == (Absence(TAG, R(0, 5), Cause.DELETED, removed_at=updated, operation="UPDATE"),)


def test_a_removal_of_other_rows_is_not_blamed(tmp_path: Path) -> None:
    """A delete of another partition's rows (a replace, a repair) leaves the missing rows unexplained."""
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 100))
    _append(uri, OTHER, range(0, 100))
    DeltaTable(uri).delete(f"{SOURCE} = '{OTHER}'")
    reflects = DeltaTable(uri).version()
    assert explain(_reader(uri), {TAG: [R(100, 120)]}, reflects=reflects) == (
        Absence(TAG, R(100, 120), Cause.NOT_COMMITTED),
    )


def test_the_history_is_read_further_back_until_it_reaches_the_rows_stamps(tmp_path: Path) -> None:
    """A delete more than the first window's commits back is still found: the window widens until its
    oldest commit predates the rows' first stamp."""
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 100))
    DeltaTable(uri).delete(f"{OFFSET} < 10")
    deleted = DeltaTable(uri).version()
    window = absence.LOOKBACK_COMMITS[0]
    for i in range(window + 2):
        write_deltalake(uri, _rows(OTHER, range(i, i + 1)), mode="append")
    reflects = DeltaTable(uri).version()
    assert reflects - deleted > window
    assert row_removals(_reader(uri), after=reflects - window).commits == ()  # the first window misses it

    found = explain(_reader(uri), {TAG: [R(0, 10)]}, reflects=reflects, margin_s=3600)

    assert found == (Absence(TAG, R(0, 10), Cause.DELETED, removed_at=deleted, operation="DELETE"),)


def test_row_removals_name_each_commit_s_operation(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, TAG, range(0, 10))
    DeltaTable(uri).delete(f"{OFFSET} = 1")
    _append(uri, TAG, range(10, 20))
    DeltaTable(uri).update(predicate=f"{OFFSET} = 2", updates={"id": "0"})
    found = row_removals(_reader(uri), after=-1)
    assert [(r.version, r.operation) for r in found.commits] == [(1, "DELETE"), (3, "UPDATE")]
    assert found.latest == 3 and found.first_ms is not None
    assert [r.version for r in row_removals(_reader(uri), after=1).commits] == [3]
