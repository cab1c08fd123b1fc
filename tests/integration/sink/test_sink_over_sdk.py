"""``ZerobusSink`` / ``StreamPool`` over ``SdkTransport`` into the emulator: what lands in Delta is what was pushed.

Each test drives the official SDK through the sink core, forces materialisation, and compares the Delta
table with the pushed data row for row, reserved ``_twg_*`` columns included.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.integration_env import (
    FAST_POOL,
    TABLE,
    PoolFactory,
    delta_rows,
    sdk_transport,
    start_emulator,
    wait_until,
)
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import EMIT_TS, OFFSET, RESERVED_NAMES, SOURCE
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.transport.sdk import SdkTransport

pytestmark = pytest.mark.integration

SOURCE_ID = "integration/test"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def payload(start: int, count: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "name": pc.cast(ids, pa.string()),
            "score": pc.divide(pc.cast(ids, pa.float64()), 3.0),
            "flag": pc.equal(pc.bit_wise_and(ids, 1), 0),
            "at": pa.array(
                [T0 + dt.timedelta(seconds=i) for i in range(start, start + count)], pa.timestamp("us", "UTC")
            ),
        }
    )


def payloads(batches: int, rows: int) -> list[pa.RecordBatch]:
    return [payload(i * rows, rows) for i in range(batches)]


def duplicated_rows(landed: pa.Table) -> int:
    return landed.num_rows - len(pc.unique(landed.column(OFFSET)))


def test_rows_in_delta_equal_rows_pushed(
    emulator: Emulator,
    transport: SdkTransport,
    gate: CatalogGate,
    coverage: CoverageStore,
    make_pool: PoolFactory,
) -> None:
    pool = make_pool(transport)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = payloads(12, 500)
    receipts = sink.send(pushed[:6])
    for batch in pushed[6:]:
        sink.push(batch)
    sink.flush(timeout=30)

    assert all(r.future.done() and r.future.exception() is None for r in receipts)
    expected = pa.Table.from_batches(pushed)
    health = pool.health()
    assert (health.submitted, health.delivered, health.pending) == (12, 12, 0)
    assert health.rows_delivered == expected.num_rows
    assert health.rebuilds == 0
    assert coverage.ranges(CoverageKey(pool.table, SOURCE_ID)) == (OffsetRange(0, expected.num_rows),)

    landed = delta_rows(emulator).sort_by(OFFSET)
    assert landed.num_rows == expected.num_rows
    assert set(RESERVED_NAMES) <= set(landed.column_names)
    assert landed.select(expected.column_names).equals(expected)  # every value, in push order
    assert landed.column(OFFSET).to_pylist() == list(range(expected.num_rows))
    assert pc.all(pc.equal(landed.column(SOURCE), SOURCE_ID)).as_py()
    assert landed.column(EMIT_TS).null_count == 0


def test_schema_evolution_reopens_the_streams(
    emulator: Emulator, transport: SdkTransport, gate: CatalogGate, make_pool: PoolFactory
) -> None:
    """A new column: the catalog adds it, the pool drains and re-opens its SDK streams with the new schema."""
    pool = make_pool(transport)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    before = payloads(3, 100)
    for batch in before:
        sink.push(batch)
    wider = payload(300, 100)
    wider = wider.append_column("note", pc.cast(wider.column("id"), pa.string()))
    sink.push(wider)
    sink.flush(timeout=30)

    landed = delta_rows(emulator).sort_by(OFFSET)
    assert landed.num_rows == 400
    assert landed.column("note").null_count == 300  # rows sent before the column existed
    assert landed.column("note").to_pylist()[300:] == [str(i) for i in range(300, 400)]


def test_batches_differing_only_in_metadata_share_the_streams(
    emulator: Emulator, transport: SdkTransport, gate: CatalogGate, make_pool: PoolFactory
) -> None:
    """pandas chunks carry their own schema metadata; the SDK demands the stream's exact schema. Without
    the transport relabelling them, each such batch read as a poisoned stream and the pool reopened
    streams in a loop."""
    pool = make_pool(transport)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = payloads(6, 100)
    for index, batch in enumerate(pushed):
        sink.push(batch.replace_schema_metadata({"pandas": f'{{"chunk": {index}}}'}))
    sink.flush(timeout=30)

    health = pool.health()
    assert health.rebuilds == 0 and health.poisoned == 0
    assert pool.open_attempts == pool.size
    landed = delta_rows(emulator).sort_by(OFFSET)
    assert landed.select(pushed[0].schema.names).equals(pa.Table.from_batches(pushed))


def test_poisoned_stream_is_rebuilt_and_every_row_lands(
    emulator: Emulator,
    transport: SdkTransport,
    gate: CatalogGate,
    coverage: CoverageStore,
    make_pool: PoolFactory,
    record_property: pytest.RecordProperty,
) -> None:
    """The emulator aborts a stream with INVALID_ARGUMENT mid-run, after durably writing batches it never
    acknowledged. The pool rebuilds it and re-submits the unacknowledged batches: at-least-once."""
    rows_per_batch, accepted_before_abort = 100, 5
    emulator.faults.add(
        FaultSpec(kind=FaultKind.WITHHOLD_ACKS, table=TABLE, protocol="arrow", after_batches=2)
    )
    emulator.faults.add(
        FaultSpec(
            kind=FaultKind.ABORT,
            table=TABLE,
            protocol="arrow",
            after_batches=accepted_before_abort,
            status="INVALID_ARGUMENT",
            message="injected poison",
        )
    )
    pool = make_pool(transport)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = payloads(24, rows_per_batch)
    sink.push(pushed[0])
    wait_until(lambda: pool.health().alive == pool.size, "every pool member open")
    for batch in pushed[1:]:  # round-robin: the faulted stream gets about half, well past the abort
        sink.push(batch)
    sink.flush(timeout=30)

    assert len(emulator.faults.fired) == 2, "both faults must have hit the first stream"
    # Both acted on it (not only handed to it): acks withheld after batch 2, then the poison status.
    assert emulator.faults.actions_of(FaultKind.WITHHOLD_ACKS), "the withhold fault never acted"
    aborts = emulator.faults.actions_of(FaultKind.ABORT)
    poisoned_at = f"ended the stream with INVALID_ARGUMENT at batch {accepted_before_abort + 1}"
    assert [a.detail for a in aborts] == [poisoned_at]
    health = pool.health()
    assert health.rebuilds == 1 and health.poisoned == 1
    assert health.failed_batches == 0 and health.pending == 0
    total = len(pushed) * rows_per_batch
    assert coverage.ranges(CoverageKey(pool.table, SOURCE_ID)) == (OffsetRange(0, total),)

    landed = delta_rows(emulator)
    assert set(landed.column(OFFSET).to_pylist()) == set(range(total))  # every pushed row, at least once
    duplicates = duplicated_rows(landed)
    record_property("duplicate_rows", duplicates)
    print(
        f"poison through the pool: {landed.num_rows} rows landed for {total} pushed, {duplicates} duplicates"
    )
    # Only batches the dead stream wrote durably but never acknowledged come twice: whole batches, at
    # most what it accepted before the abort, and identical copies (re-sent, not re-stamped).
    assert 0 < duplicates <= accepted_before_abort * rows_per_batch
    assert duplicates % rows_per_batch == 0
    assert (
        landed.group_by(OFFSET).aggregate([(EMIT_TS, "count_distinct")]).column(1).to_pylist() == [1] * total
    )
    payload_columns = pushed[0].schema.names
    assert landed.select(payload_columns).group_by(payload_columns).aggregate([]).num_rows == total


def test_concurrency_limit_keeps_sending_on_the_open_stream(
    warehouse: Path, gate: CatalogGate, coverage: CoverageStore, make_pool: PoolFactory
) -> None:
    """The service allows one stream per table; the pool asks for two, backs off on the refusals and
    delivers everything through the one it has."""
    emulator = start_emulator(str(warehouse), max_streams_per_table=1)
    pool = make_pool(sdk_transport(emulator), FAST_POOL)
    try:
        sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
        pushed = payloads(10, 50)
        sink.push(pushed[0])
        wait_until(lambda: pool.concurrency_rejects >= 1, "a refused second stream")
        for batch in pushed[1:]:
            sink.push(batch)
        sink.flush(timeout=30)
        health = pool.health()
        assert health.alive == 1 and health.delivered == len(pushed)
        assert emulator.open_streams(TABLE) == 1
        landed = delta_rows(emulator)
        assert sorted(landed.column(OFFSET).to_pylist()) == list(range(500))
        assert coverage.ranges(CoverageKey(pool.table, SOURCE_ID)) == (OffsetRange(0, 500),)
    finally:
        pool.close(timeout=10)  # before the emulator goes away
        emulator.stop()
