"""What a pusher is told when the pool cannot send: the cause, named.

A stream whose service refuses the table for good fails its member for good, and the pusher gets the
table's refusal itself, whichever of the two reports of the death reaches the pool first.

The official SDK reports a dead stream twice: a submit gets a bare "Stream is closing or closed"
(poison: rebuild), the ack wait gets the cause (here FAILED_PRECONDITION, the table refused). When the
submit's report came first, the member was already rebuilding and the cause was dropped: the pool
re-opened, the SDK retried the refused open for its whole recovery budget, and only that open's
refusal failed the member (16 s instead of 8 with the SDK's defaults, measured).

A pool whose opens keep being refused tells a pusher that waited ``healthy_member_wait_s`` in vain the
endpoint and the last refusal, not only "no healthy stream".
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from tests.support.sink_helpers import TABLE, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import StreamPoisonedError, TableUnavailableError, TransientError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.errors import PoolUnavailableError
from zerobus_orchestration.transport.memory import LatencyModel, MemoryStream, MemoryTransport

REFUSED = f"table {TABLE} is failed in the emulator (injected)"


class DyingStream:
    """Delegates to a memory stream until ``die`` is set: then a submit raises the SDK's bare "closed"
    text and marks ``submit_failed``, and an ack wait in progress ends with the table's refusal, only
    after that submit failed."""

    def __init__(self, inner: MemoryStream, die: threading.Event, submit_failed: threading.Event) -> None:
        self._inner, self._die, self._submit_failed = inner, die, submit_failed

    @property
    def table(self) -> str:
        return self._inner.table

    @property
    def stream_id(self) -> str:
        return self._inner.stream_id

    def submit(self, batch: pa.RecordBatch) -> int:
        if self._die.is_set():
            self._submit_failed.set()
            raise StreamPoisonedError(
                "Stream is closed: code: 'Internal error', message: \"Stream is closing\""
            )
        return self._inner.submit(batch)

    def wait_for_offset(self, offset: int) -> None:
        self._inner.wait_for_offset(offset)
        if self._die.is_set():
            self._submit_failed.wait(5)  # the submit's report reaches the pool first
            raise TableUnavailableError(REFUSED)

    def flush(self) -> None:
        self._inner.flush()

    def close(self) -> None:
        self._inner.close()

    def unacked(self) -> list[pa.RecordBatch]:
        return self._inner.unacked()


class RefusingTable(MemoryTransport):
    """The first stream dies as above once ``die`` is set; every later open is refused like the table."""

    def __init__(self) -> None:
        super().__init__(latency=LatencyModel(base_s=0.3))  # an ack wait is in progress when it dies
        self.die, self.submit_failed = threading.Event(), threading.Event()
        self.opens = 0

    def open_stream(self, table: str, schema: pa.Schema) -> DyingStream:  # type: ignore[override]
        self.opens += 1
        if self.opens > 1:
            raise TableUnavailableError(REFUSED)
        return DyingStream(super().open_stream(table, schema), self.die, self.submit_failed)


def test_a_refused_table_fails_the_member_for_good_even_after_a_bare_submit_failure(
    metrics: SinkMetrics,
) -> None:
    transport = RefusingTable()
    config = PoolConfig(min_streams=1, ack_channel_capacity=8, open_backoff_initial_s=0.01)
    pool = StreamPool(transport, TABLE, config, metrics=metrics, seed=1)
    sink = ZerobusSink(pool, source="src")
    sink.push(rows(0, 5))
    sink.flush()
    sink.push(rows(5, 5))  # its ack lane waits 0.3 s for it
    transport.die.set()

    with pytest.raises(TableUnavailableError) as caught:
        for start in range(10, 10_000, 5):
            sink.push(rows(start, 5))
    assert str(caught.value) == REFUSED and caught.value.table == TABLE
    assert transport.opens == 1  # never re-opened: the service would refuse it the same way
    health = pool.health().streams[0]
    assert health.failed and health.reopen_in_s is None  # failed for good, no cool-down re-open
    with pytest.raises(Exception):  # noqa: B017 (the undelivered batches: whatever the flush names them)
        pool.close(timeout=5)


class Unanswered(MemoryTransport):
    """Every open fails as an endpoint that stopped answering does (transient: the pool backs off)."""

    endpoint = "http://127.0.0.1:9"

    def open_stream(self, table: str, schema: pa.Schema) -> MemoryStream:
        raise TransientError("open stream: Failed to create stream: code: 'Deadline expired', no answer")


def test_a_pusher_that_waited_in_vain_is_told_the_endpoint_and_the_last_refusal(
    metrics: SinkMetrics,
) -> None:
    config = PoolConfig(min_streams=1, healthy_member_wait_s=0.3, open_backoff_initial_s=0.01)
    pool = StreamPool(Unanswered(), TABLE, config, metrics=metrics, seed=1)
    with pytest.raises(PoolUnavailableError) as caught:
        ZerobusSink(pool, source="src").push(rows(0, 5))
    message = str(caught.value)
    assert "no healthy stream within 0.3s" in message
    assert "at http://127.0.0.1:9 (zerobus.endpoint)" in message
    assert "last refusal: open stream: Failed to create stream: code: 'Deadline expired'" in message
    assert isinstance(caught.value.__cause__, TransientError)
    pool.close(timeout=1)
