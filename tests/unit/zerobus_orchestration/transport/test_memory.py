"""MemoryTransport: cumulative in-order acks after a seeded latency, durable store, injected faults."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import (
    ConcurrencyRejectedError,
    ErrorClass,
    StreamPoisonedError,
    TransientError,
)
from zerobus_orchestration.transport.base import Stream, Transport
from zerobus_orchestration.transport.classify import classify
from zerobus_orchestration.transport.memory import FaultPlan, LatencyModel, MemoryTransport

T = "main.test.events"
SCHEMA = pa.schema([("i", pa.int64())])


def batch(i: int, rows: int = 1) -> pa.RecordBatch:
    return pa.record_batch({"i": list(range(i, i + rows))}, schema=SCHEMA)


def test_implements_the_protocols() -> None:
    transport = MemoryTransport()
    assert isinstance(transport, Transport)
    assert isinstance(transport.open_stream(T, SCHEMA), Stream)


def test_submit_returns_sequential_offsets_and_does_not_make_durable() -> None:
    transport = MemoryTransport()
    transport.pause_acks()
    stream = transport.open_stream(T, SCHEMA)
    assert [stream.submit(batch(i)) for i in range(3)] == [0, 1, 2]
    assert transport.durable_rows(T) == 0
    assert stream.durable_offset == -1
    transport.resume_acks()
    stream.wait_for_offset(2)
    assert transport.durable_rows(T) == 3


def test_wait_is_cumulative_and_store_keeps_order() -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.001, jitter_s=0.004, seed=7))
    stream = transport.open_stream(T, SCHEMA)
    for i in range(20):
        stream.submit(batch(i * 2, rows=2))
    stream.wait_for_offset(19)  # one wait: everything below is durable too
    assert stream.durable_offset == 19
    assert transport.durable_table(T).column("i").to_pylist() == list(range(40))
    assert [b.offset for b in transport.durable_batches(T)] == list(range(20))


def test_latency_draws_are_seeded() -> None:
    draws = []
    for _ in range(2):
        transport = MemoryTransport(LatencyModel(base_s=0.0, jitter_s=1.0, seed=42))
        draws.append([transport._draw_latency(1.0) for _ in range(5)])
    assert draws[0] == draws[1]
    assert len(set(draws[0])) == 5


def test_poison_at_offset_keeps_what_was_acked_and_reports_the_rest_unacked() -> None:
    transport = MemoryTransport(faults=FaultPlan(poison_at={0: 3}))
    stream = transport.open_stream(T, SCHEMA)
    transport.pause_acks()  # submit all six before the stream reaches the poisoned batch
    for i in range(6):
        stream.submit(batch(i))
    transport.resume_acks()
    stream.wait_for_offset(2)
    with pytest.raises(StreamPoisonedError) as raised:
        stream.wait_for_offset(5)
    assert classify(raised.value) is ErrorClass.POISON
    stream.wait_for_offset(1)  # below the watermark still answers on a failed stream
    assert [b.column("i")[0].as_py() for b in stream.unacked()] == [3, 4, 5]
    assert transport.durable_rows(T) == 3
    with pytest.raises(StreamPoisonedError):
        stream.submit(batch(9))
    # A new stream (a rebuild) is a new open index and does not inherit the poison.
    fresh = transport.open_stream(T, SCHEMA)
    fresh.submit(batch(3))
    fresh.flush()
    assert transport.durable_rows(T) == 4


def test_transient_wait_failures_then_success() -> None:
    transport = MemoryTransport(faults=FaultPlan(transient_wait_failures={0: 2}))
    stream = transport.open_stream(T, SCHEMA)
    stream.submit(batch(0))
    for _ in range(2):
        with pytest.raises(TransientError) as raised:
            stream.wait_for_offset(0)
        assert classify(raised.value) is ErrorClass.TRANSIENT
    stream.wait_for_offset(0)
    assert transport.durable_rows(T) == 1


def test_concurrency_reject_first_k_opens() -> None:
    transport = MemoryTransport(faults=FaultPlan(reject_first_opens=2))
    for _ in range(2):
        with pytest.raises(ConcurrencyRejectedError) as raised:
            transport.open_stream(T, SCHEMA)
        assert classify(raised.value) is ErrorClass.CONCURRENCY_REJECT
    transport.open_stream(T, SCHEMA)
    assert (transport.open_attempts, transport.rejected_opens) == (3, 2)


def test_concurrency_reject_above_stream_limit_frees_on_close() -> None:
    transport = MemoryTransport(faults=FaultPlan(max_streams_per_table=1))
    first = transport.open_stream(T, SCHEMA)
    transport.open_stream("main.test.other", SCHEMA)  # the limit is per table
    with pytest.raises(ConcurrencyRejectedError):
        transport.open_stream(T, SCHEMA)
    first.close()
    transport.open_stream(T, SCHEMA)


def test_ack_stall_blocks_waiters_until_resumed() -> None:
    transport = MemoryTransport()
    stream = transport.open_stream(T, SCHEMA)
    transport.pause_acks()
    stream.submit(batch(0))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (stream.wait_for_offset(0), done.set()))
    waiter.start()
    assert not done.wait(0.1)
    assert transport.durable_rows(T) == 0
    transport.resume_acks()
    assert done.wait(5)
    waiter.join()


def test_slow_stream_acks_later_than_a_normal_one() -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.01), FaultPlan(slow_streams={1: 50.0}))
    normal, slow = transport.open_stream(T, SCHEMA), transport.open_stream(T, SCHEMA)
    slow.submit(batch(0))
    normal.submit(batch(1))
    normal.wait_for_offset(0)
    assert slow.durable_offset == -1  # 0.5 s latency versus 0.01 s: ordering, not a timing assertion
    slow.flush()
    assert slow.durable_offset == 0


def test_keep_payloads_false_counts_rows_only() -> None:
    transport = MemoryTransport(keep_payloads=False)
    stream = transport.open_stream(T, SCHEMA)
    stream.submit(batch(0, rows=5))
    stream.close()
    assert transport.durable_rows(T) == 5
    assert transport.durable_batches(T)[0].batch is None
    with pytest.raises(ValueError, match="does not keep payloads"):
        transport.durable_table(T)


def test_close_flushes_and_is_idempotent() -> None:
    transport = MemoryTransport(LatencyModel(base_s=0.005))
    stream = transport.open_stream(T, SCHEMA)
    for i in range(5):
        stream.submit(batch(i))
    stream.close()
    stream.close()
    assert transport.durable_rows(T) == 5
    assert stream.unacked() == []
    with pytest.raises(StreamPoisonedError):
        stream.submit(batch(9))


def test_a_rejected_batch_fails_every_stream_that_reaches_it() -> None:
    transport = MemoryTransport(faults=FaultPlan(rejects_batch=lambda b: b.column("i")[0].as_py() == 1))
    for _ in range(2):  # unlike poison_at, the fault follows the batch onto a rebuilt stream
        stream = transport.open_stream(T, SCHEMA)
        stream.submit(batch(0))
        stream.submit(batch(1))
        stream.wait_for_offset(0)
        with pytest.raises(StreamPoisonedError, match="INVALID_ARGUMENT"):
            stream.wait_for_offset(1)
        assert [b.column("i")[0].as_py() for b in stream.unacked()] == [1]
    assert transport.durable_rows(T) == 2


def test_held_acks_stall_one_stream_while_the_others_acknowledge() -> None:
    transport = MemoryTransport()
    held, other = transport.open_stream(T, SCHEMA), transport.open_stream(T, SCHEMA)
    held.hold_acks()
    held.submit(batch(0))
    other.submit(batch(1))
    other.wait_for_offset(0)
    assert held.durable_offset == -1
    held.release_acks()
    held.wait_for_offset(0)
    assert transport.durable_rows(T) == 2
