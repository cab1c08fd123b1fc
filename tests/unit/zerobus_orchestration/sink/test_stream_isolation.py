"""Per-stream isolation with the byte budget binding: a slow stream holds back only what is pinned to it.

Each stream owns a share of ``pool.max_inflight_bytes``; unkeyed pushes go to a stream with room, so one
stream whose acknowledgements stall spends its own share and nothing more. Before, the budget was one
per table: the stalled stream kept taking batches (its channel had room) until it held every byte, and
then every pusher of the table waited on it. The batches here are 8,000 bytes, so the budget binds
after a few of them (the older isolation test used 1-row batches, which never reach it).

The SDK's own cap on unacknowledged batches (``sdk.max_inflight_batches``, 1,000) is below the default
ack channel (4,096): a submit past it blocks inside ``ingest_batch`` while the pusher holds the stream's
lock. The in-memory transport reproduces that cap (``MemoryTransport(max_inflight_batches=...)``); the
pool must keep every stream under it. The same rules over the official SDK: tests/integration/sink/
test_isolation_over_sdk.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, CountingRecorder, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.confirmation import NoConfirm
from zerobus_orchestration.sink.pool import stable_index
from zerobus_orchestration.transport.memory import FaultPlan, LatencyModel, MemoryStream, MemoryTransport

BATCH = rows(0, 1_000)  # one int64 column: 8,000 bytes
ONE = BATCH.nbytes
WAITS = "zerobus_inflight_budget_waits_total"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def two_streams(metrics: SinkMetrics, transport: MemoryTransport, **config: object) -> StreamPool:
    settings = {"min_streams": 2, "ack_channel_capacity": 4096, "max_inflight_bytes": 8 * ONE, **config}
    pool = StreamPool(transport, TABLE, PoolConfig(**settings), metrics=metrics, seed=3)  # type: ignore[arg-type]
    pool.ensure_open(BATCH.schema)
    return pool


def member_of(pool: StreamPool, stream: MemoryStream) -> int:
    return next(s.index for s in pool.health().streams if s.stream_id == stream.stream_id)


def pushing(
    pool: StreamPool, batches: int, key: str | None = None
) -> tuple[threading.Thread, list[int], list[BaseException]]:
    """Submit ``batches`` batches on a thread; the members they went to, in order, and any error."""
    went: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(batches):
                went.append(pool.submit(BATCH, NoConfirm(), key=key, nbytes=ONE).member)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, went, errors


def test_a_stalled_stream_spends_only_its_share_and_unkeyed_pushes_go_on_the_other(
    metrics: SinkMetrics,
) -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.002))
    pool = two_streams(metrics, transport)
    stalled = transport.streams(TABLE)[0]
    stalled.hold_acks()
    slow = member_of(pool, stalled)
    thread, went, errors = pushing(pool, 60)  # 60 batches through a budget of 8: the budget binds
    thread.join(timeout=20)
    try:
        assert not thread.is_alive(), f"push stalled behind the held stream after {len(went)} batches"
        assert errors == []
        # The held stream took its share (4 batches of the 8) and nothing more; the rest went on.
        assert went.count(slow) == 4 and len(went) == 60
        held = pool.health().streams[slow]
        assert (held.inflight_bytes, held.inflight_bytes_limit) == (4 * ONE, 4 * ONE)
        assert pool.budget.in_flight <= 8 * ONE  # the table's total still bounds memory
    finally:
        stalled.release_acks()
    pool.flush(timeout=30)
    health = pool.health()
    assert health.delivered == health.submitted == 60 and health.inflight_bytes == 0
    pool.close()


def test_a_push_pinned_to_the_stalled_stream_waits_for_its_share_while_others_go_on(
    metrics: SinkMetrics,
) -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.002))
    pool = two_streams(metrics, transport)
    stalled = transport.streams(TABLE)[0]
    stalled.hold_acks()
    slow = member_of(pool, stalled)
    key = next(k for k in (f"k{i}" for i in range(100)) if stable_index(k, pool.size) == slow)
    keyed, keyed_went, keyed_errors = pushing(pool, 6, key=key)
    wait_for(lambda: pool.health().streams[slow].budget_waiting == 1, "the keyed push held at its share")
    free, free_went, free_errors = pushing(pool, 30)
    free.join(timeout=20)
    try:
        assert not free.is_alive() and free_errors == []
        assert keyed.is_alive() and keyed_went == [slow] * 4  # held at its own share, not failed
        assert set(free_went) == {1 - slow}  # the stalled stream's share was spent: nothing more on it
        labels = {"table": TABLE, "lane": "raw"}
        assert metrics.sample(WAITS, {**labels, "stream": str(slow)}) == 1  # the pinned wait, on its stream
    finally:
        stalled.release_acks()
    keyed.join(timeout=20)
    assert not keyed.is_alive() and keyed_errors == [] and keyed_went == [slow] * 6
    pool.flush(timeout=30)
    pool.close()


def test_a_stream_never_gets_more_pending_batches_than_the_sdks_cap(metrics: SinkMetrics) -> None:
    """No pusher blocks inside the transport while it holds a stream: the lane stops it at the cap."""
    transport = MemoryTransport(LatencyModel(base_s=0.002), max_inflight_batches=3)
    pool = two_streams(metrics, transport, max_inflight_bytes=1_000 * ONE)  # the budget never binds
    stalled = transport.streams(TABLE)[0]
    stalled.hold_acks()
    slow = member_of(pool, stalled)
    thread, went, errors = pushing(pool, 40)
    thread.join(timeout=20)
    try:
        assert not thread.is_alive(), f"a pusher waited inside the held stream after {len(went)} batches"
        assert errors == [] and went.count(slow) == 3
        assert [s.blocked_submits for s in transport.streams(TABLE)] == [0, 0]
        assert pool.health().streams[slow].pending == 3
    finally:
        stalled.release_acks()
    pool.flush(timeout=30)
    assert pool.health().delivered == 40
    pool.close()


def test_a_lane_failure_is_handled_while_another_streams_lock_is_held(metrics: SinkMetrics) -> None:
    """A lane that fails takes only its own member's lock: a pusher stuck on another stream (holding
    that stream's lock) must not delay the rebuild of this one."""
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.002), FaultPlan(poison_at={1: 2}))
    pool = StreamPool(
        transport,
        TABLE,
        PoolConfig(min_streams=2, rebuild_budget_s=10, open_backoff_initial_s=0.01, open_backoff_max_s=0.02),
        recorder=recorder,
        metrics=metrics,
        seed=3,
    )
    sink = ZerobusSink(pool, source="src")
    sink.push(rows(0, 1))
    poisoned = member_of(pool, transport.streams(TABLE)[1])
    other = pool.members[1 - poisoned]
    key = next(k for k in (f"k{i}" for i in range(100)) if stable_index(k, pool.size) == poisoned)
    with other.lock:  # what a pusher stuck inside the other stream's submit holds
        for i in range(1, 6):
            sink.push(rows(i, 1), key=key)  # reaches offset 2 on the poisoned stream
        wait_for(lambda: pool.health().rebuilds == 1, "the poisoned stream rebuilt while the other was held")
    sink.flush(timeout=30)
    assert recorder.covered() == 6 and recorder.recorded_twice() == []
    pool.close()


@pytest.mark.parametrize("streams", [1, 2, 4])
def test_the_shares_sum_to_the_budget(metrics: SinkMetrics, streams: int) -> None:
    pool = StreamPool(
        MemoryTransport(),
        TABLE,
        PoolConfig(min_streams=streams, max_inflight_bytes=1_000_003),
        metrics=metrics,
    )
    limits = [share.limit for share in pool.budget.shares]
    assert sum(limits) == 1_000_003 and max(limits) - min(limits) <= 1 and len(limits) == streams


class StuckSubmit:
    """A stream whose next ``submit`` waits until the test lets it go (a transport stuck mid-call)."""

    def __init__(self, inner: MemoryStream) -> None:
        self._inner = inner
        self.stuck = threading.Event()
        self.release = threading.Event()
        self.armed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def submit(self, batch: pa.RecordBatch) -> int:
        if self.armed:
            self.armed = False
            self.stuck.set()
            self.release.wait(30)
        return self._inner.submit(batch)


class StuckTransport(MemoryTransport):
    def __init__(self) -> None:
        super().__init__(LatencyModel(base_s=0.002))
        self.wrapped: list[StuckSubmit] = []

    def open_stream(self, table: str, schema: pa.Schema) -> StuckSubmit:  # type: ignore[override]
        stream = StuckSubmit(super().open_stream(table, schema))
        self.wrapped.append(stream)
        return stream


def test_an_unkeyed_push_does_not_queue_behind_a_submit_stuck_in_the_transport(metrics: SinkMetrics) -> None:
    """Should a submit still hang inside the transport (holding its stream), pushes free to go elsewhere
    take the other stream instead of waiting for it."""
    transport = StuckTransport()
    pool = two_streams(metrics, transport, max_inflight_bytes=1_000 * ONE)
    first = transport.wrapped[0]
    stuck_member = member_of(pool, first._inner)
    key = next(k for k in (f"k{i}" for i in range(100)) if stable_index(k, pool.size) == stuck_member)
    first.armed = True
    stuck, _, stuck_errors = pushing(pool, 1, key=key)
    assert first.stuck.wait(10)
    free, went, errors = pushing(pool, 20)
    free.join(timeout=20)
    try:
        assert not free.is_alive(), f"an unkeyed push waited behind the stuck submit after {len(went)}"
        assert errors == [] and set(went) == {1 - stuck_member}
    finally:
        first.release.set()
    stuck.join(timeout=10)
    assert stuck_errors == []
    pool.flush(timeout=30)
    assert pool.health().delivered == 21
    pool.close()
