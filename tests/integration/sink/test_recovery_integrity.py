"""SDK-level reconnects inside a stream are counted and reported, never silent (issue 12, item 7).

When acks stall past the lack-of-ack timeout, the official SDK reconnects inside the stream and replays
every batch not yet acknowledged, including batches the service already made durable: they land twice
while every wait succeeds and the pool rebuilds nothing. These tests withhold acks in the emulator, prove
the fault acted (a second stream on the emulator, duplicate rows in Delta) and that the client reported
it: ``zerobus_stream_recoveries_total``, ``PoolHealth.recoveries`` / ``rows_possibly_resent``, a warning
naming the table, and ``WriteResult.rows_possibly_resent``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import SecretStr
from zerobus.sdk.shared import HeadersProvider

from tests.support.integration_env import TABLE, PoolFactory, delta_rows, sdk_transport
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.metrics import SinkMetrics
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.testing.settings import FAULT_TEST_SDK_OPTIONS, embedded_test_config
from zerobus_orchestration.transport.sdk import SdkTransport

pytestmark = pytest.mark.integration

SOURCE_ID = "integration/recovery"
ACK_TIMEOUT_MS = 800
# A short lack-of-ack timeout, and waits that outlast it, so the SDK's own recovery (not ours) acts.
STALL_SDK = FAULT_TEST_SDK_OPTIONS.model_copy(
    update={"server_lack_of_ack_timeout_ms": ACK_TIMEOUT_MS, "flush_timeout_ms": 10_000}
)
ONE_STREAM = PoolConfig(min_streams=1, healthy_member_wait_s=10, rebuild_budget_s=10)
ROWS_PER_BATCH = 100
ACKED_BEFORE_STALL = 2
SDK_LOGGERS = ("zerobus_orchestration.sink.ack_lane", "zerobus_orchestration.runtime.facade")


def payloads(batches: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch({"id": pa.array(range(i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH), pa.int64())})
        for i in range(batches)
    ]


def withhold_acks() -> FaultSpec:
    """The first stream acknowledges two batches, then writes the rest durably without acknowledging."""
    return FaultSpec(
        kind=FaultKind.WITHHOLD_ACKS, table=TABLE, protocol="arrow", after_batches=ACKED_BEFORE_STALL
    )


def delay_acks() -> FaultSpec:
    """Slow, not withheld: the acknowledgements come, but after the SDK's lack-of-ack timeout."""
    return FaultSpec(
        kind=FaultKind.DELAY_ACKS,
        table=TABLE,
        protocol="arrow",
        after_batches=ACKED_BEFORE_STALL,
        delay_s=2 * ACK_TIMEOUT_MS / 1000,
    )


class _TokenHeaders(HeadersProvider):  # type: ignore[misc]
    def __init__(self, emulator: Emulator) -> None:
        super().__init__()
        self._emulator = emulator

    def get_headers(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self._emulator.issue_token(TABLE)}")]


def _transport(emulator: Emulator, *, headers: bool) -> SdkTransport:
    if headers:
        return SdkTransport(
            emulator.endpoint,
            emulator.workspace_url,
            headers_provider=_TokenHeaders(emulator),
            options=STALL_SDK,
        )
    return SdkTransport(
        emulator.endpoint,
        emulator.workspace_url,
        client_id=emulator.client_id,
        client_secret=SecretStr(emulator.client_secret),
        options=STALL_SDK,
    )


def _landed_twice(emulator: Emulator) -> int:
    landed = delta_rows(emulator)
    return landed.num_rows - len(pc.unique(landed.column(OFFSET)))


@pytest.mark.parametrize(
    ("fault", "headers"),
    [(withhold_acks, False), (delay_acks, False), (withhold_acks, True)],
    ids=["withheld-oauth", "delayed-oauth", "withheld-headers-provider"],
)
def test_stalled_acks_replay_is_counted_and_reported(
    emulator: Emulator,
    gate: CatalogGate,
    coverage: CoverageStore,
    make_pool: PoolFactory,
    caplog: pytest.LogCaptureFixture,
    fault: Callable[[], FaultSpec],
    headers: bool,
) -> None:
    emulator.faults.add(fault())
    pool = make_pool(_transport(emulator, headers=headers), ONE_STREAM)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = payloads(6)
    with caplog.at_level(logging.WARNING, logger=SDK_LOGGERS[0]):
        sink.send(pushed)
        sink.flush(timeout=30)

    # The fault acted: the SDK opened a second stream by itself (the pool rebuilt nothing) and replayed
    # batches the first stream had written durably without acknowledging them.
    assert emulator.streams_opened(TABLE) == 2
    health = pool.health()
    assert health.rebuilds == 0 and health.failed_batches == 0 and health.pending == 0
    duplicates = _landed_twice(emulator)
    assert duplicates > 0 and duplicates % ROWS_PER_BATCH == 0
    total = len(pushed) * ROWS_PER_BATCH
    assert coverage.ranges(CoverageKey(TABLE, SOURCE_ID)) == (OffsetRange(0, total),)

    # ... and the client saw it.
    assert health.recoveries == 1 and health.streams[0].recoveries == 1
    assert duplicates <= health.rows_possibly_resent <= total
    metrics: SinkMetrics = pool.metrics
    labels = {"table": TABLE, "stream": "0", "lane": "raw"}
    assert metrics.sample("zerobus_stream_recoveries_total", labels) == 1
    assert health.as_dict()["rows_possibly_resent"] == health.rows_possibly_resent
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(TABLE in w and f"up to {health.rows_possibly_resent} row(s)" in w for w in warnings), warnings


def test_prompt_acks_report_no_recovery(
    emulator: Emulator, gate: CatalogGate, make_pool: PoolFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The counters do not cry wolf: a fault-free run reports no reconnect and no re-sent row."""
    pool = make_pool(sdk_transport(emulator), ONE_STREAM)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    with caplog.at_level(logging.WARNING, logger=SDK_LOGGERS[0]):
        sink.send(payloads(6))
        sink.flush(timeout=30)
    health = pool.health()
    assert emulator.streams_opened(TABLE) == 1 and _landed_twice(emulator) == 0
    assert health.recoveries == 0 and health.rows_possibly_resent == 0
    assert (
        pool.metrics.sample("zerobus_stream_recoveries_total", {"table": TABLE, "stream": "0", "lane": "raw"})
        == 0
    )
    assert not [r for r in caplog.records if "reconnected" in r.getMessage()]


def test_write_result_reports_rows_possibly_resent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = embedded_test_config(tmp_path / "wh", sdk=STALL_SDK, pool={"min_streams": 1})
    runtime = acquire_runtime(config)
    try:
        assert runtime.emulator is not None
        runtime.reconcile(TABLE, pa.schema([("id", pa.int64())]))
        runtime.emulator.faults.add(withhold_acks())
        with caplog.at_level(logging.WARNING, logger=SDK_LOGGERS[1]):
            result = runtime.write(TABLE, pa.Table.from_batches(payloads(6)), source="stall")
        assert runtime.emulator.streams_opened(TABLE) == 2  # the fault acted: the SDK reconnected
        landed = delta_rows(runtime.emulator)
        duplicates = landed.num_rows - len(pc.unique(landed.column(OFFSET)))
        assert result.rows_written == 600 and duplicates > 0
        assert result.rows_possibly_resent >= duplicates
        assert result.as_dict()["rows_possibly_resent"] == result.rows_possibly_resent
        assert any(
            TABLE in r.getMessage() and str(result.rows_possibly_resent) in r.getMessage()
            for r in caplog.records
        )
        # The next write on the same (shared) pool reports only its own re-sends: none.
        again = runtime.write(TABLE, pa.Table.from_batches(payloads(2)), source="calm")
        assert again.rows_possibly_resent == 0
        health = runtime.health().pools[0]
        assert health.recoveries == 1 and health.rows_possibly_resent == result.rows_possibly_resent
    finally:
        close_all_runtimes()
