"""The sink's core rules over the official SDK against the emulator, each with the fault that tests it.

The same rules have fast fake-transport tests beside them (tests/unit/zerobus_orchestration/sink/:
``test_ack_lane.py`` coalescing and exactly-once properties, ``test_pool.py``, ``test_submit_retry.py``);
these prove them on the real path: the SDK's own offsets, acknowledgements, reconnects and replays.

- One durability wait acknowledges many batches under load (coalesce ratio well over 1).
- Each confirmation fires exactly once, through an SDK reconnect (replay) and a pool rebuild (re-submit).
- A submit the SDK refuses is retried on a rebuilt stream, never passed to the writer.
- Coverage lags the table, never leads it, with acknowledgements held *before* the batch is durable.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from prometheus_client import CollectorRegistry

from tests.support.integration_env import (
    FAST_POOL,
    TABLE,
    delta_rows,
    sdk_transport,
    start_emulator,
    wait_until,
)
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.digest import RangeDigest
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.pool import stable_index

pytestmark = pytest.mark.integration

SOURCE_ID = "integration/rules"
KEY = CoverageKey(TABLE, SOURCE_ID)


@pytest.fixture
def emulator(warehouse: Path) -> Iterator[Emulator]:
    """Streams throttled to 8 MB/s each, so under load the acknowledgements trail the pusher."""
    emu = start_emulator(str(warehouse), per_stream_mb_s=8.0)
    yield emu
    emu.stop()


class CountingStore:
    """The real coverage store, counting how often each (key, span) is recorded."""

    def __init__(self, store: CoverageStore) -> None:
        self.store = store
        self.counts: Counter[tuple[CoverageKey, OffsetRange]] = Counter()
        self._lock = threading.Lock()

    def _count(self, items: list[tuple[CoverageKey, OffsetRange]]) -> None:
        with self._lock:
            self.counts.update(items)

    def record(self, key: CoverageKey, span: OffsetRange) -> None:
        self.record_many([(key, span)])

    def record_many(self, items: Iterable[tuple[CoverageKey, OffsetRange]]) -> None:
        listed = list(items)
        self._count(listed)
        self.store.record_many(listed)

    def record_delivered(
        self, items: Iterable[tuple[CoverageKey, OffsetRange]], digests: Iterable[RangeDigest]
    ) -> None:
        listed = list(items)
        self._count(listed)
        self.store.record_delivered(listed, digests)


def batch(i: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})


def open_pool(emulator: Emulator, recorder: object, config: PoolConfig = FAST_POOL) -> StreamPool:
    return StreamPool(
        sdk_transport(emulator),
        TABLE,
        config,
        recorder=recorder,  # type: ignore[arg-type]
        metrics=SinkMetrics(CollectorRegistry()),
        seed=7,
    )


def every_position_landed(emulator: Emulator, total: int) -> None:
    """Each of ``total`` positions is in the table (a replay after a reconnect may add duplicates)."""
    landed = delta_rows(emulator)
    assert sorted(pc.unique(landed.column(OFFSET)).to_pylist()) == list(range(total))


def key_for(pool: StreamPool, member: int) -> str:
    return next(k for k in (f"k{i}" for i in range(1000)) if stable_index(k, pool.size) == member)


def test_one_durability_wait_acknowledges_many_batches_under_load(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore
) -> None:
    pool = open_pool(emulator, coverage)
    try:
        sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
        batches, rows = 400, 500
        sink.push([batch(i, rows) for i in range(batches)])
        sink.flush(timeout=120)
        waits = sum(
            pool.metrics.sample(
                "zerobus_ack_coalesce_ratio_count", {"table": TABLE, "stream": str(i), "lane": "raw"}
            )
            or 0
            for i in range(pool.size)
        )
        confirmed = sum(
            pool.metrics.sample(
                "zerobus_ack_coalesce_ratio_sum", {"table": TABLE, "stream": str(i), "lane": "raw"}
            )
            or 0
            for i in range(pool.size)
        )
        assert confirmed == batches and waits > 0
        assert confirmed / waits >= 4, f"{confirmed} batches confirmed by {waits} waits"
        health = pool.health()
        assert health.coalesce_ratio_mean is not None and health.coalesce_ratio_mean >= 4
        assert all(s.delivered > 0 for s in health.streams)  # both streams carried the load
        assert coverage.ranges(KEY) == (OffsetRange(0, batches * rows),)
    finally:
        pool.close(timeout=30)


def test_each_confirmation_fires_once_through_an_sdk_replay_and_a_pool_rebuild(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore
) -> None:
    # Member 0's stream is cut (UNAVAILABLE): the SDK reconnects by itself and replays what was not
    # acknowledged. Member 1's stream is poisoned (INVALID_ARGUMENT): the SDK gives up, the pool rebuilds
    # it and re-submits. Either way every batch's range must be recorded exactly once.
    emulator.faults.add(
        FaultSpec(kind=FaultKind.ABORT, table=TABLE, protocol="arrow", stream=0, after_batches=3)
    )
    emulator.faults.add(
        FaultSpec(
            kind=FaultKind.ABORT,
            table=TABLE,
            protocol="arrow",
            stream=1,
            after_batches=4,
            status="INVALID_ARGUMENT",
        )
    )
    counting = CountingStore(coverage)
    pool = open_pool(emulator, counting)
    try:
        sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
        batches, rows = 40, 200
        receipts = sink.send([batch(i, rows) for i in range(batches)])
        sink.flush(timeout=60)
        acted = sorted(a.detail for a in emulator.faults.actions_of(FaultKind.ABORT))
        assert len(acted) == 2 and any("UNAVAILABLE" in a for a in acted), acted
        assert pool.health().rebuilds >= 1  # the poisoned stream was rebuilt
        assert [r.durable(timeout=5) for r in receipts] == [r.span for r in receipts]
        spans = sorted(span for (_, span) in counting.counts)
        assert spans == sorted(r.span for r in receipts)
        assert [n for n in counting.counts.values() if n != 1] == []  # once each, never twice
        assert coverage.ranges(KEY) == (OffsetRange(0, batches * rows),)
        every_position_landed(emulator, batches * rows)
    finally:
        pool.close(timeout=30)


def test_a_submit_the_sdk_refuses_is_retried_on_a_rebuilt_stream(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore, caplog: pytest.LogCaptureFixture
) -> None:
    """SDK 1.10 never fails a submit while it reconnects by itself (observed: ``ingest_batch`` buffers
    through its recovery); once it gives a stream up, the next submit is refused ("Stream is closed").
    Here member 0's stream is asked to rotate and its reconnect is refused (UNAVAILABLE), with nothing in
    flight, so the SDK gives it up while it is idle and the next batch pinned to it is refused at submit.
    The pool must rebuild the stream and send the batch there; the writer never sees the refusal."""
    emulator.faults.add(
        FaultSpec(
            kind=FaultKind.ROTATE, table=TABLE, protocol="arrow", stream=0, after_batches=3, grace_ms=200
        )
    )
    # Connection 2 of the table: member 0's reconnect after the rotation (1 is member 1's first stream).
    emulator.faults.add(FaultSpec(kind=FaultKind.REJECT_OPEN, table=TABLE, protocol="arrow", stream=2))
    pool = open_pool(emulator, coverage)
    try:
        sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
        pinned = key_for(pool, 0)
        rows = 100
        for i in range(3):  # the third acknowledgement carries the rotation signal
            sink.push(batch(i, rows), key=pinned)
        sink.flush(timeout=30)
        wait_until(lambda: bool(emulator.faults.actions_of(FaultKind.REJECT_OPEN)), "the reconnect refused")
        given_up = pool.members[0].stream
        assert given_up is not None
        wait_until(lambda: given_up._inner.is_closed, "the SDK to give the stream up")
        with caplog.at_level("WARNING", logger="zerobus_orchestration.sink.pool"):
            for i in range(3, 6):
                sink.push(batch(i, rows), key=pinned)
            sink.flush(timeout=30)
        refused = [r.getMessage() for r in caplog.records if "submit poisoned a stream" in r.getMessage()]
        assert len(refused) == 1, [r.getMessage() for r in caplog.records]  # the fault acted at submit
        assert pool.health().rebuilds == 1 and pool.members[0].stream is not given_up
        assert coverage.ranges(KEY) == (OffsetRange(0, 6 * rows),)
        every_position_landed(emulator, 6 * rows)
    finally:
        pool.close(timeout=30)


def test_coverage_never_leads_the_table_while_a_batch_is_submitted_and_not_yet_durable(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore
) -> None:
    """The emulator holds batches written to its log but not yet fsync'd (so not acknowledged) for
    1.5 s. Each sample snapshots coverage, then commits what is durable to Delta and reads it: a sink
    that recorded coverage on submit, or on anything before the durable ack, would name rows Delta
    does not have. One stream, so no other stream's group commit makes the batches durable early."""
    emulator.faults.add(
        FaultSpec(
            kind=FaultKind.DELAY_DURABILITY,
            table=TABLE,
            protocol="arrow",
            stream=0,
            after_batches=2,
            delay_s=1.5,
        )
    )
    pool = open_pool(emulator, coverage, FAST_POOL.model_copy(update={"min_streams": 1}))
    try:
        sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
        batches, rows = 10, 1_000
        failures: list[BaseException] = []

        def write() -> None:
            try:
                sink.send([batch(i, rows) for i in range(batches)])
                sink.flush(timeout=60)
            except BaseException as exc:  # surfaced below
                failures.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        wait_until(lambda: pool.opened, "the first batch to create the table and open the pool")
        samples = in_window = 0
        while writer.is_alive() or samples < 3:
            covered = coverage.ranges(KEY)  # snapshot before the table is read
            health = pool.health()
            emulator.materialize_now(TABLE)  # commits every durable record, nothing more
            present = set(delta_rows(emulator).column(OFFSET).to_pylist()) if covered else set()
            leading = [s for s in covered if any(p not in present for p in range(s.start, s.end))]
            assert not leading, f"coverage leads the table: {leading}"
            samples += 1
            in_window += health.submitted > health.delivered
        writer.join()
        assert failures == []
        held = emulator.faults.actions_of(FaultKind.DELAY_DURABILITY)
        assert held and "durable through" in held[0].detail, "the durability fault never acted"
        assert in_window >= 3, f"only {in_window} of {samples} samples saw a batch submitted and not durable"
        assert coverage.ranges(KEY) == (OffsetRange(0, batches * rows),)  # it caught up after the ack
        every_position_landed(emulator, batches * rows)
    finally:
        pool.close(timeout=30)
