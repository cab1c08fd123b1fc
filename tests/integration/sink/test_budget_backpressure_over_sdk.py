"""Push held at the byte budget shows in ``health()`` and the metrics, through the official SDK.

The emulator is throttled per stream, so acknowledgements trail the pusher and the unacknowledged bytes
reach ``pool.max_inflight_bytes`` long before any ack channel fills: ``health()`` must then say
``backpressured`` at ``"max_inflight_bytes"`` (it used to say ``backpressured=False``, channels far from
full), and ``zerobus_inflight_budget_waits_total`` must count the waits. Every row still lands once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.integration_env import FAST_POOL, PoolFactory, delta_rows, sdk_transport, start_emulator
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.sink.health import PoolHealth

pytestmark = pytest.mark.integration

BATCHES = 40
ROWS = 12_500  # one int64 column: 100 kB per batch, ~4 MB in all
BUDGET = 512 * 1024  # about five batches in flight, per table
SOURCE_ID = "integration/budget"


@pytest.fixture
def emulator(warehouse: Path) -> Iterator[Emulator]:
    emu = start_emulator(str(warehouse), per_stream_mb_s=2.0)  # ~1 s of acks behind the pusher
    yield emu
    emu.stop()


def test_push_held_at_the_byte_budget_is_reported_as_backpressure(
    emulator: Emulator, gate: CatalogGate, make_pool: PoolFactory
) -> None:
    config = FAST_POOL.model_copy(update={"max_inflight_bytes": BUDGET, "max_batch_bytes": 256 * 1024})
    pool = make_pool(sdk_transport(emulator), config)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    samples: list[PoolHealth] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            samples.append(pool.health())
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        sink.send(
            [
                pa.record_batch({"id": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())})
                for i in range(BATCHES)
            ]
        )
        sink.flush(timeout=120)
    finally:
        done.set()
        watcher.join(timeout=10)

    held = [h for h in samples if h.backpressure == "max_inflight_bytes"]
    assert held, f"no sample of {len(samples)} saw push held at the byte budget"
    for health in held:
        assert health.backpressured and health.budget_waiting >= 1 and health.inflight_bytes_limit == BUDGET
        assert health.pending < 2 * config.ack_channel_capacity  # channels nowhere near full
        assert not any(s.backpressured for s in health.streams)
    # A snapshot is not atomic (a batch may settle between its reads), so the bytes are judged over all.
    assert max(h.inflight_bytes for h in held) > BUDGET // 2
    after = pool.health()
    assert not after.backpressured and after.inflight_bytes == 0
    assert after.budget_waits >= 1 and after.budget_wait_s > 0
    labels = {"table": pool.table, "stream": "any", "lane": "raw"}  # unkeyed: waited for any stream's share
    assert pool.metrics.sample("zerobus_inflight_budget_waits_total", labels) == after.budget_waits
    assert pool.metrics.sample("zerobus_inflight_budget_wait_seconds_total", labels) == pytest.approx(
        after.budget_wait_s
    )
    landed = delta_rows(emulator, pool.table).sort_by(OFFSET)
    assert landed.column("id").to_pylist() == list(range(BATCHES * ROWS))
