"""Resume refuses an input that changed between tries (content digests beside coverage).

Digests are recorded the way production records them: a real ``ZerobusSink`` over a ``StreamPool``
whose ack lanes confirm into a real SQLite ``CoverageStore``; only the transport is in memory here
(the official SDK and the emulator are exercised in tests/system/runtime/test_resume_integrity_e2e.py).
"""

from __future__ import annotations

import itertools
import logging
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.digest import SHA256_IPC_V1, RangeDigest, rows_digest
from zerobus_orchestration.coverage.store import SCHEMA_VERSION, CoverageStore
from zerobus_orchestration.errors import ResumeMismatchError, ZerobusOrchestrationError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.resume.slices import ResumeSlice, resume_slices
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import MemoryTransport

TABLE = "main.raw.orders"
KEY = CoverageKey("sink", "files/ingest", "run-1")


def orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": pa.array([None if i % 11 == 0 else f"c{i % 7}" for i in range(start, start + n)]),
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoverageStore]:
    with CoverageStore(tmp_path / "coverage.sqlite", TABLE) as s:
        yield s


def deliver(
    store: CoverageStore, data: pa.Table, *, max_chunksize: int, offset_column: str | None = None
) -> None:
    """One try that delivers ``data`` for ``KEY`` through a real sink, pool, ack lanes and store."""
    pool = StreamPool(
        MemoryTransport(),
        TABLE,
        PoolConfig(min_streams=2, ack_channel_capacity=8),
        recorder=store,
        metrics=SinkMetrics(CollectorRegistry()),
    )
    sink = ZerobusSink(
        pool, source=KEY.source, partition=KEY.partition, sink_id=KEY.sink, offset_column=offset_column
    )
    sink.push(data.to_batches(max_chunksize=max_chunksize))
    sink.flush()
    pool.close()


def resume(
    store: CoverageStore, data: pa.Table | Iterator[pa.RecordBatch], **kw: object
) -> list[ResumeSlice]:
    return list(
        resume_slices(
            store.ranges(KEY),
            data,
            digests=store.digests(KEY),
            table=TABLE,
            source=KEY.source,
            partition=KEY.partition,
            **kw,  # type: ignore[arg-type]
        )
    )


def positions(pieces: list[ResumeSlice]) -> list[int]:
    return [p.start_offset + i for p in pieces for i in range(p.batch.num_rows)]


# -- the digest ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    cuts=st.lists(st.integers(1, 199), max_size=6),
    lo=st.integers(0, 50),
    seed=st.integers(0, 2**16),
)
def test_digest_depends_on_rows_not_on_batching_or_column_order(
    n: int, cuts: list[int], lo: int, seed: int
) -> None:
    rng = random.Random(seed)
    base = pa.table(
        {
            "i": pa.array(
                [None if rng.random() < 0.1 else rng.randint(-9, 9) for _ in range(n + lo)], pa.int64()
            ),
            "s": pa.array(
                [None if rng.random() < 0.1 else "x" * rng.randint(0, 4) for _ in range(n + lo)], pa.string()
            ),
            "l": pa.array([[rng.randint(0, 3)] * rng.randint(0, 2) for _ in range(n + lo)]),
            "d": pa.array([f"k{rng.randint(0, 2)}" for _ in range(n + lo)]).dictionary_encode(),
        }
    ).slice(lo, n)  # a slice: its buffers carry the parent's bytes beyond the rows
    bounds = [0, *sorted({c for c in cuts if c < n}), n]
    pieces = [base.slice(a, b - a).combine_chunks().to_batches()[0] for a, b in itertools.pairwise(bounds)]
    fresh = pa.Table.from_pylist(base.to_pylist(), schema=base.schema).select(["s", "d", "l", "i"])
    assert rows_digest(pieces) == rows_digest(base) == rows_digest(fresh)
    changed = base.to_pylist()
    changed[rng.randrange(n)]["s"] = "changed"
    assert rows_digest(pa.Table.from_pylist(changed, schema=base.schema)) != rows_digest(base)


def test_digest_hashes_dictionary_values_at_any_depth_not_their_indices() -> None:
    def nested(values: list[str], indices: list[int]) -> pa.RecordBatch:
        codes = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))
        return pa.record_batch({"s": pa.StructArray.from_arrays([codes], names=["k"])})

    same_indices_other_values = nested(["x", "y"], [0, 1])
    same_values_other_dictionary = nested(["b", "a"], [1, 0])
    assert rows_digest(nested(["a", "b"], [0, 1])) != rows_digest(same_indices_other_values)
    assert rows_digest(nested(["a", "b"], [0, 1])) == rows_digest(same_values_other_dictionary)


# -- the store -------------------------------------------------------------------------------------


def test_digests_are_recorded_with_their_range_and_never_merged(store: CoverageStore) -> None:
    deliver(store, orders(0, 100), max_chunksize=30)
    assert store.ranges(KEY) == (OffsetRange(0, 100),)  # coverage still union-merges
    recorded = store.digests(KEY)
    assert sorted(d.span for d in recorded) == [OffsetRange(s, min(s + 30, 100)) for s in range(0, 100, 30)]
    by_span = {d.span: d for d in recorded}
    assert by_span[OffsetRange(30, 60)].digest == rows_digest(orders(30, 30))
    assert all(d.rows == len(d.span) and d.runs is None for d in recorded)


def test_an_old_coverage_file_is_upgraded_and_resumes_unverified_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE coverage_ranges (
            table_catalog TEXT NOT NULL, table_schema TEXT NOT NULL, table_name TEXT NOT NULL,
            sink TEXT NOT NULL, source TEXT NOT NULL, partition_key TEXT NOT NULL,
            start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL,
            PRIMARY KEY (table_catalog, table_schema, table_name, sink, source, partition_key, start_offset)
        ) WITHOUT ROWID;
        INSERT INTO coverage_ranges VALUES ('main', 'raw', 'orders', 'sink', 'files/ingest', 'run-1', 0, 40);
        PRAGMA user_version = 1;
        """
    )
    conn.close()
    with CoverageStore(path, TABLE) as old:
        assert old.ranges(KEY) == (OffsetRange(0, 40),) and old.digests(KEY) == ()
        with caplog.at_level(logging.WARNING):
            pieces = resume(old, orders(0, 100))
    assert positions(pieces) == list(range(40, 100))  # resumed by position, as before
    assert "40 delivered position(s)" in caplog.text and "no content digest" in caplog.text
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


# -- resume ----------------------------------------------------------------------------------------


def test_the_same_input_batched_differently_resumes_as_before(store: CoverageStore) -> None:
    everything = orders(0, 100)
    deliver(store, everything.slice(0, 60), max_chunksize=25)
    pieces = resume(store, iter(everything.to_batches(max_chunksize=7)))
    assert positions(pieces) == list(range(60, 100))
    assert pa.Table.from_batches([p.batch for p in pieces]).equals(everything.slice(60))


def test_a_batch_inserted_in_front_fails_before_anything_is_sent(store: CoverageStore) -> None:
    """The glob ``[b, c]`` delivered b; the retry reads ``[a, b, c]``: positions 0.. now hold a's rows."""
    b = orders(1_000, 50)
    deliver(store, b, max_chunksize=20)
    before = (store.ranges(KEY), store.digests(KEY))
    a, c = orders(0, 30), orders(2_000, 40)
    yielded: list[ResumeSlice] = []
    with pytest.raises(ResumeMismatchError) as failure:
        for piece in resume_slices(
            store.ranges(KEY),
            iter([*a.to_batches(), *b.to_batches(), *c.to_batches()]),  # streamed, like a file glob
            digests=store.digests(KEY),
            table=TABLE,
            source=KEY.source,
            partition=KEY.partition,
        ):
            yielded.append(piece)
    assert yielded == []  # nothing to send was let through
    error = failure.value
    assert isinstance(error, ZerobusOrchestrationError)
    assert (error.table, error.source, error.partition, error.span) == (
        TABLE,
        KEY.source,
        KEY.partition,
        OffsetRange(0, 20),
    )
    message = str(error)
    for part in (TABLE, "'files/ingest'", "'run-1'", "[0, 20)", "Nothing was sent", "new partition"):
        assert part in message
    for way_out in ("resume=False", "--no-resume", "ZerobusIngestOperator(resume=False)", "Dagster"):
        assert way_out in message
    assert (store.ranges(KEY), store.digests(KEY)) == before


def test_reordered_rows_are_detected(store: CoverageStore) -> None:
    """An unstable SQL order: the same rows, another order, at the delivered positions."""
    data = orders(0, 80)
    deliver(store, data.slice(0, 40), max_chunksize=40)
    order = list(range(80))
    order[3], order[17] = order[17], order[3]  # two rows inside the delivered range swapped
    with pytest.raises(ResumeMismatchError, match=r"\[0, 40\)"):
        resume(store, data.take(order))


def test_a_later_range_that_differs_fails_before_the_rows_of_an_earlier_hole_are_sent(
    store: CoverageStore,
) -> None:
    data = orders(0, 90)
    deliver(store, data.slice(0, 30), max_chunksize=30)
    sink_pool = StreamPool(
        MemoryTransport(),
        TABLE,
        PoolConfig(min_streams=1),
        recorder=store,
        metrics=SinkMetrics(CollectorRegistry()),
    )
    later = ZerobusSink(sink_pool, source=KEY.source, partition=KEY.partition, sink_id=KEY.sink)
    later.push(data.slice(60, 30), at=60)  # coverage [0, 30) and [60, 90): a hole at [30, 60)
    later.flush()
    sink_pool.close()
    changed = data.to_pylist()
    changed[75]["amount"] = -1.0
    yielded: list[ResumeSlice] = []
    with pytest.raises(ResumeMismatchError, match=r"\[60, 90\)"):
        for piece in resume_slices(
            store.ranges(KEY),
            iter(pa.Table.from_pylist(changed, schema=data.schema).to_batches(max_chunksize=10)),
            digests=store.digests(KEY),
            table=TABLE,
        ):
            yielded.append(piece)
    assert yielded == []  # the hole's rows were held back, not sent
    assert positions(resume(store, iter(data.to_batches(max_chunksize=10)))) == list(range(30, 60))


def test_an_input_shorter_than_what_was_delivered_is_refused(store: CoverageStore) -> None:
    deliver(store, orders(0, 50), max_chunksize=50)
    with pytest.raises(ResumeMismatchError, match="has only 20 row"):
        resume(store, orders(0, 20))


def test_a_range_sent_again_without_resume_is_checked_against_its_latest_digest(
    store: CoverageStore,
) -> None:
    deliver(store, orders(0, 40), max_chunksize=40)
    deliver(store, orders(500, 40), max_chunksize=15)  # resume=False with another input: positions 0..39
    assert resume(store, orders(500, 60)) and positions(resume(store, orders(500, 60))) == list(range(40, 60))
    with pytest.raises(ResumeMismatchError):
        resume(store, orders(0, 60))


def kafka(offsets: list[int]) -> pa.Table:
    return pa.table({"kafka_offset": pa.array(offsets, pa.int64()), "payload": [f"m{o}" for o in offsets]})


def test_declared_offsets_are_checked_by_offset_in_any_order_and_batching(store: CoverageStore) -> None:
    offsets = [o for o in range(1_000, 1_300) if o % 7 != 3]  # compaction gaps
    topic = kafka(offsets)
    deliver(store, topic.slice(0, 150), max_chunksize=40, offset_column="kafka_offset")
    assert any(d.runs for d in store.digests(KEY))
    shuffled = topic.take(random.Random(3).sample(range(len(offsets)), len(offsets)))
    pieces = resume(store, iter(shuffled.to_batches(max_chunksize=33)), offset_column="kafka_offset")
    sent = sorted(o for p in pieces for o in p.batch.column("kafka_offset").to_pylist())
    assert sent == offsets[150:]
    retained = topic.slice(60)  # retention dropped the oldest offsets: absent rows are not a change
    pieces = resume(store, retained, offset_column="kafka_offset")
    assert sorted(o for p in pieces for o in p.batch.column("kafka_offset").to_pylist()) == offsets[150:]
    rewritten = topic.to_pylist()
    rewritten[42]["payload"] = "another message at a delivered offset"
    with pytest.raises(ResumeMismatchError, match="offsets"):
        resume(store, pa.Table.from_pylist(rewritten, schema=topic.schema), offset_column="kafka_offset")


def test_a_digest_of_another_algorithm_is_not_compared(
    store: CoverageStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.record_delivered(
        [(KEY, OffsetRange(0, 10))],
        [RangeDigest(KEY, OffsetRange(0, 10), None, 10, b"\0" * 32, algorithm="future-v9")],
    )
    with caplog.at_level(logging.WARNING):
        assert positions(resume(store, orders(0, 12))) == [10, 11]
    assert "another algorithm" in caplog.text


@pytest.mark.parametrize("offset_column", [None, "order_id"])
def test_a_digest_an_earlier_release_stored_is_still_checked(
    store: CoverageStore, offset_column: str | None
) -> None:
    """A coverage cache written before the algorithm changed: its ``sha256/arrow-ipc-v1`` records are
    verified with that algorithm on resume, not skipped."""
    delivered = orders(0, 40)
    spans = [OffsetRange(0, 25), OffsetRange(25, 40)]
    store.record_delivered(
        [(KEY, span) for span in spans],
        [
            RangeDigest(
                KEY,
                span,
                None,
                len(span),
                rows_digest(delivered.slice(span.start, len(span)), offset_column, SHA256_IPC_V1),
                algorithm=SHA256_IPC_V1,
            )
            for span in spans
        ],
    )
    assert {d.algorithm for d in store.digests(KEY)} == {SHA256_IPC_V1}
    kw = {} if offset_column is None else {"offset_column": offset_column}
    assert positions(resume(store, orders(0, 50).to_batches(max_chunksize=7), **kw)) == list(range(40, 50))
    changed = orders(0, 50).to_pylist()
    changed[30]["amount"] = -1.0
    with pytest.raises(ResumeMismatchError, match=r"\[25, 40\)"):
        resume(store, pa.Table.from_pylist(changed, schema=delivered.schema), **kw)


def test_the_hold_back_is_bounded_and_says_what_was_already_sent(
    store: CoverageStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Past ``hold_back_rows`` the held rows go out (once each) while checking goes on."""
    data = orders(0, 90)
    deliver(store, data.slice(0, 10), max_chunksize=10)
    pool = StreamPool(
        MemoryTransport(),
        TABLE,
        PoolConfig(min_streams=1),
        recorder=store,
        metrics=SinkMetrics(CollectorRegistry()),
    )
    later = ZerobusSink(pool, source=KEY.source, partition=KEY.partition, sink_id=KEY.sink)
    later.push(data.slice(70, 20), at=70)  # coverage [0, 10) and [70, 90): a 60-row hole
    later.flush()
    pool.close()

    with caplog.at_level(logging.WARNING):
        same = list(
            resume_slices(
                store.ranges(KEY),
                iter(data.to_batches(max_chunksize=10)),
                digests=store.digests(KEY),
                hold_back_rows=25,
            )
        )
    assert positions(same) == list(range(10, 70))  # every hole row once, none twice
    assert "held back" in caplog.text

    changed = data.to_pylist()
    changed[80]["customer"] = "someone else"
    yielded: list[ResumeSlice] = []
    with pytest.raises(ResumeMismatchError) as failure:
        for piece in resume_slices(
            store.ranges(KEY),
            iter(pa.Table.from_pylist(changed, schema=data.schema).to_batches(max_chunksize=10)),
            digests=store.digests(KEY),
            table=TABLE,
            hold_back_rows=25,
        ):
            yielded.append(piece)
    assert positions(yielded) == list(range(10, 70))
    assert "60 row(s) at positions never delivered before were already sent" in str(failure.value)


def test_a_range_read_from_files_with_other_metadata_and_nullability_still_matches(
    store: CoverageStore,
) -> None:
    data = orders(0, 60)
    deliver(store, data.slice(0, 40), max_chunksize=40)
    first, second = data.slice(0, 25).to_batches()[0], data.slice(25).to_batches()[0]
    strict = pa.schema([pa.field(f.name, f.type, nullable=f.name != "order_id") for f in data.schema])
    from_file_1 = first.replace_schema_metadata({"writer": "file-1"})
    from_file_2 = pa.RecordBatch.from_arrays(
        second.columns, schema=strict.with_metadata({"writer": "file-2"})
    )
    assert positions(resume(store, iter([from_file_1, from_file_2]))) == list(range(40, 60))
