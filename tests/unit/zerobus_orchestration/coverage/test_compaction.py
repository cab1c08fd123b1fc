"""Coverage compaction: settled keys' digests packed (losslessly: a resume checks the same ranges), idle
keys let go after the retention, a version 2 file upgraded in place. Real SQLite, the real sink path."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.compaction import DAY_S, compact
from zerobus_orchestration.coverage.digest import RangeDigest, rows_digest
from zerobus_orchestration.coverage.packs import PackError, pack_digests, unpack_digests
from zerobus_orchestration.coverage.store import SCHEMA_VERSION, CoverageStore
from zerobus_orchestration.errors import ResumeMismatchError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.resume.slices import ResumeSlice, resume_slices
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import MemoryTransport

TABLE = "main.raw.orders"
KEY = CoverageKey("sink", "files/ingest", "2026-01-01")
LATER_US = 2**62  # "now" far in the future: every key is settled and idle


def orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": pa.array([None if i % 11 == 0 else f"c{i % 7}" for i in range(start, start + n)]),
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoverageStore]:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as s:
        yield s


def deliver(store: CoverageStore, data: pa.Table, *, max_chunksize: int, key: CoverageKey = KEY) -> None:
    """One try that delivers ``data`` for ``key`` through a real sink, pool, ack lanes and store."""
    pool = StreamPool(
        MemoryTransport(),
        TABLE,
        PoolConfig(min_streams=2, ack_channel_capacity=8),
        recorder=store,
        metrics=SinkMetrics(CollectorRegistry()),
    )
    sink = ZerobusSink(pool, source=key.source, partition=key.partition, sink_id=key.sink)
    sink.push(data.to_batches(max_chunksize=max_chunksize))
    sink.flush()
    pool.close()


def resume(store: CoverageStore, data: pa.Table) -> list[ResumeSlice]:
    return list(
        resume_slices(
            store.ranges(KEY),
            iter(data.to_batches(max_chunksize=13)),  # batched unlike the delivery
            digests=store.digests(KEY),
            table=TABLE,
            source=KEY.source,
            partition=KEY.partition,
        )
    )


def rows_of(store: CoverageStore, table: str) -> int:
    conn = sqlite3.connect(store.path)
    try:
        (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    finally:
        conn.close()
    return int(count)


def test_the_pack_codec_round_trips_every_record_shape() -> None:
    records = [
        RangeDigest(KEY, OffsetRange(0, 100), None, 100, b"\x01" * 16),
        RangeDigest(
            KEY, OffsetRange(100, 120), (OffsetRange(100, 105), OffsetRange(110, 120)), 15, b"\x02" * 16
        ),
        RangeDigest(KEY, OffsetRange(2**40, 2**40 + 1), None, 1, b""),
    ]
    algorithm, entries, body = pack_digests(records)
    assert (algorithm, entries) == (records[0].algorithm, 3)
    assert unpack_digests(KEY, algorithm, body) == tuple(records)
    with pytest.raises(ValueError, match="one algorithm"):
        pack_digests([records[0], RangeDigest(KEY, OffsetRange(0, 1), None, 1, b"x", "sha256/arrow-ipc-v1")])
    with pytest.raises(PackError, match="ends inside a record"):
        unpack_digests(KEY, algorithm, body[:-3])
    with pytest.raises(PackError, match="this release reads version 1"):
        unpack_digests(KEY, algorithm, b"\x07" + body[1:])


def test_a_settled_key_is_packed_and_resumes_exactly_as_before(store: CoverageStore) -> None:
    data = orders(0, 200)
    deliver(store, data.slice(0, 150), max_chunksize=20)
    before = store.digests(KEY)
    assert len(before) == 8 and rows_of(store, "coverage_digests") == 8
    expected = [(p.start_offset, p.batch.num_rows) for p in resume(store, data)]

    report = compact(store, compact_after_s=3600, retention_days=None, now_us=LATER_US)

    assert (report.keys_packed, report.records_packed, report.keys_dropped) == (1, 8, 0)
    assert rows_of(store, "coverage_digests") == 0 and rows_of(store, "coverage_digest_packs") == 1
    after = store.digests(KEY)
    assert sorted((d.span.start, d.span.end, d.runs, d.rows, d.digest, d.algorithm) for d in after) == sorted(
        (d.span.start, d.span.end, d.runs, d.rows, d.digest, d.algorithm) for d in before
    )
    assert all(d.seq < 1 for d in after)  # older than any loose record to come
    assert [(p.start_offset, p.batch.num_rows) for p in resume(store, data)] == expected
    assert store.ranges(KEY) == (OffsetRange(0, 150),)


def test_a_changed_input_is_still_refused_after_packing_naming_the_same_range(store: CoverageStore) -> None:
    data = orders(0, 100)
    deliver(store, data, max_chunksize=25)
    changed = data.set_column(0, "order_id", pa.array([*range(60), 999, *range(61, 100)], pa.int64()))
    with pytest.raises(ResumeMismatchError) as unpacked:
        resume(store, changed)
    compact(store, compact_after_s=0, retention_days=None, now_us=LATER_US)
    with pytest.raises(ResumeMismatchError) as packed:
        resume(store, changed)
    assert packed.value.span == unpacked.value.span == OffsetRange(50, 75)


def test_a_range_sent_twice_keeps_only_its_latest_record_and_later_records_stay_newer(
    store: CoverageStore,
) -> None:
    first, second = orders(0, 40), orders(500, 40)
    deliver(store, first, max_chunksize=40)
    deliver(store, second, max_chunksize=40)  # resume=False re-sent [0, 40) with other rows
    assert len(store.digests(KEY)) == 2
    resume(store, second)  # the latest record is what the input must hold
    compact(store, compact_after_s=0, retention_days=None, now_us=LATER_US)
    (kept,) = store.digests(KEY)
    assert kept.digest == rows_digest(second)
    resume(store, second)
    with pytest.raises(ResumeMismatchError):
        resume(store, first)

    deliver(store, first, max_chunksize=40)  # after the pack: a loose record, newer than the packed one
    resume(store, first)
    with pytest.raises(ResumeMismatchError):
        resume(store, second)
    compact(store, compact_after_s=0, retention_days=None, now_us=LATER_US)  # packed again, same verdict
    assert rows_of(store, "coverage_digests") == 0 and len(store.digests(KEY)) == 1
    resume(store, first)


def test_a_key_recorded_lately_is_not_settled(store: CoverageStore) -> None:
    deliver(store, orders(0, 30), max_chunksize=10)
    report = compact(store, compact_after_s=3600, retention_days=None)  # now: recorded a moment ago
    assert report.keys_packed == 0 and rows_of(store, "coverage_digests") == 3


def test_keys_idle_past_the_retention_are_let_go_the_others_kept(store: CoverageStore) -> None:
    idle, busy = CoverageKey("sink", "files/ingest", "2025-01-01"), KEY
    deliver(store, orders(0, 30), max_chunksize=10, key=idle)
    conn = sqlite3.connect(store.path)
    with conn:  # as if last recorded 401 days ago
        conn.execute(
            "UPDATE coverage_keys SET last_recorded_us = last_recorded_us - ? WHERE partition_key = ?",
            (int(401 * DAY_S * 1e6), idle.partition),
        )
    conn.close()
    deliver(store, orders(0, 30), max_chunksize=10, key=busy)

    report = compact(store, compact_after_s=DAY_S, retention_days=400)

    assert report.keys_dropped == 1 and report.keys_packed == 0
    assert store.ranges(idle) == () and store.digests(idle) == () and store.first_seen(idle) is None
    assert store.ranges(busy) == (OffsetRange(0, 30),) and len(store.digests(busy)) == 3


def test_max_keys_bounds_one_run_and_the_rest_follow(store: CoverageStore) -> None:
    keys = [CoverageKey("sink", "files/ingest", f"day-{i}") for i in range(5)]
    for key in keys:
        deliver(store, orders(0, 20), max_chunksize=10, key=key)
    first = compact(store, compact_after_s=0, retention_days=None, max_keys=3, now_us=LATER_US)
    assert (first.keys_packed, first.keys_left) == (3, True)
    second = compact(store, compact_after_s=0, retention_days=None, max_keys=3, now_us=LATER_US)
    assert (second.keys_packed, second.keys_left) == (2, False)
    assert rows_of(store, "coverage_digests") == 0 and rows_of(store, "coverage_digest_packs") == 5


def test_records_arriving_while_a_key_is_packed_are_never_lost(store: CoverageStore) -> None:
    """Packing runs in one write transaction: a record committed meanwhile is either taken into the pack
    or stays loose, newer than it."""
    stop = threading.Event()
    written: list[OffsetRange] = []

    def record() -> None:
        at = 10_000
        while not stop.is_set():
            span = OffsetRange(at, at + 5)
            store.record_delivered(
                [(KEY, span)], [RangeDigest(KEY, span, None, 5, at.to_bytes(16, "little"))]
            )
            written.append(span)
            at += 5

    deliver(store, orders(0, 100), max_chunksize=10)
    thread = threading.Thread(target=record)
    thread.start()
    try:
        for _ in range(20):
            compact(store, compact_after_s=0, retention_days=None, now_us=LATER_US)
    finally:
        stop.set()
        thread.join()
    vouched = {d.span for d in store.digests(KEY)}
    assert set(written) <= vouched and len(vouched) == 10 + len(written)


def test_a_version_2_file_is_upgraded_with_its_keys_taken_as_recorded_now(tmp_path: Path) -> None:
    path = tmp_path / "coverage.sqlite"
    with CoverageStore(path, TABLE) as old:
        deliver(old, orders(0, 40), max_chunksize=20)
    conn = sqlite3.connect(path)
    with conn:  # back to version 2's schema: the two tables version 3 added are not there
        conn.execute("DROP TABLE coverage_keys")
        conn.execute("DROP TABLE coverage_digest_packs")
        conn.execute("PRAGMA user_version = 2")
    conn.close()
    with CoverageStore(path, TABLE) as upgraded:
        assert upgraded.ranges(KEY) == (OffsetRange(0, 40),) and len(upgraded.digests(KEY)) == 2
        assert upgraded.first_seen(KEY) is None  # not known: the file predates it
        assert compact(upgraded, compact_after_s=3600, retention_days=None).keys_packed == 0  # recorded "now"
        assert compact(upgraded, compact_after_s=3600, retention_days=None, now_us=LATER_US).keys_packed == 1
        resume_data = orders(0, 60)
        pieces = list(
            resume_slices(
                upgraded.ranges(KEY),
                iter(resume_data.to_batches()),
                digests=upgraded.digests(KEY),
                table=TABLE,
                source=KEY.source,
                partition=KEY.partition,
            )
        )
        assert [(p.start_offset, p.batch.num_rows) for p in pieces] == [(40, 20)]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


def test_touch_keeps_the_first_start_and_forget_drops_every_trace(store: CoverageStore) -> None:
    assert store.touch(KEY) is None
    first = store.first_seen(KEY)
    assert first is not None
    assert store.touch(KEY) == first and store.first_seen(KEY) == first
    deliver(store, orders(0, 20), max_chunksize=10)
    compact(store, compact_after_s=0, retention_days=None, now_us=LATER_US)
    store.forget([KEY])
    assert store.first_seen(KEY) is None and store.digests(KEY) == () and store.ranges(KEY) == ()
    assert rows_of(store, "coverage_digest_packs") == 0
