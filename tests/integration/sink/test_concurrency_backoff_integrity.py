"""A concurrency reject mid-stream backs off (retry hint honoured) and never reopens at once (issue 12, item 11).

The emulator ends one of two pool streams with RESOURCE_EXHAUSTED and refuses the official SDK's own
reconnect, so the SDK gives the stream up. The pool must wait at least the service's retry hint before
opening a replacement, keep sending on the other stream meanwhile, and still deliver every row once.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from tests.support.integration_env import TABLE, PoolFactory, delta_rows, sdk_transport, wait_until
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.config import PoolConfig
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.errors import ConcurrencyRejectedError, ErrorClass
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.transport.base import Stream
from zerobus_orchestration.transport.classify import classify
from zerobus_orchestration.transport.sdk import SdkStream, SdkTransport

pytestmark = pytest.mark.integration

SOURCE_ID = "integration/concurrency"
HINT_S = 0.8
LIMIT_MESSAGE = f"concurrent stream limit reached for the table; retry after {HINT_S}s"
TWO_STREAMS = PoolConfig(
    min_streams=2,
    healthy_member_wait_s=10,
    rebuild_budget_s=10,
    open_backoff_initial_s=0.05,  # far below the hint: only the hint can explain a long wait
    open_backoff_max_s=0.2,
)
SCHEMA = pa.schema([pa.field("id", pa.int64())])


def batch(i: int, rows: int = 50) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}, schema=SCHEMA)


class RecordingTransport:
    """The real ``SdkTransport``, with the time of every open the pool asks for."""

    def __init__(self, inner: SdkTransport) -> None:
        self.inner = inner
        self.opened_at: list[float] = []

    def open_stream(self, table: str, schema: pa.Schema) -> Stream:
        self.opened_at.append(time.time())
        return self.inner.open_stream(table, schema)

    def close(self) -> None:
        self.inner.close()


def abort_with_concurrency_reject() -> FaultSpec:
    return FaultSpec(
        kind=FaultKind.ABORT,
        table=TABLE,
        protocol="arrow",
        after_batches=2,
        status="RESOURCE_EXHAUSTED",
        message=LIMIT_MESSAGE,
    )


def refuse_reconnect() -> FaultSpec:
    """Spent by the SDK's single recovery attempt (recovery_retries=1 in the fault-test options)."""
    return FaultSpec(
        kind=FaultKind.REJECT_OPEN,
        table=TABLE,
        protocol="arrow",
        status="RESOURCE_EXHAUSTED",
        message=LIMIT_MESSAGE,
    )


def test_mid_stream_concurrency_reject_backs_off_for_the_hint_and_keeps_sending(
    emulator: Emulator,
    gate: CatalogGate,
    coverage: CoverageStore,
    make_pool: PoolFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator.faults.add(abort_with_concurrency_reject())  # armed on the first stream the pool opens
    transport = RecordingTransport(sdk_transport(emulator))
    pool = make_pool(transport, TWO_STREAMS)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = [batch(i) for i in range(16)]
    sink.push(pushed[0])
    wait_until(lambda: pool.health().alive == 2, "both pool members open")
    emulator.faults.add(refuse_reconnect())
    with caplog.at_level(logging.WARNING, logger="zerobus_orchestration.sink.pool"):
        for item in pushed[1:]:
            sink.push(item)
        sink.flush(timeout=30)

    # The faults acted: the stream was ended with RESOURCE_EXHAUSTED and the SDK's reconnect was refused.
    acted = [(f.kind, f.status) for f in emulator.faults.acted]
    assert acted == [(FaultKind.ABORT, "RESOURCE_EXHAUSTED"), (FaultKind.REJECT_OPEN, "RESOURCE_EXHAUSTED")]
    health = pool.health()
    assert health.concurrency_rejects >= 1 and health.rebuilds == 1 and health.failed_batches == 0
    # One replacement open, no storm, and not before the service's retry hint had passed.
    assert len(transport.opened_at) == 3
    refused = [
        r for r in caplog.records if "re-opening stream" in r.getMessage() and "refused" in r.getMessage()
    ]
    assert len(refused) == 1, [r.getMessage() for r in caplog.records]
    assert pool.last_open_backoff_s is not None and pool.last_open_backoff_s >= HINT_S
    assert transport.opened_at[2] - refused[0].created >= HINT_S
    # Everything delivered, once: the other stream kept sending, the replacement took the rest.
    total = len(pushed) * 50
    landed = delta_rows(emulator)
    assert landed.num_rows == total and len(pc.unique(landed.column(OFFSET))) == total
    assert coverage.ranges(CoverageKey(TABLE, SOURCE_ID)) == (OffsetRange(0, total),)


def test_submit_on_a_stream_whose_reconnect_was_refused_is_a_concurrency_reject(
    emulator: Emulator, warehouse: Path
) -> None:
    """The SDK's text for the next submit names no cause ("Stream is closing or closed"): read as poison, the
    pool would blame the batch and rebuild at once. The stream remembers the refusal and says so."""
    uri = table_uri(str(warehouse), TABLE)
    os.makedirs(uri, exist_ok=True)
    DeltaTable.create(uri, schema=SCHEMA)
    emulator.faults.add(abort_with_concurrency_reject())
    stream: SdkStream = sdk_transport(emulator).open_stream(TABLE, SCHEMA)
    emulator.faults.add(refuse_reconnect())
    offsets = [stream.submit(batch(i)) for i in range(3)]
    with pytest.raises(ConcurrencyRejectedError) as died:
        stream.wait_for_offset(offsets[-1])
    assert [f.kind for f in emulator.faults.acted] == [FaultKind.ABORT, FaultKind.REJECT_OPEN]
    with pytest.raises(ConcurrencyRejectedError) as refused:
        stream.submit(batch(3))
    assert classify(refused.value) is ErrorClass.CONCURRENCY_REJECT
    assert TABLE in str(refused.value) and f"retry after {HINT_S}s" in str(refused.value)
    assert f"retry after {HINT_S}s" in str(died.value)
    stream.abandon()  # the SDK reports the refusal again on close
