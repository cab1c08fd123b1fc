"""The SQLite coverage store: union-merge semantics, queries, table scoping, threads, config."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerobus_orchestration import intervals
from zerobus_orchestration.config import load_config
from zerobus_orchestration.coverage.store import CoverageStore, coverage_path
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.ranges import CoverageKey, CoverageRecorder, OffsetRange
from zerobus_orchestration.tables import TableName

TABLE = "main.raw.events"
KEY = CoverageKey("sink-a", "asset/orders", "2026-11-29")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoverageStore]:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as s:
        yield s


def test_satisfies_the_recorder_protocol(store: CoverageStore) -> None:
    recorder: CoverageRecorder = store
    recorder.record(KEY, OffsetRange(0, 10))
    assert store.ranges(KEY) == (OffsetRange(0, 10),)


def test_overlapping_and_adjacent_writes_coalesce_instead_of_overwriting(store: CoverageStore) -> None:
    store.record(KEY, OffsetRange(0, 10))
    store.record(KEY, OffsetRange(20, 30))
    assert store.ranges(KEY) == (OffsetRange(0, 10), OffsetRange(20, 30))
    store.record(KEY, OffsetRange(5, 8))  # inside: a last-write-wins store would shrink to [5, 8)
    assert store.ranges(KEY) == (OffsetRange(0, 10), OffsetRange(20, 30))
    store.record(KEY, OffsetRange(10, 20))  # adjacent on both sides: bridges the gap
    assert store.ranges(KEY) == (OffsetRange(0, 30),)
    store.record(KEY, OffsetRange(25, 40))
    assert store.ranges(KEY) == (OffsetRange(0, 40),)


def test_gaps_and_high_water(store: CoverageStore) -> None:
    assert store.high_water(KEY) == 0
    assert store.gaps(KEY, 5) == (OffsetRange(0, 5),)
    store.record(KEY, OffsetRange(0, 4))
    store.record(KEY, OffsetRange(6, 9))
    store.record(KEY, OffsetRange(12, 15))
    assert store.high_water(KEY) == 4
    assert store.gaps(KEY, 20) == (OffsetRange(4, 6), OffsetRange(9, 12), OffsetRange(15, 20))
    assert store.gaps(KEY, 7) == (OffsetRange(4, 6),)


def test_empty_span_records_nothing(store: CoverageStore) -> None:
    store.record(KEY, OffsetRange(3, 3))
    assert store.keys() == ()


def test_keys_are_separate_and_filterable(store: CoverageStore) -> None:
    other_sink = CoverageKey("sink-b", KEY.source, KEY.partition)
    other_part = CoverageKey("sink-a", KEY.source, "2026-11-30")
    other_source = CoverageKey("sink-a", "dag/task", "")
    store.record(KEY, OffsetRange(0, 5))
    store.record(other_sink, OffsetRange(5, 8))
    store.record(other_part, OffsetRange(0, 1))
    store.record(other_source, OffsetRange(0, 2))
    assert store.ranges(KEY) == (OffsetRange(0, 5),)
    assert set(store.keys()) == {KEY, other_sink, other_part, other_source}
    assert set(store.keys(sink="sink-a")) == {KEY, other_part, other_source}
    assert set(store.keys(source="dag/task")) == {other_source}
    assert store.keys(sink="sink-b", source="dag/task") == ()
    # Across sinks, the same (source, partition) coverage unions: [0, 5) + [5, 8) = [0, 8).
    assert store.covered_by_source(KEY.source, KEY.partition) == (OffsetRange(0, 8),)
    assert store.covered_by_source("dag/task") == (OffsetRange(0, 2),)
    assert store.all_for_table() == {
        KEY: (OffsetRange(0, 5),),
        other_sink: (OffsetRange(5, 8),),
        other_part: (OffsetRange(0, 1),),
        other_source: (OffsetRange(0, 2),),
    }


def test_tables_sharing_one_file_do_not_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "coverage.sqlite"
    with CoverageStore(path, TABLE) as a, CoverageStore(path, TableName("main", "raw", "other")) as b:
        a.record(KEY, OffsetRange(0, 10))
        b.record(KEY, OffsetRange(50, 60))
        assert a.ranges(KEY) == (OffsetRange(0, 10),)
        assert b.ranges(KEY) == (OffsetRange(50, 60),)
        assert a.covered_by_source(KEY.source, KEY.partition) == (OffsetRange(0, 10),)
        assert list(b.all_for_table()) == [KEY]
    # The table is stored with every row, in three unambiguous columns.
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT table_catalog, table_schema, table_name FROM coverage_ranges ORDER BY table_name"
        ).fetchall()
    assert rows == [("main", "raw", "events"), ("main", "raw", "other")]


def test_coverage_survives_reopening_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "coverage.sqlite"
    with CoverageStore(path, TABLE) as first:
        first.record(KEY, OffsetRange(0, 7))
    with CoverageStore(path, TABLE) as second:
        assert second.ranges(KEY) == (OffsetRange(0, 7),)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_record_many_merges_in_one_transaction(store: CoverageStore) -> None:
    other = CoverageKey("sink-a", "x", "")
    store.record_many(
        [
            (KEY, OffsetRange(0, 3)),
            (other, OffsetRange(1, 2)),
            (KEY, OffsetRange(3, 6)),
            (KEY, OffsetRange(8, 9)),
        ]
    )
    assert store.ranges(KEY) == (OffsetRange(0, 6), OffsetRange(8, 9))
    assert store.ranges(other) == (OffsetRange(1, 2),)


def test_closed_store_refuses_use(tmp_path: Path) -> None:
    store = CoverageStore(tmp_path / "c.sqlite", TABLE)
    store.record(KEY, OffsetRange(0, 1))
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.ranges(KEY)


def test_newer_schema_version_is_refused_with_a_fix(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(ConfigError, match=r"schema version 99.*Fix"):
        CoverageStore(path, TABLE).ranges(KEY)


def test_location_comes_from_config_beside_the_warehouse(tmp_path: Path) -> None:
    config = load_config(environ={}, warehouse=str(tmp_path / "wh"))
    with CoverageStore.from_config(config, TABLE) as store:
        store.record(KEY, OffsetRange(0, 1))
        assert store.path == tmp_path / "wh" / "_zerobus" / "coverage.sqlite"
    assert store.path.exists()


def test_object_store_location_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match="ZEROBUS_COVERAGE__LOCATION"):
        coverage_path("s3://bucket/warehouse/_zerobus/coverage.sqlite")
    assert coverage_path("file:///tmp/x.sqlite") == Path("/tmp/x.sqlite")


def test_bad_table_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="three non-empty parts"):
        CoverageStore("/tmp/unused.sqlite", "events")


def test_threads_writing_at_once_lose_no_range(store: CoverageStore) -> None:
    # Each thread writes every 4th unit span, interleaved, so merges constantly race on neighbours.
    n, workers = 400, 4
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            barrier.wait()
            for start in range(worker, n, workers):
                store.record(KEY, OffsetRange(start, start + 1))
        except BaseException as exc:  # surfaced below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.ranges(KEY) == (OffsetRange(0, n),)


@st.composite
def spans(draw: st.DrawFn) -> OffsetRange:
    start = draw(st.integers(0, 60))
    return OffsetRange(start, draw(st.integers(start, 60)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(spans(), max_size=15), data=st.data())
def test_store_union_merge_is_order_independent_idempotent_and_gap_complete(
    tmp_path: Path, writes: list[OffsetRange], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(writes))
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "coverage.sqlite"  # fresh file per example
    with CoverageStore(path, TABLE) as store:
        for span in order:
            store.record(KEY, span)
        once = store.ranges(KEY)
        assert once == intervals.merge(writes)
        for span in writes:  # replaying every write (a retry) changes nothing
            store.record(KEY, span)
        assert store.ranges(KEY) == once
        n = data.draw(st.integers(0, 70))
        covered = {p for r in intervals.clip(once, 0, n) for p in range(r.start, r.end)}
        holes = {p for r in store.gaps(KEY, n) for p in range(r.start, r.end)}
        assert covered.isdisjoint(holes)
        assert covered | holes == set(range(n))


@pytest.mark.slow  # a race soak: 80 attempts
def test_concurrent_first_openers_of_a_new_file_all_succeed(tmp_path: Path) -> None:
    """Several connections opening a brand-new file at once race for the switch to WAL.

    SQLite answers that race with an immediate ``database is locked`` (no busy handler), which once
    failed a read of coverage while two ack lanes were opening the file; every opener must get through.
    """
    for attempt in range(80):
        path = tmp_path / f"race-{attempt}.sqlite"
        stores = [CoverageStore(path, TABLE) for _ in range(4)]
        failures = _record_from_threads_at_once(stores)
        for store in stores:
            store.close()
        assert failures == []
        with CoverageStore(path, TABLE) as check:
            stored_keys = check.keys()
            assert {key.source: check.ranges(key) for key in stored_keys} == {
                f"s{i}": (OffsetRange(0, i + 1),) for i in range(len(stores))
            }


def _record_from_threads_at_once(stores: list[CoverageStore]) -> list[BaseException]:
    """Each store records from its own thread, all released together; returns what they raised."""
    barrier = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def open_and_record(store: CoverageStore, index: int) -> None:
        try:
            barrier.wait()
            store.record(CoverageKey("sink", f"s{index}", ""), OffsetRange(0, index + 1))
        except BaseException as exc:  # returned to the caller, which asserts there are none
            failures.append(exc)

    threads = [threading.Thread(target=open_and_record, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def test_recorded_since_names_the_keys_a_write_recorded_lately(store: CoverageStore) -> None:
    old, new = CoverageKey("s", "events[d1@r1]", "d1@r1"), CoverageKey("s", "events[d1@r2]", "d1@r2")
    store.record(old, OffsetRange(0, 5))
    time.sleep(0.01)
    since_us = int(time.time() * 1e6)
    store.record(new, OffsetRange(0, 5))
    assert store.recorded_since(since_us) == (new,)
    store.record(old, OffsetRange(5, 9))  # recorded again: lately too
    assert store.recorded_since(since_us) == (old, new)
