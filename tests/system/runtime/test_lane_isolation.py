"""A derived lane stalled for 10 s delays no raw-lane acknowledgement (the official SDK, the embedded
emulator, real Delta and SQLite).

The derived table's streams acknowledge 10 s late (an emulator fault) and its lane's coverage file is
held by another writer for the same 10 s (its commit path stalled). A raw write made meanwhile must be
durable and confirmed, its coverage recorded, while the derived write is still stalled. Before each lane
kind had its own coverage file (``CoverageStore.derived_lane``), the raw lane's commit waited for the
same SQLite write lock, and the raw write could not finish until the derived stall ended.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pyarrow as pa

from zerobus_orchestration.config import Role
from zerobus_orchestration.coverage.store import CoverageStore
from zerobus_orchestration.emulator.faults import FaultKind, FaultSpec
from zerobus_orchestration.ranges import CoverageKey, OffsetRange
from zerobus_orchestration.runtime.facade import ZerobusRuntime

RAW = "main.raw.clicks"
DERIVED = "main.gold.clicks_daily"
STALL_S = 10.0


def rows(n: int) -> pa.Table:
    return pa.table({"clicks": pa.array(range(n), pa.int64())})


def test_a_derived_lane_stalled_for_10_s_delays_no_raw_lane_ack(runtime: ZerobusRuntime) -> None:
    assert runtime.emulator is not None
    runtime.emulator.faults.add(  # every stream of the derived table acknowledges 10 s late
        FaultSpec(kind=FaultKind.DELAY_ACKS, table=DERIVED, protocol="arrow", delay_s=STALL_S, streams=4)
    )
    recorder = runtime.sink(DERIVED, source="gold", role=Role.DERIVED).pool.recorder
    assert isinstance(recorder, CoverageStore)
    recorder.ranges(CoverageKey("probe", "probe"))  # the derived lane's coverage file exists
    holder = sqlite3.connect(recorder.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # its commit path stalled: another writer holds the file
    stalled_at = time.monotonic()
    failures: list[BaseException] = []

    def derived_write() -> None:
        try:
            runtime.write(DERIVED, rows(500), source="gold", role=Role.DERIVED)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    derived = threading.Thread(target=derived_write, daemon=True)
    derived.start()
    try:
        result = runtime.write(RAW, rows(2_000), source="raw")  # returns once durable and confirmed
        raw_took_s = time.monotonic() - stalled_at
        still_stalled = derived.is_alive() and holder.in_transaction
        assert still_stalled, f"the derived lane's stall ended before the raw write did ({raw_took_s:.1f}s)"
        assert result.rows_written == 2_000
        assert runtime.covered(RAW, source="raw") == (OffsetRange(0, 2_000),)  # its coverage committed
    finally:
        time.sleep(max(0.0, STALL_S - (time.monotonic() - stalled_at)))  # the stall lasts its 10 s
        holder.execute("ROLLBACK")
        holder.close()
    derived.join(timeout=60)
    assert not derived.is_alive() and failures == []
    assert runtime.covered(DERIVED, source="gold") == (OffsetRange(0, 500),)
    delayed = runtime.emulator.faults.actions_of(FaultKind.DELAY_ACKS)  # type: ignore[attr-defined]
    assert delayed and {a.table for a in delayed} == {DERIVED}, "the derived stall never acted"
