"""``health()`` and the metrics tell which backpressure point holds push: the byte budget or a full channel.

The byte budget (``pool.max_inflight_bytes``, per table) is what binds with the default sizes, yet before
it was reported, ``health()`` showed ``backpressured=False`` while pushers waited on it (docs/runbook.md
#backpressure). Pushers here submit straight to the pool over the in-memory transport with its
acknowledgements paused, so exactly one point can hold them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tests.support.sink_helpers import TABLE, rows
from tests.unit.zerobus_orchestration.sink.test_health import FakeLane, serving
from tests.unit.zerobus_orchestration.test_metrics_docs import alert_rules
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool
from zerobus_orchestration.sink import byte_budget as byte_budget_module
from zerobus_orchestration.sink.byte_budget import ByteBudget
from zerobus_orchestration.sink.confirmation import LaneKind, NoConfirm
from zerobus_orchestration.sink.health import BudgetFigures, SampleReservoir, pool_health
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport

BATCH = rows(0, 1_000)  # one int64 column: 8,000 bytes
WAITS = "zerobus_inflight_budget_waits_total"
WAIT_SECONDS = "zerobus_inflight_budget_wait_seconds_total"


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def submitter(pool: StreamPool, batches: int) -> tuple[threading.Thread, list[int], list[BaseException]]:
    done: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for i in range(batches):
                pool.submit(BATCH, NoConfirm(), nbytes=BATCH.nbytes)
                done.append(i)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, errors


def open_pool(config: PoolConfig, metrics: SinkMetrics, lane: LaneKind = LaneKind.RAW) -> StreamPool:
    pool = StreamPool(MemoryTransport(LatencyModel(base_s=0.0)), TABLE, config, lane=lane, metrics=metrics)
    pool.ensure_open(BATCH.schema)
    return pool


def test_a_pusher_held_at_the_byte_budget_shows_as_backpressured_with_the_budgets_figures(
    metrics: SinkMetrics,
) -> None:
    one = BATCH.nbytes
    # Channels far larger than the budget: only the bytes can hold the pusher.
    pool = open_pool(
        PoolConfig(min_streams=1, ack_channel_capacity=1000, max_inflight_bytes=3 * one), metrics
    )
    transport = pool.transport
    assert isinstance(transport, MemoryTransport)
    before = pool.health()
    assert not before.backpressured and before.backpressure is None and before.budget_waits == 0
    transport.pause_acks()
    thread, done, errors = submitter(pool, 6)
    wait_for(lambda: pool.budget.waiting == 1)
    time.sleep(0.05)  # some time waited, for the figures below
    health = pool.health()
    assert len(done) == 3  # three batches fit; the fourth waits for bytes, not for a channel slot
    assert health.backpressured and health.backpressure == "max_inflight_bytes"
    assert (health.inflight_bytes, health.inflight_bytes_limit) == (3 * one, 3 * one)
    assert (health.budget_waiting, health.budget_waits) == (1, 1)
    assert health.pending == 3 and not any(s.backpressured for s in health.streams)  # far below 1000
    as_dict = health.as_dict()
    assert as_dict["backpressure"] == "max_inflight_bytes" and as_dict["budget_waiting"] == 1
    # One stream: an unkeyed push waits for any share, counted on stream="any".
    labels = {"table": TABLE, "stream": "any", "lane": "raw"}
    assert metrics.sample(WAITS, labels) == 1  # counted when the wait starts, not only when it ends
    transport.resume_acks()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    pool.flush(timeout=30)
    after = pool.health()
    assert not after.backpressured and after.backpressure is None and after.budget_waiting == 0
    assert after.budget_waits >= 1 and after.budget_wait_s >= 0.05
    assert metrics.sample(WAITS, labels) == after.budget_waits
    assert metrics.sample(WAIT_SECONDS, labels) == pytest.approx(after.budget_wait_s)
    pool.close()


def test_a_pusher_held_at_a_full_channel_is_told_apart_from_the_budget(metrics: SinkMetrics) -> None:
    # A budget far larger than the channel: only the channel can hold the pusher.
    pool = open_pool(
        PoolConfig(min_streams=1, ack_channel_capacity=2, max_inflight_bytes=1000 * BATCH.nbytes), metrics
    )
    transport = pool.transport
    assert isinstance(transport, MemoryTransport)
    transport.pause_acks()
    thread, done, errors = submitter(pool, 4)
    # The unkeyed wait is sliced (it re-selects every few ms), so sample until one catches it waiting.
    wait_for(lambda: pool.health().backpressure == "ack_channel_capacity")
    health = pool.health()
    assert len(done) == 2 and health.pending == 2 and health.budget_waiting == 0 and health.budget_waits == 0
    assert metrics.sample(WAITS, {"table": TABLE, "stream": "any", "lane": "raw"}) == 0
    transport.resume_acks()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    pool.close()


def test_a_channel_with_room_is_not_backpressured_while_a_pusher_reserves_on_it(metrics: SinkMetrics) -> None:
    pool = open_pool(PoolConfig(ack_channel_capacity=1000), metrics)
    lane = pool._members[0].lane
    assert lane is not None
    lane._waiting_pushers = 1  # what ``reserve`` holds for an instant on every call, waiting or not
    assert not lane.backpressured and pool.health().backpressure is None
    lane._waiting_pushers = 0
    pool.close()


@pytest.mark.parametrize(
    ("waiting", "channel_held", "expected"),
    [
        (0, False, None),
        (2, False, "max_inflight_bytes"),
        (0, True, "ack_channel_capacity"),
        (1, True, "max_inflight_bytes+ack_channel_capacity"),
    ],
)
def test_the_snapshot_names_every_point_holding_a_pusher(
    waiting: int, channel_held: bool, expected: str | None
) -> None:
    health = pool_health(
        table=TABLE,
        lane="raw",
        members=[serving(0, FakeLane(backpressured=channel_held), submitted=1), serving(1, FakeLane(), 0)],
        coalesce=SampleReservoir(),
        latency=SampleReservoir(),
        concurrency_rejects=0,
        poisoned=0,
        lane_failures=0,
        supervisor_errors=0,
        last_supervisor_error=None,
        closed=False,
        now=0.0,
        budget=BudgetFigures(in_flight=90, limit=100, waiting=waiting, waits=7, wait_s=1.5),
    )
    assert health.backpressure == expected and health.backpressured is (expected is not None)
    assert (
        health.inflight_bytes,
        health.inflight_bytes_limit,
        health.budget_waits,
        health.budget_wait_s,
    ) == (
        90,
        100,
        7,
        1.5,
    )


class Tally:
    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0

    def inc(self, amount: float = 1) -> None:
        self.total += amount
        self.calls += 1


def test_an_acquire_that_fits_counts_nothing() -> None:
    waits, seconds = Tally(), Tally()
    budget = ByteBudget(100, table=TABLE, counters=lambda _stream: (waits, seconds))
    budget.acquire(60)
    budget.acquire(40)
    assert (budget.waits, budget.wait_s, waits.calls, seconds.calls) == (0, 0.0, 0, 0)


def test_a_long_wait_is_counted_while_it_lasts_not_only_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_budget_module, "_WAIT_SLICE_S", 0.02)
    waits, seconds = Tally(), Tally()
    budget = ByteBudget(100, table=TABLE, counters=lambda _stream: (waits, seconds))
    budget.acquire(100)
    thread = threading.Thread(target=budget.acquire, args=(10,), daemon=True)
    thread.start()
    wait_for(lambda: budget.waiting == 1)
    wait_for(lambda: seconds.total >= 0.1)  # still waiting: the seconds grew in slices
    assert thread.is_alive() and waits.calls == 1 and budget.waits == 1
    assert budget.wait_s == pytest.approx(seconds.total)
    budget.release(100)
    thread.join(timeout=10)
    assert not thread.is_alive() and budget.in_flight == 10 and budget.waiting == 0
    assert waits.calls == 1  # one wait, however many slices


def test_the_budget_metrics_are_per_stream_share_never_per_pusher(metrics: SinkMetrics) -> None:
    for family in (metrics.inflight_budget_waits, metrics.inflight_budget_wait_seconds):
        assert family._labelnames == ("table", "stream", "lane"), family
    derived = open_pool(PoolConfig(min_streams=1, max_inflight_bytes=1), metrics, lane=LaneKind.DERIVED)
    transport = derived.transport
    assert isinstance(transport, MemoryTransport)
    transport.pause_acks()
    thread, _, errors = submitter(derived, 2)
    wait_for(lambda: derived.budget.waiting == 1)
    assert metrics.sample(WAITS, {"table": TABLE, "stream": "any", "lane": "derived"}) == 1
    assert metrics.sample(WAITS, {"table": TABLE, "stream": "0", "lane": "derived"}) == 0  # no keyed wait
    assert metrics.sample(WAITS, {"table": TABLE, "stream": "any", "lane": "raw"}) is None  # apart
    transport.resume_acks()
    thread.join(timeout=30)
    assert errors == []
    derived.close()


def test_the_byte_budget_alert_reads_the_wait_seconds_and_points_at_the_runbook() -> None:
    rule = {r["alert"]: r for r in alert_rules()}["ZerobusPushHeldAtByteBudget"]
    assert "rate(zerobus_inflight_budget_wait_seconds_total" in rule["expr"] and rule["for"] == "15m"
    assert rule["annotations"]["runbook"] == "docs/runbook.md#backpressure"
