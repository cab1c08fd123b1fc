"""Resume refuses a changed input, end to end: official SDK, embedded emulator, Delta, SQLite coverage.

The first try delivers part of an input; the retry's input differs at delivered positions (a file
that sorts first joined a glob, an unstable SQL order). The retry must fail before sending anything:
the table and coverage stay exactly as the first try left them.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from zerobus_orchestration.errors import ResumeMismatchError, ZerobusOrchestrationError
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import DEFAULT_SINK_ID, ZerobusRuntime, source_tag
from zerobus_orchestration.tables import table_uri

TABLE = "main.raw.orders_integrity"
SOURCE, PARTITION = "landing/orders", "2026-11-30"


def orders(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": pa.array([f"c{i % 17}" for i in range(start, start + n)]),
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def delta_count(rt: ZerobusRuntime) -> int:
    rt.delta_version(TABLE)  # commit the emulator's WAL
    return int(DeltaTable(table_uri(rt.config.warehouse, TABLE)).to_pyarrow_table().num_rows)


def coverage_state(rt: ZerobusRuntime) -> tuple[object, ...]:
    key = CoverageKey(DEFAULT_SINK_ID, source_tag(SOURCE, PARTITION), PARTITION)
    store = rt.coverage(TABLE)
    return store.ranges(key), store.digests(key)


def test_the_same_input_batched_differently_resumes_and_skips(runtime: ZerobusRuntime) -> None:
    data = orders(0, 3_000)
    first = runtime.write(TABLE, data.slice(0, 1_800), source=SOURCE, partition=PARTITION)
    assert first.rows_written == 1_800
    _, digests = coverage_state(runtime)
    assert digests  # recorded by the ack lane beside each delivered range
    retry = runtime.write(TABLE, data.to_reader(max_chunksize=700), source=SOURCE, partition=PARTITION)
    assert (retry.rows_written, retry.rows_skipped) == (1_200, 1_800)
    assert delta_count(runtime) == 3_000
    assert runtime.verify(TABLE, source=SOURCE, partition=PARTITION).duplicate_count == 0


def test_a_file_that_sorts_first_fails_the_retry_before_anything_is_sent(runtime: ZerobusRuntime) -> None:
    b, c = orders(10_000, 2_500), orders(20_000, 1_500)
    runtime.write(TABLE, b.to_reader(max_chunksize=1_000), source=SOURCE, partition=PARTITION)
    before = coverage_state(runtime)
    a = orders(0, 2_000)
    glob = pa.concat_tables([a, b, c])  # the retry's glob: a, b, c in sorted path order
    with pytest.raises(ResumeMismatchError) as failure:
        runtime.write(TABLE, glob.to_reader(max_chunksize=1_000), source=SOURCE, partition=PARTITION)
    assert isinstance(failure.value, ZerobusOrchestrationError)
    message = str(failure.value)
    for part in (TABLE, repr(SOURCE), repr(PARTITION), "[0, 1000)", "Nothing was sent", "new partition"):
        assert part in message
    assert "resume=False" in message and "--no-resume" in message
    assert delta_count(runtime) == 2_500  # a's rows were not skipped as "delivered", b's not re-sent
    assert coverage_state(runtime) == before
    # A way out the message names: a new partition sends the whole input as its own rows.
    fresh = runtime.write(TABLE, glob, source=SOURCE, partition=PARTITION + "-retry")
    assert (fresh.rows_written, fresh.rows_skipped) == (6_000, 0)


def test_reordered_rows_of_an_unstable_query_are_detected(runtime: ZerobusRuntime) -> None:
    data = orders(0, 2_000)
    runtime.write(TABLE, data.slice(0, 1_200), source=SOURCE, partition=PARTITION)
    before = coverage_state(runtime)
    unstable = data.take(list(range(1_000, 1_100)) + list(range(0, 1_000)) + list(range(1_100, 2_000)))
    with pytest.raises(ResumeMismatchError) as failure:
        runtime.write(TABLE, unstable, source=SOURCE, partition=PARTITION)
    assert failure.value.span == OffsetRange(0, 1_200)
    assert delta_count(runtime) == 1_200
    assert coverage_state(runtime) == before
