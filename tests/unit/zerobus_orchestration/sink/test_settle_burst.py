"""A confirmed burst gives its bytes back to the pool's budget in one release (``settle_all``): a pusher
waiting on the budget is woken once per burst, not once per batch. Every batch is still settled
(receipt, in-flight count, bytes), a failed recording still fails exactly the recorded batches."""

from __future__ import annotations

from concurrent.futures import Future

from tests.support.sink_helpers import rows
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.sink.byte_budget import ByteBudget
from zerobus_orchestration.sink.confirmation import (
    InFlightBatches,
    LaneKind,
    PendingAck,
    RawAnchor,
    settle_all,
)

KEY = CoverageKey("sink", "src")


class CountingBudget(ByteBudget):
    def __init__(self, limit: int) -> None:
        super().__init__(limit, table="main.raw.t")
        self.releases: list[int] = []

    def release(self, nbytes: int) -> None:
        self.releases.append(nbytes)
        super().release(nbytes)


def burst(budget: ByteBudget, tracker: InFlightBatches, n: int) -> list[PendingAck]:
    items = []
    for i in range(n):
        span = OffsetRange(i * 10, (i + 1) * 10)
        budget.acquire(100)
        tracker.add()
        items.append(
            PendingAck(
                LaneKind.RAW,
                i,
                i,
                RawAnchor(KEY, span),
                0.0,
                rows(span.start, 10),
                Future(),
                nbytes=100,
                tracker=tracker,
                budget=budget,
            )
        )
    return items


def test_a_burst_gives_its_bytes_back_in_one_release_and_settles_every_batch() -> None:
    budget, tracker = CountingBudget(10_000), InFlightBatches()
    items = burst(budget, tracker, 5)
    assert budget.in_flight == 500
    settle_all((item, None) for item in items)
    assert budget.releases == [500]  # one wake-up for the waiting pusher, not five
    assert budget.in_flight == 0 and tracker.count == 0
    assert [item.future.result(0) for item in items if item.future] == [
        OffsetRange(i * 10, (i + 1) * 10) for i in range(5)
    ]


def test_a_failed_recording_fails_its_batches_and_still_gives_every_byte_back() -> None:
    budget, tracker = CountingBudget(10_000), InFlightBatches()
    items = burst(budget, tracker, 3)
    error = RuntimeError("coverage store unavailable")
    settle_all((item, error if item.seq != 1 else None) for item in items)
    assert budget.releases == [300] and budget.in_flight == 0 and tracker.count == 0
    futures = [item.future for item in items if item.future is not None]
    assert [f.exception(0) for f in futures] == [error, None, error]
