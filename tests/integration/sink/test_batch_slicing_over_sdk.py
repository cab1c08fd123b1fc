"""A batch over ``pool.max_batch_bytes`` is sliced before submit and lands whole, through the official SDK.

The emulator sees several logical batches (one per slice), Delta holds every row once at its position,
and coverage and its content digests are recorded per slice, under a byte budget smaller than the batch.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.integration_env import FAST_POOL, PoolFactory, delta_rows
from zerobus_orchestration.catalog.catalog_gate import CatalogGate
from zerobus_orchestration.coverage.digest import rows_digest
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.sink import ZerobusSink
from zerobus_orchestration.transport.sdk import SdkTransport

pytestmark = pytest.mark.integration

ROWS = 200_000
SOURCE_ID = "integration/slicing"


def test_a_big_batch_is_sliced_and_lands_whole_with_per_slice_coverage(
    emulator: Emulator,
    transport: SdkTransport,
    gate: CatalogGate,
    coverage: CoverageStore,
    make_pool: PoolFactory,
) -> None:
    ids = pa.array(range(ROWS), pa.int64())
    big = pa.record_batch({"id": ids, "name": pc.cast(ids, pa.string())})  # ~3.4 MB: at least 3 slices
    limit = 1024 * 1024
    config = FAST_POOL.model_copy(update={"max_batch_bytes": limit, "max_inflight_bytes": 2 * limit})
    pool = make_pool(transport, config)
    sink = ZerobusSink(pool, source=SOURCE_ID, gate=gate)
    receipts = sink.send(big)
    sink.flush(timeout=60)

    spans = [r.span for r in receipts]
    assert len(spans) >= 3 and spans[0].start == 0 and spans[-1].end == ROWS
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    health = pool.health()
    assert (health.submitted, health.delivered, health.inflight_bytes) == (len(spans), len(spans), 0)
    key = CoverageKey(pool.table, SOURCE_ID)
    assert coverage.ranges(key) == (OffsetRange(0, ROWS),)
    digests = sorted(coverage.digests(key), key=lambda d: d.span.start)
    assert [d.span for d in digests] == spans
    for digest in digests:
        piece = big.slice(digest.span.start, digest.span.end - digest.span.start)
        assert digest.digest == rows_digest(piece)

    landed = delta_rows(emulator).sort_by(OFFSET)
    assert landed.column(OFFSET).to_pylist() == list(range(ROWS))
    assert landed.select(big.schema.names).equals(pa.Table.from_batches([big]))
