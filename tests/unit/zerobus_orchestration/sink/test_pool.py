"""Stream pool: sizing, selection, poison -> bounded rebuild, concurrency rejects, graceful close."""

from __future__ import annotations

import itertools
import math
import threading
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.sink_helpers import TABLE, CountingRecorder, positions_landed, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    FatalTransportError,
    SinkClosedError,
    StreamPoisonedError,
)
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import OffsetRange
from zerobus_orchestration.sink import (
    CoverageNotRecordedError,
    DeliveryFailedError,
    PoisonedBatchError,
    StreamPool,
    SubmitFailedError,
    ZerobusSink,
)
from zerobus_orchestration.sink.confirmation import NoConfirm
from zerobus_orchestration.sink.pool import stable_index
from zerobus_orchestration.sink.supervisor import backoff_ceiling
from zerobus_orchestration.transport.memory import FaultPlan, LatencyModel, MemoryStream, MemoryTransport


def make(
    transport: MemoryTransport, metrics: SinkMetrics, recorder: CountingRecorder | None = None, **cfg: object
) -> tuple[StreamPool, ZerobusSink]:
    config = PoolConfig(**{"min_streams": 3, "ack_channel_capacity": 8, **cfg})  # type: ignore[arg-type]
    pool = StreamPool(transport, TABLE, config, recorder=recorder, metrics=metrics, seed=1)
    return pool, ZerobusSink(pool, source="src")


def test_pool_size_is_ceil_of_peak_over_ceiling_floored_at_min(metrics: SinkMetrics) -> None:
    sized = StreamPool(MemoryTransport(), TABLE, PoolConfig(peak_mb_s=250.0), metrics=metrics)
    floored = StreamPool(
        MemoryTransport(), TABLE, PoolConfig(peak_mb_s=250.0, min_streams=4), metrics=metrics
    )
    assert (sized.size, floored.size) == (math.ceil(250 / 100), 4)


def test_pool_opens_lazily_at_first_write_and_logs_size(
    metrics: SinkMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    transport = MemoryTransport()
    pool, sink = make(transport, metrics)
    assert transport.open_attempts == 0
    with caplog.at_level("INFO"):
        sink.push(rows(0, 3))
        sink.flush()
    assert "opening 3 stream(s)" in caplog.text
    pool.close()
    assert len(transport.streams(TABLE)) == 3


def test_round_robin_spreads_and_ordering_key_pins_one_stream(metrics: SinkMetrics) -> None:
    transport = MemoryTransport()
    pool, sink = make(transport, metrics)
    spread = sink.send([rows(i, 1) for i in range(9)])
    pinned = sink.send([rows(100 + i, 1) for i in range(9)], key="customer-42")
    sink.flush()
    assert sorted({r.member for r in spread}) == [0, 1, 2]
    assert {r.member for r in pinned} == {stable_index("customer-42", 3)}
    assert stable_index("customer-42", 3) == stable_index("customer-42", 3)
    pool.close()


def test_poison_rebuilds_within_budget_resubmits_and_other_members_keep_their_streams(
    metrics: SinkMetrics,
) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.002), FaultPlan(poison_at={0: 4}))
    pool, sink = make(transport, metrics, recorder)
    receipts = sink.send([rows(i * 10, 10) for i in range(60)])
    sink.flush()
    health = pool.health()
    assert health.rebuilds == 1 and health.poisoned == 1 and health.failed_batches == 0
    assert [s.stream_id for s in health.streams][1:] == ["mem-1", "mem-2"]  # untouched members
    assert health.streams[0].stream_id != "mem-0"
    assert (
        metrics.sample("zerobus_stream_rebuilds_total", {"table": TABLE, "stream": "0", "lane": "raw"}) == 1
    )
    assert (
        metrics.sample("zerobus_stream_rebuilds_total", {"table": TABLE, "stream": "1", "lane": "raw"})
        is None
    )
    # No offset re-advanced: every span recorded exactly once, delivered == submitted per member.
    assert recorder.recorded_twice() == []
    assert recorder.covered() == 600
    assert all(s.delivered == s.submitted for s in health.streams)
    assert all(r.future.result(timeout=5) == r.span for r in receipts)
    # At least once: every position landed; nothing acknowledged was lost.
    assert sorted(set(positions_landed(transport))) == list(range(600))
    pool.close()


def test_a_slow_stream_fills_only_its_own_channel_and_pushers_move_on(metrics: SinkMetrics) -> None:
    """Per-stream isolation: a stream whose acks crawl must not hold pushers while another has room."""
    slow_ack_s = 1.5
    transport = MemoryTransport(LatencyModel(base_s=0.005), FaultPlan(slow_streams={0: slow_ack_s / 0.005}))
    pool, sink = make(transport, metrics, min_streams=2, ack_channel_capacity=2)
    started = time.monotonic()
    receipts = sink.send([rows(i, 1) for i in range(20)])
    pushed_in = time.monotonic() - started
    slow = next(s.index for s in pool.health().streams if s.stream_id == "mem-0")
    assert sum(r.member == slow for r in receipts) <= 2  # only what fits its channel
    assert pushed_in < slow_ack_s, f"pushers waited {pushed_in:.2f}s on the slow stream"
    for receipt in receipts:
        if receipt.member != slow:
            assert receipt.future.result(timeout=slow_ack_s) == receipt.span
    pool.close()


class GatedTransport(MemoryTransport):
    """Opens after the first ``free_opens`` block until the test releases them (a slow rebuild)."""

    def __init__(self, free_opens: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.free_opens = free_opens
        self.release = threading.Event()
        self.blocked = threading.Event()

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        if self.open_attempts >= self.free_opens:
            self.blocked.set()
            self.release.wait(30)
        return super().open_stream(table, schema)


def test_other_members_serve_while_one_rebuilds(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = GatedTransport(3, latency=LatencyModel(base_s=0.001), faults=FaultPlan(poison_at={0: 0}))
    pool, sink = make(transport, metrics, recorder)
    first = sink.send([rows(i, 1) for i in range(3)])  # member 0's batch poisons its stream
    assert transport.blocked.wait(10)  # the rebuild is stuck opening a new stream
    assert pool.health().streams[0].rebuilding
    during = sink.send([rows(10 + i, 1) for i in range(10)])
    assert {r.member for r in during} == {1, 2}
    for receipt in during:  # confirmed durable while member 0 is still rebuilding
        assert receipt.future.result(timeout=10) == receipt.span
    assert not first[0].future.done()
    transport.release.set()
    sink.flush()
    assert first[0].future.result(timeout=5) == first[0].span
    assert recorder.recorded_twice() == [] and recorder.covered() == 13
    pool.close()


class RejectAfter(MemoryTransport):
    def __init__(self, free_opens: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.free_opens = free_opens
        self.attempts = 0

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        self.attempts += 1
        if self.attempts > self.free_opens:
            raise ConcurrencyRejectedError(f"{table}: RESOURCE_EXHAUSTED")
        return super().open_stream(table, schema)


def test_rebuild_that_cannot_finish_in_budget_fails_only_that_members_batches(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = RejectAfter(3, latency=LatencyModel(base_s=0.001), faults=FaultPlan(poison_at={0: 0}))
    pool, sink = make(
        transport,
        metrics,
        recorder,
        rebuild_budget_s=0.3,
        open_backoff_initial_s=0.02,
        open_backoff_max_s=0.05,
    )
    receipts = sink.send([rows(i, 1) for i in range(6)])
    with pytest.raises(DeliveryFailedError, match="not delivered"):
        sink.flush()
    failed = [r for r in receipts if r.member == 0]
    assert failed and all(r.future.exception(timeout=5) is not None for r in failed)
    delivered = [r for r in receipts if r.member != 0]
    assert all(r.future.result(timeout=5) == r.span for r in delivered)
    assert recorder.covered() == len(delivered)  # coverage never claims the lost batches
    health = pool.health()
    assert health.streams[0].failed and health.failed_batches == len(failed)
    late = sink.send(rows(100, 1))  # the pool keeps serving on the healthy members
    assert late[0].member != 0 and late[0].future.result(timeout=5) == late[0].span
    # A later write on the same long-lived pool is judged by its own batches, not the earlier loss.
    next_write = ZerobusSink(pool, source="next")
    assert next_write.send(rows(200, 1))[0].member != 0
    next_write.flush()
    with pytest.raises(DeliveryFailedError):
        pool.close()


def test_repeated_concurrency_rejects_back_off_and_data_flows_on_existing_members(
    metrics: SinkMetrics,
) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.002), FaultPlan(max_streams_per_table=1))
    initial, ceiling = 0.05, 0.2
    pool, sink = make(
        transport, metrics, recorder, open_backoff_initial_s=initial, open_backoff_max_s=ceiling
    )
    started = time.monotonic()
    for i in range(40):
        sink.push(rows(i * 5, 5))
        time.sleep(0.01)  # keep pushing for a while so the supervisor keeps retrying
    sink.flush()
    elapsed = time.monotonic() - started
    health = pool.health()
    assert health.alive == 1 and recorder.covered() == 200
    assert len(transport.streams(TABLE)) == 1
    # Bounded opens: one per backoff period at most (jittered to >= half the period), not a storm.
    doublings = math.ceil(math.log2(ceiling / initial))
    bound = 3 + doublings + elapsed / (initial * 0.5)
    assert transport.open_attempts <= bound, (transport.open_attempts, elapsed)
    assert pool.concurrency_rejects == transport.rejected_opens >= 1
    per_stream = [
        metrics.sample("zerobus_concurrency_rejects_total", {"table": TABLE, "stream": str(i), "lane": "raw"})
        for i in range(pool.size)
    ]
    assert sum(n or 0 for n in per_stream) == pool.concurrency_rejects
    pool.close()


def test_first_open_rejected_waits_out_backoff_then_writes(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(faults=FaultPlan(reject_first_opens=2))
    pool, sink = make(transport, metrics, min_streams=1, open_backoff_initial_s=0.01, open_backoff_max_s=0.02)
    receipt = sink.send(rows(0, 2))[0]
    assert receipt.future.result(timeout=10) == receipt.span
    assert pool.concurrency_rejects == 2
    pool.close()


def test_graceful_close_loses_no_confirmation(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel.around(0.02, seed=3))
    pool, sink = make(transport, metrics, recorder)
    receipts = sink.send([rows(i * 4, 4) for i in range(100)])
    assert not all(r.future.done() for r in receipts)  # still in flight when close starts
    pool.close()
    assert all(r.future.result(timeout=0) == r.span for r in receipts)
    assert recorder.covered() == 400 and recorder.recorded_twice() == []
    assert transport.durable_rows(TABLE) == 400
    assert pool.health().pending == 0
    with pytest.raises(SinkClosedError):
        sink.push(rows(1000, 1))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    poison=st.dictionaries(st.integers(0, 5), st.integers(0, 12), max_size=3),
    transient=st.dictionaries(st.integers(0, 5), st.integers(1, 3), max_size=3),
    seed=st.integers(0, 1000),
    batches=st.integers(1, 40),
)
def test_each_confirmation_fires_exactly_once_across_retries_and_rebuilds(
    poison: dict[int, int], transient: dict[int, int], seed: int, batches: int
) -> None:
    recorder = CountingRecorder()
    faults = FaultPlan(poison_at=poison, transient_wait_failures=transient, seed=seed)
    transport = MemoryTransport(LatencyModel(base_s=0.0005, jitter_s=0.002, seed=seed), faults)
    metrics = SinkMetrics(CollectorRegistry())
    pool, sink = make(transport, metrics, recorder, open_backoff_initial_s=0.01)
    receipts = sink.send([rows(i * 3, 3) for i in range(batches)])
    pool.close(timeout=30)
    assert recorder.recorded_twice() == []
    assert recorder.spans() == [r.span for r in receipts]
    assert all(r.future.result(timeout=0) == r.span for r in receipts)
    assert sorted(set(positions_landed(transport))) == list(range(batches * 3))
    health = pool.health()
    assert health.delivered == health.submitted == batches


def test_schema_change_drains_and_reopens_every_member_with_the_new_schema(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.002))
    pool, sink = make(transport, metrics, recorder, min_streams=2)
    sink.push(rows(0, 2))
    sink.push(pa.record_batch({"v": pa.array([2, 3], pa.int64()), "extra": ["a", "b"]}))
    sink.flush()
    # The supervisor re-opens the member that carried no batch of the new schema in the background
    # (the flush waits only for the batches sent): give it a bounded moment under a loaded machine.
    deadline = time.monotonic() + 10
    while len(transport.streams(TABLE)) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    streams = transport.streams(TABLE)
    assert len(streams) == 4  # two members, each re-opened once for the new schema
    assert all("extra" in s.schema.names for s in streams[2:])
    assert recorder.covered() == 4 and pool.health().rebuilds == 0  # a re-open is not a rebuild
    pool.close()


class FailingRecorder(CountingRecorder):
    def record_many(self, items: object) -> None:
        raise OSError("coverage store unavailable")


def test_a_failed_coverage_record_fails_the_write_and_the_pool_health(metrics: SinkMetrics) -> None:
    """Durable but unrecorded rows are lost coverage: the flush says so and health is not healthy."""
    pool, sink = make(MemoryTransport(), metrics, FailingRecorder())
    for i in range(4):
        sink.push(rows(i, 1))
    with pytest.raises(CoverageNotRecordedError) as failure:
        sink.flush()
    message = str(failure.value)
    assert "4 batch(es)" in message and "coverage store unavailable" in message
    assert TABLE in message and "zerobus.coverage.location" in message
    later = ZerobusSink(pool, source="later", confirm=False)  # a later write is not failed for it
    later.push(rows(10, 1))
    later.flush()
    health = pool.health()
    assert health.delivered == 5 and health.confirm_errors == 4
    assert not health.healthy and health.as_dict()["confirm_errors"] == 4
    pool.close()


# -- first open, reopen storms, supervisor survival -----------------------------------------------------


class SlowToRefuse(MemoryTransport):
    """One stream per table; a second open is refused only after a while (a real service round trip)."""

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        if self.streams(table):
            self._open_attempts += 1
            time.sleep(0.3)  # the first write is already waiting when the refusal arrives
            raise ConcurrencyRejectedError(f"{table}: RESOURCE_EXHAUSTED: too many concurrent streams")
        return super().open_stream(table, schema)


def test_first_write_goes_ahead_as_soon_as_the_service_refuses_a_member(metrics: SinkMetrics) -> None:
    """The service allows one stream; the first write must not wait out ``healthy_member_wait_s`` for the
    refused member (regression: ``_back_off`` did not wake ``_await_first_open``)."""
    transport = SlowToRefuse()
    pool, sink = make(
        transport,
        metrics,
        min_streams=2,
        healthy_member_wait_s=8.0,
        open_backoff_initial_s=30.0,  # the refused member stays refused for the whole test
        open_backoff_max_s=60.0,
    )
    pushed = threading.Event()

    def first_write() -> None:
        sink.push(rows(0, 2))
        pushed.set()

    threading.Thread(target=first_write, daemon=True).start()
    assert pushed.wait(4.0), "the first write waited for the refused member instead of going ahead"
    sink.flush()
    assert pool.concurrency_rejects == 1 and pool.health().alive == 1
    pool.close()


class PoisonOnSubmit(MemoryTransport):
    """Streams whose ``submit`` raises StreamPoisonedError for any batch holding ``v == -1``; after
    ``max_opens`` opens it refuses for good, so a regression fails the test instead of storming forever."""

    def __init__(self, max_opens: int = 60, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.max_opens = max_opens

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        if self.open_attempts >= self.max_opens:
            raise FatalTransportError(f"{table}: test transport: too many opens ({self.open_attempts})")
        stream = super().open_stream(table, schema)
        submit = stream.submit

        def refusing_submit(batch: pa.RecordBatch) -> int:
            if -1 in batch.column("v").to_pylist():
                raise StreamPoisonedError(f"{table}: INVALID_ARGUMENT: stream poisoned by this batch")
            return submit(batch)

        stream.submit = refusing_submit  # type: ignore[method-assign]
        return stream


def test_a_batch_that_poisons_every_stream_at_submit_is_refused_after_bounded_rebuilds(
    metrics: SinkMetrics,
) -> None:
    recorder = CountingRecorder()
    transport = PoisonOnSubmit(latency=LatencyModel(base_s=0.001))
    attempts = 2  # pool.poisoned_submit_attempts (default 3)
    pool, sink = make(
        transport,
        metrics,
        recorder,
        open_backoff_initial_s=0.01,
        open_backoff_max_s=0.02,
        poisoned_submit_attempts=attempts,
    )
    sink.push(rows(0, 3))
    sink.flush()
    opens_before = transport.open_attempts
    with pytest.raises(SubmitFailedError, match=rf"{TABLE}: submitting one batch poisoned 2 stream"):
        sink.push(pa.record_batch({"v": pa.array([7, -1], pa.int64())}))
    # One rebuild per poisoned attempt (the supervisor does the last one in the background), bounded,
    # each counted in health and in the metrics.
    wait_for(lambda: pool.health().rebuilds == attempts)
    time.sleep(0.1)  # room for a storm to show, if there were one
    assert transport.open_attempts - opens_before == attempts
    health = pool.health()
    assert health.rebuilds == attempts
    rebuild_samples = [
        metrics.sample("zerobus_stream_rebuilds_total", {"table": TABLE, "stream": str(i), "lane": "raw"})
        or 0
        for i in range(pool.size)
    ]
    assert sum(rebuild_samples) == attempts
    sink.push(rows(10, 3))  # the pool keeps serving other batches
    sink.flush()
    assert recorder.covered() == 6 and health.failed_batches == 0
    pool.close()


def test_a_refused_batch_is_not_counted_as_submitted_and_leaves_no_position_hole(
    metrics: SinkMetrics,
) -> None:
    recorder = CountingRecorder()
    transport = PoisonOnSubmit(latency=LatencyModel(base_s=0.001))
    pool, sink = make(transport, metrics, recorder, open_backoff_initial_s=0.01, open_backoff_max_s=0.02)
    sink.push(rows(0, 3))
    with pytest.raises(SubmitFailedError):
        sink.push(pa.record_batch({"v": pa.array([7, -1], pa.int64())}))
    info, span = sink.finish()
    assert (info.batches, info.rows, span) == (1, 3, OffsetRange(0, 3))  # only what was submitted
    sink.push(rows(10, 3))  # takes the positions the refused batch never used
    sink.flush()
    assert recorder.spans() == [OffsetRange(0, 3), OffsetRange(3, 6)]
    pool.close()


class AlwaysRefuse(MemoryTransport):
    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        self._open_attempts += 1
        raise ConcurrencyRejectedError(f"{table}: RESOURCE_EXHAUSTED: no streams for you")


def test_supervisor_survives_more_than_a_thousand_consecutive_refusals(metrics: SinkMetrics) -> None:
    """``2 ** 1024`` used to overflow the backoff computation and kill the supervisor thread."""
    transport = AlwaysRefuse()
    pool = StreamPool(
        transport,
        TABLE,
        PoolConfig(
            min_streams=1, healthy_member_wait_s=0.05, open_backoff_initial_s=1e-6, open_backoff_max_s=1e-5
        ),
        metrics=metrics,
        seed=1,
    )
    pool.ensure_open(rows(0, 1).schema)
    deadline = time.monotonic() + 20
    while transport.open_attempts < 1200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert transport.open_attempts >= 1200, f"supervisor stopped after {transport.open_attempts} opens"
    assert pool._supervisor is not None and pool._supervisor.is_alive()
    assert pool.health().supervisor_errors == 0
    pool.close()
    assert backoff_ceiling(0.5, 30.0, 100_000) == 30.0


def test_unexpected_supervisor_error_is_logged_counted_and_survived(
    metrics: SinkMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = CountingRecorder()
    transport = MemoryTransport()
    pool, sink = make(
        transport,
        metrics,
        recorder,
        min_streams=1,
        healthy_member_wait_s=5.0,
        open_backoff_initial_s=0.01,
    )
    attach = pool._supervisor._attach
    calls = []

    def attach_failing_once(member: object, stream: MemoryStream, schema: pa.Schema) -> bool:
        calls.append(member)
        if len(calls) == 1:
            stream.close()
            raise RuntimeError("injected supervisor bug")
        return attach(member, stream, schema)  # type: ignore[arg-type]

    pool._supervisor._attach = attach_failing_once  # type: ignore[method-assign]
    with caplog.at_level("ERROR"):
        sink.push(rows(0, 4))
        sink.flush()
    assert recorder.covered() == 4
    health = pool.health()
    assert health.supervisor_errors == 1
    assert health.last_supervisor_error == "RuntimeError: injected supervisor bug"
    assert health.as_dict()["supervisor_errors"] == 1
    assert "injected supervisor bug" in caplog.text
    pool.close()


def test_metadata_only_schema_change_through_ensure_open_reopens_with_the_exact_schema(
    metrics: SinkMetrics,
) -> None:
    """The SDK compares metadata too; the pool's streams must carry exactly the schema it was given."""
    transport = MemoryTransport()
    pool = StreamPool(transport, TABLE, PoolConfig(min_streams=1), metrics=metrics, seed=1)
    schema = rows(0, 1).schema
    pool.ensure_open(schema)
    pool.ensure_open(schema)  # identical: nothing re-opened
    assert transport.open_attempts == 1
    labelled = schema.with_metadata({"pandas": '{"chunk": 1}'})
    pool.ensure_open(labelled)
    wait_for(lambda: transport.open_attempts == 2)
    assert pool.schema is not None and pool.schema.equals(labelled, check_metadata=True)
    assert transport.streams(TABLE)[-1].schema.equals(labelled, check_metadata=True)
    pool.close()


def wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


class RefuseWhileSet(MemoryTransport):
    """Refuses every open while ``refusing`` is set (a service outage longer than the rebuild budget)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.refusing = threading.Event()

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        if self.refusing.is_set():
            self._open_attempts += 1
            raise ConcurrencyRejectedError(f"{table}: RESOURCE_EXHAUSTED: no streams for you")
        return super().open_stream(table, schema)


def test_a_member_failed_by_a_refusal_outage_is_reopened_after_its_cooldown(metrics: SinkMetrics) -> None:
    """With pool size 1, one outage longer than the rebuild budget must not fail every later write."""
    recorder = CountingRecorder()
    transport = RefuseWhileSet(latency=LatencyModel(base_s=0.001), faults=FaultPlan(poison_at={0: 1}))
    cooldown = 0.3
    pool, sink = make(
        transport,
        metrics,
        recorder,
        min_streams=1,
        rebuild_budget_s=0.2,
        open_backoff_initial_s=0.02,
        open_backoff_max_s=0.05,
        failed_member_cooldown_s=cooldown,
        healthy_member_wait_s=10.0,
    )
    first = sink.send(rows(0, 1))[0]
    sink.flush()
    transport.refusing.set()
    lost = sink.send(rows(1, 1))[0]  # poisons the only stream; every rebuild open is refused
    with pytest.raises(DeliveryFailedError, match="not delivered"):
        sink.flush()
    assert lost.future.exception(timeout=5) is not None
    assert pool.health().streams[0].failed
    opens_when_failed = transport.open_attempts
    # Bounded by the shared backoff while refusing: no storm (budget / (initial * 0.5 jitter) + slack).
    assert opens_when_failed <= 2 + 0.2 / 0.01, opens_when_failed
    health = pool.health()
    assert health.streams[0].reopen_in_s is not None and health.reopens == 0
    time.sleep(cooldown / 3)
    assert transport.open_attempts == opens_when_failed  # nothing opened during the cool-down
    transport.refusing.clear()

    later = ZerobusSink(pool, source="later")
    receipt = later.send(rows(10, 2))[0]  # waits for the re-open instead of failing fast
    later.flush()  # its own batch delivered: the earlier loss is not this write's
    assert receipt.future.result(timeout=5) == receipt.span
    assert transport.open_attempts == opens_when_failed + 1  # exactly one re-open
    health = pool.health()
    assert health.alive == 1 and health.reopens == 1 and not health.streams[0].failed
    assert health.failed_batches == 1  # history: the lost batch stays reported
    assert health.pending == 0 and health.streams[0].delivered == 2
    assert recorder.spans() == [first.span, receipt.span]  # coverage never claimed the lost batch
    with pytest.raises(DeliveryFailedError):
        pool.close()


def test_a_fatal_member_failure_is_never_reopened(metrics: SinkMetrics) -> None:
    transport = MemoryTransport()
    pool, sink = make(transport, metrics, min_streams=1, failed_member_cooldown_s=0.01)
    pool.ensure_open(rows(0, 1).schema)
    member = pool._members[0]
    pool._supervisor.fail_member(member, FatalTransportError("PERMISSION_DENIED"))
    time.sleep(0.2)
    assert transport.open_attempts == 1 and pool.health().streams[0].failed
    assert pool.health().streams[0].reopen_in_s is None
    with pytest.raises(Exception, match="failed beyond repair"):
        sink.send(rows(0, 1))
    pool.close()


class BlockingOpen(MemoryTransport):
    """The ``block_at``-th open blocks until ``release`` is set, so a test can change schema meanwhile."""

    def __init__(self, block_at: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.block_at = block_at
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        self.calls += 1
        if self.calls == self.block_at:
            self.entered.set()
            assert self.release.wait(30)
        return super().open_stream(table, schema)


def test_a_stream_opened_with_the_old_schema_during_a_schema_change_is_reopened(metrics: SinkMetrics) -> None:
    transport = BlockingOpen(1)
    pool = StreamPool(
        transport, TABLE, PoolConfig(min_streams=1, healthy_member_wait_s=0.05), metrics=metrics
    )
    old = rows(0, 1).schema
    pool.ensure_open(old)  # returns after healthy_member_wait_s; the open is still in flight
    assert transport.entered.wait(10)
    new_batch = pa.record_batch({"v": pa.array([2, 3], pa.int64()), "extra": ["a", "b"]})
    pool.ensure_open(new_batch.schema)  # the supervisor is opening with ``old`` right now
    transport.release.set()
    wait_for(lambda: pool.health().alive == 1 and len(transport.streams(TABLE)) == 2)
    in_service = pool.health().streams[0].stream_id
    serving = next(s for s in transport.streams(TABLE) if s.stream_id == in_service)
    assert serving.schema.equals(new_batch.schema, check_metadata=True)
    pool.submit(new_batch, NoConfirm())
    pool.flush(timeout=10)
    assert serving.durable_offset == 0  # the new-schema batch went to the new-schema stream
    stale = transport.streams(TABLE)[0]
    assert stale.schema.equals(old) and not stale.is_live  # drained and closed, never served
    assert pool.health().rebuilds == 0  # a re-open for a schema is not a rebuild
    pool.close()


def rejects_minus_one(batch: pa.RecordBatch) -> bool:
    return -1 in batch.column("v").to_pylist()


def test_a_batch_rejected_at_every_ack_is_given_up_after_bounded_rebuilds_and_the_rest_delivers(
    metrics: SinkMetrics,
) -> None:
    """The service rejects one batch whenever a stream reaches it: re-sending it forever was a reopen
    loop with a flush that never returned. It must cost ``poisoned_submit_attempts`` streams, then fail
    alone, while the batches queued behind it on the same dead streams are still delivered."""
    recorder = CountingRecorder()
    transport = MemoryTransport(LatencyModel(base_s=0.001), FaultPlan(rejects_batch=rejects_minus_one))
    attempts = 3
    pool, sink = make(
        transport,
        metrics,
        recorder,
        min_streams=1,
        open_backoff_initial_s=0.01,
        open_backoff_max_s=0.02,
        poisoned_submit_attempts=attempts,
    )
    receipts = sink.send([rows(0, 3), pa.record_batch({"v": pa.array([7, -1], pa.int64())}), rows(10, 3)])
    with pytest.raises(DeliveryFailedError, match=rf"{TABLE}: 1 batch\(es\) were not delivered"):
        sink.flush(timeout=30)
    with pytest.raises(
        PoisonedBatchError,
        match=rf"{TABLE}: one batch \(2 row\(s\), positions \[3, 5\)\) was rejected at acknowledgement "
        rf"by {attempts} stream\(s\).*INVALID_ARGUMENT.*Fix: check the batch",
    ):
        receipts[1].durable(timeout=5)
    assert receipts[0].durable(timeout=5) == OffsetRange(0, 3)
    assert receipts[2].durable(timeout=5) == OffsetRange(5, 8)
    assert transport.open_attempts == attempts + 1  # each stream the batch killed, and the one after
    health = pool.health()
    assert (health.failed_batches, health.poisoned, health.pending) == (1, attempts, 0)
    assert recorder.spans() == [OffsetRange(0, 3), OffsetRange(5, 8)] and recorder.recorded_twice() == []
    with pytest.raises(DeliveryFailedError):
        pool.close(timeout=10)
    assert transport.open_attempts == attempts + 1


def test_every_stream_dying_at_its_first_batch_costs_bounded_opens_with_backoff_between_rebuilds(
    metrics: SinkMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.001), FaultPlan(poison_at={i: 0 for i in range(1000)}))
    attempts = 3
    pool, sink = make(
        transport,
        metrics,
        min_streams=1,
        open_backoff_initial_s=0.01,
        open_backoff_max_s=0.02,
        poisoned_submit_attempts=attempts,
    )
    with caplog.at_level("WARNING"):
        receipt = sink.send(rows(0, 2))[0]
        with pytest.raises(DeliveryFailedError):
            sink.flush(timeout=30)
    with pytest.raises(PoisonedBatchError):
        receipt.durable(timeout=5)
    wait_for(lambda: pool.health().alive == 1)  # a fresh stream, with nothing left to re-send
    time.sleep(0.1)  # room for a loop to show, if there were one
    # The first stream and one per poisoning; every rebuild after a barren stream was backed off.
    assert transport.open_attempts == attempts + 1
    assert caplog.text.count("without delivering anything; next rebuild in") == attempts - 1
    with pytest.raises(DeliveryFailedError):
        pool.close(timeout=10)


def test_a_lane_stopped_by_exhausted_transient_retries_is_not_counted_as_poisoned(
    metrics: SinkMetrics,
) -> None:
    """The runbook tells "our stream died" (poisoned) from a struggling service; only POISON counts."""
    transport = MemoryTransport(LatencyModel(base_s=0.001), FaultPlan(transient_wait_failures={0: 50}))
    pool, sink = make(transport, metrics, min_streams=1, transient_retries=1)
    receipt = sink.send(rows(0, 3))[0]
    sink.flush(timeout=30)
    assert receipt.durable(timeout=5) == OffsetRange(0, 3)
    health = pool.health()
    assert (health.lane_failures, health.rebuilds, health.poisoned) == (1, 1, 0)
    assert (
        metrics.sample("zerobus_ack_lane_poisoned_total", {"table": TABLE, "stream": "0", "lane": "raw"}) == 0
    )
    assert metrics.sample("zerobus_ack_lane_retry_total", {"table": TABLE, "stream": "0", "lane": "raw"}) == 1
    pool.close()


class HangsAfterDying(MemoryTransport):
    """The first stream fails its first ack wait, then hangs every later wait (and so its close)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.release = threading.Event()

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        stream = super().open_stream(table, schema)
        if stream.open_index != 0:
            return stream
        calls = itertools.count()

        def dying_then_hanging(offset: int) -> None:
            if next(calls) == 0:
                raise StreamPoisonedError(f"{table}: INVALID_ARGUMENT: stream died")
            self.release.wait()
            raise StreamPoisonedError(f"{table}: released")

        stream.wait_for_offset = dying_then_hanging  # type: ignore[method-assign]
        return stream


def test_a_dead_stream_whose_waits_hang_cannot_hold_its_rebuild_forever(metrics: SinkMetrics) -> None:
    recorder = CountingRecorder()
    transport = HangsAfterDying(latency=LatencyModel(base_s=0.001))
    pool, sink = make(transport, metrics, recorder, min_streams=1, rebuild_budget_s=0.5)
    try:
        receipts = sink.send([rows(0, 2), rows(2, 2), rows(4, 2)])
        sink.flush(timeout=30)  # the salvage gives up at rebuild_budget_s; everything is re-sent
        assert [r.durable(timeout=5) for r in receipts] == [r.span for r in receipts]
        assert transport.open_attempts == 2
        assert recorder.covered() == 6 and recorder.recorded_twice() == []
        assert pool.health().rebuilds == 1
    finally:
        transport.release.set()
    pool.close()
