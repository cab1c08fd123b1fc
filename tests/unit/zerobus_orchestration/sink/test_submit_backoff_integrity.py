"""Refusals at submit are backed off and retried, never a failed write (issue 12, item 11; fast, in memory).

The same behaviour against the official SDK and the emulator is in
``tests/integration/sink/test_concurrency_backoff_integrity.py``.
"""

from __future__ import annotations

import pytest

from tests.support.sink_helpers import TABLE, CountingRecorder, positions_landed, rows
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.errors import ConcurrencyRejectedError, TransientError
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.sink.errors import SubmitFailedError
from zerobus_orchestration.transport.classify import retry_delay_s
from zerobus_orchestration.transport.memory import FaultPlan, LatencyModel, MemoryTransport


def _pool(
    transport: MemoryTransport, metrics: SinkMetrics, recorder: CountingRecorder, **cfg: object
) -> StreamPool:
    config = PoolConfig(
        **{"min_streams": 1, "open_backoff_initial_s": 0.01, "open_backoff_max_s": 0.05, **cfg}  # type: ignore[arg-type]
    )
    return StreamPool(transport, TABLE, config, recorder=recorder, metrics=metrics, seed=3)


def test_transient_submit_failures_are_retried_with_backoff_and_every_row_lands_once(
    metrics: SinkMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = CountingRecorder()
    hint_s = 0.05
    transport = MemoryTransport(
        LatencyModel(base_s=0.001), FaultPlan(transient_submit_failures={0: 2}, submit_retry_hint_s=hint_s)
    )
    pool = _pool(transport, metrics, recorder)
    sink = ZerobusSink(pool, source="src")
    with caplog.at_level("WARNING"):
        sink.send([rows(i * 10, 10) for i in range(5)])
        sink.flush()
    stream = transport.streams(TABLE)[0]
    assert stream.refused_submits == 2  # the fault acted
    assert len(transport.streams(TABLE)) == 1  # retried on the same stream: no reopen
    assert positions_landed(transport) == list(range(50))  # every row, once
    assert recorder.recorded_twice() == [] and recorder.covered() == 50
    retries = [r.getMessage() for r in caplog.records if "submit on stream 0 failed" in r.getMessage()]
    assert len(retries) == 2
    assert all(float(m.split("retry in ")[1].split("s")[0]) >= hint_s for m in retries)  # hint honoured
    pool.close()


def test_submit_that_keeps_failing_is_refused_after_the_retry_budget(metrics: SinkMetrics) -> None:
    transport = MemoryTransport(faults=FaultPlan(transient_submit_failures={0: 100}))
    pool = _pool(transport, metrics, CountingRecorder(), transient_retries=2)
    sink = ZerobusSink(pool, source="src")
    with pytest.raises(Exception) as failed:
        sink.push(rows(0, 5))
    chain = [failed.value, failed.value.__cause__]
    assert any(isinstance(e, SubmitFailedError) for e in chain), chain
    assert transport.streams(TABLE)[0].refused_submits == 3  # two retries, then refused loudly
    pool.close()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("concurrent stream limit; retry after 1.5s", 1.5),
        ("x retry_delay_ms=500", 0.5),
        ("Retry-After: 2", 2.0),
        ("please retry in 250ms", 0.25),
        ("retry after 3 seconds", 3.0),
        ("concurrent stream limit reached", None),
    ],
)
def test_retry_hint_is_read_from_the_status_message(text: str, seconds: float | None) -> None:
    assert retry_delay_s(Exception(text)) == seconds


def test_retry_hint_is_found_through_our_wrapping_and_in_grpc_status_details() -> None:
    wrapped = ConcurrencyRejectedError("open stream for t: refused")
    wrapped.__cause__ = Exception('code: "Some resource has been exhausted", message: "retry after 0.7s"')
    assert retry_delay_s(wrapped) == 0.7

    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000)))
    status = status_pb2.Status(code=8, message="limit", details=[detail]).SerializeToString()

    class RpcLike(Exception):
        def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
            return (("grpc-status-details-bin", status),)

    assert retry_delay_s(RpcLike("RESOURCE_EXHAUSTED")) == 2.5
    assert retry_delay_s(TransientError("no hint here")) is None
