"""Per-stream isolation over the official SDK against the emulator, with faults aimed at one pool stream.

The pool opens its members one after the other, so the table's connection 0 is member 0's stream and
connection 1 member 1's (``FaultSpec.stream``). Both tests judge isolation by state at the moment the
push returned, not by time: the slow stream had acknowledged nothing yet, so the pusher cannot have
waited for it. On the code before ADR 0008 the pusher did wait (the shared byte budget filled with the
slow stream's batches; the SDK's ``ingest_batch`` blocked at its in-flight cap with the stream's lock
held), and both tests fail there. The fake-transport versions: tests/unit/zerobus_orchestration/sink/
test_stream_isolation.py.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import SecretStr

from tests.support.integration_env import FAST_POOL, FAST_SDK, TABLE, PoolFactory, delta_rows
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import StreamPool, ZerobusSink
from zerobus_orchestration.transport.memory import LatencyModel, MemoryTransport
from zerobus_orchestration.transport.sdk import SdkTransport

pytestmark = pytest.mark.integration

SOURCE_ID = "integration/isolation"
ROWS = 5_000


def batch(i: int, rows: int = ROWS) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})


def stamped_bytes(rows: int) -> int:
    """What one ``batch`` weighs once stamped for ``SOURCE_ID`` (what the byte budget counts)."""
    pool = StreamPool(
        MemoryTransport(LatencyModel(base_s=0.0)), TABLE, FAST_POOL.model_copy(update={"min_streams": 1})
    )
    sink = ZerobusSink(pool, source=SOURCE_ID)
    sink.push(batch(0, rows))
    info, _ = sink.finish()
    pool.close()
    return info.bytes


def transport_for(emulator: Emulator, **sdk: object) -> SdkTransport:
    return SdkTransport(
        emulator.endpoint,
        emulator.workspace_url,
        client_id=emulator.client_id,
        client_secret=SecretStr(emulator.client_secret),
        options=FAST_SDK.model_copy(update=sdk),
    )


def every_position_landed(emulator: Emulator, total: int) -> None:
    """Each of ``total`` positions is in the table (a replay after a reconnect may add duplicates)."""
    landed = delta_rows(emulator)
    assert sorted(pc.unique(landed.column(OFFSET)).to_pylist()) == list(range(total))


def test_a_stream_acknowledging_late_holds_only_its_share_and_the_other_carries_the_push(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore, make_pool: PoolFactory
) -> None:
    one = stamped_bytes(ROWS)
    emulator.faults.add(  # member 1's stream: every ack 3 s late
        FaultSpec(kind=FaultKind.DELAY_ACKS, table=TABLE, protocol="arrow", stream=1, delay_s=3.0)
    )
    # A share of 2.25 batches per stream: the budget binds after a few batches.
    config = FAST_POOL.model_copy(update={"max_inflight_bytes": int(4.5 * one), "max_batch_bytes": 2 * one})
    pool = make_pool(transport_for(emulator), config)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = 30
    receipts = sink.send([batch(i) for i in range(pushed)])
    at_return = pool.health()

    slow = at_return.streams[1]
    assert slow.delivered == 0, "the push waited for the late stream's acknowledgements"
    assert [r.member for r in receipts].count(1) == 2  # its share, and nothing more
    assert slow.inflight_bytes == 2 * one and slow.inflight_bytes_limit == int(4.5 * one) // 2
    assert at_return.inflight_bytes <= int(4.5 * one)  # the table's total still bounds memory
    sink.flush(timeout=60)
    delayed = emulator.faults.actions_of(FaultKind.DELAY_ACKS)
    assert delayed and len({a.stream_id for a in delayed}) == 1, "the delay fault never acted"
    every_position_landed(emulator, pushed * ROWS)
    assert coverage.ranges(CoverageKey(TABLE, SOURCE_ID)) == (OffsetRange(0, pushed * ROWS),)


def test_a_stream_at_the_sdks_in_flight_cap_takes_no_more_and_the_push_goes_on(
    emulator: Emulator, gate: CatalogGate, coverage: CoverageStore, make_pool: PoolFactory
) -> None:
    """The SDK's ``ingest_batch`` blocks once ``max_inflight_batches`` batches are unacknowledged; the pool
    keeps every stream's channel at that cap, so no pusher waits inside the SDK holding a stream."""
    cap = 4
    emulator.faults.add(  # member 0's stream acknowledges nothing (until the SDK reconnects it)
        FaultSpec(kind=FaultKind.WITHHOLD_ACKS, table=TABLE, protocol="arrow", stream=0)
    )
    config = FAST_POOL.model_copy(update={"max_inflight_bytes": 1_000 * stamped_bytes(100)})
    pool = make_pool(transport_for(emulator, max_inflight_batches=cap), config)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    pushed = 30
    receipts = sink.send([batch(i, 100) for i in range(pushed)])
    at_return = pool.health()

    held = at_return.streams[0]
    assert held.delivered == 0, "the push waited inside the SDK on the stream that acknowledges nothing"
    assert held.pending == cap and [r.member for r in receipts].count(0) == cap
    lane = pool.members[0].lane
    assert lane is not None and lane.capacity == cap < config.ack_channel_capacity
    assert emulator.faults.actions_of(FaultKind.WITHHOLD_ACKS), "the withhold fault never acted"
    # The SDK's lack-of-ack timeout reconnects the held stream and replays its batches (at-least-once).
    sink.flush(timeout=60)
    every_position_landed(emulator, pushed * 100)
    assert coverage.ranges(CoverageKey(TABLE, SOURCE_ID)) == (OffsetRange(0, pushed * 100),)
