"""Each lane kind commits coverage into its own file; the table's store reads both.

SQLite has one write lock per file. With both lanes in one file, a derived lane whose commit stalled
(a slow disk, another process holding the file) held the raw lane's commit, and with it the raw lane's
acknowledgements. The system test over the runtime and the official SDK:
tests/system/runtime/test_lane_isolation.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.coverage.store import CoverageStore, derived_lane_path
from zerobus_orchestration.ranges import CoverageKey, OffsetRange

TABLE = "main.gold.orders"
RAW = CoverageKey("sink", "asset/raw", "p")
DERIVED = CoverageKey("sink", "asset/gold", "p")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoverageStore]:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as s:
        yield s


def digest(key: CoverageKey, start: int, end: int, value: bytes) -> RangeDigest:
    return RangeDigest(key, OffsetRange(start, end), None, end - start, value)


def test_the_derived_lane_records_into_its_own_file_and_the_store_reads_both(store: CoverageStore) -> None:
    lane = store.derived_lane()
    assert lane.path == derived_lane_path(store.path) == store.path.with_name("coverage.derived.sqlite")
    store.record(RAW, OffsetRange(0, 10))
    lane.record_delivered([(DERIVED, OffsetRange(0, 5))], [digest(DERIVED, 0, 5, b"d" * 16)])
    lane.record(RAW, OffsetRange(10, 20))  # one key in both files: merged on read
    assert store.ranges(RAW) == (OffsetRange(0, 20),) and lane.ranges(RAW) == (OffsetRange(10, 20),)
    assert store.ranges(DERIVED) == (OffsetRange(0, 5),)
    assert store.keys() == (DERIVED, RAW)
    assert store.covered_by_source("asset/raw", "p") == (OffsetRange(0, 20),)
    assert store.all_for_table() == {RAW: (OffsetRange(0, 20),), DERIVED: (OffsetRange(0, 5),)}
    assert [d.digest for d in store.digests(DERIVED)] == [b"d" * 16]
    with sqlite3.connect(store.path) as raw_file:  # nothing of the derived lane in the raw lane's file
        assert raw_file.execute("SELECT count(*) FROM coverage_digests").fetchone() == (0,)


def test_the_derived_lanes_digests_read_as_the_later_ones(store: CoverageStore) -> None:
    store.record_delivered([(DERIVED, OffsetRange(0, 5))], [digest(DERIVED, 0, 5, b"a" * 16)])
    store.derived_lane().record_delivered([(DERIVED, OffsetRange(0, 5))], [digest(DERIVED, 0, 5, b"b" * 16)])
    records = store.digests(DERIVED)
    assert [d.digest for d in records] == [b"a" * 16, b"b" * 16]
    assert records[0].seq < records[1].seq  # a resume takes the latest record where two overlap


def test_forget_drops_a_key_from_both_files(store: CoverageStore) -> None:
    store.record(DERIVED, OffsetRange(0, 5))
    store.derived_lane().record(DERIVED, OffsetRange(5, 9))
    store.forget([DERIVED])
    assert store.ranges(DERIVED) == () and store.derived_lane().ranges(DERIVED) == ()


def test_reading_never_creates_the_derived_lanes_file(store: CoverageStore) -> None:
    store.record(RAW, OffsetRange(0, 3))
    assert store.ranges(RAW) == (OffsetRange(0, 3),) and store.keys() == (RAW,)
    assert not derived_lane_path(store.path).exists()


def test_a_derived_commit_held_by_another_writer_does_not_hold_the_raw_lanes(tmp_path: Path) -> None:
    path = tmp_path / "coverage.sqlite"
    with CoverageStore(path, TABLE, busy_timeout_s=0.2) as store:
        lane = store.derived_lane()
        lane.record(DERIVED, OffsetRange(0, 1))  # the file exists
        holder = sqlite3.connect(lane.path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's commit, stalled with the write lock
        try:
            store.record(RAW, OffsetRange(0, 10))  # the raw lane's commit goes through
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                lane.record(DERIVED, OffsetRange(1, 2))  # only the derived lane waits
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        lane.record(DERIVED, OffsetRange(1, 2))
        assert store.ranges(RAW) == (OffsetRange(0, 10),) and store.ranges(DERIVED) == (OffsetRange(0, 2),)
